"""The executor: the one path from a model's tool call to a ``ToolResult``.

unknown tool -> argument validation -> workspace containment -> the gate (policy
verdict, approver for ``ask``) -> ``before_run`` (the loop commits the intent) ->
execution with per-effect retry. Every failure comes back as a ``ToolResult``
carrying the ``HarnessError``'s name and code, never as an exception, so the model
can act on it.

Every execution is cut at the run's remaining time (plus ``SETTLE_S``, so a tool
that keeps its own deadline, like ``run_command``, can still report): one that
overruns is abandoned and recorded as ``SandboxError`` reason ``timeout``. Blocking
work runs on daemon threads (``_blocking``), so an abandoned call never holds the
interpreter open.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..providers._completion import ToolCall
from ..rules._errors import (
    ConfigError,
    HarnessError,
    RefusedError,
    SandboxError,
    ToolError,
    wrap_unknown,
)
from ..rules._events import ToolCallEvent
from ..rules._policy import Policy
from ..rules._secrets import scrub, scrub_values
from ._approval import Approver
from ._gate import EventSink, Gate, Stop, StopKind
from ._process import TERM_GRACE_S
from ._protocol import (
    PREVIEW_LIMIT,
    Effect,
    Tool,
    ToolContext,
    ToolOutput,
    ToolResult,
    bound_output,
)
from ._schema import check_schema, validate_args

if TYPE_CHECKING:
    from ._workspace import Workspace

__all__ = [
    "MAX_EXECUTIONS",
    "SETTLE_S",
    "Execution",
    "ToolExecutor",
    "retry_decision",
    "retryable",
]

log = logging.getLogger("harnessnb.tools")

MAX_EXECUTIONS = 3
# Past the run's deadline, how long a tool may take to wind down. run_command's own
# timeout is cut one grace before the deadline (SIGTERM there, SIGKILL with the whole
# tree at the deadline), so it ends on time; this covers the rest.
SETTLE_S = 2 * TERM_GRACE_S + 0.5


# ------------------------------------------------------------------ retry


def retryable(error: BaseException) -> bool:
    """May a retry help? True for failures a repeat can cure.

    The question every harnessnb error answers as ``.retryable``, asked of any
    exception a tool raised. Retryable: ``TimeoutError`` and ``ConnectionError`` (and subclasses), a
    ``SandboxError`` with reason ``timeout``, and any error whose ``retryable``
    attribute is true (``ProviderError``, ``StoreError`` busy, or a user's own).
    Everything else is deterministic: refusals, bad arguments, missing files, no-match
    edits, binary or huge files, and a user tool's ``ValueError``.
    """
    if isinstance(error, RefusedError):
        return False
    if isinstance(error, SandboxError):
        return error.reason == "timeout"
    if isinstance(error, TimeoutError | ConnectionError):
        return True
    return getattr(error, "retryable", False) is True


def retry_decision(effect: Effect, executions: int, error: BaseException) -> bool:
    """Whether to run a tool again after ``executions`` runs ended in ``error``. Pure.

    READ retries, IDEMPOTENT retries (the executor reuses the same key), WRITE never;
    only retryable errors (``retryable``); at most ``MAX_EXECUTIONS`` runs in all.
    Retries are immediate: a tool's transient failures are local, not rate limits.
    """
    if effect is Effect.WRITE or executions >= MAX_EXECUTIONS:
        return False
    return retryable(error)


# ------------------------------------------------------------------ the executor


@dataclasses.dataclass(frozen=True)
class Execution:
    """How one call runs, as ``ToolExecutor.execute`` was asked: the key every
    execution of it reuses, what runs just before the tool does (the loop commits the
    call's intent), and its ``run_command`` timeout."""

    idempotency_key: str
    before_run: Callable[[], Awaitable[None]] | None
    command_timeout_s: float


class ToolExecutor:
    """Runs model tool calls under the workspace, the policy and the approver.

    Args:
        workspace: The folder the tools act on.
        policy: The permission policy.
        approver: Who decides ``ask`` verdicts; ``None`` refuses them with a hint.
        tools: Every tool the model may call (names must be unique).
        run_id: Passed to events and tool contexts.
        on_event: Called (sync or async) with ``tool_call``, ``refused``,
            ``approval_requested`` and ``approval_decided`` events; its failures are
            logged and ignored, because the trace, not the events, is authoritative.
        command_timeout_s: The ``run_command`` timeout when a call gives none.
        remaining: Seconds the run has left (None: no time budget); every execution
            is cut there, plus ``SETTLE_S``.

    Raises:
        ConfigError: Two tools share a name, or a tool's parameters are not JSON Schema.
    """

    def __init__(
        self,
        workspace: Workspace,
        *,
        policy: Policy,
        approver: Approver | None,
        tools: Sequence[Tool],
        run_id: str | None = None,
        on_event: EventSink | None = None,
        command_timeout_s: float = 30.0,
        remaining: Callable[[], float | None] | None = None,
    ) -> None:
        self.workspace = workspace
        self.policy = policy
        self.run_id = run_id
        # The approver and the event listener belong to the gate (events go through it).
        self.gate = Gate(policy, approver, run_id=run_id, on_event=on_event)
        self.command_timeout_s = command_timeout_s
        self.remaining = remaining
        self._tools: dict[str, Tool] = {}
        for t in tools:
            if not isinstance(t, Tool):
                raise ConfigError(
                    f"tools= takes tools (functions made with @hn.tool), not {type(t).__name__}"
                )
            if t.name in self._tools:
                raise ConfigError(f"two tools are named {t.name!r}")
            check_schema(t.parameters, f"tool {t.name!r}")
            self._tools[t.name] = t

    def add(self, tools: Sequence[Tool]) -> None:
        """Offer ``tools`` too (a run's MCP tools, once their servers are open).

        Raises:
            ConfigError: A tool's name is taken; none of ``tools`` is added then.
        """
        names = [t.name for t in tools]
        taken = sorted(n for n in set(names) if n in self._tools or names.count(n) > 1)
        if taken:
            raise ConfigError(f"two tools are named {taken[0]!r}")
        for t in tools:
            self._tools[t.name] = t

    def names(self) -> set[str]:
        """The names of the tools offered."""
        return set(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        """The specs of every tool, for the provider request."""
        return [t.spec() for t in self._tools.values()]

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    async def execute(
        self,
        call: ToolCall,
        *,
        idempotency_key: str,
        before_run: Callable[[], Awaitable[None]] | None = None,
        command_timeout_s: float | None = None,
    ) -> ToolResult:
        """Run one tool call end to end; every failure comes back as a result.
        ``command_timeout_s``: this call's ``run_command`` timeout (None: the executor's)."""
        limit = self.command_timeout_s if command_timeout_s is None else command_timeout_s
        result = await self._execute(call, Execution(idempotency_key, before_run, limit))
        served = self._tools.get(call.name)
        if served is not None and served.server is not None:
            result = dataclasses.replace(result, server=served.server)
        await self.emit_call(call, result)
        return result

    async def emit_call(self, call: ToolCall, result: ToolResult) -> None:
        """The ``tool_call`` event of a call that ended with ``result``."""
        await self.gate.emit(
            ToolCallEvent(
                call_id=call.id,
                tool=call.name,
                args=dict(call.arguments),
                status=result.status,
                ok=result.ok,
                changed_workspace=result.changed_workspace,
                executions=result.executions,
                error=result.error,
            )
        )

    async def _execute(self, call: ToolCall, how: Execution) -> ToolResult:
        tool_ = self._tools.get(call.name)
        if tool_ is None:
            known = ", ".join(sorted(self._tools)) or "none"
            message = f"unknown tool {call.name!r}; tools: {known}"
            return _failure(ToolError(message, code="TOOL_UNKNOWN"))
        problems = validate_args(tool_.argument_schema(), call.arguments)
        if problems:
            message = f"invalid arguments for {tool_.name}: " + "; ".join(problems)
            return _failure(ToolError(message, code="TOOL_ARGS"))
        args = dict(call.arguments)
        try:
            act_target = tool_.resolve_target(args, self.workspace)
        except RefusedError as err:
            refused = await self.gate.refuse("containment", err, call.name, call.id)
            return _failure(refused.error, status="refused")
        except Exception as exc:  # an unreadable path component, say: not retried
            return _failure(wrap_unknown(exc))
        gate = await self._gate(call, tool_, args, act_target)
        if gate is not None:
            return gate
        if how.before_run is not None:
            await how.before_run()
        return await self._run(tool_, args, call, how, act_target)

    async def _gate(
        self,
        call: ToolCall,
        tool_: Tool,
        args: dict[str, Any],
        act_target: tuple[str, str] | None,
    ) -> ToolResult | None:
        """The gate (policy, approver) on the contained target, then on each pair the
        tool also needs (``Tool.also_judged``); a result stops the call."""
        judged = [] if act_target is None else [(act_target, tool_.read_only)]
        judged += [(pair, False) for pair in tool_.also_judged(args)]
        for (act, target), read_only in judged:
            stop = await self.gate.check(
                act,
                target,
                tool=tool_.name,
                preview=lambda: _safe_preview(tool_, args, self.workspace),
                args=args,
                call_id=call.id,
                read_only=read_only,
            )
            if stop is not None:
                return _stopped(stop)
        return None

    async def _run(
        self,
        tool_: Tool,
        args: dict[str, Any],
        call: ToolCall,
        how: Execution,
        judged: tuple[str, str] | None,
    ) -> ToolResult:
        """Execute with per-effect retry; the same key on every attempt."""
        executions = 0
        while True:
            executions += 1
            ctx = ToolContext(
                workspace=self.workspace,
                idempotency_key=how.idempotency_key,
                command_timeout_s=self._command_timeout(how.command_timeout_s),
                policy=self.policy,
                run_id=self.run_id,
                call_id=call.id,
                attempt=executions,
                judged=judged,
            )
            try:
                output = await self._invoke(tool_, args, ctx)
            except RefusedError as err:  # judged again on what the tool actually opened
                kind: StopKind = "containment" if err.rule == "containment" else "denied"
                await self.gate.refuse(kind, err, tool_.name, call.id)
                failed = _failure(err, status="refused", executions=executions)
                return dataclasses.replace(failed, sandbox=ctx.sandbox)
            except Exception as exc:
                if (
                    not self._out_of_time()
                    and retry_decision(tool_.effect, executions, exc)
                    and await tool_.before_retry(exc)
                ):
                    log.debug("retrying %s after %r (execution %d)", tool_.name, exc, executions)
                    continue
                failed = _failure(wrap_unknown(exc), executions=executions)
                return dataclasses.replace(failed, sandbox=ctx.sandbox)
            return ToolResult(
                ok=True,
                output=bound_output(scrub_values(output.text)),  # scrubbed before the cut
                changed_workspace=output.changed_workspace,
                executions=executions,
                sandbox=ctx.sandbox,
            )

    async def _invoke(self, tool_: Tool, args: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        """One execution, abandoned past the run's remaining time (plus ``SETTLE_S``)."""
        left = None if self.remaining is None else self.remaining()
        if left is None:
            return await tool_.invoke(args, ctx)
        scope = asyncio.timeout(max(left, 0.0) + SETTLE_S)
        try:
            async with scope:
                return await tool_.invoke(args, ctx)
        except TimeoutError as exc:
            if not scope.expired():
                raise  # the tool's own TimeoutError
            message = (
                f"{tool_.name} ran past the run's time budget ({max(left, 0.0):.3g} s were "
                "left) and was abandoned"
            )
            if tool_.effect is not Effect.READ:
                message += "; it may still complete, so check before repeating it"
            raise SandboxError(message, reason="timeout") from exc

    def _command_timeout(self, limit: float) -> float:
        """``run_command``'s timeout, cut so the command ends by the run's deadline: its
        SIGTERM comes one grace early, so the SIGKILL that follows lands on time."""
        left = None if self.remaining is None else self.remaining()
        if left is None:
            return limit
        return min(limit, max(left - TERM_GRACE_S, 0.0))

    def _out_of_time(self) -> bool:
        left = None if self.remaining is None else self.remaining()
        return left is not None and left <= 0

    def __repr__(self) -> str:
        return f"ToolExecutor(tools={list(self._tools)}, policy={self.policy!r})"


def _failure(err: HarnessError, *, status: str = "error", executions: int = 0) -> ToolResult:
    return ToolResult(
        ok=False,
        output=bound_output(err.message),
        error=err.to_dict(),
        status=status,
        executions=executions,
    )


def _stopped(stop: Stop) -> ToolResult:
    if stop.kind == "deferred":
        deferred = _failure(stop.error, status="deferred")
        return dataclasses.replace(deferred, approval=stop.request)
    return _failure(stop.error, status="refused")


def _safe_preview(tool_: Tool, args: Mapping[str, Any], workspace: Workspace) -> str:
    try:
        # Scrubbed before it is cut: a key cut in two is no longer found.
        return bound_output(scrub(tool_.preview(args, workspace)), PREVIEW_LIMIT)
    except Exception as exc:  # a preview is a courtesy; never let it block the decision
        return f"(no preview: {type(exc).__name__}: {exc})"
