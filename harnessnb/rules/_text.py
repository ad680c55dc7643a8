"""Shortening text for one line of display or a prompt: the one ``shorten`` rule."""

from __future__ import annotations

from ._secrets import scrub

__all__ = ["ELLIPSIS", "shorten"]

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
