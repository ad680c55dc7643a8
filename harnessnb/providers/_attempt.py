"""One HTTP attempt of one provider: send, read, classify, time and report.

``Attempt`` is what ``HTTPProvider.complete`` runs: it sends one request to its
``Endpoint`` (where and how the provider talks, its wire format's parsers), reads the
answer whole or as server-sent events, turns every failure into a ``ProviderError``
through the table in ``rules._errors`` and puts the attempt's record on the answer, the
failure, or the ``CancelledError`` of a cancel that cut it off.

Time limits of a stream, inside the attempt's deadline: the first complete event must
come within ``first_event_timeout`` of the answer's headers (a reasoning model thinks
before it sends anything, so it is long), then each next one within ``idle_timeout``.
Progress is a complete event: bytes or comments that complete none are silence.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx2

from ..rules._classify import ErrorReading
from ..rules._errors import (
    ProviderError,
    ProviderErrorKind,
    classify_status,
    parse_retry_after,
    parse_should_retry,
    request_id_from,
)
from ..rules._secrets import scrub, scrub_exception
from ..rules._text import shorten
from ._client import drain, error_kind, post, read_limited
from ._completion import Attempted, AttemptRecord, Completion, TextSink, Usage, with_attempts
from ._usage import answer_chars, estimate_usage
from ._wire import (
    Parsed,
    SSEFrames,
    StreamAccumulator,
    WireError,
    error_text,
    rejects_streaming,
)

__all__ = ["MAX_ANSWER_BYTES", "MAX_ERROR_TEXT", "MAX_STREAM_BYTES", "Attempt", "Endpoint"]

MAX_ANSWER_BYTES = 16 * 1024 * 1024  # some four million tokens: no real answer is near
# A stream's JSON framing is 50-100x the text of each token chunk, so its cap is wider.
MAX_STREAM_BYTES = 8 * MAX_ANSWER_BYTES
MAX_ERROR_TEXT = 2000  # characters of a provider error message, cut with "..."

# Error bodies are read for their message only; a huge HTML error page is cut short.
_ERROR_BODY_LIMIT = 64 * 1024


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """Where and how one provider's attempts go, and how its wire format is read."""

    label: str  # the protocol's name, first in every message ("openai")
    name: str  # the provider's name in rows
    model: str
    url: httpx2.URL
    base_url: str
    headers: Mapping[str, str]
    timeout: float  # the attempt's whole deadline
    idle_timeout: float  # between two events of a stream
    first_event_timeout: float  # from a stream's headers to its first event
    parse_body: Callable[[Any], Parsed]
    stream_accumulator: Callable[[], StreamAccumulator]
    error_object: Callable[[Any], Any]
    # What an error status's error object says beyond the status (Gemini: its kind, the
    # body's retry delay, a daily quota); None: the status and message decide.
    read_error: Callable[[Any, int], ErrorReading] | None = None


