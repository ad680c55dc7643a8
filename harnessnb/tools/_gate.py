"""The gate every act passes before it runs: policy verdict, approver, refusal.

One rule for the model's tool calls (``ToolExecutor``) and a contract's
``hn.Command`` verification:

* the policy's verdict on ``(act, target)``: ``allow`` passes, ``deny`` refuses;
  for a read-only act that is still judged (``read_only=True``: an MCP server's READ
  tool) a verdict from the act's default passes, and only a matching rule asks or
  refuses;
* ``ask`` goes to the approver; with no approver it is refused with a hint that says
  how to allow the act (``--allow-write`` on the face it is read in, ``policy=``); the
  approver approves
  (pass), denies (refused) or defers (the run stops awaiting approval);
* a refusal is a ``RefusedError`` carrying the verdict's rule and layer, and a
  ``refused`` event; asking emits ``approval_requested`` and ``approval_decided``.

The gate returns ``None`` (go ahead) or a ``Stop``; callers turn a ``Stop`` into
their own result (a refused tool row, a verification that could not run).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, Literal

from ..rules._errors import RefusedError
from ..rules._events import (
    ApprovalDecidedEvent,
    ApprovalRequestedEvent,
    RefusedEvent,
    ToolEvent,
)
from ..rules._policy import Policy, Verdict
from ._approval import ApprovalRequest, Approver, Decision, decide

__all__ = ["EventSink", "Gate", "Stop", "StopKind", "hints_name"]

log = logging.getLogger("harnessnb.tools")

EventSink = Callable[[ToolEvent], Awaitable[None] | None]

StopKind = Literal["containment", "denied", "no_approver", "approver_denied", "deferred"]

# The ``source`` of a ``refused`` event, by why the act stopped.
_SOURCE: dict[StopKind, str] = {
    "containment": "containment",
    "denied": "policy",
    "no_approver": "policy",
    "approver_denied": "approver",
}

_ALLOW_METHOD = {"write": "allow_write", "read": "allow_read", "exec": "allow_exec",
                 "net": "allow_net"}  # fmt: skip
# Where a person passes --allow-write: the face they read the hint in (the command sets
# its own while it runs: ``hints_name``; the magic's is the default).
_FACE = ["%%harness run"]


@contextlib.contextmanager
def hints_name(face: str) -> Iterator[None]:
    """While the block runs, a refusal's hint says to pass ``--allow-write GLOB`` to
    ``face`` (``harnessnb run``) instead of ``%%harness run``: a process-wide setting,
    as the runs it covers are driven on harnessnb's loop thread."""
    before = _FACE[0]
    _FACE[0] = face
    try:
        yield
    finally:
        _FACE[0] = before


@dataclasses.dataclass(frozen=True)
class Stop:
    """Why an act does not run.

    Attributes:
        kind: ``containment`` (the path left the workspace), ``denied`` (a deny
            rule), ``no_approver`` (``ask`` with nobody to ask), ``approver_denied``
            or ``deferred`` (the approver will decide later).
        error: The refusal the model sees (code ``APPROVAL_DEFERRED`` when deferred).
        decision: The approver's answer, when one was asked.
        request: What the approver was asked, when one was.
    """

    kind: StopKind
    error: RefusedError
    decision: Decision | None = None
    request: ApprovalRequest | None = None


