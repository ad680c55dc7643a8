"""Shortening text for one line of display or a prompt: the one ``shorten`` rule."""

from __future__ import annotations

__all__ = ["ELLIPSIS", "shorten"]

ELLIPSIS = "..."


def shorten(text: str, limit: int) -> str:
    """``text`` if it fits in ``limit`` characters, else its start and ``...`` in ``limit``.

    Whitespace is kept as given (strip first where it should not count).
    """
    if len(text) <= limit:
        return text
    if limit <= len(ELLIPSIS):
        return text[:limit]
    return text[: limit - len(ELLIPSIS)] + ELLIPSIS
