"""The failure taxonomy: every failure harnessnb reports is a ``HarnessError``.

Class tree::

    HarnessError                 code="UNKNOWN" when wrapping a foreign exception
    ├── ProviderError            a provider call failed: .kind .status .retry_after_s
    │                            .provider .request_id .retryable
    ├── ConfigError              bad configuration (missing key, bad option)
    ├── RefusedError             the policy or containment refused an act:
    │                            .act .target .rule .layer
    ├── ResumeError              a run cannot be resumed: .reason
    ├── SandboxError             a tool could not do its work safely: .reason
    ├── StoreError               the DuckDB store failed: .kind (StoreErrorKind) .path
    │                            .retryable
    ├── ConflictError            another process drives this run: .run_id .owner
    ├── MCPError                 an MCP tool server failed: .kind (MCPErrorKind) .server
    │                            .tool .status .exit_code .stderr .retryable
    ├── OutputError              no usable typed answer: .kind (OutputFailureKind)
    │                            .mode .reasons (every attempt's)
    └── ToolError                a tool failed in a way the model can act on
                                 (.retryable is False)

"May a retry help" has one spelling: ``.retryable``, on every error: False unless the
class says otherwise (ProviderError by its kind, StoreError for busy and full,
``hn.agents.CLIError`` by its cause).

Every error pickles with its fields (``__reduce__``, ``rules._error_pickle``), so one
raised in a Dask worker reaches the client as the same type, scrubbed.

This module also holds the ONE classification table (HTTP status, body and header
to ``ProviderErrorKind``; the failure phrases, ``PHRASES``, which the agent CLIs' words
extend) and the ONE ``Retry-After`` parser, shared by every provider. It is pure: no
I/O, no clock except the ``now`` argument.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from ._classify import (
    BODY_TYPES,
    PHRASES,
    OutputFailureKind,
    ProviderErrorKind,
    classify_body_error,
    classify_status,
)
from ._error_pickle import CAUSE_LINES, cause_chain, reduce_error
from ._fields import Declared, context
from ._headers import parse_retry_after, parse_should_retry, request_id_from
from ._html import (
    Html,
    Tone,
    bullets,
    card,
    code,
    join,
    kv_table,
    preview,
    retry_badge,
    text_block,
)
from ._renamed import renamed
from ._secrets import scrub, scrub_exception
from ._text import clip, shorten

__all__ = [
    "BODY_TYPES",
    "MAX_MESSAGE",
    "PHRASES",
    "ConfigError",
    "ConflictError",
    "HarnessError",
    "MCPError",
    "MCPErrorKind",
    "OutputError",
    "OutputFailureKind",
    "ProviderError",
    "ProviderErrorKind",
    "RefusedError",
    "ResumeError",
    "SandboxError",
    "StoreError",
    "StoreErrorKind",
    "ToolError",
    "classify_body_error",
    "classify_status",
    "parse_retry_after",
    "parse_should_retry",
    "request_id_from",
    "wrap_unknown",
]


# --------------------------------------------------------------------------- errors

# Characters of an error's message (and of each cause and context field) kept, head and
# tail, the cut marked: what rows, cards, events and the model see of a huge error.
MAX_MESSAGE = 4000


class HarnessError(Exception):
    """Base of every harnessnb failure.

    Every surface (``str``, ``repr``, ``to_dict``, cards, the short traceback) goes
    through the one scrubber (``rules._secrets``), the cause chain's messages included;
    the message, each cause and each context string are then kept to ``MAX_MESSAGE``
    characters, head and tail, the cut counted (``rules._text.clip``).

    Args:
        message: What happened, for a person; secret values are scrubbed from it.
        code: A stable, machine-routable string (defaults to the class's ``CODE``).
    """

    CODE = "UNKNOWN"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        # Scrubbed, then kept to a few KB (head and tail, the cut marked): a tool that
        # raises with 5 MB, or a CLI's stderr, must not flood a row, a card or an event.
        message = clip(scrub(message), MAX_MESSAGE)
        super().__init__(message)
        self.message = message
        self.code = code or self.CODE

    # Context attributes shown in dicts and cards, in order; subclasses extend.
    def _fields(self) -> dict[str, Any]:
        return {}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: name, code, message, context fields and the cause chain."""
        out: dict[str, Any] = {
            "name": type(self).__name__,
            "code": self.code,
            "message": str(self),
        }
        out.update(self._shown_fields())
        out["causes"] = _causes(self)
        return out

    def __str__(self) -> str:
        return scrub(self.message)

    def __repr__(self) -> str:
        fields = "".join(f", {k}={v!r}" for k, v in self._shown_fields().items() if v is not None)
        return f"{type(self).__name__}(code={self.code!r}, message={str(self)!r}{fields})"

    def _shown_fields(self) -> dict[str, Any]:
        # Context may carry server text (a request id, stderr): scrubbed like the message.
        return {
            k: clip(scrub(v), MAX_MESSAGE) if isinstance(v, str) else v
            for k, v in self._fields().items()
        }

    # Notebook display: plain strings built with rules._html, so every error has a
    # card without the core importing IPython.
    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": self._card_text(), "text/html": str(self._card_html())}

    def _render_traceback_(self) -> list[str]:
        # IPython calls this instead of printing frames: 1-3 short lines.
        lines = [f"{type(self).__name__} [{self.code}]: {_first_line(str(self))}"]
        hint = self._hint()
        if hint:
            lines.append(hint)
        causes = _told(self)
        if causes:
            lines.append(f"caused by {_first_line(causes[0])}")
        return lines[:3]

    @property
    def retryable(self) -> bool:
        """May the same call succeed later? False unless the class says it may."""
        return False

    def __reduce__(self) -> tuple[Any, ...]:
        # With its fields and scrubbed, not through __init__ (rules._error_pickle).
        return reduce_error(self, _causes(self))

    def _hint(self) -> str:
        return ""

    def _card_text(self) -> str:
        lines = [f"{type(self).__name__} [{self.code}]: {self}"]
        for key, value in self._shown_fields().items():
            if value is not None:
                lines.append(f"  {key}: {value}")
        for cause in _told(self):
            lines.append(f"  caused by {cause}")
        return "\n".join(lines)

    def _card_html(self) -> Html:
        causes = _told(self)
        return card(
            "harnessnb-error",
            [type(self).__name__, code(self.code), self._badge_html()],
            text_block(str(self)),
            kv_table(self._shown_fields().items()),
            join(["caused by:", bullets(causes)]) if causes else "",
            self._card_extra(),
            tone=Tone.WARN if self.retryable else Tone.BAD,
        )

    def _card_extra(self) -> Html:
        """More of the card's body, after the causes (an MCP server's stderr tail)."""
        return Html("")

    def _badge_html(self) -> Html:
        return Html("")


def _first_line(text: str) -> str:
    return shorten(text.strip().splitlines()[0] if text.strip() else "", 200)


def _causes(err: BaseException) -> list[str]:
    """The cause chain as ``Type: message`` lines, scrubbed (a cause may quote a key);
    for an unpickled error, the lines the sender scrubbed (it knew its keys)."""
    pickled = getattr(err, CAUSE_LINES, None)
    if pickled is not None:
        return list(pickled)
    return [clip(scrub(f"{type(c).__name__}: {c}"), MAX_MESSAGE) for c in cause_chain(err)]


def _told(err: BaseException) -> list[str]:
    """The causes a card shows: each once, none that the message already says (an HTTP
    client's error and its transport's often carry the same words)."""
    said = str(err)
    shown: list[str] = []
    for line in _causes(err):
        if line not in shown and line not in said:
            shown.append(line)
    return shown


def wrap_unknown(exc: BaseException, message: str | None = None) -> HarnessError:
    """Wrap a foreign exception caught at a seam as a ``HarnessError`` with code UNKNOWN.

    A ``HarnessError`` is returned as it is. The original is kept as ``__cause__``.
    """
    if isinstance(exc, HarnessError):
        return exc
    scrub_exception(exc)
    err = HarnessError(message or f"{type(exc).__name__}: {exc}", code="UNKNOWN")
    err.__cause__ = exc
    return err


@renamed(retry_after="retry_after_s")
class ProviderError(Declared, HarnessError):
    """A provider call failed.

    Args:
        message: What happened.
        kind: The ``ProviderErrorKind``.
        status: The HTTP status, or None when no response arrived.
        retry_after_s: Seconds the server asked to wait (None when it did not say).
        provider: The leaf provider's name (``openai``, ``anthropic``, ...).
        request_id: The server's request id, when it sent one.
        should_retry: The server's ``x-should-retry`` answer, overriding the kind's.
        model: The model asked.
        attempts: The failed call's ``hn.AttemptRecord``s (its provider sets them).
    """

    CODE = "PROVIDER"

    message: str = context(kw_only=False)
    kind: ProviderErrorKind
    status: int | None = None
    retry_after_s: float | None = None
    provider: str | None = None
    request_id: str | None = None
    should_retry: bool | None = None
    model: str | None = None
    code: str = context(default=None)
    attempts: tuple[Any, ...] = context(default=(), shown=False)

    def _code(self) -> str:
        return f"PROVIDER_{self.kind.name}"

    def _settle(self) -> None:
        if self.request_id is not None:  # servers have been seen echoing the key in it
            self.request_id = scrub(self.request_id)

    @property
    def retryable(self) -> bool:
        """The kind's answer, unless the server said otherwise with ``x-should-retry``."""
        if self.should_retry is not None:
            return self.should_retry
        return self.kind.retryable

    def _fields(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "retryable": self.retryable,
            "status": self.status,
            "retry_after_s": self.retry_after_s,
            "provider": self.provider,
            "model": self.model,
            "request_id": self.request_id,
        }

    def _hint(self) -> str:
        parts = [self.kind.value]
        if self.status is not None:
            parts.append(f"HTTP {self.status}")
        parts.append("retryable" if self.retryable else "not retryable")
        if self.retry_after_s is not None:
            parts.append(f"retry after {self.retry_after_s:g} s")
        return ", ".join(parts)

    def _badge_html(self) -> Html:
        return retry_badge(self._hint(), retryable=self.retryable)


class ConfigError(HarnessError):
    """Bad or missing configuration, found before any request is sent."""

    CODE = "CONFIG"


class RefusedError(Declared, HarnessError):
    """An act was refused by the policy, an approver, or workspace containment."""

    CODE = "REFUSED"

    message: str = context(kw_only=False)
    act: str
    target: str
    rule: str | None = None
    layer: str | None = None
    code: str = context(default=None)


class _ReasonError(HarnessError):
    """A failure named by one stable word, ``reason``; its code is ``CODE_REASON``."""

    def __init__(self, message: str, *, reason: str, code: str | None = None) -> None:
        super().__init__(message, code=code or f"{self.CODE}_{reason.upper()}")
        self.reason = reason

    def _fields(self) -> dict[str, Any]:
        return {"reason": self.reason}


class ResumeError(_ReasonError):
    """A run cannot be resumed; ``reason`` says why in one stable word."""

    CODE = "RESUME"


class SandboxError(_ReasonError):
    """A tool could not do its work within the sandbox (timeout, too big, binary...)."""

    CODE = "SANDBOX"


class StoreErrorKind(enum.StrEnum):
    """What went wrong with the store; the value is the word stored and compared."""

    BUSY = "busy"  # another process held the file past the wait: retryable
    FULL = "full"  # the disk (or quota, or file size limit) is full: retryable once freed
    CLOSED = "closed"  # the store was closed
    CORRUPT = "corrupt"  # the file is damaged; it is left untouched
    FOREIGN = "foreign"  # the file is not a harnessnb store; it is left untouched
    NEWER = "newer"  # written by a newer harnessnb schema
    IO = "io"  # the file could not be read or written
    READ_ONLY = "read_only"  # a write to a store opened read-only (its file is not writable)
    MISSING = "missing"  # no such run
    DUPLICATE = "duplicate"  # a row broke a uniqueness constraint
    QUERY = "query"  # a query could not be parsed or bound
    INTERNAL = "internal"  # any other driver failure


class StoreError(HarnessError):
    """The DuckDB store failed. ``kind`` is a ``StoreErrorKind``; busy and full are
    retryable (the lock may be free, the space freed, on a later try).

    ``kind`` may be given as the word (``kind="busy"``); it compares equal to it.
    """

    CODE = "STORE"

    def __init__(
        self,
        message: str,
        *,
        kind: StoreErrorKind | str,
        path: str | None = None,
        code: str | None = None,
    ) -> None:
        word = StoreErrorKind(kind)
        super().__init__(message, code=code or f"STORE_{word.name}")
        self.kind = word
        self.path = path

    @property
    def retryable(self) -> bool:
        """True for busy and full: the lock may be free, or space freed, on a later try."""
        return self.kind in (StoreErrorKind.BUSY, StoreErrorKind.FULL)

    def _fields(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "path": self.path, "retryable": self.retryable}

    def _badge_html(self) -> Html:
        word = "retryable" if self.retryable else "not retryable"
        return retry_badge(f"{self.kind.value}, {word}", retryable=self.retryable)


class ConflictError(Declared, HarnessError):
    """Another live process drives this run (or took it over from a stale lease). Not
    retryable: trying again does not take a run from its live owner."""

    CODE = "CONFLICT"

    message: str = context(kw_only=False)
    run_id: str
    owner: str | None = None
    code: str = context(default=None)


class MCPErrorKind(enum.StrEnum):
    """What went wrong with an MCP tool server; the value is the word stored."""

    SPAWN = "spawn"  # the server's program is missing or cannot run
    EXITED = "exited"  # the server process ended (exit code, stderr tail)
    TIMEOUT = "timeout"  # start or a request took longer than allowed
    PROTOCOL = "protocol"  # the server spoke something other than MCP
    TOOL_ERROR = "tool_error"  # the tool itself reported an error (isError)
    UNKNOWN_TOOL = "unknown_tool"  # the server has no such tool
    CONNECTION_CLOSED = "connection_closed"  # the connection ended, the process alive
    TRANSPORT = "transport"  # HTTP failed (connect, status, a dropped stream)


_MCP_RETRYABLE = frozenset(
    {MCPErrorKind.TIMEOUT, MCPErrorKind.CONNECTION_CLOSED, MCPErrorKind.EXITED}
)


class MCPError(Declared, HarnessError):
    """An MCP tool server failed; ``kind`` (``MCPErrorKind``) says how.

    Args:
        message: What happened.
        kind: The ``MCPErrorKind``.
        server: The server's name.
        tool: The tool called, when a call failed.
        status: The HTTP status (Streamable HTTP), when a response arrived.
        retry_after_s: Seconds the server asked to wait (Retry-After).
        exit_code: The server process's exit code, when it ended.
        stderr: The tail of the server's stderr, scrubbed and bounded.
    """

    CODE = "MCP"

    message: str = context(kw_only=False)
    kind: MCPErrorKind
    server: str | None = None
    tool: str | None = None
    status: int | None = None
    retry_after_s: float | None = None
    exit_code: int | None = None
    stderr: str | None = context(default=None, shown=False)
    code: str = context(default=None)

    def _code(self) -> str:
        return f"MCP_{MCPErrorKind(self.kind).name}"

    def _settle(self) -> None:
        self.kind = MCPErrorKind(self.kind)
        if self.stderr is not None:
            self.stderr = clip(scrub(self.stderr), MAX_MESSAGE)

    @property
    def retryable(self) -> bool:
        """Timeout, a closed connection and an exited server: yes; HTTP transport by its
        status (none, or one a retry may cure); the rest no."""
        if self.kind is MCPErrorKind.TRANSPORT:
            return self.status is None or classify_status(self.status).retryable
        return self.kind in _MCP_RETRYABLE

    def _fields(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "retryable": self.retryable,
            "server": self.server,
            "tool": self.tool,
            "status": self.status,
            "retry_after_s": self.retry_after_s,
            "exit_code": self.exit_code,
        }

    def to_dict(self) -> dict[str, Any]:
        """The common dict plus the stderr tail (scrubbed, bounded)."""
        return {**super().to_dict(), "stderr": self.stderr}

    def _card_text(self) -> str:
        text = super()._card_text()
        return f"{text}\n  server stderr (tail):\n{self.stderr}" if self.stderr else text

    def _card_extra(self) -> Html:
        # The tail in a <pre>, escaped by rules._html (it is the server's own text).
        if not self.stderr:
            return Html("")
        return join(["server stderr (tail):", preview(self.stderr)])

    def _hint(self) -> str:
        parts = [self.kind.value]
        if self.server:
            parts.append(f"server {self.server}")
        if self.exit_code is not None:
            parts.append(f"exit code {self.exit_code}")
        if self.status is not None:
            parts.append(f"HTTP {self.status}")
        parts.append("retryable" if self.retryable else "not retryable")
        return ", ".join(parts)

    def _badge_html(self) -> Html:
        return retry_badge(self._hint(), retryable=self.retryable)


MAX_REASONS = 20  # an OutputError's reasons kept (the first ones and the last)


class OutputError(HarnessError):
    """A run asked for a typed answer (``TaskContract(output=T)``, ``hn.ask``) and got
    none it could use: the model refused (``kind`` refusal, not retried), or every
    answer allowed was cut at its token cap or did not validate.

    Args:
        message: What happened.
        kind: The ``OutputFailureKind`` of the last answer (the word: ``"refusal"``...).
        mode: How the answer was asked for last (``native``, ``tool``, ``prompted``).
        reasons: Why each answer could not be used, one line per attempt, in order.
    """

    CODE = "OUTPUT"

    def __init__(
        self,
        message: str,
        *,
        kind: OutputFailureKind | str,
        mode: str | None = None,
        reasons: Sequence[str] = (),
        code: str | None = None,
    ) -> None:
        word = OutputFailureKind(kind)
        kept = [clip(scrub(r), MAX_MESSAGE) for r in reasons]
        if len(kept) > MAX_REASONS:
            cut = len(kept) - MAX_REASONS
            kept = [*kept[: MAX_REASONS // 2], f"... {cut} more ...", *kept[-MAX_REASONS // 2 :]]
        listed = "".join(f"\n  attempt {i}: {shorten(r, 400)}" for i, r in enumerate(kept, 1))
        super().__init__(f"{message}{listed}", code=code or f"OUTPUT_{word.name}")
        self.kind = word
        self.mode = mode
        self.reasons = tuple(kept)

    def _fields(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "mode": self.mode, "attempts": len(self.reasons)}

    def _hint(self) -> str:
        return f"{self.kind.value}, {len(self.reasons)} answer(s) not usable"


class ToolError(HarnessError):
    """A tool failed in a way the model can act on (missing file, bad argument...)."""

    CODE = "TOOL"

    @property
    def retryable(self) -> bool:
        """False: the same call fails the same way; the model has to change it."""
        return False