class Attempt:
    """One HTTP attempt of one provider: send, read, classify, time and report."""

    def __init__(
        self,
        endpoint: Endpoint,
        body: dict[str, Any],
        stream: bool,
        on_text: TextSink | None = None,
    ) -> None:
        self.p = endpoint
        self.body = body
        self.stream = stream
        self.on_text = on_text  # takes each piece of streamed text
        self.started_at = time.time()
        self.t0 = time.perf_counter()
        self.status: int | None = None
        self.headers: Mapping[str, str] = {}
        self.ttft_ms: float | None = None
        self.events_seen = False  # a complete SSE event arrived (the idle timer is armed)
        self.headers_seen = False  # a stream's headers arrived (the first-event timer is armed)
        self.stream_refused = False  # the server said no to streaming
        self.streamed_chars = 0  # answer text a stream brought so far (for an estimate)

    async def run(self) -> Completion:
        try:
            parsed = await self._answer()
        except asyncio.CancelledError as exc:
            # Cut off in flight (the run cancelled, a Ctrl-C): the server may have read
            # and billed the request, so it is a row, marked cancelled, not a failure.
            with_attempts(exc, [self._cut_off()])
            raise
        if not parsed.text and not parsed.tool_calls and parsed.refusal is None:
            # A refusal with no words is still an answer: the model declined.
            usage = self._billed(parsed.usage, 0)
            said = "estimated" if usage.estimated else "reported"
            raise self._fail(
                ProviderErrorKind.MALFORMED,
                "answer holds neither text nor a tool call "
                f"({usage.input_tokens} input, {usage.output_tokens} output tokens {said})",
                usage,
            )
        return self._succeed(parsed)

    async def _answer(self) -> Parsed:
        """Send and read the answer; every failure becomes a ``ProviderError``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.p.timeout
        try:
            async with asyncio.timeout_at(deadline) as timer:
                if self.stream:
                    parsed = await self._send_streamed(timer, deadline)
                else:
                    parsed = await self._send()
        except TimeoutError as exc:
            # A stream's own timer fired when it was armed for earlier than the deadline.
            when = timer.when()
            if self.headers_seen and when is not None and when < deadline:
                silent = (
                    f"stream went silent for {self.p.idle_timeout:g} s (idle timeout)"
                    if self.events_seen
                    else f"no event within {self.p.first_event_timeout:g} s of the stream's "
                    "headers (first-event timeout)"
                )
                raise self._fail(ProviderErrorKind.TIMEOUT, silent) from exc
            raise self._fail(
                ProviderErrorKind.TIMEOUT,
                f"no complete answer within the {self.p.timeout:g} s deadline",
            ) from exc
        except httpx2.HTTPError as exc:
            scrub_exception(exc)  # it may quote a header, the key in it
            kind, text = error_kind(exc)
            raise self._fail(kind, text) from exc
        except httpx2.InvalidURL as exc:
            scrub_exception(exc)
            raise self._fail(ProviderErrorKind.REQUEST, f"invalid URL: {exc}") from exc
        except WireError as exc:
            # Not chained to the WireError itself: its text is unscrubbed server output.
            scrub_exception(exc.__cause__)
            raise self._fail(
                exc.kind, exc.message, exc.usage, reading=exc.reading
            ) from exc.__cause__
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            # A stream event of an odd shape; unchained: the parser's text quotes the body.
            name = type(exc).__name__
            raise self._fail(ProviderErrorKind.MALFORMED, f"unreadable answer ({name})") from None
        return parsed

    def _billed(self, usage: Usage | None, answer_chars: int) -> Usage:
        """What an answer that arrived cost: its reported usage, else an estimate."""
        if usage is not None:
            return usage
        request_bytes = len(json.dumps(self.body, ensure_ascii=False).encode())
        return estimate_usage(request_bytes, answer_chars)

    async def _send(self) -> Parsed:
        async with post(self.p.url, self.body, self.p.headers) as response:
            self._took(response)
            if response.status_code >= 300:
                raise self._status_error(await read_limited(response, _ERROR_BODY_LIMIT))
            return self._parse_json(await _read_answer(response))

    async def _send_streamed(self, timer: asyncio.Timeout, deadline: float) -> Parsed:
        async with post(self.p.url, self.body, self.p.headers) as response:
            self._took(response)
            if response.status_code >= 300:
                raise self._status_error(await read_limited(response, _ERROR_BODY_LIMIT))
            ctype = response.headers.get("content-type", "")
            if not ctype.startswith("text/event-stream"):
                # A server may answer a stream request with one JSON body (an error in
                # a 200, or a server that does not stream): read it as such.
                return self._parse_json(await _read_answer(response))
            acc = self.p.stream_accumulator()
            await self._read_sse(response, acc, timer, deadline)
            return acc.result()

    async def _read_sse(
        self,
        response: httpx2.Response,
        acc: StreamAccumulator,
        timer: asyncio.Timeout,
        deadline: float,
    ) -> None:
        idle = self.p.idle_timeout
        frames = SSEFrames()
        sink = self.on_text
        shown = False  # a piece of text went to the sink already
        chunks = response.aiter_bytes()
        received = 0
        # Progress is a complete event, never a byte: a server that trickles bytes or
        # comments is silent. The first event may take long (a reasoning model thinks).
        self.headers_seen = True
        silence = _Silence(timer, deadline, self.p.first_event_timeout)
        try:
            async for chunk in chunks:
                received += len(chunk)
                if received > MAX_STREAM_BYTES:
                    raise WireError.malformed(f"stream larger than the {MAX_STREAM_BYTES} byte cap")
                events = frames.feed(chunk)
                if events:
                    self.events_seen = True
                    silence.progress(idle)
                for event, data in events:
                    if acc.feed(event, data) and self.ttft_ms is None:
                        self.ttft_ms = (time.perf_counter() - self.t0) * 1000.0
                    self.streamed_chars += len(acc.fresh)
                    if sink is not None and acc.fresh:
                        # A listener's failure is its own (the loop's logs it), never the
                        # answer's.
                        with contextlib.suppress(Exception):
                            await sink(acc.fresh, not shown)
                        shown = True
                    if acc.done:
                        # The answer is complete: its own deadline no longer applies.
                        silence.stop()
                        timer.reschedule(None)
                        await drain(chunks)
                        return
        finally:
            silence.stop()
        if (last := frames.last()) is not None:  # a last event without its blank line
            acc.feed(*last)

    def _parse_json(self, content: bytes) -> Parsed:
        try:
            body = json.loads(content)
        except ValueError as exc:
            raise WireError.malformed(f"200 body is not JSON ({len(content)} bytes)") from exc
        error = self.p.error_object(body)
        if error is not None:
            raise WireError.from_error_object(error, "error in a 200 body", self.p.read_error)
        try:
            return self.p.parse_body(body)
        except WireError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise WireError.malformed(f"unreadable 200 body ({type(exc).__name__})") from exc

    def _took(self, response: httpx2.Response) -> None:
        self.status = response.status_code
        self.headers = response.headers

    def _status_error(self, content: bytes) -> ProviderError:
        status = self.status or 0
        try:
            body: Any = json.loads(content) if content else None
        except ValueError:
            body = None
        error = self.p.error_object(body)
        if error is not None:
            detail = error_text(error)
        else:
            detail = scrub(content.decode("utf-8", "replace")).strip()[:300] or "(empty body)"
        if 300 <= status < 400:
            where = self.headers.get("location", "elsewhere")
            detail = f"redirect to {where} not followed ({detail})"
        kind = classify_status(status, detail)
        reading = None
        if error is not None and self.p.read_error is not None and status >= 400:
            reading = self.p.read_error(error, status)
            kind = reading.kind
            detail = f"{detail} ({reading.note})" if reading.note else detail
        self.stream_refused = self.stream and rejects_streaming(status, detail)
        reason = httpx2.codes.get_reason_phrase(status)
        return self._fail(kind, f"HTTP {status} {reason}: {detail}", reading=reading)

    def _fail(
        self,
        kind: ProviderErrorKind,
        text: str,
        usage: Usage | None = None,
        *,
        reading: ErrorReading | None = None,
    ) -> ProviderError:
        p = self.p
        # An answer that arrived was billed, used or not; an error status was not.
        answered = self.status is not None and 200 <= self.status < 300
        billed = self._billed(usage, self.streamed_chars) if answered else None
        headers = self.headers
        # Retry-After and x-should-retry mean something only on a response that failed.
        retry_after = parse_retry_after(headers) if headers else None
        should_retry = parse_should_retry(headers) if headers else None
        if reading is not None:  # the body's word where the headers said nothing
            retry_after = reading.retry_after_s if retry_after is None else retry_after
            should_retry = reading.should_retry if should_retry is None else should_retry
        # Scrubbed, then cut: a cut must never leave half a key behind.
        # shorten scrubs before it cuts: the key, registered when the provider was built,
        # is removed even where a server echoed it into the text.
        message = shorten(f"{p.label} {p.model}: {text}", MAX_ERROR_TEXT)
        err = ProviderError(
            message,
            kind=kind,
            status=self.status,
            retry_after_s=retry_after,
            provider=p.name,
            request_id=request_id_from(headers) if headers else None,
            should_retry=should_retry,
            model=p.model,
        )
        record = AttemptRecord.failed(err, usage=billed, **self._attempted())
        return with_attempts(err, [record])

    def _cut_off(self) -> AttemptRecord:
        headers = self.headers
        request_id = request_id_from(headers) if headers else None
        return AttemptRecord.cut_off(status=self.status, request_id=request_id, **self._attempted())

    def _attempted(self) -> Attempted:
        """This attempt's provider, model, start and time so far, for its record."""
        return {
            "provider": self.p.name,
            "model": self.p.model,
            "started_at": self.started_at,
            "latency_ms": (time.perf_counter() - self.t0) * 1000.0,
            "ttft_ms": self.ttft_ms,
            "base_url": self.p.base_url,
        }

    def _succeed(self, parsed: Parsed) -> Completion:
        latency = (time.perf_counter() - self.t0) * 1000.0
        p = self.p
        request_id = request_id_from(self.headers)
        completion = Completion(
            text=parsed.text,
            tool_calls=parsed.tool_calls,
            usage=self._billed(parsed.usage, answer_chars(parsed)),
            finish_reason=parsed.finish_reason,
            provider=p.name,
            model=p.model,
            request_id=request_id,
            ttft_ms=self.ttft_ms,
            latency_ms=latency,
            refusal=parsed.refusal,
            output_items=parsed.output_items,
        )
        record = AttemptRecord.succeeded(
            completion,
            started_at=self.started_at,
            latency_ms=latency,
            status=self.status,
            base_url=p.base_url,
        )
        return dataclasses.replace(completion, attempts=(record,))