@dataclasses.dataclass(eq=False, repr=False)  # holds a callback; compared by identity
class Gate:
    """Judges acts under one policy and one approver, and reports what it decided.

    Args:
        policy: The permission policy.
        approver: Who decides ``ask`` verdicts; ``None`` refuses them with a hint.
        run_id: Added to every event.
        on_event: Called (sync or async) with each event; its failures are logged
            and ignored, because the trace, not the events, is authoritative.
    """

    policy: Policy
    approver: Approver | None
    _: dataclasses.KW_ONLY
    run_id: str | None = None
    on_event: EventSink | None = None

    async def check(
        self,
        act: str,
        target: str,
        *,
        tool: str,
        preview: Callable[[], str],
        args: Mapping[str, Any] | None = None,
        call_id: str | None = None,
        read_only: bool = False,
    ) -> Stop | None:
        """``None`` when ``act`` on ``target`` may go ahead, else why not.

        ``preview`` is called only when an approver is asked. ``read_only``: the act
        changes nothing, so the act's default verdict is ``allow`` (a rule still decides).
        """
        verdict = self.policy.explain(act, target)
        if verdict.effect == "allow" or (read_only and verdict.rule is None):
            return None
        if verdict.effect == "deny":
            message = f"refused: {verdict.act} {verdict.target} is denied by {verdict.reason()}"
            return await self.refuse("denied", _refusal(message, verdict), tool, call_id)
        if self.approver is None:
            refusal = _refusal(_no_approver_message(verdict), verdict)
            return await self.refuse("no_approver", refusal, tool, call_id)
        request = ApprovalRequest(
            act=verdict.act,
            target=verdict.target,
            preview=preview(),
            rule=verdict.rule,
            layer=verdict.layer,
            tool=tool,
            args=dict(args or {}),
            call_id=call_id,
        )
        return await self._ask(self.approver, verdict, request)

    async def _ask(
        self, approver: Approver, verdict: Verdict, request: ApprovalRequest
    ) -> Stop | None:
        call_id = request.call_id
        await self.emit(ApprovalRequestedEvent(**request.to_dict()))
        decision = await decide(approver, request)
        await self.emit(
            ApprovalDecidedEvent(
                call_id=call_id, tool=request.tool, decision=decision.kind, reason=decision.reason
            )
        )
        if decision.kind == "approve":
            return None
        if decision.kind == "defer":
            return Stop("deferred", _deferral(verdict, decision), decision, request)
        message = f"refused: the approver denied {verdict.act} {verdict.target}: {decision.reason}"
        refusal = _refusal(message, verdict)
        return await self.refuse("approver_denied", refusal, request.tool, call_id, decision)

    async def refuse(
        self,
        kind: StopKind,
        error: RefusedError,
        tool: str,
        call_id: str | None,
        decision: Decision | None = None,
    ) -> Stop:
        """A ``Stop`` for ``error``, announced with a ``refused`` event."""
        await self.emit(
            RefusedEvent(
                call_id=call_id,
                tool=tool,
                act=error.act,
                target=error.target,
                rule=error.rule,
                layer=error.layer,
                source=_SOURCE[kind],
                message=error.message,
            )
        )
        return Stop(kind, error, decision)

    async def emit(self, event: ToolEvent) -> None:
        """Hand one event (its ``run_id`` the gate's) to ``on_event``; a broken listener
        changes nothing."""
        if self.on_event is None:
            return
        try:
            outcome = self.on_event(dataclasses.replace(event, run_id=self.run_id or ""))
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:  # a broken listener must not change what the tool did
            log.exception("on_event listener failed for %s", event.kind)


def _refusal(message: str, verdict: Verdict) -> RefusedError:
    return RefusedError(
        message, act=verdict.act, target=verdict.target, rule=verdict.rule, layer=verdict.layer
    )


def _deferral(verdict: Verdict, decision: Decision) -> RefusedError:
    reason = f": {decision.reason}" if decision.reason else ""
    return RefusedError(
        f"awaiting approval for {verdict.act} {verdict.target}{reason}",
        act=verdict.act,
        target=verdict.target,
        rule=verdict.rule,
        layer=verdict.layer,
        code="APPROVAL_DEFERRED",
    )


def _no_approver_message(verdict: Verdict) -> str:
    """The refusal with its hint: the face's flag where it has one (only writes do)."""
    method = _ALLOW_METHOD[verdict.act]
    flag = f"`--allow-write GLOB` to {_FACE[0]}, or " if verdict.act == "write" else ""
    glob = "GLOB"
    if verdict.act == "exec" and verdict.target.startswith("mcp:"):
        glob = verdict.target  # an MCP tool's own name: mcp:SERVER/TOOL
    return (
        f"refused: {verdict.act} {verdict.target} needs approval ({verdict.reason()}) "
        f"and no approver is set. To allow it, pass {flag}"
        f'policy=hn.Policy.default().layer("app").{method}("{glob}") to hn.run.'
    )
