"""What a provider returns, what it is handed, and how its attempts are reported.

Messages are plain dicts in one normalised, OpenAI-like form that every provider
converts to its own wire format::

    {"role": "system" | "user", "content": str}
    {"role": "assistant", "content": str, "tool_calls": [{"id", "name", "arguments": dict}]}
        (and "output_items": [item, ...], the Responses API's items of an answer that reasoned)
    {"role": "tool", "tool_call_id": str, "name": str, "content": str}

Tool specs handed to ``complete(tools=...)`` are dicts
``{"name": str, "description": str, "parameters": <JSON schema object>}``.

Attempts travel on the value: a call's ``Completion.attempts`` are the HTTP attempts
it made, in order (a ``Fallback``'s legs, a refused stream asked again), the last the
one that answered; a failed call's ``ProviderError`` carries the ones it made in
``.attempts``, and a cancel that cut a call off leaves them on the ``CancelledError``
it raises (read either with ``attempts_of``). Streamed text goes to the ``on_text``
sink the caller passes to ``complete``, and the run a call is made for is its
``run_id`` argument (``Record`` files recordings under it). Nothing travels by an
ambient channel: a reader of ``complete()`` sees where everything goes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import (
    Any,
    NotRequired,
    Protocol,
    TypeAlias,
    TypedDict,
    TypeVar,
    Unpack,
    runtime_checkable,
)
from urllib.parse import urlsplit

from ..rules._errors import ProviderError

__all__ = [
    "CAP_REASONS",
    "AttemptRecord",
    "Attempted",
    "Completion",
    "Messages",
    "OutputSchema",
    "Provider",
    "TextSink",
    "ToolCall",
    "ToolSpecs",
    "Usage",
    "attempts_of",
    "shown_url",
    "with_attempts",
]


Messages: TypeAlias = Sequence[dict[str, Any]]
"""A conversation as a provider takes it: plain dicts with OpenAI-like roles."""

ToolSpecs: TypeAlias = Sequence[dict[str, Any]] | None
"""The tools offered to the model (OpenAI function specs), or None."""

TextSink: TypeAlias = Callable[[str, bool], Awaitable[None]]
"""Takes each piece of streamed answer text as it arrives, and whether it is the first
piece of an attempt (a retry's or a fallback's answer starts over)."""


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


CAP_REASONS = frozenset({"length", "max_tokens", "max_output_tokens", "MAX_TOKENS"})
"""The finish reasons, as each wire spells them, of an answer stopped at its token cap
(chat completions, Anthropic, the Responses API's incomplete reason, Gemini)."""


@dataclasses.dataclass(frozen=True)
class OutputSchema:
    """An answer asked for in a JSON Schema: the provider's native structured output
    (``complete(output=...)``). ``name`` names the schema where the wire wants a name;
    ``strict`` asks for constrained decoding where the wire offers it (OpenAI)."""

    name: str
    schema: Mapping[str, Any]
    strict: bool = True


@dataclasses.dataclass(frozen=True)
class Completion:
    """A successful answer from a provider (the leaf that answered is ``provider``).

    ``attempts`` are the attempts the call made, in order, the last the one that
    answered (empty from a provider that reports none); not part of ``to_dict``.
    """

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    finish_reason: str | None = None
    provider: str = ""
    model: str = ""
    request_id: str | None = None
    ttft_ms: float | None = None
    latency_ms: float | None = None
    refusal: str | None = None
    """The model's refusal, where the wire says it declined (OpenAI's ``refusal``, the
    Responses API's refusal content, Anthropic's ``stop_reason: "refusal"``)."""
    output_items: tuple[dict[str, Any], ...] = dataclasses.field(
        default=(), compare=False, repr=False
    )
    """The Responses API's output items (reasoning, message, function calls, in order) as
    the server sent them, when they hold a reasoning item (else empty): the assistant
    message (``to_message``) carries them so the next turn hands them back whole, as the
    API wants each reasoning item followed by the item it preceded, ids and all."""
    attempts: tuple[AttemptRecord, ...] = dataclasses.field(default=(), compare=False, repr=False)

    @property
    def truncated(self) -> bool:
        """The answer stopped at its token cap (``finish_reason`` in ``CAP_REASONS``)."""
        return self.finish_reason in CAP_REASONS

    def after(self, earlier: Sequence[AttemptRecord]) -> Completion:
        """This completion with ``earlier`` attempts (of the same call) before its own."""
        if not earlier:
            return self
        return dataclasses.replace(self, attempts=(*earlier, *self.attempts))

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
            **({"refusal": self.refusal} if self.refusal is not None else {}),
            **({"output_items": [dict(i) for i in self.output_items]} if self.output_items else {}),
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
            refusal=None if data.get("refusal") is None else str(data["refusal"]),
            output_items=tuple(dict(i) for i in data.get("output_items") or ()),
        )

    def to_message(self) -> dict[str, Any]:
        """The assistant message this completion adds to the conversation."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls
            ]
        if self.output_items:  # handed back by the Responses API's next request
            msg["output_items"] = [dict(i) for i in self.output_items]
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
    output_mode: str | None = None  # how a typed answer was asked: native, tool or prompted
    answer: str | None = None  # an unusable answer's text (a kind of OutputFailureKind)

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
        status: int | None = None,
        request_id: str | None = None,
        **attempted: Unpack[Attempted],
    ) -> AttemptRecord:
        """The record of an attempt a cancel cut off in flight (the run's, a Ctrl-C):
        the server may have seen and billed it, so it is a row, ``cancelled``, with no
        kind; it counts in no failure rate."""
        seconds = attempted["latency_ms"] / 1000
        return cls(
            **_kept(attempted),
            status=status,
            request_id=request_id,
            error=f"cut off by a cancel after {seconds:.1f} s",
            cancelled=True,
        )

    @classmethod
    def failed(
        cls, error: ProviderError, *, usage: Usage | None = None, **attempted: Unpack[Attempted]
    ) -> AttemptRecord:
        """The record of an attempt that failed with ``error``; ``usage`` is what an
        answer that arrived but could not be used was billed (None: nothing billed)."""
        return cls(
            **_kept(attempted),
            kind=error.kind.value,
            status=error.status,
            retry_after_s=error.retry_after_s,
            request_id=error.request_id,
            error=error.message,
            input_tokens=None if usage is None else usage.input_tokens,
            output_tokens=None if usage is None else usage.output_tokens,
            usage_estimated=usage is not None and usage.estimated,
        )


class Attempted(TypedDict):
    """Who made an attempt, when and for how long: what every record of one names (the
    keywords ``AttemptRecord.failed`` and ``cut_off`` share; ``base_url`` as given, the
    record keeps it without credentials)."""

    provider: str
    model: str
    started_at: float  # Unix seconds
    latency_ms: float
    ttft_ms: NotRequired[float | None]
    base_url: NotRequired[str | None]


def _kept(attempted: Attempted) -> Attempted:
    """``attempted`` as a record keeps it: its ``base_url`` shown (``shown_url``)."""
    url = attempted.get("base_url")
    return attempted if url is None else {**attempted, "base_url": shown_url(url)}


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
        *,
        on_text: TextSink | None = None,
        run_id: str | None = None,
        output: OutputSchema | None = None,
    ) -> Completion:
        """One answer, its attempts on it (``Completion.attempts``); a failure raises
        ``ProviderError`` carrying the attempts made (``.attempts``).

        ``on_text`` takes each piece of streamed text; ``run_id`` is the run the call
        is made for; ``output`` asks for the answer in a JSON Schema, natively (only a
        provider whose ``native_output`` is True is handed it). A provider written
        before these keywords (``complete(messages, tools)``) still works: callers pass
        only what its signature takes (``providers._base.ask``).
        """
        ...


E = TypeVar("E", bound=BaseException)


def with_attempts(exc: E, records: Iterable[AttemptRecord]) -> E:
    """``exc`` (a ``ProviderError``, or the ``CancelledError`` of a call a cancel cut
    off) carrying ``records``, the attempts the call made; returned for ``raise``."""
    exc.attempts = tuple(records)  # type: ignore[attr-defined]
    return exc


def attempts_of(exc: BaseException | None) -> tuple[AttemptRecord, ...]:
    """The attempts a failed or cut-off call made (``with_attempts``), else ()."""
    found = getattr(exc, "attempts", ())
    if not isinstance(found, tuple):
        return ()
    return tuple(rec for rec in found if isinstance(rec, AttemptRecord))
