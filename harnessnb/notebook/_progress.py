"""Live progress of a run: a state folded from ``RunEvent``s, shown as a widget or text.

``ProgressState`` is pure (events in, text/HTML out; time is an argument); its lines
are the words the command prints too (``launch._words``). The two views take events
on the harness loop thread: ``WidgetProgress`` sets ipywidgets traits there
(ipykernel sends comm messages from any thread through its IOPub thread), throttled;
``TextProgress`` prints one line per event worth a line.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

from ..launch._words import event_words, retry_words, streamed_words
from ..loop._events import DELTA_TAIL, RunEvent
from ..rules._events import (
    ApprovalDecidedEvent,
    ApprovalRequestedEvent,
    DeltaEvent,
    FellBackEvent,
    FinishedEvent,
    RefusedEvent,
    ReplanEvent,
    RetryEvent,
    ShrunkEvent,
    StalledEvent,
    StartedEvent,
    StepEvent,
    ToolCallEvent,
)
from ..rules._html import Tone, bold, bullets, code, panel, text_block, tinted

__all__ = ["ProgressState", "TextProgress", "WidgetProgress"]

_NOTES_KEPT = 6
# Events whose line stays in the panel's short list of notes.
_NOTED = (FellBackEvent, ReplanEvent, StalledEvent, RefusedEvent, ApprovalDecidedEvent, ShrunkEvent)
# Events the widget shows at once (the rest wait for its throttle).
_URGENT = (RetryEvent, FellBackEvent, FinishedEvent, ApprovalRequestedEvent, StartedEvent)


@dataclasses.dataclass
class ProgressState:
    """What the live panel shows. ``fold`` applies one event; ``now`` is monotonic time."""

    run_id: str = ""
    max_steps: int = 0
    step: int = 0
    tokens: int = 0
    provider: str = ""
    started: float = 0.0
    activity: str = "starting"
    retry: tuple[str, int | None, int, int, float] | None = None  # kind, status, n, of, until
    notes: list[str] = dataclasses.field(default_factory=list)
    outcome: str | None = None
    streamed: str = ""  # the newest text of the answer being streamed ("" when none)

    def fold(self, event: RunEvent, now: float) -> str | None:
        """Apply ``event``; return its line (``launch._words``) when it deserves one."""
        self.run_id = event.run_id or self.run_id
        if isinstance(event, StartedEvent):
            self.started = self.started or now
            self.max_steps = event.max_steps or self.max_steps
            self.provider = event.provider or ""
            self.step = max(self.step, event.step)
            self.activity = "waiting for the model"
        line = event_words(event, max_steps=self.max_steps)
        if isinstance(event, DeltaEvent):
            text = event.text
            self.streamed = (text if event.restart else self.streamed + text)[-DELTA_TAIL:]
            self.activity = "the model is answering"
            return None
        self.streamed = ""  # anything else ends (or voids) the answer being streamed
        match event:
            case StepEvent():
                self.retry = None
                self.step = event.step
                self.tokens = event.tokens or self.tokens
                served = event.provider
                if served and self.provider and served != self.provider:
                    self._note(f"step {event.step} served by {served}")
                self.activity = "waiting for the model"
            case ToolCallEvent():
                self.retry = None
                self.activity = line or ""
            case RetryEvent():
                self.retry = (
                    event.error_kind,
                    event.status,
                    event.attempt or 0,
                    event.max_attempts or 0,
                    now + event.delay_s,
                )
            case ApprovalRequestedEvent():
                self.activity = "waiting for approval"
            case FinishedEvent():
                self.retry = None
                self.outcome = event.outcome
                self.activity = f"finished: {self.outcome}"
        if line and isinstance(event, _NOTED):
            self._note(line)
        return line

    def _note(self, text: str) -> None:
        self.notes = [*self.notes, text][-_NOTES_KEPT:]

    def retry_line(self, now: float) -> str:
        """``rate_limited (HTTP 429) - retrying in 7 s, attempt 2/3``, or "" with no retry."""
        if self.retry is None:
            return ""
        kind, status, attempt, of, until = self.retry
        return retry_words(kind, status, until - now, attempt, of)

    def text(self, now: float) -> str:
        """The whole state as one line (for a text status)."""
        elapsed = now - self.started if self.started else 0.0
        head = (
            f"{self.run_id}: step {self.step}{_of(self.max_steps)}, {self.tokens} tokens, "
            f"{elapsed:.0f} s"
        )
        return f"{head} - {self.retry_line(now) or self.activity}"

    def streamed_line(self, width: int = 72) -> str:
        """The tail of the answer being streamed, as one line ("" when none)."""
        return streamed_words(self.streamed, width) if self.streamed else ""

    def html(self, now: float) -> str:
        """The panel body; every value escaped."""
        elapsed = now - self.started if self.started else 0.0
        retry = self.retry_line(now)
        return str(panel(
            "harnessnb-progress",
            code(self.run_id), " step ", bold(self.step),
            f" of {self.max_steps}" if self.max_steps else "",
            f" \u00b7 {self.tokens} tokens \u00b7 {elapsed:.0f} s",
            text_block(tinted(retry, Tone.WARN) if retry else self.activity),
            text_block(self.streamed_line(120), faint=True) if self.streamed else "",
            bullets(self.notes),
        ))  # fmt: skip


class TextProgress:
    """Plain text progress lines (no widget frontend: terminal, headless, plain python)."""

    def __init__(self, stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic):
        self.state = ProgressState()
        self._stream = stream
        self._clock = clock

    def __call__(self, event: RunEvent) -> None:
        line = self.state.fold(event, self._clock())
        if line:
            stream = self._stream or sys.stdout
            print(f"[harnessnb] {line}", file=stream, flush=True)

    def show(self) -> None:
        """Nothing to show up front: lines come as events do."""

    def close(self) -> None:
        """Nothing to stop."""


class WidgetProgress:
    """An ipywidgets panel (progress bar + status HTML) updated from run events.

    Updates are throttled to one per ``min_interval`` seconds, except retries and
    the end; a ticker thread refreshes the elapsed time and retry countdown once a
    second while the run is live.
    """

    def __init__(self, *, min_interval: float = 0.25, clock: Callable[[], float] = time.monotonic):
        import ipywidgets  # type: ignore[import-untyped]

        self.state = ProgressState()
        self._clock = clock
        self._min_interval = min_interval
        self._last = 0.0
        self._lock = threading.Lock()
        self.bar = ipywidgets.IntProgress(value=0, min=0, max=1, layout={"width": "260px"})
        self.status = ipywidgets.HTML(value="harnessnb: starting")
        self.panel = ipywidgets.VBox([self.bar, self.status])
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def show(self) -> None:
        """Start the once-a-second refresh (the caller displays ``panel``)."""
        self._ticker = threading.Thread(target=self._tick, name="harnessnb-progress", daemon=True)
        self._ticker.start()

    def __call__(self, event: RunEvent) -> None:
        with self._lock:
            self.state.fold(event, self._clock())
        self.refresh(force=isinstance(event, _URGENT))

    def refresh(self, *, force: bool = False) -> None:
        now = self._clock()
        with self._lock:
            if not force and now - self._last < self._min_interval:
                return
            self._last = now
            body = self.state.html(now)
            step = self.state.step
            # No step cap (a coding-agent CLI): the bar never looks finished early.
            most = self.state.max_steps or step + 1
        self.bar.max = most
        self.bar.value = min(step, most)
        self.status.value = body

    def _tick(self) -> None:
        while not self._stop.wait(1.0):
            self.refresh(force=True)

    def close(self) -> None:
        """Stop the ticker and close the widgets (their comms)."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=2)
        self.panel.close()
        self.bar.close()
        self.status.close()


def _of(most: int) -> str:
    """ "/12" after a step number when the run has a step cap ("" for a CLI without one)."""
    return f"/{most}" if most else ""
