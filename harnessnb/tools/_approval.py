"""Approval: who says yes when the policy says ``ask``.

An approver is any callable, sync or async, that takes an ``ApprovalRequest`` and
returns a ``Decision`` (or ``True`` / ``False`` / ``None`` for approve / deny /
defer). ``ApproveAll`` and ``DenyAll`` are the two built-ins, ``PromptApprover`` asks
on the terminal (the command's ``--approval-timeout``, the widget approver's
``fallback="prompt"``); the notebook widget approver lives in the notebook layer.

Every approver sees the request's ``preview`` and ``target`` through the one scrubber
(``rules._secrets``): a key the model put in a file or a command line shows as
``[redacted]`` in the terminal prompt, the widget and a stored pending approval alike.

An act the policy denies never reaches an approver. An approver that raises is taken
as a deny whose reason is the error: a broken approver must not wave things through,
and the model (and the trace) should see why nothing happened.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import select
import sys
import threading
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, Literal, TextIO, TypeAlias

from ..rules._events import ApprovalFields
from ..rules._retry import seconds
from ..rules._secrets import scrub
from ..rules._text import printable
from ._blocking import run_blocking

__all__ = [
    "ApprovalRequest",
    "ApproveAll",
    "Approver",
    "Decision",
    "DenyAll",
    "PromptApprover",
    "decide",
]

PREVIEW_CHARS = 4000  # of a request's preview shown to the person asked
_READ_POLL_S = 0.1

DecisionKind = Literal["approve", "deny", "defer"]


@dataclasses.dataclass(frozen=True)
class ApprovalRequest(ApprovalFields):
    """What an approver is asked: one act on one target, with a bounded preview.

    Args:
        act: ``read`` / ``write`` / ``exec`` / ``net``.
        target: The workspace path, command line or host.
        preview: The content to be written, a unified diff for edits, or the command.
        rule: The policy rule that asked (``None`` when the act's default asked).
        layer: The layer holding that rule.
        tool: The tool the model called.
        args: The call's arguments.
        call_id: The model's tool call id, when known.

    ``preview`` and ``target`` are scrubbed when the request is made (secret values and
    token shapes become ``[redacted]``): they are for people to read. ``args`` stay as
    the model sent them.
    """

    def __post_init__(self) -> None:
        object.__setattr__(self, "preview", scrub(self.preview))
        object.__setattr__(self, "target", scrub(self.target))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (for a pending approval stored with a deferred run)."""
        out = dataclasses.asdict(self)
        out["args"] = dict(self.args)
        return out

    def __repr__(self) -> str:
        return f"ApprovalRequest({self.act} {self.target!r} via {self.tool}, rule={self.rule!r})"


@dataclasses.dataclass(frozen=True)
class Decision:
    """An approver's answer: ``kind`` is approve, deny or defer; deny carries a reason."""

    kind: DecisionKind
    reason: str | None = None

    @classmethod
    def approve(cls) -> Decision:
        return cls("approve")

    @classmethod
    def deny(cls, reason: str = "denied by the approver") -> Decision:
        """Deny; ``reason`` is shown to the model so it can choose another way."""
        return cls("deny", reason)

    @classmethod
    def defer(cls, reason: str | None = None) -> Decision:
        """Decide later: the run stops awaiting approval."""
        return cls("defer", reason)


DecisionLike: TypeAlias = Decision | bool | None
Approver: TypeAlias = Callable[[ApprovalRequest], DecisionLike | Awaitable[DecisionLike]]


class ApproveAll:
    """Approves every request (the policy's denies still hold: they never get here)."""

    def __call__(self, request: ApprovalRequest) -> Decision:
        return Decision.approve()

    def __repr__(self) -> str:
        return "ApproveAll()"


class DenyAll:
    """Denies every request with ``reason``."""

    def __init__(self, reason: str = "denied: this run approves nothing") -> None:
        self.reason = reason

    def __call__(self, request: ApprovalRequest) -> Decision:
        return Decision.deny(self.reason)

    def __repr__(self) -> str:
        return f"DenyAll(reason={self.reason!r})"


class PromptApprover:
    """Asks on the terminal: ``y``/``yes`` approves; anything else denies, with it as
    the reason; end of input denies.

    Args:
        timeout: Seconds (or ``timedelta``) to wait for an answer; then the request
            is deferred and the run stops ``awaiting_approval`` (resumable), as the
            notebook's panel does. None waits until the run is cancelled.
        stdin: Where answers are read (default ``sys.stdin``); questions go to
            ``sys.stdout``.
    """

    def __init__(
        self, timeout: float | timedelta | None = None, *, stdin: TextIO | None = None
    ) -> None:
        self.timeout = seconds(timeout)
        self.stdin = stdin

    def __repr__(self) -> str:
        return f"PromptApprover(timeout={self.timeout!r})"

    async def __call__(self, request: ApprovalRequest) -> Decision:
        # Escaped: a model-chosen argv must not rewrite what the person approves.
        print(printable(f"harnessnb asks: {request.act} {request.target} via {request.tool}"))
        print(printable(request.preview[:PREVIEW_CHARS], lines=True))
        print("approve? [y/N, or a reason to deny] ", end="", flush=True)
        stop = threading.Event()  # ends the reading thread when nobody answered in time
        try:
            reply = await asyncio.wait_for(
                run_blocking(_read_line, self.stdin or sys.stdin, stop), self.timeout
            )
        except TimeoutError:
            print()
            return Decision.defer(f"no answer within {self.timeout:g} s")
        finally:
            stop.set()
        if reply is None:
            return Decision.deny("no answer on standard input")
        reply = reply.strip()
        if reply.lower() in ("y", "yes"):
            return Decision.approve()
        return Decision.deny(reply if reply and reply.lower() not in ("n", "no") else "denied")


def _read_line(stream: TextIO, stop: threading.Event) -> str | None:
    """One line from ``stream`` (None at end of input), given up once ``stop`` is set.

    A stream with a file descriptor is polled, so a question nobody answered leaves
    no thread blocked on the terminal; one without (a notebook kernel's stdin, which
    asks the frontend) is read with ``input()``.
    """
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    if fd is None:
        try:
            return input()
        except EOFError:
            return None
    while not stop.is_set():
        ready, _, _ = select.select([fd], [], [], _READ_POLL_S)
        if ready:
            line = stream.readline()
            return line or None  # "" is the end of input
    return None


async def decide(approver: Approver, request: ApprovalRequest) -> Decision:
    """Ask ``approver`` and normalise its answer; an approver that raises denies."""
    try:
        answer = approver(request)
        if inspect.isawaitable(answer):
            answer = await answer
    except Exception as exc:  # any approver bug becomes a deny, never an approval
        return Decision.deny(f"the approver failed: {type(exc).__name__}: {exc}")
    return _normalise(answer)


def _normalise(answer: object) -> Decision:
    if isinstance(answer, Decision):
        return answer
    if answer is True:
        return Decision.approve()
    if answer is False:
        return Decision.deny()
    if answer is None:
        return Decision.defer()
    return Decision.deny(f"the approver returned {type(answer).__name__}, not a Decision")