class _Silence:
    """A stream's first-event and idle timeouts as one lazy timer on the attempt's own.

    Progress (a complete event) only notes the time: moving the attempt's timer on
    every event would cancel and schedule a timer handle per event. The handle armed
    here comes due at the last progress plus the limit; when progress came since it
    was armed it is armed again for the new time, else the stream was silent that
    long and the attempt's timer is fired at that very time (``when()`` before the
    deadline says which timeout it was). A shorter limit (idle after the first event's)
    arms it again at once; a limit that reaches past the deadline arms nothing: the
    deadline comes first.
    """

    __slots__ = ("_armed", "_deadline", "_handle", "_limit", "_loop", "_since", "_timer")

    def __init__(self, timer: asyncio.Timeout, deadline: float, limit: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._timer = timer
        self._deadline = deadline
        self._limit = limit
        self._since = self._loop.time()
        self._armed = 0.0  # when the armed handle comes due
        self._handle: asyncio.TimerHandle | None = None
        self._arm()

    def _arm(self) -> None:
        self._handle = None
        due = self._since + self._limit
        if due < self._deadline:
            self._armed = due
            self._handle = self._loop.call_at(due, self._due)

    def _due(self) -> None:
        self._handle = None
        if self._timer.expired():  # the deadline came first, in the same turn of the loop
            return
        due = self._since + self._limit
        if due > self._armed:  # progress since it was armed: not silent that long
            self._arm()
        else:
            self._timer.reschedule(due)

    def progress(self, limit: float) -> None:
        """A complete event arrived: the next one is due within ``limit`` seconds."""
        self._since = now = self._loop.time()
        self._limit = limit
        if self._handle is None:  # nothing armed: the limit may now end before the deadline
            self._arm()
        elif now + limit < self._armed:  # a shorter limit (the first event's, then idle)
            self._handle.cancel()
            self._arm()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


async def _read_answer(response: httpx2.Response) -> bytes:
    """The whole answer body, or a malformed ``WireError`` past ``MAX_ANSWER_BYTES``."""
    body = await read_limited(response, MAX_ANSWER_BYTES + 1)
    if len(body) > MAX_ANSWER_BYTES:
        raise WireError.malformed(f"answer body larger than the {MAX_ANSWER_BYTES} byte cap")
    return body
