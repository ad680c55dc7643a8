"""Run events: notifications for widgets and logs. The store stays authoritative."""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal

__all__ = ["EventKind", "EventSink", "RunEvent"]

log = logging.getLogger("harnessnb")

EventKind = Literal[
    "started",
    "step",
    "tool_call",
    "refused",
    "approval_requested",
    "approval_decided",
    "retry",
    "fell_back",
    "shrunk",
    "replan",
    "stalled",
    "finished",
]


@dataclasses.dataclass(frozen=True)
class RunEvent:
    """One thing that happened in a run.

    ``data`` by kind: step {tokens, cost_usd, tool_calls, changed_workspace, provider};
    tool_call {tool, args, status, changed_workspace}; retry {kind, status, attempt,
    max_attempts, delay, retry_after}; fell_back {from_provider, kind, status};
    replan/stalled {signal, detail}; finished {outcome, steps, tokens, cost_usd, verified,
    error}. ``cost_usd`` is the run's spend so far in dollars, None when unknown.
    """

    kind: EventKind
    run_id: str
    step: int
    at: float
    data: dict[str, Any] = dataclasses.field(default_factory=dict)


Callback = Callable[[RunEvent], Awaitable[None] | None]


class EventSink:
    """Delivers events to a sync or async callback; a callback that raises is logged once
    and never kills the run."""

    def __init__(self, callback: Callback | None) -> None:
        self._callback = callback
        self._warned = False

    async def emit(self, event: RunEvent) -> None:
        if self._callback is None:
            return
        try:
            result = self._callback(event)
            if inspect.isawaitable(result):
                await result
        except Exception:  # a faulty listener must not end the run
            if not self._warned:
                self._warned = True
                log.warning("on_event callback raised; further errors are ignored", exc_info=True)
