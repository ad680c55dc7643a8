"""Run events: notifications for widgets and logs. The store stays authoritative.

``TextDeltas`` turns the pieces of a streamed answer into ``delta`` events, at most
one per ``DELTA_INTERVAL`` and each with only the tail of the new text: cheap to
send, and never stored anywhere. A delta ends on whitespace (the word being streamed
waits for the next one), so no secret is ever split across two events, where no
scrubber could see it whole; a word longer than any key (512 characters) is sent as it
comes.

The events themselves, one typed class per kind, are ``rules._events``'s (the gate
and the executor, below this package, emit them too); ``RunEvent`` is their base.

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
from typing import Any, TypeVar

from ..rules._errors import RefusedError
from ..rules._events import (
    AnyEvent,
    ApprovalDecidedEvent,
    ApprovalRequestedEvent,
    DeltaEvent,
    EventKind,
    RunEvent,
    ToolEvent,
)
from ..rules._secrets import scrubber

__all__ = [
    "DELTA_INTERVAL",
    "DELTA_TAIL",
    "AnyEvent",
    "Asking",
    "Callback",
    "Emit",
    "EventKind",
    "EventSink",
    "RunEvent",
    "TextDeltas",
    "unscrubbed_events",
]

log = logging.getLogger("harnessnb")

Callback = Callable[[AnyEvent], Awaitable[None] | None]
"""An ``on_event`` callback: handed each event (one of ``AnyEvent``), sync or async."""

Emit = Callable[[AnyEvent], Awaitable[None]]
"""How a run's parts send an event (the run stamps its run, step and time)."""

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

    def __init__(self, emit: Emit, clock: Callable[[], float] = time.monotonic) -> None:
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
        await self._emit(DeltaEvent(text=text, restart=restart))


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


def _scrubbed_event(event: AnyEvent, clean: Callable[[str], str]) -> AnyEvent:
    """``event`` with every text its emitter chose (not its run, step or time) scrubbed;
    the same event when there was nothing to scrub."""
    fields = vars(event)
    changes = {
        name: kept
        for name, value in fields.items()
        if name not in ("run_id", "step", "at") and (kept := _scrubbed(value, clean)) != value
    }
    return type(event)(**{**fields, **changes}) if changes else event


class EventSink:
    """Delivers events to a sync or async callback; a callback that raises is logged once
    and never kills the run."""

    def __init__(self, callback: Callback | None) -> None:
        self._callback = callback
        self._warned = False
        self._raw = bool(getattr(callback, "__harnessnb_unscrubbed__", False))

    @property
    def listening(self) -> bool:
        """Whether anything takes the events (an ``on_event`` callback): a run with no
        listener neither stamps its events nor makes ``delta`` events of streamed text."""
        return self._callback is not None

    async def emit(self, event: AnyEvent) -> None:
        if self._callback is None:
            return
        if not self._raw:
            event = _scrubbed_event(event, scrubber())
        if isinstance(event, DeltaEvent) and len(event.text) > DELTA_TAIL:
            # scrubbed whole above; only then cut to its tail
            event = dataclasses.replace(event, text=event.text[-DELTA_TAIL:])
        try:
            result = self._callback(event)
            if inspect.isawaitable(result):
                await result
        except Exception:  # a faulty listener must not end the run
            if not self._warned:
                self._warned = True
                log.warning("on_event callback raised; further errors are ignored", exc_info=True)


class Asking:
    """The approval a run asked for and has not had answered, followed through its tool
    events: a run cancelled while it waits records it as its error (``unanswered``)."""

    def __init__(self) -> None:
        self.request: ApprovalRequestedEvent | None = None

    def see(self, event: ToolEvent) -> None:
        if isinstance(event, ApprovalRequestedEvent):
            self.request = event
        elif isinstance(event, ApprovalDecidedEvent):
            self.request = None

    def unanswered(self) -> dict[str, Any] | None:
        """The approval a cancelled run was waiting for, as its error: not answered."""
        ask, self.request = self.request, None
        if ask is None:
            return None
        return RefusedError(
            f"cancelled while awaiting approval: {ask.act} {ask.target} via {ask.tool} was "
            "not answered (a resume asks again)",
            act=ask.act,
            target=ask.target,
            rule=ask.rule,
            layer=ask.layer,
            code="APPROVAL_UNANSWERED",
        ).to_dict()
