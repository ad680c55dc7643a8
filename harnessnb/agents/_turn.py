"""What a CLI's structured stream said, accumulated line by line, within bounds.

Every text kept is scrubbed (``rules._secrets``, with the run's own secrets) before it
is cut to its bound (``rules._text.clip``): a key cut in two is no longer found."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from ..rules._events import AnyEvent, RefusedEvent, RetryEvent, StepEvent, ToolCallEvent
from ..rules._secrets import scrub, scrub_values
from ..rules._text import clip
from ._cause import Cause
from ._process import Limits

__all__ = ["Turn", "to_int"]

# Tool calls kept per run; later ones are counted, not kept.
_MAX_TOOL_CALLS = 1000


@dataclasses.dataclass
class Turn:
    """One CLI invocation as read from its stream.

    Attributes:
        session_id: The CLI's native session id, once the stream named it.
        text: The final answer (the last assistant message, or the result event's).
        usage: input_tokens (cache reads included), output_tokens, cached_input_tokens,
            cost_usd: totals for the invocation.
        done: A terminal event (result / turn completed / turn failed) was read.
        failure: (detail, status) when the stream reported a failed turn.
        rate_limit: (detail, resets_at) when the stream reported a rejected quota.
        reports: the failed requests the CLI reported while retrying (``Cause``, time).
        unparsed: Lines that were not JSON objects; ``first_unparsed`` the first one.
        secrets: The values of the CLI's secret-named variables, scrubbed like a key.
    """

    limits: Limits
    session_id: str | None = None
    model: str | None = None
    text: str = ""
    usage: dict[str, Any] = dataclasses.field(
        default_factory=lambda: {
            "input_tokens": 0,
            "output_tokens": 0,
            "cached_input_tokens": 0,
            "cost_usd": None,
        }
    )
    tool_calls: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    tool_calls_seen: int = 0
    messages: int = 0
    done: bool = False
    failure: tuple[str, int | None] | None = None
    error_kind: str | None = None  # the CLI's own word for a failed turn (authentication_failed)
    rate_limit: tuple[str, float | None] | None = None
    reports: list[tuple[Cause, float]] = dataclasses.field(default_factory=list)
    """Each failed request the CLI reported, with when (its retries, in order)."""
    stop: Cause | None = None  # a reported cause waiting cannot fix: stop the CLI now
    retrying: bool = False  # the last report is unanswered: no progress since
    unparsed: int = 0
    first_unparsed: str = ""
    partial: list[str] = dataclasses.field(default_factory=list)
    _partial_bytes: int = 0
    events: list[AnyEvent] = dataclasses.field(default_factory=list)
    secrets: list[str] = dataclasses.field(default_factory=list)

    # ---------------------------------------------------------------- bounds

    def shown(self, text: str, limit: int) -> str:
        """Text for a person (an event, a message): scrubbed, token shapes too, then cut."""
        return clip(scrub(text, self.secrets), limit)

    def kept(self, text: str, limit: int) -> str:
        """Text kept as the CLI gave it (its answer, tool arguments): secret values
        removed, then cut; a token's shape in code is left alone."""
        return clip(scrub_values(text, self.secrets), limit)

    # ------------------------------------------------------------- recording

    def emit(self, event: AnyEvent) -> None:
        """Queue an event for the run's ``on_event`` (drained after each line)."""
        self.events.append(event)

    def retry(
        self, cause: Cause, *, attempt: Any = None, of: Any = None, delay_s: float | None = None
    ) -> None:
        """The CLI reported a failed request (it may retry it): a ``retry`` event, a
        report kept for the attempt rows, and ``stop`` set when waiting cannot help."""
        self.reports.append((cause, time.time()))
        self.retrying = True
        self.emit(
            RetryEvent(
                error_kind=cause.kind.value,
                status=cause.status,
                attempt=to_int(attempt) or None,
                max_attempts=to_int(of) or None,
                delay_s=delay_s or 0.0,
                retry_after_s=cause.retry_after,
                provider=None,
                detail=self.shown(cause.detail, 300) or None,
            )
        )
        if cause.fatal and self.stop is None:
            self.stop = cause

    @property
    def cause(self) -> Cause | None:
        """The last failed request the CLI reported and had not got past, or None."""
        return self.reports[-1][0] if self.reports and self.retrying else None

    def step(self, provider: str) -> None:
        """An assistant turn ended: a ``step`` event, as the loop emits after each step."""
        self.emit(StepEvent(tool_calls=self.tool_calls_seen, tokens=self.tokens, provider=provider))

    def say(self, text: str, *, progress: bool = True) -> None:
        """An assistant message: it becomes the answer so far, and partial output.

        ``progress`` False for a message the CLI made up to say a request failed.
        """
        self.retrying = self.retrying and not progress
        text = self.kept(text, self.limits.capture_bytes)
        self.text = text
        self.messages += 1
        room = self.limits.capture_bytes - self._partial_bytes
        if room > 0 and text:
            kept = text[:room]  # the earliest output is kept
            self.partial.append(kept)
            self._partial_bytes += len(kept)

    def answer(self, text: str) -> None:
        """The final answer as the CLI's result event gives it (no message counted)."""
        self.text = self.kept(text, self.limits.capture_bytes)

    def tool_started(self, call_id: str | None, tool: str, args: Any) -> None:
        self.retrying = False
        self.tool_calls_seen += 1
        shown = args if isinstance(args, str) else json.dumps(args, sort_keys=True, default=str)
        name, kept = self.shown(tool, 200), self.kept(shown, self.limits.event_bytes)
        call = {
            "id": call_id,
            "tool": name,
            "args": kept,
            "status": "started",
            "output_bytes": None,
        }
        if len(self.tool_calls) < _MAX_TOOL_CALLS:
            self.tool_calls.append(call)
        self.emit(ToolCallEvent(tool=name, args=kept, status="started"))

    def tool_ended(self, call_id: str | None, *, ok: bool, output: str | None = None) -> None:
        for call in reversed(self.tool_calls):
            if call["id"] == call_id and call["status"] == "started":
                call["status"] = "ok" if ok else "error"
                if output is not None:
                    call["output_bytes"] = len(output.encode("utf-8", "replace"))
                tool, args = str(call["tool"]), str(call["args"])
                self.emit(ToolCallEvent(tool=tool, args=args, status=call["status"]))
                return

    def tool_refused(self, call_id: str | None, reason: str = "") -> None:
        """The CLI's own permission rules refused a tool call (a ``refused`` event)."""
        for call in reversed(self.tool_calls):
            if call["id"] == call_id and call["status"] in ("started", "error"):
                call["status"] = "refused"
                self.emit(
                    RefusedEvent(
                        act=call["tool"],
                        target=self.shown(call["args"], 200),
                        rule="the CLI's permission mode",
                        layer="agent",
                        reason=self.shown(reason, 300),
                    )
                )
                return

    def add_usage(self, usage: Any, *, replace: bool = False) -> None:
        """Add a usage record (or replace the totals with a final one)."""
        if not isinstance(usage, dict):
            return
        cached = to_int(usage.get("cached_input_tokens")) + to_int(
            usage.get("cache_read_input_tokens")
        )
        fresh = to_int(usage.get("input_tokens")) + to_int(usage.get("cache_creation_input_tokens"))
        # OpenAI-style input_tokens already include the cached ones; Anthropic's do not.
        input_tokens = fresh if "cached_input_tokens" in usage else fresh + cached
        record = {
            "input_tokens": input_tokens,
            "output_tokens": to_int(usage.get("output_tokens")),
            "cached_input_tokens": cached,
        }
        for key, value in record.items():
            self.usage[key] = value if replace else self.usage[key] + value

    def unreadable(self, line: str) -> None:
        self.unparsed += 1
        if not self.first_unparsed:
            self.first_unparsed = self.shown(line, 300)

    @property
    def tokens(self) -> int:
        return int(self.usage["input_tokens"]) + int(self.usage["output_tokens"])

    def partial_text(self) -> str:
        return "\n".join(self.partial)


def to_int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0
