"""Run events: notifications for widgets and logs. The store stays authoritative.

``TextDeltas`` turns the pieces of a streamed answer into ``delta`` events, at most
one per ``DELTA_INTERVAL`` and each with only the tail of the new text: cheap to
send, and never stored anywhere.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal

__all__ = ["DELTA_INTERVAL", "DELTA_TAIL", "EventKind", "EventSink", "RunEvent", "TextDeltas"]

log = logging.getLogger("harnessnb")

EventKind = Literal[
    "started",
    "step",
    "delta",
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
    delta {text, restart}: answer text streamed since the last delta (its last
    ``DELTA_TAIL`` characters), ``restart`` when it begins a new attempt's answer;
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

DELTA_INTERVAL = 0.1
"""Seconds between two ``delta`` events at most once a stream is going (10 a second)."""

DELTA_TAIL = 400
"""Characters of streamed text a ``delta`` event carries at most (the newest)."""


class TextDeltas:
    """Streamed text in, throttled ``delta`` events out (through ``emit``).

    ``__call__`` is a provider's text sink (``providers._completion.stream_text_to``);
    ``flush`` sends what is still held, when the answer is complete.
    """

    def __init__(
        self, emit: Callable[..., Awaitable[None]], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._emit = emit
        self._clock = clock
        self._held: list[str] = []
        self._restart = False
        self._last = float("-inf")

    async def __call__(self, piece: str, first: bool = False) -> None:
        if first:  # a new attempt's answer: what the last one said is void
            self._held.clear()
            self._restart = True
        self._held.append(piece)
        if self._clock() - self._last >= DELTA_INTERVAL:
            await self.flush()

    async def flush(self) -> None:
        if not self._held:
            return
        text = "".join(self._held)[-DELTA_TAIL:]
        restart = self._restart
        self._held.clear()
        self._restart = False
        self._last = self._clock()
        await self._emit("delta", text=text, restart=restart)


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
