"""What the wire-format parsers share: the parsed answer, stream assembly, their errors.

``providers/_openai.py`` and ``providers/_anthropic.py`` turn bodies and SSE events
into a ``Parsed`` answer and raise ``WireError`` for an unreadable one; the HTTP module
(``providers/_http.py``) adds timing and identity and turns a ``WireError`` into a
``ProviderError``. No HTTP here.
"""

from __future__ import annotations

import abc
import codecs
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ..rules._classify import ErrorReading
from ..rules._errors import ProviderErrorKind, classify_body_error
from ..rules._secrets import scrub
from ._completion import ToolCall, Usage

__all__ = [
    "MAX_TOKEN_COUNT",
    "Parsed",
    "SSEFrames",
    "StreamAccumulator",
    "WireError",
    "error_text",
    "json_object",
    "rejects_streaming",
    "schema_name",
    "token_count",
    "tool_arguments",
]


class WireError(Exception):
    """Raised by a protocol parser: the answer is unreadable or carries an error.

    The provider turns it into a ``ProviderError`` with its own context.
    """

    def __init__(self, kind: ProviderErrorKind, message: str, usage: Usage | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.usage = usage  # what the unusable answer reported it cost, if it did
        self.reading: ErrorReading | None = None  # what the error object said beyond its kind

    @classmethod
    def malformed(cls, message: str, usage: Usage | None = None) -> WireError:
        return cls(ProviderErrorKind.MALFORMED, message, usage)

    @classmethod
    def from_error_object(
        cls, error: Any, where: str, read: Callable[[Any, int], ErrorReading] | None = None
    ) -> WireError:
        """An error object found in a 200 body or a stream event, classified by itself
        (by ``read`` when the wire format reads its error objects: Gemini's wait and
        daily quota)."""
        if read is None:
            return cls(classify_body_error(error), f"{where}: {error_text(error)}")
        reading = read(error, 200)
        note = f" ({reading.note})" if reading.note else ""
        found = cls(reading.kind, f"{where}: {error_text(error)}{note}")
        found.reading = reading
        return found


class Parsed(NamedTuple):
    """A parsed answer, before the provider adds timing and identity (``usage`` None:
    the answer reported none; ``output_items``: the Responses API's output items of an
    answer that reasoned, kept as sent to be handed back on the next turn; ``refusal``:
    the model declined, in its words, where the wire says so)."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage | None
    finish_reason: str | None
    output_items: tuple[dict[str, Any], ...] = ()
    refusal: str | None = None


class StreamAccumulator(abc.ABC):
    """Assembles a streamed answer from its SSE events."""

    done: bool = False
    fresh: str = ""  # the answer text the last event fed added ("" when none)

    @abc.abstractmethod
    def feed(self, event: str, data: str) -> bool:
        """Take one event; True when it carried model output (text or a tool fragment).

        Sets ``fresh`` to the text the event added, so it can be shown as it comes."""

    @abc.abstractmethod
    def result(self) -> Parsed:
        """The assembled answer; raises ``WireError`` when the stream ended early."""


class SSEFrames:
    """Server-sent events framing: bytes in, ``(event, data)`` pairs out.

    A blank line dispatches an event; ``data`` lines join with newlines; comments and
    ids are ignored; invalid UTF-8 becomes U+FFFD.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        """The events that ``chunk`` completes, in order."""
        self._pending += self._decoder.decode(chunk)
        if "\n" not in self._pending:
            return []
        *lines, self._pending = self._pending.split("\n")
        out: list[tuple[str, str]] = []
        for line in lines:
            if line.endswith("\r"):
                line = line[:-1]
            if line:
                field, _, value = line.partition(":")
                if value.startswith(" "):
                    value = value[1:]
                if field == "data":
                    self._data.append(value)
                elif field == "event":
                    self._event = value
                continue
            if self._data:
                out.append((self._event or "message", "\n".join(self._data)))
            self._event, self._data = "", []
        return out

    def last(self) -> tuple[str, str] | None:
        """The event the stream ended in without its blank line, if any."""
        return (self._event or "message", "\n".join(self._data)) if self._data else None


def tool_arguments(raw: str | None, tool: str) -> dict[str, Any]:
    """Parse a tool call's JSON arguments to a dict, or raise a malformed ``WireError``."""
    # Some OpenAI-compatible servers send "" for a call without arguments.
    if raw is None or not raw.strip():
        return {}
    return json_object(raw, f"tool call {tool!r} has arguments that are")


def json_object(text: str, subject: str) -> dict[str, Any]:
    """``text`` as a JSON object, or a malformed ``WireError``: ``{subject} not JSON``.

    ``subject`` starts the message and ends with its verb (``"stream event is"``).
    """
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise WireError.malformed(f"{subject} not JSON") from exc
    if not isinstance(value, dict):
        raise WireError.malformed(f"{subject} not an object")
    return value


_NAME_CHARS = re.compile(r"[^A-Za-z0-9_-]+")


def schema_name(name: str) -> str:
    """A schema's name as OpenAI accepts one (``^[a-zA-Z0-9_-]{1,64}$``): other
    characters become ``_``, cut to 64 (``answer`` when nothing is left)."""
    return _NAME_CHARS.sub("_", name).strip("_")[:64] or "answer"


MAX_TOKEN_COUNT = 10**9
"""More tokens than any one answer has used: a usage field beyond it is ``malformed``."""


def token_count(usage: Mapping[str, Any], field: str) -> int:
    """``usage[field]`` as a token count (absent or null is 0), or a malformed ``WireError``
    (not an integer, negative, NaN, or beyond ``MAX_TOKEN_COUNT``).

    The message names the field only: the value is server text, which may echo a key.
    """
    value = usage.get(field)
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if type(value) is not int or not 0 <= value <= MAX_TOKEN_COUNT:
        raise WireError.malformed(f"usage field {field!r} is not a token count")
    return value


def error_text(error: Any) -> str:
    """One line of a provider's error object: ``type: message``, bounded."""
    if isinstance(error, Mapping):
        message = error.get("message")
        label = error.get("type") or error.get("code")
        # Scrubbed before it is cut: a key cut in two is no longer found.
        text = str(message) if message else scrub(json.dumps(error))[:300]
        return f"{label}: {text}" if label else text
    return scrub(str(error))[:300]


# Statuses a server answers a request it cannot take as sent with (404/405: a route
# that exists only without streaming; 501: not implemented).
_REFUSAL_STATUSES = frozenset({400, 404, 405, 415, 422, 501})


def rejects_streaming(status: int, detail: str) -> bool:
    """True when an error answer to a streamed request says streaming is the problem.

    For example OpenAI's ``'stream' does not support true with this model``, a proxy's
    ``Unrecognized request argument supplied: stream_options``, or a local server's
    ``streaming is not supported``.
    """
    return status in _REFUSAL_STATUSES and "stream" in detail.lower()
