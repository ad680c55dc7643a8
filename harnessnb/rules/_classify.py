"""The ONE classification table: HTTP status, body and the failure phrases to a
``ProviderErrorKind`` (and ``.retryable`` per kind), shared by every provider and, through
``classify_status``, by MCP's HTTP transport. Pure. ``_errors`` re-exports every name.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from ._phrases import PROVIDER_PHRASES, Phrases

__all__ = [
    "BODY_TYPES",
    "GOOGLE_STATUSES",
    "PHRASES",
    "ErrorReading",
    "OutputFailureKind",
    "ProviderErrorKind",
    "classify_body_error",
    "classify_status",
    "read_google_error",
]


class ProviderErrorKind(enum.Enum):
    """What went wrong with a provider call, in the terms a retry decision needs."""

    TRANSPORT = "transport"
    TIMEOUT = "timeout"
    RATE_LIMITED = "rate_limited"
    SERVER = "server"
    AUTH = "auth"
    REQUEST = "request"
    MALFORMED = "malformed"
    CONTEXT_OVERFLOW = "context_overflow"

    @property
    def retryable(self) -> bool:
        """True for the kinds a retry can cure (transport .. malformed)."""
        return self in _RETRYABLE_KINDS

    @classmethod
    def from_status(cls, status: int) -> ProviderErrorKind:
        """The kind an HTTP status alone implies (no body to read)."""
        return classify_status(status)


class OutputFailureKind(enum.Enum):
    """Why an answer that arrived cannot be used as the typed answer a run asked for
    (``TaskContract(output=T)``): an attempt row's kind, beside the provider kinds."""

    REFUSAL = "refusal"  # the model declined: not retried
    TRUNCATED = "truncated"  # stopped at the token cap mid-answer: retried once, larger cap
    SCHEMA_VIOLATION = "schema_violation"  # did not validate: retried with the errors

    @property
    def retryable(self) -> bool:
        """A refusal is final; a truncated or invalid answer may be asked again."""
        return self is not OutputFailureKind.REFUSAL


_RETRYABLE_KINDS = frozenset(
    {
        ProviderErrorKind.TRANSPORT,
        ProviderErrorKind.TIMEOUT,
        ProviderErrorKind.RATE_LIMITED,
        ProviderErrorKind.SERVER,
        ProviderErrorKind.MALFORMED,
    }
)


# ------------------------------------------------------------ classification table

# The failure phrases (rules._phrases), keyed by kind (an unknown one fails at import). A
# body's message is read here for an overflow only: its type, code and status decide.
PHRASES: Phrases[ProviderErrorKind] = PROVIDER_PHRASES.map(ProviderErrorKind)


def _overflow(message: str) -> bool:
    return PHRASES.says(ProviderErrorKind.CONTEXT_OVERFLOW, message)


# Provider error ``type``/``code`` strings found in bodies and stream events.
BODY_TYPES: Mapping[str, ProviderErrorKind] = {
    "rate_limit_error": ProviderErrorKind.RATE_LIMITED,
    "rate_limit_exceeded": ProviderErrorKind.RATE_LIMITED,
    "overloaded_error": ProviderErrorKind.SERVER,
    "api_error": ProviderErrorKind.SERVER,
    "server_error": ProviderErrorKind.SERVER,
    "internal_error": ProviderErrorKind.SERVER,
    "service_unavailable": ProviderErrorKind.SERVER,
    "timeout_error": ProviderErrorKind.TIMEOUT,
    "authentication_error": ProviderErrorKind.AUTH,
    "permission_error": ProviderErrorKind.AUTH,
    "billing_error": ProviderErrorKind.AUTH,
    "insufficient_quota": ProviderErrorKind.AUTH,
    "invalid_api_key": ProviderErrorKind.AUTH,
    "invalid_request_error": ProviderErrorKind.REQUEST,
    "not_found_error": ProviderErrorKind.REQUEST,
    "request_too_large": ProviderErrorKind.REQUEST,
    "context_length_exceeded": ProviderErrorKind.CONTEXT_OVERFLOW,
}

# Google's canonical codes (an error object's ``status``: google.rpc.Status) and the
# ErrorInfo ``reason`` Google answers a bad key with (HTTP 400 INVALID_ARGUMENT), read
# from those fields only. A reason is read before the status, so API_KEY_INVALID wins
# over INVALID_ARGUMENT.
GOOGLE_STATUSES: Mapping[str, ProviderErrorKind] = {
    "API_KEY_INVALID": ProviderErrorKind.AUTH,
    "INVALID_ARGUMENT": ProviderErrorKind.REQUEST,
    "FAILED_PRECONDITION": ProviderErrorKind.REQUEST,
    "NOT_FOUND": ProviderErrorKind.REQUEST,
    "OUT_OF_RANGE": ProviderErrorKind.REQUEST,
    "PERMISSION_DENIED": ProviderErrorKind.AUTH,
    "UNAUTHENTICATED": ProviderErrorKind.AUTH,
    "RESOURCE_EXHAUSTED": ProviderErrorKind.RATE_LIMITED,
    "UNAVAILABLE": ProviderErrorKind.SERVER,
    "INTERNAL": ProviderErrorKind.SERVER,
    "DEADLINE_EXCEEDED": ProviderErrorKind.TIMEOUT,
}


