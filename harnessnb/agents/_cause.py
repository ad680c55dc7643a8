"""Why a CLI's model request failed: one ``Cause`` from what the CLI reported.

The CLIs report each failed request as they retry it (Claude Code's ``api_retry``
lines, Codex's ``Reconnecting... n/5 (...)`` errors, Copilot's ``model.call_failure``
events) and the last one again when they give up. Each report is read here into a
``Cause``: the ``ProviderErrorKind`` every provider shares, the HTTP status, the
seconds the server asked to wait, and whether waiting can help at all (``fatal``: a
bad key, an exhausted quota, a rejected request, a prompt too long for the context
window). Pure functions over the CLI's words; no I/O.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
from collections.abc import Sequence
from typing import Any

from ..rules._errors import BODY_TYPES, ProviderErrorKind, classify_status
from ._classify import CLI_PHRASES, QUOTA, auth_failure, status_code

__all__ = [
    "Cause",
    "cause_of",
    "claude_retry_after",
    "copilot_log_waits",
    "error_message",
    "overflow",
    "quota_exhausted",
    "retry_cause",
    "with_retry_after",
]

K = ProviderErrorKind

_QUOTA = re.compile(QUOTA, re.IGNORECASE)

# A quota used up, in the CLIs' and the providers' words: a rate limit here (waiting
# will not restore it), where the providers' table reads it as auth.
_QUOTA_WORDS = frozenset({"billing_error", "quota", "insufficient_quota"})
# The CLIs' words for a failed request (Claude's ``error``, Copilot's
# ``failureKind``/``errorType``/``reason``): the providers' error types, which they
# pass on (the rules' table), and their own.
_WORDS: dict[str, ProviderErrorKind] = {
    **BODY_TYPES,
    "rate_limit": K.RATE_LIMITED, "rate_limited": K.RATE_LIMITED,
    "authentication_failed": K.AUTH, "authentication": K.AUTH,
    "oauth_org_not_allowed": K.AUTH, "transient_auth_error": K.AUTH,
    "overloaded": K.SERVER,
    "transport": K.TRANSPORT, "streaming_error": K.TRANSPORT, "network": K.TRANSPORT,
    "connection_error": K.TRANSPORT, "timeout": K.TIMEOUT,
    "invalid_request": K.REQUEST, "forced_compaction": K.CONTEXT_OVERFLOW,
    **dict.fromkeys(_QUOTA_WORDS, K.RATE_LIMITED),
}  # fmt: skip
# Failures before any answer arrived: the connection, or the wait for it.
_CONNECTION = frozenset({K.TRANSPORT, K.TIMEOUT})


@dataclasses.dataclass(frozen=True)
class Cause:
    """One failed model request, as the CLI reported it.

    Attributes:
        kind: The shared taxonomy's kind.
        status: The HTTP status, when the CLI said it.
        retry_after: Seconds the server asked to wait, when the CLI said it.
        detail: The CLI's words (already scrubbed by the caller if need be).
        quota: A rate limit that is an exhausted quota (waiting will not restore it).
    """

    kind: ProviderErrorKind
    status: int | None = None
    retry_after: float | None = None
    detail: str = ""
    quota: bool = False

    @property
    def fatal(self) -> bool:
        """True when waiting cannot fix it: stop the CLI instead of letting it retry."""
        return self.quota or self.kind in (K.AUTH, K.REQUEST, K.CONTEXT_OVERFLOW)

    @property
    def retryable(self) -> bool:
        """The same request may succeed later (the shared taxonomy's rule, quota aside)."""
        return not self.fatal and self.kind is not K.MALFORMED and self.kind.retryable


def overflow(text: str) -> bool:
    """True when ``text`` says the prompt does not fit the model's context window."""
    return CLI_PHRASES.says(K.CONTEXT_OVERFLOW, text)


def quota_exhausted(text: str) -> bool:
    """True when ``text`` says a quota (not a per-minute rate) is used up."""
    return bool(_QUOTA.search(text))


def cause_of(
    detail: str,
    status: int | None = None,
    word: str | None = None,
    retry_after: float | None = None,
) -> Cause | None:
    """The ``Cause`` behind a reported failure, or None when nothing says what it was.

    ``detail`` is the CLI's message, ``status`` the HTTP status it gave (else one found
    in ``detail``), ``word`` its own classification (``rate_limit``, ``transport``...).
    The wording decides an overflow whatever the status; then the status; then the
    CLI's word (a generic server word with no status yields to wording that names the
    connection or a timeout); then the wording.
    """
    status = status if status and 100 <= status < 600 else status_code(detail)
    word = (word or "").strip().lower()
    kind: ProviderErrorKind | None = None
    if overflow(detail) or word in ("context_length_exceeded", "forced_compaction"):
        kind = K.CONTEXT_OVERFLOW
    elif status is not None and status >= 400:
        kind = classify_status(status, detail)  # the one table: 402 is auth, as for HTTP
    elif word in _WORDS:
        kind = _WORDS[word]
        worded = _by_wording(detail) if kind is K.SERVER and status is None else None
        if worded in _CONNECTION:
            # Claude Code's "server_error" for "Unable to connect to API (ECONNRESET)":
            # with no status no server answered, and the words say what failed.
            kind = worded
    else:
        kind = _by_wording(detail)
    quota = word in _QUOTA_WORDS or quota_exhausted(detail)
    if quota and kind in (None, K.REQUEST, K.RATE_LIMITED):
        kind = K.RATE_LIMITED  # e.g. Anthropic's 400 "credit balance is too low"
    if kind is None:
        return None
    return Cause(kind, status, retry_after, detail, quota and kind is K.RATE_LIMITED)


def retry_cause(
    detail: str,
    status: int | None = None,
    word: str | None = None,
    retry_after: float | None = None,
) -> Cause:
    """The cause of a request the CLI reported failing, when it did not say which: with
    no HTTP status the connection failed (``transport``, as the HTTP providers classify a
    cut stream; Claude Code's ``"error": "unknown"`` with ``"error_status": null``), with
    one the server did (``server``: the CLI retries it, so it took it for one)."""
    found = cause_of(detail, status, word, retry_after)
    if found is not None:
        return found
    return Cause(_unexplained(status), status, retry_after, detail)


def _unexplained(status: int | None) -> ProviderErrorKind:
    """The kind of a failure nothing explains: no status means no answer arrived."""
    return K.TRANSPORT if status is None else K.SERVER


def _by_wording(detail: str) -> ProviderErrorKind | None:
    """The kind the CLI's words name (the table's order: auth first), or None."""
    return K.AUTH if auth_failure(detail) else CLI_PHRASES.kind_of(detail)


def claude_retry_after(
    status: int | None, delay_ms: Any, earlier: Sequence[Cause] = ()
) -> float | None:
    """Claude's wait before retrying a 429, when it is the server's retry-after.

    Claude waits max(retry-after, its backoff); its backoff carries jitter (fractional
    milliseconds), a retry-after is whole seconds: a whole-second wait is the header's.
    Once its backoff outgrows the retry-after, the last one it honoured (in ``earlier``
    reports) is kept.
    """
    if status != 429 or not isinstance(delay_ms, int | float) or delay_ms <= 0:
        return None
    if float(delay_ms) % 1000 == 0:
        return float(delay_ms) / 1000
    known = [c.retry_after for c in earlier if c.status == 429 and c.retry_after is not None]
    return known[-1] if known else None


def error_message(raw: Any) -> str:
    """The message inside an error body given as JSON text (Copilot's ``errorMessage``)."""
    text = raw if isinstance(raw, str) else ("" if raw is None else str(raw))
    try:
        body = json.loads(text)
    except ValueError:
        return text
    if isinstance(body, dict):
        error = body.get("error")
        inner: dict[str, Any] = error if isinstance(error, dict) else body
        message = inner.get("message")
        return message if isinstance(message, str) and message else text
    return body if isinstance(body, str) else text


# Copilot's log line for a failed model request: '... Model provider request failed {json}'.
_COPILOT_FAILED = re.compile(r"Model provider request failed (\{.*\})\s*$")


def copilot_log_waits(folder: str, limit: int = 1 << 20) -> list[tuple[int | None, float | None]]:
    """(status, retry-after seconds) of each failed request in Copilot's log files."""
    waits: list[tuple[int | None, float | None]] = []
    for path in sorted(glob.glob(os.path.join(folder, "*.log"))):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read(limit)
        except OSError:
            continue
        for line in text.splitlines():
            match = _COPILOT_FAILED.search(line)
            try:
                record = json.loads(match.group(1)) if match else None
            except ValueError:
                record = None
            if isinstance(record, dict):
                status, wait = record.get("http_status"), record.get("retry_after_ms")
                waits.append(
                    (
                        status if isinstance(status, int) else None,
                        wait / 1000 if isinstance(wait, int | float) else None,
                    )
                )
    return waits


def with_retry_after(
    reports: list[tuple[Cause, float]], waits: list[tuple[int | None, float | None]]
) -> list[tuple[Cause, float]]:
    """``reports`` with each one's retry-after taken from ``waits`` (the same failures,
    in the same order, matched by status), where the report has none."""
    out, pending = [], list(waits)
    for cause, at in reports:
        index = next((i for i, (status, _) in enumerate(pending) if status == cause.status), None)
        if index is not None:
            _, wait = pending.pop(index)
            if cause.retry_after is None and wait is not None:
                cause = dataclasses.replace(cause, retry_after=wait)
        out.append((cause, at))
    return out
