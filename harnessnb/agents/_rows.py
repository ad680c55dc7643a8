"""A coding-agent CLI run's rows: its one step, an attempt row for each failed request
the CLI reported while retrying and one for how the invocation ended (its ``kind``
in the taxonomy every provider shares), and a tool-call row per tool call it reported.

What the rows are built from is the CLI's own (its ``Turn``, how its process ended);
where they go, with the run's end, is the loop's ``RunRecorder``'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..rules._errors import HarnessError, ProviderErrorKind
from ._errors import AgentError, Cancelled, CLIError, NotAuthenticated, RateLimited

if TYPE_CHECKING:
    from ..store._row_types import AttemptRow, StepRow, ToolCallRow
    from ._cause import Cause
    from ._drivers import AgentCLI
    from ._process import ProcessEnd
    from ._turn import Turn

__all__ = ["run_rows"]


def run_rows(
    agent: AgentCLI,
    turn: Turn,
    end: ProcessEnd | None,
    error: HarnessError | None,
    *,
    changed: bool | None,
    model: str | None,
    started: float,
    stopped_after: float | None,
    now: float,
) -> tuple[StepRow, list[AttemptRow], list[ToolCallRow]]:
    """The run's step row, its attempt rows and its tool-call rows.

    Args:
        agent: The CLI.
        turn: What its stream said.
        end: How its process ended (None: it was stopped, or never ran).
        error: The failure the invocation ended with (None: a good answer).
        changed: The invocation changed the workspace (None: unknown).
        model: The model asked for (the turn's own, when it named one, first).
        started: When the run began; stopped_after: seconds the CLI ran before it was
            stopped on a cause waiting cannot fix; now: the rows' time.
    """
    kind = error.kind if isinstance(error, CLIError) else None
    decision = "answer" if error is None else "error"
    if isinstance(error, Cancelled):
        decision = "cancelled"
    step: StepRow = {
        "step": 1,
        "decision": decision,
        "tool_calls": turn.tool_calls_seen,
        "tokens": turn.tokens,
        "changed_workspace": changed,
        "provider": agent.name,
        "at": now,
    }
    attempts = _retry_rows(agent, turn, end, error, model)
    ran_s = end.elapsed_s if end is not None else stopped_after
    attempt: AttemptRow = {
        "step": 1,
        "attempt": len(attempts) + 1,
        "provider": agent.name,
        "model": turn.model or model,
        "kind": None if kind is None else kind.value,
        "status": getattr(error, "status", None),
        "retry_after_s": getattr(error, "retry_after_s", None),
        "latency_ms": None if ran_s is None else ran_s * 1000,
        "input_tokens": turn.usage["input_tokens"],
        "output_tokens": turn.usage["output_tokens"],
        "request_id": turn.session_id,
        "fell_back": False,
        "error": None if error is None else error.code,
        "started_at": started,
        "cost_usd": _reported_cost(turn.usage),
    }
    tools: list[ToolCallRow] = [
        {
            "step": 1,
            "seq": i,
            "tool": call["tool"],
            "effect": "agent",
            "args": call["args"],
            "status": call["status"],
            "output_bytes": call["output_bytes"],
            "at": now,
        }
        for i, call in enumerate(turn.tool_calls, start=1)
    ]
    # A cancel cut the CLI's request off in flight: a row marked ``cancelled`` (in
    # no failure rate). A failure with no kind (a harnessnb bug) is no provider
    # outcome to count: the step keeps the usage, the failure rates are not skewed.
    if isinstance(error, Cancelled):
        attempts.append({**attempt, "cancelled": True})
    elif error is None or kind is not None:
        attempts.append(attempt)
    return step, attempts, tools


def _retry_rows(
    agent: AgentCLI,
    turn: Turn,
    end: ProcessEnd | None,
    error: HarnessError | None,
    model: str | None,
) -> list[AttemptRow]:
    """An attempt row for each failed request the CLI reported while retrying.

    The request the run ended on is the final row: a report of it (the one the run
    was stopped on, the one still being retried at the deadline, or Copilot's report
    of its last failure), when nothing came after it, is not counted twice.
    """
    reports = list(turn.reports)
    last_is_final = turn.retrying and (
        turn.stop is not None or (end is not None and end.timed_out) or agent.reports_every_failure
    )
    if reports and error is not None and last_is_final:
        reports.pop()
    model = turn.model or model
    return [
        {
            "step": 1,
            "attempt": i,
            "provider": agent.name,
            "model": model,
            "kind": cause.kind.value,
            "status": cause.status,
            "retry_after_s": cause.retry_after,
            "request_id": turn.session_id,
            "fell_back": False,
            "error": _code(cause),
            "started_at": at,
        }
        for i, (cause, at) in enumerate(reports, start=1)
    ]


def _reported_cost(usage: dict[str, Any]) -> float | None:
    """The invocation's cost as the CLI reported it (Claude Code does), else None:
    unknown, which the run's cost says (a CLI's login may be a subscription)."""
    cost = usage.get("cost_usd")
    if isinstance(cost, int | float) and not isinstance(cost, bool) and cost >= 0:
        return float(cost)
    return None


def _code(cause: Cause) -> str:
    """The error code a failed request of this cause is stored with."""
    codes = {
        ProviderErrorKind.AUTH: NotAuthenticated.CODE,
        ProviderErrorKind.RATE_LIMITED: RateLimited.CODE,
    }
    return codes.get(cause.kind, AgentError.CODE)
