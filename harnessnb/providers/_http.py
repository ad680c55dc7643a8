"""The one module that speaks HTTP: deadlines, SSE, streaming and failure mapping.

Every HTTP provider subclasses ``HTTPProvider``, which makes one attempt per
``complete`` call (providers never retry), reports it with ``report_attempt``
and turns every failure into a ``ProviderError`` through the table in
``_errors``. Subclasses only convert messages to their wire format and parse the
answer back; swapping the HTTP client library means editing this file and
``_client.py`` (the client per event loop) alone.

Time limits:
    * ``timeout`` is the whole attempt's deadline (connect, send, wait, read all
      of it, stream included). Exceeding it is ``timeout``.
    * ``idle_timeout`` bounds the silence between two chunks of a stream, so a
      stream that stalls fails after seconds, not after the 600 s deadline. The
      wait for the first chunk (a reasoning model sends nothing while it thinks)
      has the deadline alone.

Streaming: answers are streamed unless the provider was built with ``stream=False``
(or a call passes ``stream=False``), so time-to-first-token is measured, a silent
stream is cut by the idle timeout and each piece of text goes to ``report_text``.
A server that rejects a streamed request (an error answer that names streaming) is
asked again at once without it, and that provider instance never streams again.

Size limits: an answer body over ``MAX_ANSWER_BYTES`` (16 MiB; a stream over
``MAX_STREAM_BYTES``, 128 MiB) is ``malformed``, read no further; every provider
error message, and so the error of attempt rows, run rows and cards, is cut to
``MAX_ERROR_TEXT`` characters.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import copy
import datetime
import json
import os
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar, Self
from urllib.parse import urlsplit

import httpx2

from ..rules._errors import (
    ConfigError,
    ProviderError,
    ProviderErrorKind,
    classify_status,
    parse_retry_after,
    parse_should_retry,
    request_id_from,
)
from ..rules._secrets import register, register_header, scrub, scrub_exception
from ..rules._text import shorten
from ._client import aclose_client, new_client, shared_client
from ._completion import (
    AttemptRecord,
    Completion,
    Messages,
    ToolSpecs,
    report_attempt,
    shown_url,
    text_sink,
)
from ._wire import (
    Parsed,
    SSEFrames,
    StreamAccumulator,
    WireError,
    error_text,
    rejects_streaming,
)

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "MAX_ANSWER_BYTES",
    "MAX_ERROR_TEXT",
    "MAX_STREAM_BYTES",
    "REQUEST_TIMEOUT",
    "HTTPProvider",
    "aclose_client",
    "new_client",
    "seconds",
    "shared_client",
]

REQUEST_TIMEOUT = 600.0
"""Deadline of one provider attempt, in seconds (the official SDKs' default)."""

DEFAULT_IDLE_TIMEOUT = 60.0
"""Longest silence allowed between two chunks of a stream, in seconds."""

MAX_ANSWER_BYTES = 16 * 1024 * 1024  # some four million tokens: no real answer is near
# A stream's JSON framing is 50-100x the text of each token chunk, so its cap is wider.
MAX_STREAM_BYTES = 8 * MAX_ANSWER_BYTES
MAX_ERROR_TEXT = 2000  # characters of a provider error message, cut with "..."

# Error bodies are read for their message only; a huge HTML error page is cut short.
_ERROR_BODY_LIMIT = 64 * 1024
_DRAIN_TIMEOUT = 0.5


def seconds(value: float | datetime.timedelta) -> float:
    """A duration in seconds from a float or a ``timedelta``; must be positive."""
    out = value.total_seconds() if isinstance(value, datetime.timedelta) else float(value)
    if not out > 0:
        raise ConfigError(f"a timeout must be a positive number of seconds, got {value!r}")
    return out


def _env(var: str) -> str | None:
    value = os.environ.get(var, "").strip()
    return value or None


# ------------------------------------------------------------- the base provider


class HTTPProvider(abc.ABC):
    """A provider reached over HTTP: config, one attempt per call, failure mapping.

    Args:
        model: The model name sent to the server.
        api_key: The secret; never shown in a repr, error or attempt record.
        base_url: The server root, as the official SDK spells it.
        timeout: Deadline of one attempt (float seconds or ``timedelta``).
        idle_timeout: Longest silence between stream chunks (default 60 s).
        headers: Extra headers sent with every request.
        stream: Stream answers (the default); False asks for whole answers.
    """

    NAME: ClassVar[str]
    DEFAULT_BASE_URL: ClassVar[str]
    DEFAULT_MODEL: ClassVar[str]
    KEY_ENV: ClassVar[str]
    BASE_URL_ENV: ClassVar[str]
    MODEL_ENV: ClassVar[str]
    PATH: ClassVar[str]

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float | datetime.timedelta = REQUEST_TIMEOUT,
        *,
        idle_timeout: float | datetime.timedelta = DEFAULT_IDLE_TIMEOUT,
        headers: Mapping[str, str] | None = None,
        stream: bool = True,
        name: str | None = None,
    ) -> None:
        if not model:
            raise ConfigError(f"{self.NAME}: a model name is required")
        self._model = model
        self._base_url = (base_url or self.DEFAULT_BASE_URL).rstrip("/")
        parts = urlsplit(self._base_url)
        if parts.scheme not in ("http", "https"):
            raise ConfigError(f"{self.NAME}: base_url must be an http(s) URL: {self._base_url!r}")
        if parts.query or parts.fragment:  # the path is appended to it: it would follow them
            raise ConfigError(f"{self.NAME}: base_url {shown_url(self._base_url)!r} may not "
                              "carry a query or fragment (pass headers= for a key)")  # fmt: skip
        if api_key:  # a key read from a file ends in a newline, which breaks the header
            if not (api_key := api_key.strip()):
                raise ConfigError(f"{self.NAME}: api_key= holds only whitespace",
                                  code="CONFIG_MISSING_KEY")  # fmt: skip
        elif base_url is None:
            # The official host needs a key: take it from the environment like the
            # SDKs do, but never send it to a custom base_url nobody handed it to.
            api_key = _env(self.KEY_ENV)
            if api_key is None:
                raise ConfigError(
                    f"{self.NAME}: no API key; set {self.KEY_ENV} or pass api_key=",
                    code="CONFIG_MISSING_KEY",
                )
        self._api_key = api_key or None
        register(self._api_key)
        register(parts.password)  # a proxy's key in user:password@
        register(parts.username)  # ... or a key as the user name alone
        for header, value in (headers or {}).items():
            register_header(header, value)
        self._timeout = seconds(timeout)
        self._idle_timeout = seconds(idle_timeout)
        self._stream = bool(stream)
        self._stream_refused = False  # the server rejected a streamed request once
        try:
            # Parsed once: httpx2 would otherwise re-parse the URL string on every call.
            self._url = httpx2.URL(self._base_url + self.PATH)
        except httpx2.InvalidURL as exc:
            raise ConfigError(f"{self.NAME}: invalid base_url {self._base_url!r}: {exc}") from exc
        self._headers = {**self._auth_headers(self._api_key), **(headers or {})}
        self._name = name or self.NAME

    @classmethod
    def from_env(
        cls,
        model: str | None = None,
        *,
        timeout: float | datetime.timedelta = REQUEST_TIMEOUT,
        idle_timeout: float | datetime.timedelta = DEFAULT_IDLE_TIMEOUT,
        stream: bool = True,
    ) -> Self:
        """Configure from the environment; ``ConfigError`` names a missing variable.

        Reads the key variable (``KEY_ENV``), the optional base URL variable and,
        when ``model`` is None, the model variable (else ``DEFAULT_MODEL``). The key
        may be absent only when a custom base URL is set (a local server).
        """
        base_url = _env(cls.BASE_URL_ENV)
        api_key = _env(cls.KEY_ENV)
        if api_key is None and base_url is None:
            raise ConfigError(
                f"{cls.NAME}: environment variable {cls.KEY_ENV} is not set",
                code="CONFIG_MISSING_KEY",
            )
        return cls(
            model or _env(cls.MODEL_ENV) or cls.DEFAULT_MODEL,
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            idle_timeout=idle_timeout,
            stream=stream,
        )

    # -- Provider protocol

    @property
    def name(self) -> str:
        return self._name

    @property
    def model(self) -> str:
        return self._model

    @property
    def timeout(self) -> float:
        return self._timeout

    @property
    def idle_timeout(self) -> float:
        return self._idle_timeout

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def stream(self) -> bool:
        """Whether calls stream: as built, and False once the server rejected it."""
        return self._stream and not self._stream_refused

    def hosts(self) -> list[str]:
        host = urlsplit(self._base_url).hostname
        return [host] if host else []

    def with_timeout(
        self,
        timeout: float | datetime.timedelta,
        *,
        idle_timeout: float | datetime.timedelta | None = None,
    ) -> Self:
        """A new provider like this one with another deadline (and idle timeout)."""
        new = copy.copy(self)
        new._timeout = seconds(timeout)
        if idle_timeout is not None:
            new._idle_timeout = seconds(idle_timeout)
        return new

    def __repr__(self) -> str:
        # Cheap and secret-free: the key is never part of the repr, nor the URL's
        # user, password or query (``shown_url``).
        url = shown_url(self._base_url)
        return (
            f"{type(self).__name__}(model={self._model!r}, base_url={url!r}, "
            f"timeout={self._timeout:g}{'' if self._stream else ', stream=False'})"
        )

    async def complete(
        self,
        messages: Messages,
        tools: ToolSpecs = None,
        max_tokens: int | None = None,
        stream: bool | None = None,
    ) -> Completion:
        """One HTTP attempt; raises ``ProviderError`` on any failure (never retries).

        ``stream=None`` streams as the provider was built to. The one second attempt is
        a server's rejection of streaming, asked again without it (and remembered).
        """
        streamed = (self._stream if stream is None else stream) and not self._stream_refused
        body = self._request_body(messages, tools, max_tokens, streamed)
        attempt = _Attempt(self, body, streamed)
        try:
            return await attempt.run()
        except ProviderError:
            if not attempt.stream_refused:
                raise
        self._stream_refused = True
        body = self._request_body(messages, tools, max_tokens, False)
        return await _Attempt(self, body, False).run()

    # -- what a protocol supplies

    @abc.abstractmethod
    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        """Headers that authenticate (and version) every request."""

    @abc.abstractmethod
    def _request_body(
        self, messages: Messages, tools: ToolSpecs, max_tokens: int | None, stream: bool
    ) -> dict[str, Any]:
        """The JSON request body in the wire format."""

    @abc.abstractmethod
    def _parse_body(self, body: Any) -> Parsed:
        """Parse a non-streamed 200 body; raise ``WireError`` when it is not an answer."""

    @abc.abstractmethod
    def _stream_accumulator(self) -> StreamAccumulator:
        """A fresh accumulator for one streamed answer."""

    @staticmethod
    def _error_object(body: Any) -> Any:
        """The error object inside an error body, or None (both wire shapes)."""
        if isinstance(body, Mapping):
            return body.get("error")
        return None


