"""The one scrubber: no secret value leaves through any surface harnessnb writes to.

What counts as secret:
    * every value handed to ``register`` (each provider registers its key when it is
      built);
    * the value of every environment variable whose name looks secret
      (``is_secret_name``: a word of it is KEY, APIKEY, TOKEN, SECRET, PASSWORD,
      CREDENTIAL, COOKIE or AUTH, as in ``OPENAI_API_KEY``, ``AWS_BEARER_TOKEN_BEDROCK``,
      ``NPM_CONFIG__AUTH``; ``*PASSWORD*`` anywhere), read when text is scrubbed, so a
      variable set later is covered too;
    * with ``scrub`` (not ``scrub_values``), bearer tokens, ``sk-...`` style keys and
      Google's ``AIza...`` keys found by their shape.

A value is removed as given, stripped of surrounding whitespace (a key read from a
file ends in a newline), JSON-escaped (``\\/`` for ``/`` too, as some encoders write it)
and URL-encoded (``%2f`` and ``%2F`` alike: the hex digits match in either case).
Values shorter than ``MIN_SECRET_CHARS`` once stripped are ignored: removing every "abc"
from a text would hide more than it protects.

``scrub`` is for text shown to a person (messages, cards, the CLI, logs);
``scrub_values`` is for text that must otherwise stay verbatim (a checkpoint handed
back to the model on resume, tool output the model reads), where a shape match could
be ordinary code. Pure: standard library only; the environment is the one input read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable
from typing import Final
from urllib.parse import quote, quote_plus

__all__ = [
    "MIN_SECRET_CHARS",
    "REDACTED",
    "is_secret_name",
    "register",
    "register_header",
    "scrub",
    "scrub_exception",
    "scrub_loggers",
    "scrub_values",
    "scrubber",
]

REDACTED: Final = "[redacted]"
MIN_SECRET_CHARS: Final = 8

# Words of an environment variable's name that make its value a credential: whole
# words only (KEYBOARD_LAYOUT and TOKENIZERS_PARALLELISM are not secret).
_SECRET_WORDS: Final = frozenset(
    {"KEY", "KEYS", "APIKEY", "TOKEN", "TOKENS", "SECRET", "SECRETS", "PASSWORD", "PASSWD",
     "CREDENTIAL", "CREDENTIALS", "COOKIE", "COOKIES", "AUTH"}
)  # fmt: skip
# A last word that makes the value a place, not the secret (SSH_AUTH_SOCK, *_KEY_FILE).
_PLACE_WORDS: Final = frozenset({"SOCK", "SOCKET", "FILE", "PATH", "DIR", "URL"})
_WORD: Final = re.compile(r"[A-Za-z0-9]+")
# Credentials found by their shape; the prefix is kept so a reader sees what was there.
# Google's API keys (Gemini's among them) are AIza and 35 more characters.
_SHAPES: Final = re.compile(
    r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+|\b(sk-(?:ant-|or-|proj-)?)[A-Za-z0-9_-]{8,}"
    r"|\b((?-i:AIza))[A-Za-z0-9_-]{35}"
)

_lock = threading.Lock()
_registered: set[str] = set()
_version = 0  # bumped by every new registration
# (registry version, environment snapshot) -> the pattern of every form of every value.
_cache: tuple[int, tuple[object, ...], re.Pattern[str] | None] = (-1, (), None)


def is_secret_name(name: str) -> bool:
    """True for an environment variable name whose value is treated as secret.

    The one rule, for the scrubber's reading of the environment and for the variables a
    coding-agent CLI is given: a word of the name (split at ``_`` and other
    punctuation, any case) is a credential's (KEY, TOKEN, SECRET, CREDENTIALS, AUTH...)
    and its last word does not make it a place (``SSH_AUTH_SOCK``, ``*_KEY_FILE``); or
    it holds PASSWORD anywhere.
    """
    upper = name.upper()
    if "PASSWORD" in upper:
        return True
    words = _WORD.findall(upper)
    return bool(words) and words[-1] not in _PLACE_WORDS and not _SECRET_WORDS.isdisjoint(words)


def register(value: str | None) -> None:
    """Treat ``value`` as secret everywhere from now on (a provider key, say)."""
    global _version
    if value and len(value.strip()) >= MIN_SECRET_CHARS:
        with _lock:
            if value not in _registered:
                _registered.add(value)
                _version += 1


# Header names whose values are credentials (Authorization, X-Api-Key, Cookie, ...).
_SECRET_HEADER: Final = re.compile(r"(?i)auth|key|token|secret|password|cookie|session")


def register_header(name: str, value: str) -> None:
    """Register an HTTP header's value when its name says it is a credential: the whole
    value and, for ``Scheme credentials`` (``Bearer sk-...``), the credentials alone."""
    if not _SECRET_HEADER.search(name):
        return
    register(value)
    scheme, _, credentials = value.strip().partition(" ")
    if credentials and scheme.isalpha():
        register(credentials)


def scrub(text: str, extra: Iterable[str] = ()) -> str:
    """``text`` without secret values (also ``extra``'s) and without token shapes."""
    return _shapes(scrub_values(text, extra))


def scrub_values(text: str, extra: Iterable[str] = ()) -> str:
    """``text`` without registered, environment and ``extra`` secret values (no shapes)."""
    if len(text) < MIN_SECRET_CHARS and not extra:
        return text  # every spelling of a secret is at least this long
    pattern = _values_pattern()
    if pattern is not None:
        text = pattern.sub(REDACTED, text)
    extra = [v for v in extra if v and len(v.strip()) >= MIN_SECRET_CHARS]
    if extra:
        text = _compile(extra).sub(REDACTED, text)
    return text


def scrubber(*, shapes: bool = True) -> Callable[[str], str]:
    """``scrub`` (or ``scrub_values`` without ``shapes``) with the set of secrets read
    once: for the many strings of one value (a checkpoint's every message), where
    reading the environment for each string would cost more than the scrubbing."""
    pattern = _values_pattern()

    def clean(text: str) -> str:
        if pattern is not None and len(text) >= MIN_SECRET_CHARS:
            text = pattern.sub(REDACTED, text)
        return _shapes(text) if shapes else text

    return clean


def _shapes(text: str) -> str:
    lower = text.lower()
    if "bearer" not in lower and "sk-" not in lower and "AIza" not in text:  # 20x cheaper
        return text
    return _SHAPES.sub(lambda m: (m.group(1) or m.group(2) or m.group(3)) + REDACTED, text)


def scrub_exception(exc: BaseException | None) -> None:
    """Scrub the string arguments of ``exc`` and its whole cause chain, in place.

    Called where a foreign exception is chained under a ``HarnessError``: Python's own
    traceback printing shows every exception of the chain by ``str``.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen and len(seen) < 20:
        seen.add(id(exc))
        # An exception type that forbids setting its args keeps them.
        with contextlib.suppress(AttributeError, TypeError):
            exc.args = tuple(scrub(a) if isinstance(a, str) else a for a in exc.args)
        exc = exc.__cause__ or exc.__context__


# ------------------------------------------------------------------ internals


def _env_snapshot() -> tuple[object, ...]:
    # The raw mapping (bytes on POSIX) is compared by identity of its items: cheap
    # enough to do on every scrub, and any set/unset makes a different snapshot.
    data = getattr(os.environ, "_data", None)
    if isinstance(data, dict):
        return tuple(data.items())
    return tuple(os.environ.items())


def _env_secrets() -> list[str]:
    return [
        value
        for name, value in os.environ.items()
        if is_secret_name(name) and len(value.strip()) >= MIN_SECRET_CHARS
    ]


def _values_pattern() -> re.Pattern[str] | None:
    global _cache
    version, snapshot = _version, _env_snapshot()
    if _cache[0] == version and _cache[1] == snapshot:
        return _cache[2]
    with _lock:
        values = [*_registered, *_env_secrets()]
    pattern = _compile(values) if values else None
    _cache = (version, snapshot, pattern)
    return pattern


def _forms(value: str) -> set[str]:
    """The spellings a secret travels in: as given, stripped, JSON-escaped, URL-encoded."""
    out: set[str] = set()
    for v in {value, value.strip()}:
        out.update(
            {
                v,
                json.dumps(v)[1:-1],
                json.dumps(v, ensure_ascii=False)[1:-1],
                quote(v, safe=""),
                quote(v),  # as a path keeps "/"
                quote_plus(v),
                repr(v)[1:-1],
            }
        )
    # JSON may escape "/" as "\/" (PHP's encoder and others do).
    out.update({f.replace("/", "\\/") for f in out if "/" in f})
    return {f for f in out if len(f.strip()) >= MIN_SECRET_CHARS}


_PERCENT: Final = re.compile(r"%([0-9A-F])([0-9A-F])")


def _form_pattern(form: str) -> str:
    """``form`` as a regex: literal, except that each ``%XX`` escape matches its hex
    digits in either case (``quote`` writes upper case; browsers and proxies may not)."""
    escaped = re.escape(form)  # "%" and hex digits are left as they are
    return _PERCENT.sub(
        lambda m: (
            "%"
            + "".join(f"[{c}{c.lower()}]" if c.isalpha() else c for c in m.group(1) + m.group(2))
        ),
        escaped,
    )


def _compile(values: Iterable[str]) -> re.Pattern[str]:
    forms = {f for v in values for f in _forms(v)}
    # Longest first, so a value's whole spelling goes before a shorter one inside it.
    return re.compile("|".join(_form_pattern(f) for f in sorted(forms, key=len, reverse=True)))


class _ScrubLogs(logging.Filter):
    """Scrubs a record's message and traceback before any handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = scrub(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        return True


def scrub_loggers(*names: str) -> None:
    """Scrub every record of the loggers ``names`` and of their children that exist now.

    Filters do not follow propagation (a filter on ``"httpcore2"`` never sees a record of
    ``"httpcore2.http11"``), so each logger gets its own, once.
    """
    existing = list(logging.Logger.manager.loggerDict)
    for name in names:
        for each in [name, *(n for n in existing if n.startswith(name + "."))]:
            logger = logging.getLogger(each)
            if not any(isinstance(f, _ScrubLogs) for f in logger.filters):
                logger.addFilter(_ScrubLogs())


# Each logger harnessnb logs through; the HTTP module adds its client library's.
scrub_loggers(
    "harnessnb",
    "harnessnb.tools",
    "harnessnb.sweep",
    "harnessnb.prices",
    "harnessnb.mcp",
    "harnessnb.tracing",
)
