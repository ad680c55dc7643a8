"""Approval: who says yes when the policy says ``ask``.

An approver is any callable, sync or async, that takes an ``ApprovalRequest`` and
returns a ``Decision`` (or ``True`` / ``False`` / ``None`` for approve / deny /
defer). ``ApproveAll`` and ``DenyAll`` are the two built-ins; the notebook widget
approver lives in the notebook layer.

Every approver sees the request's ``preview`` and ``target`` through the one scrubber
(``rules._secrets``): a key the model put in a file or a command line shows as
``[redacted]`` in the terminal prompt, the widget and a stored pending approval alike.

An act the policy denies never reaches an approver. An approver that raises is taken
as a deny whose reason is the error: a broken approver must not wave things through,
and the model (and the trace) should see why nothing happened.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, TypeAlias

from ..rules._secrets import scrub

__all__ = [
    "ApprovalRequest",
    "ApproveAll",
    "Approver",
    "Decision",
    "DenyAll",
    "decide",
]

DecisionKind = Literal["approve", "deny", "defer"]


@dataclasses.dataclass(frozen=True)
class ApprovalRequest:
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

    act: str
    target: str
    preview: str
    rule: str | None
    layer: str | None
    tool: str
    args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    call_id: str | None = None

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
