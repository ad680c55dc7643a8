"""The ONE classification table: HTTP status, body and the failure phrases to a
``ProviderErrorKind`` (and ``.retryable`` per kind), shared by every provider and, through
``classify_status``, by MCP's HTTP transport. Pure. ``_errors`` re-exports every name.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from ._phrases import PROVIDER_PHRASES, Phrases

__all__ = [
    "BODY_TYPES",
    "PHRASES",
    "ProviderErrorKind",
    "classify_body_error",
    "classify_status",
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

    Handles OpenAI ``{"message", "type", "code"}``, Anthropic ``{"type", "message"}``
    and OpenRouter ``{"code": 429, "message"}`` shapes. ``status`` is the HTTP status
    the response carried, used only when the object says nothing usable.
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
    for word in (code, etype):
        if isinstance(word, str) and word in BODY_TYPES:
            kind = BODY_TYPES[word]
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
