"""A chaos server: real HTTP on loopback that speaks OpenAI, Anthropic and Gemini, and
fails on demand.

It is the test bed for providers, the run loop and the demo model::

    from harnessnb.chaos import ChaosServer, Fault, Reply

    with ChaosServer(seed=0) as srv:
        provider = hn.OpenAI("m", base_url=srv.openai_url)
        srv.push(Fault.status(429, retry_after="1"), Fault.drop_mid_stream())
        ...
        srv.requests[0].fault        # what the first request got

Paths: ``/v1/chat/completions`` (any path ending in ``/chat/completions``) is the
OpenAI protocol, ``/v1/responses`` OpenAI's Responses API (``_chaos_responses``),
``/v1/messages`` the Anthropic one, ``/v1/models/{model}:generateContent``
and ``:streamGenerateContent`` (any version) Gemini's (``_chaos_gemini``), streaming
(SSE) or not. The server runs an asyncio loop in its own thread, speaks HTTP/1.1 with keep-alive
and handles hundreds of concurrent connections. Faults come, in this order, from
the queue (``push``), from the seeded ``rates`` draw, or from ``set_default``.

Typed answers (``_chaos_output``): a request asking for a JSON Schema (natively, as a
``final_answer`` tool, or in the conversation) is answered by the echo responder and the
demo model with JSON that validates (``ChaosRequest.typed_as()`` says what was asked,
and how), and four faults make the answer unusable on every wire: ``Fault.refusal()``,
``Fault.truncated()``, ``Fault.schema_violation()``, ``Fault.schema_rejected()``.
Run ``python -m harnessnb.chaos --port 8000`` to serve one from a shell.

This module is longer than the 600 lines the others keep to, on purpose: it is one
protocol simulator whose parts (the HTTP exchange, the OpenAI and Anthropic bodies and
SSE streams, the fault table) change together; split, each part would need the others'
private shapes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import json
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import _chaos_gemini as gemini
from . import _chaos_output as output
from . import _chaos_responses as responses

__all__ = ["ChaosRequest", "ChaosServer", "Fault", "Reply", "echo_responder"]

_SECRET_HEADERS = frozenset(
    {"authorization", "x-api-key", "proxy-authorization", "api-key", "x-goog-api-key"}
)
_ANTHROPIC_CONTEXT = "prompt is too long: 210000 tokens > 200000 maximum"
# Faults answered with no content (Gemini's own two are "empty" in the other protocols).
_EMPTY = frozenset({"empty", "blocked", "finish_empty"})


# --------------------------------------------------------------------- public data


@dataclasses.dataclass(frozen=True)
class Fault:
    """One failure the server applies to one request. Build with the classmethods.

    Hashable, so a ``Fault`` can key ``rates``. Objects (bodies, error objects) are
    kept as JSON text for that reason.
    """

    kind: str
    http_status: int = 200
    retry_after: str | None = None
    retry_after_ms: str | None = None
    body: str | None = None  # JSON text, or a plain message for the default error body
    body_is_message: bool = False
    headers: tuple[tuple[str, str], ...] = ()
    should_retry: bool | None = None
    seconds: float = 0.0
    after_events: int = 0

    @classmethod
    def status(
        cls,
        code: int,
        *,
        retry_after: str | float | None = None,
        retry_after_ms: str | float | None = None,
        body: str | Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        should_retry: bool | None = None,
    ) -> Fault:
        """Answer with HTTP ``code``.

        Args:
            code: The status.
            retry_after: ``Retry-After`` value as sent: seconds or an HTTP-date.
            retry_after_ms: ``retry-after-ms`` value.
            body: A message (wrapped in the protocol's error body) or a whole JSON body.
            headers: Extra response headers.
            should_retry: Sent as ``x-should-retry``.
        """
        return cls(
            "status",
            http_status=code,
            retry_after=None if retry_after is None else str(retry_after),
            retry_after_ms=None if retry_after_ms is None else str(retry_after_ms),
            body=body if isinstance(body, str) or body is None else json.dumps(body),
            body_is_message=isinstance(body, str),
            headers=tuple((headers or {}).items()),
            should_retry=should_retry,
        )

    @classmethod
    def hang(cls, seconds: float = 30.0) -> Fault:
        """Accept the request, then say nothing for ``seconds`` and close."""
        return cls("hang", seconds=seconds)

    @classmethod
    def drop_mid_body(cls) -> Fault:
        """Send the headers and half the body, then drop the connection."""
        return cls("drop_mid_body")

    @classmethod
    def drop_mid_stream(cls, after_events: int = 2) -> Fault:
        """Stream ``after_events`` events, then drop (non-stream: as ``drop_mid_body``)."""
        return cls("drop_mid_stream", after_events=after_events)

    @classmethod
    def stall_stream(cls, after_events: int = 2, seconds: float = 30.0) -> Fault:
        """Stream ``after_events`` events, go silent for ``seconds``, then finish."""
        return cls("stall_stream", after_events=after_events, seconds=seconds)

    @classmethod
    def malformed(cls) -> Fault:
        """A 200 whose body (or a stream event) is not valid JSON."""
        return cls("malformed")

    @classmethod
    def empty(cls) -> Fault:
        """A 200 with a valid envelope but no choice / no content and 0 output tokens."""
        return cls("empty")

    @classmethod
    def error_in_200(cls, error: Any) -> Fault:
        """A 200 JSON body ``{"error": error}`` (OpenRouter style), streamed or not."""
        return cls("error_in_200", body=json.dumps(error))

    @classmethod
    def stream_error(cls, error: Any, after_events: int = 1) -> Fault:
        """A stream that carries an error event after ``after_events`` healthy ones."""
        return cls("stream_error", body=json.dumps(error), after_events=after_events)

    @classmethod
    def slow(cls, seconds: float) -> Fault:
        """A healthy answer sent after ``seconds``."""
        return cls("slow", seconds=seconds)

    @classmethod
    def trickle(cls, seconds: float) -> Fault:
        """A healthy stream with ``seconds`` between its events (non-stream: as ``slow``
        by that much). For watching streamed text arrive."""
        return cls("trickle", seconds=seconds)

    @classmethod
    def rejects_streaming(cls) -> Fault:
        """A streamed request gets HTTP 400 "streaming is not supported"; a request that
        does not stream gets a healthy answer (a server that cannot stream)."""
        return cls("rejects_streaming", http_status=400)

    @classmethod
    def blocked(cls, reason: str = "SAFETY") -> Fault:
        """Gemini: a 200 with no candidate, the prompt blocked (``promptFeedback``).
        Other protocols: as ``empty``."""
        return cls("blocked", body=reason)

    @classmethod
    def finish_empty(cls, reason: str = "SAFETY") -> Fault:
        """Gemini: a candidate that ended ``reason`` (``SAFETY``, ``RECITATION``,
        ``MAX_TOKENS``) with no content. Other protocols: as ``empty``."""
        return cls("finish_empty", body=reason)

    @classmethod
    def refusal(cls, text: str = output.REFUSAL_TEXT) -> Fault:
        """The model declines, in ``text``, as the wire says it: chat's
        ``message.refusal`` (streamed: ``delta.refusal``), the Responses API's refusal
        content (``response.refusal.delta``), Anthropic's ``stop_reason: "refusal"``.
        Gemini has no refusal: a candidate stopped for ``SAFETY`` with no content."""
        return cls("refusal", body=text)

    @classmethod
    def truncated(cls) -> Fault:
        """The answer stops at the token cap halfway (mid-JSON for a typed answer; a
        final-answer call's arguments become cut text), with the wire's cap reason:
        ``length``, ``max_tokens``, ``incomplete`` for ``max_output_tokens``,
        ``MAX_TOKENS``; its output tokens the request's cap when it set one."""
        return cls("truncated")

    @classmethod
    def schema_violation(cls) -> Fault:
        """Valid JSON that breaks the schema asked (a required field missing), as text
        for a native request, as ``final_answer``'s arguments when the request offers
        that tool, in a fenced ``json`` block when the conversation gives the schema;
        ``[]`` when the request asks no schema."""
        return cls("schema_violation")

    @classmethod
    def schema_rejected(cls, message: str | None = None) -> Fault:
        """A request asking natively for a JSON Schema gets HTTP 400 in the wire's error
        shape, as a strict mode refusing the schema answers (OpenAI's ``Invalid schema
        for response_format 'NAME': ...``; Gemini's ``INVALID_ARGUMENT``); ``message``
        the reason. A request asking none gets a healthy answer (as
        ``rejects_streaming``)."""
        return cls("schema_rejected", http_status=400, body=message)


@dataclasses.dataclass(frozen=True)
class Reply:
    """What a healthy answer says; the server renders it in the request's protocol.

    ``tool_calls`` items are ``{"name": str, "arguments": dict}``. Token counts
    default to an estimate from the text sizes. ``usage`` replaces the whole usage
    object as sent (an unreadable one, say); ``headers`` are added to the response.
    ``refusal`` makes the answer a refusal in the wire's shape (``Fault.refusal``);
    ``truncated`` ends it with the wire's token-cap reason (``Fault.truncated``).
    """

    text: str = ""
    tool_calls: Sequence[Mapping[str, Any]] = ()
    input_tokens: int | None = None
    output_tokens: int | None = None
    usage: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    refusal: str | None = None
    truncated: bool = False


@dataclasses.dataclass
class ChaosRequest:
    """One request the server received, with the fault it got (None: healthy)."""

    protocol: str  # "openai" | "responses" | "anthropic" | "gemini"
    path: str
    json: Any
    headers: dict[str, str]  # lower-case names; secrets replaced by "REDACTED"
    request_id: str
    fault: Fault | None = None
    connection: int = 0  # which TCP connection carried it (1, 2, ... in accept order)

    @property
    def model(self) -> str:
        if self.protocol == "gemini":  # named by the path
            return (gemini.gemini_route(self.path) or ("", False))[0]
        return str(self._get("model") or "")

    @property
    def stream(self) -> bool:
        if self.protocol == "gemini":
            return (gemini.gemini_route(self.path) or ("", False))[1]
        return bool(self._get("stream"))

    @property
    def messages(self) -> list[Any]:
        """The conversation, as chat messages (a Responses request's input items and
        Gemini's ``contents`` read as OpenAI-shaped messages)."""
        if self.protocol == "responses":
            return responses.chat_messages(self.json)
        if self.protocol == "gemini":
            return gemini.gemini_messages(self.json)
        value = self._get("messages")
        return list(value) if isinstance(value, list) else []

    @property
    def tools(self) -> list[str]:
        """The names of the tools offered, in order."""
        if self.protocol == "gemini":
            return gemini.gemini_tools(self.json)
        names: list[str] = []
        for tool in self._get("tools") or ():
            if isinstance(tool, Mapping):
                fn = tool.get("function")
                names.append(str(fn.get("name") if isinstance(fn, Mapping) else tool.get("name")))
        return names

    @property
    def output_schema(self) -> Mapping[str, Any] | None:
        """The JSON Schema the request asks its answer in natively (None: it asks none):
        chat's ``response_format``, the Responses API's ``text.format``, Anthropic's
        ``output_config.format``, Gemini's ``responseJsonSchema``."""
        return output.output_schema(self.protocol, self.json)

    @property
    def tool_schemas(self) -> dict[str, Mapping[str, Any]]:
        """The parameters schema of each tool offered, by name."""
        return output.tool_parameters(self.protocol, self.json)

    @property
    def prompted_schema(self) -> Mapping[str, Any] | None:
        """The JSON Schema the conversation gives for the answer (a typed run's prompted
        mode: after the words "JSON Schema" in a user or system message), if any."""
        return output.prompted_schema(self.messages)

    def typed_as(self) -> tuple[Mapping[str, Any] | None, str]:
        """The schema the answer is asked in and how (``native``, ``tool``, ``prompted``;
        ``(None, "")``: none)."""
        return output.schema_of_reply(self.output_schema, self.tool_schemas, self.prompted_schema)

    @property
    def max_tokens(self) -> int | None:
        """The token cap the request sets, if it sets one."""
        return output.max_tokens(self.protocol, self.json)

    def _get(self, key: str) -> Any:
        return self.json.get(key) if isinstance(self.json, Mapping) else None


def echo_responder(request: ChaosRequest) -> Reply:
    """The default responder: answer with the last user message's text; asked for a
    JSON Schema (natively, as a ``final_answer`` tool, or in the conversation), with
    JSON that validates, its strings that text."""
    said = "ok"
    for message in reversed(request.messages):
        if isinstance(message, Mapping) and message.get("role") == "user":
            text = _text_of(message.get("content"))
            if text:
                said = text
                break
    return typed_reply(request, Reply(text=said), text=said)


def typed_reply(
    request: ChaosRequest, reply: Reply, *, number: int | None = None, text: str = ""
) -> Reply:
    """``reply`` as the typed answer the request asks for, when it asks one and
    ``reply`` is a last answer (no tool call): its JSON as text for a native request, a
    ``final_answer`` call for one offering that tool, a fenced ``json`` block for a
    conversation that gives the schema; else ``reply`` unchanged."""
    if reply.tool_calls:
        return reply
    schema, mode = request.typed_as()
    if schema is None:
        return reply
    value = output.instance(schema, number=number, text=text)
    if mode == "tool":
        return dataclasses.replace(
            reply, text="", tool_calls=[{"name": output.FINAL_ANSWER, "arguments": value}]
        )
    return dataclasses.replace(reply, text=output.as_text(value, mode))


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content or ():
        if isinstance(block, Mapping):
            if block.get("type") == "text":
                parts.append(str(block.get("text") or ""))
            elif block.get("type") == "tool_result":
                parts.append(_text_of(block.get("content")))
    return "".join(parts)


# ------------------------------------------------------------------------ server

# Names usable as ``rates`` keys, and the fault each one stands for.
RATE_FAULTS: dict[str, Fault] = {
    "rate_limited": Fault.status(429, retry_after="1"),
    "server": Fault.status(503),
    "overloaded": Fault.status(529),
    "timeout": Fault.hang(30.0),
    "transport": Fault.drop_mid_body(),
    "malformed": Fault.malformed(),
    "empty": Fault.empty(),
    "auth": Fault.status(401),
    "request": Fault.status(400),
    "context_overflow": Fault.status(400, body=_ANTHROPIC_CONTEXT),
    "stream_error": Fault.stream_error({"type": "overloaded_error", "message": "Overloaded"}),
    # One chunk, then silence: the provider's idle timeout cuts it as a timeout.
    "stalled_stream": Fault.stall_stream(after_events=1, seconds=30.0),
    # Answers that came but cannot be the typed answer asked for (OutputFailureKind).
    "refusal": Fault.refusal(),
    "truncated": Fault.truncated(),
    "schema_violation": Fault.schema_violation(),
    "schema_rejected": Fault.schema_rejected(),
}


class ChaosServer:
    """A loopback HTTP server speaking OpenAI and Anthropic, with faults on demand.

    Args:
        seed: Seeds the ``rates`` draw: the same seed gives the same fault sequence.
        responder: ``(ChaosRequest) -> Reply`` deciding healthy answers (default: echo).
            It runs on the server's thread; if it raises, the request gets a 500.
        rates: Fault rates by name (see ``RATE_FAULTS``) or by ``Fault``, e.g.
            ``{"rate_limited": 0.1, "server": 0.05}``.
        host: Interface to bind (loopback by default).
        port: Port to bind; 0 picks a free one.
    """

    def __init__(
        self,
        seed: int = 0,
        responder: Callable[[ChaosRequest], Reply] | None = None,
        rates: Mapping[str | Fault, float] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._seed = seed
        self._responder = responder or echo_responder
        self._rates: list[tuple[Fault, float]] = []
        for key, rate in (rates or {}).items():
            if isinstance(key, str):
                if key not in RATE_FAULTS:
                    raise ValueError(f"unknown fault rate {key!r}; known: {sorted(RATE_FAULTS)}")
                key = RATE_FAULTS[key]
            self._rates.append((key, float(rate)))
        if sum(r for _, r in self._rates) > 1.0 + 1e-9:
            raise ValueError("fault rates add up to more than 1")
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._queue: deque[Fault] = deque()
        self._default: Fault | None = None
        self._requests: list[ChaosRequest] = []
        self._ids = itertools.count(1)
        self._conn_ids = itertools.count(1)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()

    # -- lifecycle

    def start(self) -> ChaosServer:
        """Start serving in a background thread; returns self."""
        if self._thread is not None:
            return self
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._connection, self._host, self._port, backlog=2048)
                )
                self._port = self._server.sockets[0].getsockname()[1]
            except BaseException as exc:  # reported to the starting thread
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._thread = threading.Thread(target=serve, name="harnessnb-chaos", daemon=True)
        self._thread.start()
        ready.wait()
        if failure:
            self._thread = None
            raise failure[0]
        return self

    def stop(self) -> None:
        """Stop serving; hanging and stalled connections are cut, not waited for."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        try:
            fut.result(timeout=5)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=5)
            self._thread = None
            self._loop = None

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._conns):
            task.cancel()
        if self._conns:
            await asyncio.gather(*self._conns, return_exceptions=True)

    def __enter__(self) -> ChaosServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- addresses

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self._port}"

    @property
    def openai_url(self) -> str:
        """``base_url`` for ``hn.OpenAI`` / ``hn.OpenRouter`` and the ``openai`` SDK."""
        return self.url + "/v1"

    @property
    def anthropic_url(self) -> str:
        """``base_url`` for ``hn.Anthropic`` and the ``anthropic`` SDK."""
        return self.url

    @property
    def gemini_url(self) -> str:
        """``base_url`` for ``hn.Gemini`` and the ``google-genai`` SDK."""
        return self.url

    # -- faults

    def push(self, *faults: Fault) -> None:
        """Queue faults: the next requests get them, first in first out."""
        with self._lock:
            self._queue.extend(faults)

    def set_default(self, fault: Fault | None) -> None:
        """The fault every request gets when none is queued or drawn (None: healthy)."""
        with self._lock:
            self._default = fault

    @property
    def requests(self) -> list[ChaosRequest]:
        """A snapshot of every request received, in arrival order."""
        with self._lock:
            return list(self._requests)

    def reset(self) -> None:
        """Forget requests, queued faults and the default; restart the rates draw."""
        with self._lock:
            self._queue.clear()
            self._default = None
            self._requests.clear()
            self._rng = random.Random(self._seed)

    def _next_fault(self) -> Fault | None:
        # Called under the lock, once per request, in arrival order.
        if self._queue:
            return self._queue.popleft()
        if self._rates:
            draw = self._rng.random()
            total = 0.0
            for fault, rate in self._rates:
                total += rate
                if draw < total:
                    return fault
        return self._default

    # -- HTTP/1.1

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        conn_id = next(self._conn_ids)
        graceful = True
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                try:
                    method, target, _version = lines[0].split(" ", 2)
                except ValueError:
                    return
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    name, sep, value = line.partition(":")
                    if sep:
                        headers[name.strip().lower()] = value.strip()
                body = await _read_body(reader, headers)
                if body is None:
                    return
                graceful = await self._respond(method, target, headers, body, writer, conn_id)
                if not graceful or headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            graceful = False
        except asyncio.CancelledError:
            # Our own shutdown cutting a hanging or idle connection: end quietly.
            graceful = False
        finally:
            self._conns.discard(task)
            # A fault drops the connection hard; a normal end lets buffered bytes out.
            if graceful:
                writer.close()
            else:
                writer.transport.abort()

    async def _respond(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes,
        writer: asyncio.StreamWriter,
        conn_id: int,
    ) -> bool:
        """Answer one request; False when the connection must be closed."""
        path = target.split("?", 1)[0]
        if path.endswith("/chat/completions"):
            protocol = "openai"
        elif path.endswith("/responses"):
            protocol = "responses"
        elif path.endswith("/messages"):
            protocol = "anthropic"
        elif gemini.gemini_route(path) is not None:
            protocol = "gemini"
        else:
            await _send(writer, 404, _error_body("openai", 404, f"no route {path}"), {})
            return True
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            payload = None
        if method != "POST" or not isinstance(payload, dict):
            await _send(writer, 400, _error_body(protocol, 400, "expected a JSON POST"), {})
            return True
        rid = f"req_{next(self._ids):06d}"
        request = ChaosRequest(
            protocol=protocol,
            path=path,
            json=payload,
            headers={k: ("REDACTED" if k in _SECRET_HEADERS else v) for k, v in headers.items()},
            request_id=rid,
            connection=conn_id,
        )
        with self._lock:
            request.fault = self._next_fault()
            self._requests.append(request)
        id_header = {"request-id" if protocol == "anthropic" else "x-request-id": rid}
        return await _Exchange(request, self._responder, writer, id_header).run()


async def _read_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> bytes | None:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        out = bytearray()
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # trailers are not used
                return bytes(out)
            out += await reader.readexactly(size)
            await reader.readexactly(2)
    length = headers.get("content-length")
    if length is None:
        return b""
    try:
        return await reader.readexactly(int(length))
    except ValueError:
        return None


async def _send(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    headers: Mapping[str, str],
    content_type: str = "application/json",
) -> None:
    writer.write(_head(status, {"content-type": content_type, **headers}, len(body)) + body)
    await writer.drain()


def _head(status: int, headers: Mapping[str, str], length: int | None) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}", "server: harnessnb-chaos"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines.append(
        f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
    )
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


_REASONS = {
    200: "OK", 301: "Moved Permanently", 302: "Found", 400: "Bad Request",
    401: "Unauthorized", 402: "Payment Required", 403: "Forbidden", 404: "Not Found",
    408: "Request Timeout", 413: "Payload Too Large", 429: "Too Many Requests",
    500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable",
    504: "Gateway Timeout", 529: "Overloaded",
}  # fmt: skip

# status -> (error type, default message), shared by both protocols' error bodies.
_ERROR_TYPES = {
    400: ("invalid_request_error", "Invalid request."),
    401: ("authentication_error", "Invalid API key."),
    402: ("billing_error", "Insufficient credits."),
    403: ("permission_error", "Permission denied."),
    404: ("not_found_error", "Not found."),
    408: ("timeout_error", "Request timed out."),
    413: ("request_too_large", "Request too large."),
    429: ("rate_limit_error", "Rate limit reached."),
    529: ("overloaded_error", "Overloaded."),
}


def _error_body(protocol: str, status: int, message: str | None = None) -> bytes:
    etype, default = _ERROR_TYPES.get(status, ("api_error", "Internal server error."))
    msg = message or default
    if protocol == "gemini":
        return gemini.error_body(status, message)
    if protocol == "anthropic":
        return json.dumps({"type": "error", "error": {"type": etype, "message": msg}}).encode()
    return json.dumps(
        {"error": {"message": msg, "type": etype, "param": None, "code": None}}
    ).encode()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class _Exchange:
    """Renders one response (healthy or faulty) in the request's protocol."""

    def __init__(
        self,
        request: ChaosRequest,
        responder: Callable[[ChaosRequest], Reply],
        writer: asyncio.StreamWriter,
        id_header: dict[str, str],
    ) -> None:
        self.req = request
        self.responder = responder
        self.writer = writer
        self.ids = id_header
        self.fault = request.fault

    async def run(self) -> bool:
        f = self.fault
        kind = f.kind if f else "healthy"
        if f is not None and (kind == "slow" or (kind == "trickle" and not self.req.stream)):
            await asyncio.sleep(f.seconds)
            kind = "healthy"
        if kind == "rejects_streaming":
            if self.req.stream:
                text = "streaming is not supported by this server"
                await _send(self.writer, 400, _error_body(self.req.protocol, 400, text), self.ids)
                return True
            kind = "healthy"
        if kind == "schema_rejected":
            if self.req.output_schema is not None:
                name = output.output_name(self.req.protocol, self.req.json)
                said = self.fault.body if self.fault else None
                body = output.rejection(self.req.protocol, name, said)
                await _send(self.writer, 400, json.dumps(body).encode(), self.ids)
                return True
            kind = "healthy"
        if self.req.protocol == "responses" and (wrong := responses.input_error(self.req.json)):
            await _send(self.writer, 400, _error_body("openai", 400, wrong), self.ids)
            return True
        if f is not None and kind == "hang":
            await asyncio.sleep(f.seconds)
            return False
        if f is not None and kind == "status":
            await self._status(f)
            return True
        if kind == "error_in_200" or (kind == "stream_error" and not self.req.stream):
            await self._error_in_200()
            return True
        if kind == "malformed" and not self.req.stream:
            await _send(
                self.writer, 200, b'{"id": "chatcmpl-x", "choices": [{"index": 0, "mess', self.ids
            )
            return True
        try:
            reply = self._reply(kind)
        except Exception as exc:
            # A broken responder is a bug in the test, said plainly, not a dropped socket.
            text = f"chaos responder failed: {type(exc).__name__}: {exc}"
            await _send(self.writer, 500, _error_body(self.req.protocol, 500, text), self.ids)
            return True
        self.ids = {**self.ids, **reply.headers}
        if self.req.stream:
            return await self._stream(self._events(kind, reply))
        return await self._whole(kind, reply)

    async def _status(self, f: Fault) -> None:
        headers = dict(self.ids)
        if f.retry_after is not None:
            headers["retry-after"] = f.retry_after
        if f.retry_after_ms is not None:
            headers["retry-after-ms"] = f.retry_after_ms
        if f.should_retry is not None:
            headers["x-should-retry"] = "true" if f.should_retry else "false"
        if 300 <= f.http_status < 400:
            headers["location"] = "http://127.0.0.1:9/elsewhere"
        headers.update(dict(f.headers))
        if f.body is not None and not f.body_is_message:
            body = f.body.encode()
        else:
            body = _error_body(self.req.protocol, f.http_status, f.body)
        await _send(self.writer, f.http_status, body, headers)

    async def _error_in_200(self) -> None:
        error = json.loads(self.fault.body or "null") if self.fault else None
        if self.req.protocol == "responses":  # a response that failed, streamed or not
            answer = self._answer(Reply(), empty=True)
            if self.req.stream:
                await self._stream(responses.failed_events(answer, error))
                return
            payload: dict[str, Any] = responses.failed_response(answer, error)
        elif self.req.protocol == "anthropic":
            payload = {"type": "error", "error": error}
        else:
            payload = {"error": error}
        await _send(self.writer, 200, json.dumps(payload).encode(), self.ids)

    # -- healthy (or empty / truncated) answers

    def _reply(self, kind: str) -> Reply:
        if kind in _EMPTY:
            return Reply(text="", output_tokens=0)
        reply = self.responder(self.req)
        if kind == "refusal":
            said = (self.fault.body if self.fault else None) or output.REFUSAL_TEXT
            return Reply(refusal=said, headers=reply.headers)
        if kind == "truncated":
            text = output.truncate(output.answer_text(reply.text, reply.tool_calls))
            return Reply(
                text=text,
                output_tokens=self.req.max_tokens,
                truncated=True,
                headers=reply.headers,
            )
        if kind == "schema_violation":
            schema, mode = self.req.typed_as()
            bad = [] if schema is None else output.violating(schema)
            if mode == "tool":
                call = {"name": output.FINAL_ANSWER, "arguments": bad}
                return Reply(tool_calls=[call], headers=reply.headers)
            return Reply(text=output.as_text(bad, mode), headers=reply.headers)
        return reply

    async def _whole(self, kind: str, reply: Reply) -> bool:
        if self.req.protocol == "responses":
            body = self._answer(reply, kind in _EMPTY).response()
        elif self.req.protocol == "gemini":
            body = _gemini_body(self.req, reply, kind, self.fault)
        elif self.req.protocol == "anthropic":
            body = _anthropic_message(self.req, reply, kind in _EMPTY)
        else:
            body = _openai_completion(self.req, reply, kind in _EMPTY)
        data = json.dumps(body).encode()
        w = self.writer
        if kind in ("drop_mid_body", "drop_mid_stream"):
            w.write(_head(200, {"content-type": "application/json", **self.ids}, len(data)))
            w.write(data[: len(data) // 2])
            await w.drain()
            return False
        if kind == "stall_stream" and self.fault is not None:
            w.write(_head(200, {"content-type": "application/json", **self.ids}, len(data)))
            w.write(data[: len(data) // 2])
            await w.drain()
            await asyncio.sleep(self.fault.seconds)
            w.write(data[len(data) // 2 :])
            await w.drain()
            return True
        await _send(w, 200, data, self.ids)
        return True

    def _answer(self, reply: Reply, empty: bool) -> responses.Answer:
        inp, out = _usage(self.req, reply, empty)
        calls = [
            (cid, str(c["name"]), c.get("arguments") or {})
            for cid, c in zip(_call_ids(self.req, reply, "call_"), reply.tool_calls, strict=True)
        ]
        rid, model = self.req.request_id, self.req.model
        return responses.Answer(
            rid, model, reply.text, calls, inp, out, reply.usage, empty,
            refusal=reply.refusal, truncated=reply.truncated,
        )  # fmt: skip

    def _events(self, kind: str, reply: Reply) -> list[bytes]:
        if self.req.protocol == "responses":
            return self._answer(reply, kind in _EMPTY).events()
        if self.req.protocol == "gemini":
            return _gemini_events(self.req, reply, kind, self.fault)
        if self.req.protocol == "anthropic":
            return _anthropic_events(self.req, reply, kind in _EMPTY)
        return _openai_events(self.req, reply, kind in _EMPTY)

    async def _stream(self, events: list[bytes]) -> bool:
        f = self.fault
        kind = f.kind if f else "healthy"
        w = self.writer
        headers = {"content-type": "text/event-stream", "cache-control": "no-cache", **self.ids}
        w.write(_head(200, headers, None))
        cut = f.after_events if f else len(events)
        if kind == "drop_mid_body":
            cut = 0
        if kind in ("drop_mid_stream", "drop_mid_body"):
            for event in events[:cut]:
                w.write(_chunk(event))
            await w.drain()
            return False
        if kind == "malformed":
            events = [events[0], b'data: {"choices": [{"delta": {"content": "He\n\n', *events[1:]]
        if kind == "stream_error" and f is not None:
            error = json.loads(f.body or "null")
            if self.req.protocol == "responses":
                bad = responses.error_event(error, cut)
            elif self.req.protocol == "anthropic":
                bad = _sse({"type": "error", "error": error}, "error")
            else:
                bad = _sse({"error": error})
            events = [*events[:cut], bad]
        if kind == "trickle" and f is not None:
            for event in events:
                w.write(_chunk(event))
                await w.drain()
                await asyncio.sleep(f.seconds)
            events = []
        if kind == "stall_stream" and f is not None:
            for event in events[:cut]:
                w.write(_chunk(event))
            await w.drain()
            await asyncio.sleep(f.seconds)
            events = events[cut:]
        # One write per event, as a real server flushes each token.
        if not _write_each(w, [*map(_chunk, events), b"0\r\n\r\n"]):
            return False
        await w.drain()
        return True


def _write_each(w: asyncio.StreamWriter, chunks: Sequence[bytes]) -> bool:
    """Write each chunk in a write of its own, stopping at a connection the client has
    left (a stalled stream's client timed out): asyncio logs "socket.send() raised
    exception." for every write after the loss, which the demo printed on stderr."""
    for chunk in chunks:
        if w.is_closing():
            return False
        w.write(chunk)
    return True


# ----------------------------------------------------------------- wire rendering


def _sse(obj: Any, event: str | None = None) -> bytes:
    data = f"data: {json.dumps(obj)}\n\n"
    return (f"event: {event}\n{data}" if event else data).encode()


def _split(text: str, parts: int = 3) -> list[str]:
    """Split text into ``parts`` non-empty fragments (fewer when it is short)."""
    if not text:
        return []
    size = max(1, -(-len(text) // parts))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _usage(req: ChaosRequest, reply: Reply, empty: bool) -> tuple[int, int]:
    if reply.input_tokens is not None:
        inp = reply.input_tokens
    else:
        inp = max(1, len(json.dumps(req.messages)) // 4)
    if reply.output_tokens is not None:
        out = reply.output_tokens
    elif empty:
        out = 0
    else:
        args = sum(len(json.dumps(c.get("arguments") or {})) for c in reply.tool_calls)
        out = max(1, (len(reply.text) + args) // 4 + 3 * len(reply.tool_calls))
    return inp, out


def _call_ids(req: ChaosRequest, reply: Reply, prefix: str) -> list[str]:
    return [f"{prefix}{req.request_id}_{i}" for i in range(len(reply.tool_calls))]


def _openai_completion(req: ChaosRequest, reply: Reply, empty: bool) -> dict[str, Any]:
    inp, out = _usage(req, reply, empty)
    usage = {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}
    envelope: dict[str, Any] = {
        "id": f"chatcmpl-{req.request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": req.model,
        "usage": usage if reply.usage is None else reply.usage,
    }
    if empty:
        envelope["choices"] = []
        return envelope
    message: dict[str, Any] = {
        "role": "assistant",
        "content": reply.text or None,
        "refusal": reply.refusal,
    }
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": cid,
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments") or {})},
            }
            for cid, c in zip(_call_ids(req, reply, "call_"), reply.tool_calls, strict=True)
        ]
    envelope["choices"] = [
        {"index": 0, "message": message, "finish_reason": _openai_finish(reply), "logprobs": None}
    ]
    return envelope


def _openai_finish(reply: Reply) -> str:
    return "length" if reply.truncated else "tool_calls" if reply.tool_calls else "stop"


def _openai_events(req: ChaosRequest, reply: Reply, empty: bool) -> list[bytes]:
    inp, out = _usage(req, reply, empty)
    base = {
        "id": f"chatcmpl-{req.request_id}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": req.model,
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return _sse({**base, "choices": [choice]})

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in _split(reply.text)]
    events += [chunk({"refusal": piece}) for piece in _split(reply.refusal or "")]
    for i, (cid, call) in enumerate(
        zip(_call_ids(req, reply, "call_"), reply.tool_calls, strict=True)
    ):
        head = {"index": i, "id": cid, "type": "function"}
        events.append(
            chunk({"tool_calls": [{**head, "function": {"name": call["name"], "arguments": ""}}]})
        )
        for piece in _split(json.dumps(call.get("arguments") or {})):
            events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
    events.append(chunk({}, _openai_finish(reply)))
    options = req.json.get("stream_options") if isinstance(req.json, dict) else None
    if isinstance(options, dict) and options.get("include_usage"):
        usage = {"prompt_tokens": inp, "completion_tokens": out, "total_tokens": inp + out}
        events.append(_sse({**base, "choices": [], "usage": reply.usage or usage}))
    events.append(b"data: [DONE]\n\n")
    return events


def _anthropic_blocks(req: ChaosRequest, reply: Reply) -> list[dict[str, Any]]:
    said = reply.refusal or reply.text  # a refusal's words are its text
    blocks: list[dict[str, Any]] = [{"type": "text", "text": said}] if said else []
    for cid, call in zip(_call_ids(req, reply, "toolu_"), reply.tool_calls, strict=True):
        blocks.append(
            {
                "type": "tool_use",
                "id": cid,
                "name": call["name"],
                "input": dict(call.get("arguments") or {}),
            }
        )
    return blocks


def _anthropic_stop(reply: Reply) -> str:
    if reply.refusal is not None:
        return "refusal"
    return "max_tokens" if reply.truncated else "tool_use" if reply.tool_calls else "end_turn"


def _anthropic_message(req: ChaosRequest, reply: Reply, empty: bool) -> dict[str, Any]:
    inp, out = _usage(req, reply, empty)
    return {
        "id": f"msg_{req.request_id}",
        "type": "message",
        "role": "assistant",
        "model": req.model,
        "content": [] if empty else _anthropic_blocks(req, reply),
        "stop_reason": _anthropic_stop(reply),
        "stop_sequence": None,
        "usage": reply.usage or {"input_tokens": inp, "output_tokens": out},
    }


def _anthropic_events(req: ChaosRequest, reply: Reply, empty: bool) -> list[bytes]:
    inp, out = _usage(req, reply, empty)
    message = {**_anthropic_message(req, reply, empty), "content": [], "stop_reason": None}
    message["usage"] = reply.usage or {"input_tokens": inp, "output_tokens": 1 if out else 0}
    events = [_sse({"type": "message_start", "message": message}, "message_start")]
    for index, block in enumerate([] if empty else _anthropic_blocks(req, reply)):
        if block["type"] == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _split(block["text"])]
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": p}
                for p in _split(json.dumps(block["input"]))
            ]
        events.append(
            _sse(
                {"type": "content_block_start", "index": index, "content_block": start},
                "content_block_start",
            )
        )
        if index == 0:
            events.append(_sse({"type": "ping"}, "ping"))
        events += [
            _sse({"type": "content_block_delta", "index": index, "delta": d}, "content_block_delta")
            for d in deltas
        ]
        events.append(_sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    stop = _anthropic_stop(reply)
    events.append(
        _sse(
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": reply.usage or {"output_tokens": out},
            },
            "message_delta",
        )
    )
    events.append(_sse({"type": "message_stop"}, "message_stop"))
    return events


def _gemini_body(req: ChaosRequest, reply: Reply, kind: str, fault: Fault | None) -> Any:
    empty = kind in _EMPTY
    tokens = _usage(req, reply, empty)
    if kind == "blocked":
        return gemini.blocked_prompt((fault.body if fault else None) or "SAFETY", tokens)
    finish = _gemini_finish(reply, kind, fault)
    empty = empty or reply.refusal is not None
    return gemini.gemini_response(
        req.model, req.request_id, reply.text, reply.tool_calls, tokens,
        usage=reply.usage, finish=finish, empty=empty,
    )  # fmt: skip


def _gemini_finish(reply: Reply, kind: str, fault: Fault | None) -> str | None:
    """A candidate's finish reason: the fault's, ``SAFETY`` for a refusal (Gemini has no
    refusal of its own), ``MAX_TOKENS`` for a truncated answer, else the default."""
    if fault is not None and kind == "finish_empty":
        return fault.body
    if reply.refusal is not None:
        return "SAFETY"
    return "MAX_TOKENS" if reply.truncated else None


def _gemini_events(req: ChaosRequest, reply: Reply, kind: str, fault: Fault | None) -> list[bytes]:
    if kind == "blocked":
        return [_sse(_gemini_body(req, reply, kind, fault))]
    empty = kind in ("empty", "finish_empty") or reply.refusal is not None
    finish = _gemini_finish(reply, kind, fault)
    chunks = gemini.gemini_chunks(
        req.model, req.request_id, _split(reply.text), reply.tool_calls,
        _usage(req, reply, empty), usage=reply.usage, finish=finish, empty=empty,
    )  # fmt: skip
    return [_sse(chunk) for chunk in chunks]


def main(argv: Sequence[str] | None = None) -> None:
    """Serve a chaos server until interrupted (``python -m harnessnb.chaos``)."""
    parser = argparse.ArgumentParser(prog="python -m harnessnb.chaos", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with ChaosServer(seed=args.seed, host=args.host, port=args.port) as srv:
        print(srv.url, flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
