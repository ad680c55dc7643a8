"""What a provider returns, what it is handed, and how its attempts are reported.

Messages are plain dicts in one normalised, OpenAI-like form that every provider
converts to its own wire format::

    {"role": "system" | "user", "content": str}
    {"role": "assistant", "content": str, "tool_calls": [{"id", "name", "arguments": dict}]}
    {"role": "tool", "tool_call_id": str, "name": str, "content": str}

Tool specs handed to ``complete(tools=...)`` are dicts
``{"name": str, "description": str, "parameters": <JSON schema object>}``.

Attempt reporting: every leaf provider reports each HTTP attempt (success or
failure) through ``report_attempt``; the loop collects them with
``collect_attempts()`` around a call, so ``Fallback`` and nested providers need no
extra return channel. Outside a collector, reports are dropped.

Streamed text: a leaf provider that streams hands each piece of answer text to
``report_text`` (or to the ``text_sink()`` it looked up once); the loop listens with
``stream_text_to(sink)`` around a call (the progress views show it live). Like
attempts, it passes through ``Fallback`` and wrappers untouched; outside a
listener, pieces are dropped.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from ..rules._errors import ProviderError

__all__ = [
    "AttemptRecord",
    "Completion",
    "Messages",
    "Provider",
    "TextSink",
    "ToolCall",
    "ToolSpecs",
    "Usage",
    "calling_for",
    "calling_run",
    "collect_attempts",
    "report_attempt",
    "report_text",
    "shown_url",
    "stream_text_to",
    "text_sink",
]


Messages: TypeAlias = Sequence[dict[str, Any]]
"""A conversation as a provider takes it: plain dicts with OpenAI-like roles."""

ToolSpecs: TypeAlias = Sequence[dict[str, Any]] | None
"""The tools offered to the model (OpenAI function specs), or None."""


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One tool call the model asked for, arguments already parsed to a dict."""

    id: str
    name: str
    arguments: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Usage:
    """Token counts of one answer: as the provider reported them, or, when its answer
    reported none, estimated (``estimated``; see ``providers._usage``)."""

    input_tokens: int = 0
    output_tokens: int = 0
    estimated: bool = False
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those read from the provider's cache (0: none reported)."""

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclasses.dataclass(frozen=True)
class Completion:
    """A successful answer from a provider (the leaf that answered is ``provider``)."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    finish_reason: str | None = None
    provider: str = ""
    model: str = ""
    request_id: str | None = None
    ttft_ms: float | None = None
    latency_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form (for checkpoints and recordings)."""
        return {
            "text": self.text,
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls
            ],
            "usage": {
                "input_tokens": self.usage.input_tokens,
                "output_tokens": self.usage.output_tokens,
            },
            "finish_reason": self.finish_reason,
            "provider": self.provider,
            "model": self.model,
            "request_id": self.request_id,
            "ttft_ms": self.ttft_ms,
            "latency_ms": self.latency_ms,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Completion:
        """The inverse of ``to_dict``."""
        usage = data.get("usage") or {}
        return cls(
            text=str(data.get("text") or ""),
            tool_calls=tuple(
                ToolCall(str(c["id"]), str(c["name"]), dict(c.get("arguments") or {}))
                for c in data.get("tool_calls") or []
            ),
            usage=Usage(int(usage.get("input_tokens", 0)), int(usage.get("output_tokens", 0))),
            finish_reason=data.get("finish_reason"),
            provider=str(data.get("provider") or ""),
            model=str(data.get("model") or ""),
            request_id=data.get("request_id"),
            ttft_ms=data.get("ttft_ms"),
            latency_ms=data.get("latency_ms"),
        )

    def to_message(self) -> dict[str, Any]:
        """The assistant message this completion adds to the conversation."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls
            ]
        return msg


@dataclasses.dataclass(frozen=True)
class AttemptRecord:
    """One HTTP attempt by a leaf provider; becomes an ``attempts`` row."""

    provider: str
    model: str
    started_at: float  # Unix seconds
    latency_ms: float
    kind: str | None = None  # ProviderErrorKind value; None on success
    status: int | None = None
    retry_after_s: float | None = None
    ttft_ms: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    request_id: str | None = None
    fell_back: bool = False  # a Fallback moved on to the next provider after this one
    error: str | None = None
    base_url: str | None = None  # its server, no credentials (None: not over HTTP)
    cancelled: bool = False  # cut off by a cancel in flight: neither success nor failure
    usage_estimated: bool = False  # the answer reported no usage: the tokens are estimated

    @classmethod
    def succeeded(
        cls,
        completion: Completion,
        *,
        started_at: float,
        latency_ms: float,
        status: int | None = None,
        base_url: str | None = None,
    ) -> AttemptRecord:
        """The record of an attempt that produced ``completion``."""
        return cls(
            provider=completion.provider,
            model=completion.model,
            started_at=started_at,
            latency_ms=latency_ms,
            status=status,
            ttft_ms=completion.ttft_ms,
            input_tokens=completion.usage.input_tokens,
            output_tokens=completion.usage.output_tokens,
            request_id=completion.request_id,
            base_url=None if base_url is None else shown_url(base_url),
            usage_estimated=completion.usage.estimated,
        )

    @classmethod
    def cut_off(
        cls,
        *,
        provider: str,
        model: str,
        started_at: float,
        latency_ms: float,
        status: int | None = None,
        ttft_ms: float | None = None,
        request_id: str | None = None,
        base_url: str | None = None,
    ) -> AttemptRecord:
        """The record of an attempt a cancel cut off in flight (the run's, a Ctrl-C):
        the server may have seen and billed it, so it is a row, ``cancelled``, with no
        kind; it counts in no failure rate."""
        return cls(
            provider=provider,
            model=model,
            started_at=started_at,
            latency_ms=latency_ms,
            status=status,
            ttft_ms=ttft_ms,
            request_id=request_id,
            error=f"cut off by a cancel after {latency_ms / 1000:.1f} s",
            base_url=None if base_url is None else shown_url(base_url),
            cancelled=True,
        )

    @classmethod
    def failed(
        cls,
        error: ProviderError,
        *,
        provider: str,
        model: str,
        started_at: float,
        latency_ms: float,
        ttft_ms: float | None = None,
        base_url: str | None = None,
        usage: Usage | None = None,
    ) -> AttemptRecord:
        """The record of an attempt that failed with ``error``; ``usage`` is what an
        answer that arrived but could not be used was billed (None: nothing billed)."""
        return cls(
            provider=provider,
            model=model,
            started_at=started_at,
            latency_ms=latency_ms,
            kind=error.kind.value,
            status=error.status,
            retry_after_s=error.retry_after_s,
            ttft_ms=ttft_ms,
            request_id=error.request_id,
            error=error.message,
            base_url=None if base_url is None else shown_url(base_url),
            input_tokens=None if usage is None else usage.input_tokens,
            output_tokens=None if usage is None else usage.output_tokens,
            usage_estimated=usage is not None and usage.estimated,
        )


@functools.lru_cache(maxsize=64)  # once per provider, not per attempt
def shown_url(url: str) -> str:
    """``url`` as rows keep it (``AttemptRecord.base_url``, a run's server): scheme,
    host, port and path; no user, password, query or fragment (where a key might ride)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return f"{parts.scheme}://{netloc}{parts.path}"


@runtime_checkable
class Provider(Protocol):
    """Anything that can complete a conversation. All I/O is async."""

    @property
    def name(self) -> str: ...

    @property
    def model(self) -> str: ...

    def hosts(self) -> list[str]:
        """Network hosts this provider dials (all leaves, for the egress policy)."""
        ...

    async def complete(
        self,
        messages: Messages,
        tools: ToolSpecs = None,
        max_tokens: int | None = None,
        stream: bool | None = None,
    ) -> Completion: ...


_collector: contextvars.ContextVar[list[AttemptRecord] | None] = contextvars.ContextVar(
    "harnessnb_attempts", default=None
)


def report_attempt(record: AttemptRecord) -> None:
    """Called by leaf providers (and Fallback) for every attempt."""
    sink = _collector.get()
    if sink is not None:
        sink.append(record)


def mark_last_fell_back() -> None:
    """Fallback calls this when it moves on: the latest attempt is marked ``fell_back``."""
    sink = _collector.get()
    if sink:
        sink[-1] = dataclasses.replace(sink[-1], fell_back=True)


@contextlib.contextmanager
def collect_attempts() -> Iterator[list[AttemptRecord]]:
    """Collect every attempt reported inside the block, in order."""
    sink: list[AttemptRecord] = []
    token = _collector.set(sink)
    try:
        yield sink
    finally:
        _collector.reset(token)


_calling_run: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "harnessnb_calling_run", default=None
)


@contextlib.contextmanager
def calling_for(run_id: str) -> Iterator[None]:
    """Model calls inside the block are made for run ``run_id`` (``Record`` files its
    recordings under it, so a replay of the run answers as that run was answered)."""
    token = _calling_run.set(run_id)
    try:
        yield
    finally:
        _calling_run.reset(token)


def calling_run() -> str | None:
    """The run the model call in progress is made for, or None outside a run."""
    return _calling_run.get()


TextSink: TypeAlias = Callable[[str, bool], Awaitable[None]]
"""Takes each piece of streamed answer text as it arrives, and whether it is the first
piece of an attempt (a retry's or a fallback's answer starts over)."""

_text_sink: contextvars.ContextVar[TextSink | None] = contextvars.ContextVar(
    "harnessnb_text_sink", default=None
)


def text_sink() -> TextSink | None:
    """The listener of streamed text in this context, or None (leaf providers ask once
    per attempt, so a stream without a listener pays nothing per chunk)."""
    return _text_sink.get()


async def report_text(piece: str, *, first: bool = False) -> None:
    """Called by a streaming provider with each piece of answer text."""
    sink = _text_sink.get()
    if sink is not None and piece:
        await sink(piece, first)


@contextlib.contextmanager
def stream_text_to(sink: TextSink | None) -> Iterator[None]:
    """Hand every piece of text streamed inside the block to ``sink``."""
    token = _text_sink.set(sink)
    try:
        yield
    finally:
        _text_sink.reset(token)