class _Attempt:
    """One HTTP attempt of one provider: send, read, classify, time and report."""

    def __init__(self, provider: HTTPProvider, body: dict[str, Any], stream: bool) -> None:
        self.p = provider
        self.body = body
        self.stream = stream
        self.started_at = time.time()
        self.t0 = time.perf_counter()
        self.status: int | None = None
        self.headers: Mapping[str, str] = {}
        self.ttft_ms: float | None = None
        self.idle_armed = False
        self.stream_refused = False  # the server said no to streaming

    async def run(self) -> Completion:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.p._timeout
        try:
            async with asyncio.timeout_at(deadline) as timer:
                if self.stream:
                    parsed = await self._send_streamed(timer, deadline)
                else:
                    parsed = await self._send()
        except TimeoutError as exc:
            # The idle timer fired when it was armed for earlier than the deadline.
            when = timer.when()
            if self.idle_armed and when is not None and when < deadline:
                raise self._fail(
                    ProviderErrorKind.TIMEOUT,
                    f"stream went silent for {self.p._idle_timeout:g} s (idle timeout)",
                ) from exc
            raise self._fail(
                ProviderErrorKind.TIMEOUT,
                f"no complete answer within the {self.p._timeout:g} s deadline",
            ) from exc
        except httpx2.HTTPError as exc:
            scrub_exception(exc)  # it may quote a header, the key in it
            kind, text = _http_error_kind(exc)
            raise self._fail(kind, text) from exc
        except httpx2.InvalidURL as exc:
            scrub_exception(exc)
            raise self._fail(ProviderErrorKind.REQUEST, f"invalid URL: {exc}") from exc
        except WireError as exc:
            # Not chained to the WireError itself: its text is unscrubbed server output.
            scrub_exception(exc.__cause__)
            raise self._fail(exc.kind, exc.message) from exc.__cause__
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            # A stream event of an odd shape; unchained: the parser's text quotes the body.
            name = type(exc).__name__
            raise self._fail(ProviderErrorKind.MALFORMED, f"unreadable answer ({name})") from None
        if not parsed.text and not parsed.tool_calls:
            raise self._fail(
                ProviderErrorKind.MALFORMED,
                "answer holds neither text nor a tool call "
                f"({parsed.usage.input_tokens} input, {parsed.usage.output_tokens} output tokens)",
            )
        return self._succeed(parsed)

    async def _send(self) -> Parsed:
        client = shared_client()
        request = client.build_request("POST", self.p._url, json=self.body, headers=self.p._headers)
        # Sent as a stream so the status and request id are known even if the body dies.
        response = await client.send(request, stream=True)
        try:
            self._took(response)
            if response.status_code >= 300:
                raise self._status_error(await _read_limited(response))
            return self._parse_json(await _read_answer(response))
        finally:
            await response.aclose()

    async def _send_streamed(self, timer: asyncio.Timeout, deadline: float) -> Parsed:
        client = shared_client()
        async with client.stream(
            "POST", self.p._url, json=self.body, headers=self.p._headers
        ) as response:
            self._took(response)
            if response.status_code >= 300:
                raise self._status_error(await _read_limited(response))
            ctype = response.headers.get("content-type", "")
            if not ctype.startswith("text/event-stream"):
                # A server may answer a stream request with one JSON body (an error in
                # a 200, or a server that does not stream): read it as such.
                return self._parse_json(await _read_answer(response))
            acc = self.p._stream_accumulator()
            await self._read_sse(response, acc, timer, deadline)
            return acc.result()

    async def _read_sse(
        self,
        response: httpx2.Response,
        acc: StreamAccumulator,
        timer: asyncio.Timeout,
        deadline: float,
    ) -> None:
        loop = asyncio.get_running_loop()
        idle = self.p._idle_timeout
        frames = SSEFrames()
        sink = text_sink()
        shown = False  # a piece of text went to the sink already
        chunks = response.aiter_bytes()
        received = 0
        async for chunk in chunks:
            # Armed from the first chunk on: the wait for it (a reasoning model thinking
            # sends nothing) is bounded by the deadline alone, as a whole answer's is.
            self.idle_armed = True
            timer.reschedule(min(deadline, loop.time() + idle))
            received += len(chunk)
            if received > MAX_STREAM_BYTES:
                raise WireError.malformed(f"stream larger than the {MAX_STREAM_BYTES} byte cap")
            for event, data in frames.feed(chunk):
                if acc.feed(event, data) and self.ttft_ms is None:
                    self.ttft_ms = (time.perf_counter() - self.t0) * 1000.0
                if sink is not None and acc.fresh:
                    # A listener's failure is its own (the loop's logs it), never the answer's.
                    with contextlib.suppress(Exception):
                        await sink(acc.fresh, not shown)
                    shown = True
                if acc.done:
                    # The answer is complete: its own deadline no longer applies.
                    timer.reschedule(None)
                    await _drain(chunks)
                    return
        if (last := frames.last()) is not None:  # a last event without its blank line
            acc.feed(*last)

    def _parse_json(self, content: bytes) -> Parsed:
        try:
            body = json.loads(content)
        except ValueError as exc:
            raise WireError.malformed(f"200 body is not JSON ({len(content)} bytes)") from exc
        error = self.p._error_object(body)
        if error is not None:
            raise WireError.from_error_object(error, "error in a 200 body")
        try:
            return self.p._parse_body(body)
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
        error = self.p._error_object(body)
        if error is not None:
            detail = error_text(error)
        else:
            detail = scrub(content.decode("utf-8", "replace")).strip()[:300] or "(empty body)"
        if 300 <= status < 400:
            where = self.headers.get("location", "elsewhere")
            detail = f"redirect to {where} not followed ({detail})"
        kind = classify_status(status, detail)
        self.stream_refused = self.stream and rejects_streaming(status, detail)
        reason = httpx2.codes.get_reason_phrase(status)
        return self._fail(kind, f"HTTP {status} {reason}: {detail}")

    def _fail(self, kind: ProviderErrorKind, text: str) -> ProviderError:
        latency = (time.perf_counter() - self.t0) * 1000.0
        p = self.p
        headers = self.headers
        # Retry-After and x-should-retry mean something only on a response that failed.
        retry_after = parse_retry_after(headers) if headers else None
        # Scrubbed, then cut: a cut must never leave half a key behind.
        # shorten scrubs before it cuts: the key, registered when the provider was built,
        # is removed even where a server echoed it into the text.
        message = shorten(f"{p.NAME} {p._model}: {text}", MAX_ERROR_TEXT)
        err = ProviderError(
            message,
            kind=kind,
            status=self.status,
            retry_after=retry_after,
            provider=p._name,
            request_id=request_id_from(headers) if headers else None,
            should_retry=parse_should_retry(headers) if headers else None,
            model=p._model,
        )
        report_attempt(
            AttemptRecord.failed(
                err,
                provider=p._name,
                model=p._model,
                started_at=self.started_at,
                latency_ms=latency,
                ttft_ms=self.ttft_ms,
                base_url=p._base_url,
            )
        )
        return err

    def _succeed(self, parsed: Parsed) -> Completion:
        latency = (time.perf_counter() - self.t0) * 1000.0
        p = self.p
        request_id = request_id_from(self.headers)
        completion = Completion(
            text=parsed.text,
            tool_calls=parsed.tool_calls,
            usage=parsed.usage,
            finish_reason=parsed.finish_reason,
            provider=p._name,
            model=p._model,
            request_id=request_id,
            ttft_ms=self.ttft_ms,
            latency_ms=latency,
        )
        report_attempt(
            AttemptRecord.succeeded(
                completion,
                started_at=self.started_at,
                latency_ms=latency,
                status=self.status,
                base_url=p._base_url,
            )
        )
        return completion


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    """Read what follows the last event (the chunk terminator) so the connection is reused.

    A server that keeps the stream open, or drops it, after its last event does not
    turn a complete answer into a failure: the connection is just not reused.
    """
    with contextlib.suppress(TimeoutError, httpx2.HTTPError):
        async with asyncio.timeout(_DRAIN_TIMEOUT):
            async for _ in chunks:
                pass


