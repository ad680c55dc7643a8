"""Run events: notifications for widgets and logs. The store stays authoritative.

``TextDeltas`` turns the pieces of a streamed answer into ``delta`` events, at most
one per ``DELTA_INTERVAL`` and each with only the tail of the new text: cheap to
send, and never stored anywhere. A delta ends on whitespace (the word being streamed
waits for the next one), so no secret is ever split across two events, where no
scrubber could see it whole; a word longer than any key (512 characters) is sent as it
comes.

Events are scrubbed before any callback sees them (``EventSink``): tool arguments,
streamed text and errors through the one scrubber, and only then is a delta's text cut
to its tail. A caller who needs the raw values wraps its callback in
``unscrubbed_events``.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

from ..rules._secrets import scrubber

__all__ = [
    "DELTA_INTERVAL",
    "DELTA_TAIL",
    "EventKind",
    "EventSink",
    "RunEvent",
    "TextDeltas",
    "unscrubbed_events",
]

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

# A word longer than this is sent though no whitespace ended it yet (no key is this long).
_WORD_HELD_MAX = 512


class TextDeltas:
    """Streamed text in, throttled ``delta`` events out (through ``emit``).

    ``__call__`` is the text sink a model call passes to ``complete(on_text=...)``;
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
            await self.flush(complete=False)

    async def flush(self, *, complete: bool = True) -> None:
        """Send what is held; with ``complete=False`` (the answer goes on) the word still
        being streamed stays held, unless it is already longer than any key."""
        if not self._held:
            return
        text = "".join(self._held)
        self._held.clear()
        if not complete:
            end = max(text.rfind(" "), text.rfind("\n"), text.rfind("\t"))
            word = text[end + 1 :]
            if word and len(word) <= _WORD_HELD_MAX:
                self._held.append(word)
                text = text[: end + 1]
                if not text:
                    return
        restart = self._restart
        self._restart = False
        self._last = self._clock()
        # Whole: the sink scrubs it, then keeps the tail (a cut first could halve a key).
        await self._emit("delta", text=text, restart=restart)


_C = TypeVar("_C", bound=Callable[..., Any])


def unscrubbed_events(callback: _C) -> _C:
    """Mark an ``on_event`` callback to receive events with secret values left in.

    Every other callback gets them through the one scrubber (tool arguments, streamed
    text, errors): use this only where the raw text is what you need and goes nowhere a
    person or a file could see it.
    """
    callback.__harnessnb_unscrubbed__ = True  # type: ignore[attr-defined]
    return callback


def _scrubbed(value: Any, clean: Callable[[str], str]) -> Any:
    kind = type(value)
    if kind is str:  # exactly str: an enum value (a kind, an outcome) is no secret
        return clean(value)
    if kind is dict:
        return {k: _scrubbed(v, clean) for k, v in value.items()}
    if kind is list or kind is tuple:
        return kind(_scrubbed(v, clean) for v in value)
    return value


class EventSink:
    """Delivers events to a sync or async callback; a callback that raises is logged once
    and never kills the run."""

    def __init__(self, callback: Callback | None) -> None:
        self._callback = callback
        self._warned = False
        self._raw = bool(getattr(callback, "__harnessnb_unscrubbed__", False))

    async def emit(self, event: RunEvent) -> None:
        if self._callback is None:
            return
        if not self._raw and event.data:
            event = dataclasses.replace(event, data=_scrubbed(event.data, scrubber()))
        if event.kind == "delta":  # scrubbed whole above; only then cut to its tail
            text = event.data.get("text")
            if isinstance(text, str) and len(text) > DELTA_TAIL:
                event = dataclasses.replace(event, data={**event.data, "text": text[-DELTA_TAIL:]})
        try:
            result = self._callback(event)
            if inspect.isawaitable(result):
                await result
        except Exception:  # a faulty listener must not end the run
            if not self._warned:
                self._warned = True
                log.warning("on_event callback raised; further errors are ignored", exc_info=True)
