"""Reading a failed CLI run: auth, quota, rejected flags, the line that explains it.

The failure phrases are data: the CLIs' words (``CLI_PHRASES``) are rows added to the
rules' one table (``rules._errors.PHRASES``, which provider bodies are read with), and
``_cause`` reads a reported failure with the same table.

Pure functions over text. Phrases are narrow and status codes count only as
standalone tokens, so an answer that merely mentions logging in, or a UUID such as
``7f3a-401b``, is not taken for an auth failure. The agent's own answer is consulted
only when it is a short notice (its first three non-blank lines within 240
characters), never an essay that happens to discuss authentication.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..rules._errors import PHRASES, ProviderErrorKind
from ..rules._phrases import Phrases

__all__ = [
    "CLI_PHRASES",
    "QUOTA",
    "auth_failure",
    "explanatory_line",
    "flag_rejected",
    "looks_like_notice",
    "rate_limit",
    "status_code",
]

K = ProviderErrorKind

# A quota that waiting does not restore: money or credits, not a per-minute rate or a
# subscription window ("usage limit reached, try again at 5pm" is a rate limit).
QUOTA = (
    r"insufficient_quota|quota exceeded|exceeded (your )?(current )?quota|"
    r"billing[ _](error|details|hard[ _]limit)|credit balance|out of credits"
)

# The CLIs' own words, given to the rules' table (``rules._errors.PHRASES``) as more rows:
# the one table that provider bodies are read with reads the CLIs' output too.
CLI_PHRASES = PHRASES.plus(
    # A prompt too long for the model: Claude "Prompt is too long", Codex "ran out of
    # room in the model's context window" (no status), Copilot "rejected the prompt as
    # too long".
    (K.CONTEXT_OVERFLOW, r"prompt (was |is )?too long|context limit"),
    (K.CONTEXT_OVERFLOW, r"ran out of room"),
    (K.CONTEXT_OVERFLOW, r"rejected the prompt as too long"),
    # Not logged in, or the key is missing: each CLI's login notice.
    (K.AUTH,
     r"not logged in|please run /login|run `?\w+ login`?|no authentication information|"
     r"not authenticated|no credentials|credentials not found|please log ?in|"
     r"missing (an )?api key|api key (is )?(missing|not (set|found))|"
     r"oauth token (has )?expired|token (has )?expired|no authentication token|"
     r"login required"),
    # A subscription's window (Claude, Codex), and a quota used up.
    (K.RATE_LIMITED, r"usage limit|hit your ([\w-]+ )?limit|limit reached"),
    (K.RATE_LIMITED, QUOTA),
    # The connection or the stream failed, in the words of the CLIs' HTTP clients
    # (Node's, Rust's), not the server's answer.
    (K.TRANSPORT,
     r"stream disconnected|stream closed|econnreset|econnrefused|epipe|socket hang up|"
     r"fetch failed|empty or malformed response|finali[sz]e .*stream|broken pipe|"
     r"terminated"),
)  # fmt: skip

# An argument the CLI's parser refused (``FlagRejected``, a rejected request).
_ARGUMENTS = Phrases((
    (K.REQUEST,
     r"unexpected argument|unknown option|unrecognized option|unknown flag|"
     r"unrecognized arguments?|unknown argument|invalid value .* for '--|"
     r"error: option '--[\w-]+' argument|too many arguments"),
))  # fmt: skip

# Lines that explain a failure, preferred over chatter when picking one to show.
_ERROR_MARK = re.compile(
    r"(error|exception)\b|\b(failed|failure|fatal|panic|denied|invalid|not found|refused|"
    r"cannot|can't|unable)\b",
    re.IGNORECASE,
)
# Progress chatter: spinners, log-level debug/info lines, bare punctuation.
_CHATTER = re.compile(r"^\s*([\W_]{0,3}\s*)?(debug|info|trace|loading|starting)\b|^\W*$", re.I)

_NOTICE_CHARS = 240


def _standalone(code: str) -> str:
    # Not part of a longer token: digits, letters, '-', '.', '/' and '_' on either side
    # make it part of an id, a version or a path. A sentence's final '.' is allowed.
    return rf"(?<![\w.\-/]){code}(?![\w\-/]|\.\w)"


# A status said alone: read only where no phrase of its kind is.
_CODES = Phrases(((K.AUTH, _standalone("401")), (K.RATE_LIMITED, _standalone("429"))))
_STATUS = re.compile(_standalone(r"([45]\d\d)"))


def looks_like_notice(answer: str) -> bool:
    """True when ``answer`` is short enough to be a CLI's notice, not a model's essay."""
    lines = [ln.strip() for ln in answer.splitlines() if ln.strip()][:3]
    return bool(lines) and sum(len(ln) for ln in lines) <= _NOTICE_CHARS


def _texts(stderr: str, answer: str) -> Iterable[str]:
    yield stderr
    if looks_like_notice(answer):
        yield answer


def _said(kind: ProviderErrorKind, stderr: str, answer: str) -> str | None:
    texts = list(_texts(stderr, answer))
    return CLI_PHRASES.line(kind, texts) or _CODES.line(kind, texts)


def auth_failure(stderr: str, answer: str = "") -> str | None:
    """The line saying the CLI is not logged in (or its key is bad), or None."""
    return _said(K.AUTH, stderr, answer)


def rate_limit(stderr: str, answer: str = "") -> str | None:
    """The line saying a quota or rate limit was hit, in the CLI's own words, or None."""
    return _said(K.RATE_LIMITED, stderr, answer)


def flag_rejected(stderr: str) -> str | None:
    """The line in which the CLI refuses one of its arguments, or None."""
    return _ARGUMENTS.line(K.REQUEST, [stderr])


def status_code(text: str) -> int | None:
    """A standalone 4xx/5xx status in an error text (``API Error: 404 ...``), or None."""
    match = _STATUS.search(text)
    return int(match.group(1)) if match else None


def explanatory_line(stderr: str) -> str:
    """The stderr line that best explains a failure.

    The last line carrying an error marker, else the last line that is not progress
    chatter, else the last non-blank line; "" for empty stderr.
    """
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for line in reversed(lines):
        if _ERROR_MARK.search(line):
            return line
    for line in reversed(lines):
        if not _CHATTER.search(line):
            return line
    return lines[-1] if lines else ""