async def _read_answer(response: httpx2.Response) -> bytes:
    """The whole answer body, or a malformed ``WireError`` past ``MAX_ANSWER_BYTES``."""
    body = await _read_limited(response, MAX_ANSWER_BYTES + 1)
    if len(body) > MAX_ANSWER_BYTES:
        raise WireError.malformed(f"answer body larger than the {MAX_ANSWER_BYTES} byte cap")
    return body


async def _read_limited(response: httpx2.Response, limit: int = _ERROR_BODY_LIMIT) -> bytes:
    out = bytearray()
    async for chunk in response.aiter_bytes():
        out += chunk
        if len(out) >= limit:
            break
    return bytes(out[:limit])


def _http_error_kind(exc: httpx2.HTTPError) -> tuple[ProviderErrorKind, str]:
    """The kind of an httpx2 failure that produced no usable response."""
    name = type(exc).__name__
    detail = str(exc) or name
    if isinstance(exc, httpx2.TimeoutException):
        return ProviderErrorKind.TIMEOUT, f"{name}: {detail}"
    if isinstance(exc, httpx2.UnsupportedProtocol | httpx2.LocalProtocolError):
        # Our own request could not be sent as given: no retry can cure that.
        return ProviderErrorKind.REQUEST, f"{name}: {detail}"
    if isinstance(exc, httpx2.DecodingError):
        return ProviderErrorKind.MALFORMED, f"{name}: {detail}"
    # Refused, reset, DNS, TLS, a connection dying mid-body or mid-stream, proxies.
    return ProviderErrorKind.TRANSPORT, f"{name}: {detail}"
