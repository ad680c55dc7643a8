"""Text for people: ``shorten`` (the one rule for cutting text to a line), ``clip`` (the
one rule for keeping long text to a size, head and tail) and ``printable`` (the one rule
for showing untrusted text without letting it act)."""

from __future__ import annotations

import re
from typing import Final

from ._secrets import scrub

__all__ = ["ELLIPSIS", "clip", "printable", "shorten"]

ELLIPSIS = "..."


def shorten(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` characters, else its start and ``...`` in ``limit``.

    Whitespace is kept as given (strip first where it should not count). Secrets are
    scrubbed first (``rules._secrets``): once cut in two, a key is no longer found.
    """
    text = scrub(text)
    if len(text) <= limit:
        return text
    if limit <= len(ELLIPSIS):
        return text[:limit]
    return text[: limit - len(ELLIPSIS)] + ELLIPSIS


def clip(text: str, limit: int) -> str:
    """``text`` kept to about ``limit`` characters: its head and tail, and between them a
    line saying how many characters were cut (``... [4996000 chars elided] ...``).

    For long text whose end matters too (tool output, an error message, stderr). It does
    not scrub: callers scrub first, since a key cut in two is no longer found.
    """
    if len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    elided = len(text) - head - tail
    return f"{text[:head]}\n... [{elided} chars elided] ...\n{text[-tail:]}"


# What could make a terminal (or a page) show something other than the text: C0 and
# C1 controls (ESC starts ANSI CSI/OSC sequences, CR and backspace overwrite), DEL,
# and the bidirectional and line-separator marks that reorder or break what is shown.
_MARKS: Final = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_ONE_LINE: Final = re.compile(f"[\x00-\x1f{_MARKS}]")
# Several lines: newline, tab and a CR that ends a line (CRLF) are kept.
_LINES: Final = re.compile(f"[\x00-\x08\x0b\x0c\x0e-\x1f{_MARKS}]|\r(?!\n)")
_NAMED: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with every control character shown as its escape, as literal text.

    ``"\\x1b[2J"`` (clear the screen) comes out as the eight characters ``\\x1b[2J``;
    a carriage return as ``\\r``, a right-to-left override as ``\\u202e``. Argv, file
    names, model and server text go through this before a terminal, the CLI or a
    widget shows them, so a person approves the command that will run.

    Args:
        text: Untrusted text.
        lines: Keep newlines, tabs and CRLF line ends (a preview, a card body); by
            default the result is one line and those are escaped too.
    """
    pattern = _LINES if lines else _ONE_LINE
    if text.isascii() and text.isprintable():
        return text
    return pattern.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
