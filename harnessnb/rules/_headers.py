"""What a response's headers say about a failure: ``Retry-After`` (the ONE parser),
``x-should-retry`` and the request id. Pure: no I/O, no clock except ``now``.
Re-exported by ``_errors``, where the classification table that uses them lives.
"""

from __future__ import annotations

import email.utils
import math
from collections.abc import Mapping

from ._secrets import scrub

__all__ = ["parse_retry_after", "parse_should_retry", "request_id_from"]


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms``, then ``retry-after`` (seconds or HTTP-date).

    A past date is 0. Anything unreadable is absent (None), never an exception.
    ``now`` is the current Unix time (needed only for HTTP-dates).
    """
    lower = {k.lower(): v for k, v in headers.items()}
    ms = lower.get("retry-after-ms")
    if ms is not None:
        value = _finite_float(ms)
        if value is not None and value >= 0:
            return value / 1000.0
    raw = lower.get("retry-after")
    if raw is None:
        return None
    seconds = _finite_float(raw)
    if seconds is not None:
        return seconds if seconds >= 0 else None
    try:
        parsed = email.utils.parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if parsed is None:
        return None
    if parsed.tzinfo is None:
        return None
    if now is None:
        import time

        now = time.time()
    return max(0.0, parsed.timestamp() - now)


def _finite_float(text: str) -> float | None:
    try:
        value = float(text.strip())
    except (ValueError, AttributeError):
        return None
    return value if math.isfinite(value) else None


def parse_should_retry(headers: Mapping[str, str]) -> bool | None:
    """The server's ``x-should-retry: true|false`` answer, or None."""
    for key, value in headers.items():
        if key.lower() == "x-should-retry":
            v = value.strip().lower()
            if v == "true":
                return True
            if v == "false":
                return False
    return None


def request_id_from(headers: Mapping[str, str]) -> str | None:
    """The request id from ``x-request-id`` or ``request-id``."""
    lower = {k.lower(): v for k, v in headers.items()}
    found = lower.get("x-request-id") or lower.get("request-id")
    # Scrubbed: a server may echo the key in it, and it goes to rows and cards.
    return scrub(found) if found else None