def classify_status(status: int, message: str = "") -> ProviderErrorKind:
    """Map an HTTP status (and its error message) to a kind.

    429 rate_limited; 401/402/403 auth; 408 timeout; 5xx and 529 server; 400/413
    naming a context-length overflow context_overflow; every other status (3xx
    included, redirects are never followed) request.
    """
    if status == 429:
        return ProviderErrorKind.RATE_LIMITED
    if status in (401, 402, 403):
        return ProviderErrorKind.AUTH
    if status == 408:
        return ProviderErrorKind.TIMEOUT
    if 500 <= status <= 599:
        return ProviderErrorKind.SERVER
    if status in (400, 413) and message and _overflow(message):
        return ProviderErrorKind.CONTEXT_OVERFLOW
    return ProviderErrorKind.REQUEST


def classify_body_error(error: Any, status: int | None = None) -> ProviderErrorKind:
    """Classify an error object found in a body or stream event, by its own code/type.

    Handles OpenAI ``{"message", "type", "code"}``, Anthropic ``{"type", "message"}``,
    OpenRouter ``{"code": 429, "message"}`` and Google ``{"code", "message", "status",
    "details"}`` shapes (an ErrorInfo detail's ``reason`` first, then the code, type and
    status words). ``status`` is the HTTP status the response carried, used only when the
    object says nothing usable.
    """
    if not isinstance(error, Mapping):
        return (
            classify_status(status, str(error))
            if status and status >= 300
            else (ProviderErrorKind.MALFORMED)
        )
    message = str(error.get("message") or "")
    code = error.get("code")
    etype = error.get("type")
    words = [(w, BODY_TYPES) for w in (code, etype)]
    words += [(w, GOOGLE_STATUSES) for w in (*_details(error, "reason"), error.get("status"))]
    for word, table in words:
        if isinstance(word, str) and word in table:
            kind = table[word]
            if kind is ProviderErrorKind.REQUEST and _overflow(message):
                return ProviderErrorKind.CONTEXT_OVERFLOW
            return kind
    numeric = code if isinstance(code, int) and not isinstance(code, bool) else None
    if numeric is None and isinstance(code, str) and code.isdigit():
        numeric = int(code)
    if numeric is not None and 100 <= numeric <= 599:
        return classify_status(numeric, message)
    if status is not None and status >= 300:
        return classify_status(status, message)
    if _overflow(message):
        return ProviderErrorKind.CONTEXT_OVERFLOW
    # An error object inside a 200 that names nothing we know: a server-side failure.
    return ProviderErrorKind.SERVER


# ------------------------------------------------------- Google's error details

_INFO = "google.rpc.ErrorInfo"
_RETRY = "google.rpc.RetryInfo"
_QUOTA = "google.rpc.QuotaFailure"
# A protobuf Duration in JSON: "30s", "1.5s", "0.250s".
_DURATION = re.compile(r"\s*(\d{1,9}(?:\.\d{1,9})?)s\s*")
# A quota that waiting seconds does not restore: a per-day or per-month limit.
_LONG_QUOTA = re.compile(r"(?i)per[ _-]?(day|month)|daily|monthly")


class ErrorReading(NamedTuple):
    """What an error object says beyond its kind: the wait it asks for and whether
    waiting can help (None: the kind decides), and a note for the message."""

    kind: ProviderErrorKind
    retry_after_s: float | None = None
    should_retry: bool | None = None
    note: str = ""


def _details(error: Mapping[str, Any], field: str, of_type: str = _INFO) -> list[Any]:
    """``field`` of each detail of ``of_type`` (an ``@type`` ending in it) in the object."""
    details = error.get("details")
    if not isinstance(details, list):
        return []
    return [
        d.get(field)
        for d in details
        if isinstance(d, Mapping) and str(d.get("@type", "")).endswith(of_type)
    ]


def read_google_error(error: Any, status: int | None = None) -> ErrorReading:
    """Classify a Google error object (``google.rpc.Status``) and read its details.

    A ``RetryInfo`` detail's ``retryDelay`` is the wait; a ``QuotaFailure`` naming a
    per-day or per-month limit makes a ``rate_limited`` answer not retryable (waiting
    the delay does not restore a daily quota), the limit named in the note.
    """
    kind = classify_body_error(error, status)
    if not isinstance(error, Mapping):
        return ErrorReading(kind)
    delay = None
    for raw in _details(error, "retryDelay", _RETRY):
        match = _DURATION.fullmatch(raw) if isinstance(raw, str) else None
        if match:
            delay = float(match.group(1))
            break
    if kind is ProviderErrorKind.RATE_LIMITED:
        for violations in _details(error, "violations", _QUOTA):
            for v in violations if isinstance(violations, list) else ():
                if not isinstance(v, Mapping):
                    continue
                named = [str(v.get(k) or "") for k in ("quotaId", "quotaMetric", "description")]
                if any(_LONG_QUOTA.search(n) for n in named):
                    limit = next(n for n in named if n)[:200]
                    value = v.get("quotaValue")
                    shown = f"{limit} (limit {str(value)[:20]})" if value else limit
                    note = f"quota exhausted: {shown}; waiting does not restore it"
                    return ErrorReading(kind, delay, False, note)
    return ErrorReading(kind, delay)
