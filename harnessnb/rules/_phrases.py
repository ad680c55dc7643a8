"""Failure phrases as data: which words name which kind of failure (``Phrases``).

A table is rows of (kind, pattern), each pattern a regular expression matched without
regard to case. The rows of one kind are read as one alternation; the kinds are tried
in the order they first appear, so a text naming two kinds gets the earlier one.

``PROVIDER_PHRASES`` is the rules' table: what an HTTP API writes in an error's
message, keyed by the ``ProviderErrorKind`` value (``_errors.PHRASES`` is the same
table keyed by the kind itself; ``classify_status`` and ``classify_body_error`` read it
for an overflow). The coding-agent CLIs give their own words to it as more rows
(``plus``, in ``agents/_classify.py``), and the same ``kind_of`` / ``says`` / ``line``
read provider bodies and CLI output alike. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

__all__ = ["PROVIDER_PHRASES", "Phrases"]

K = TypeVar("K", bound=Hashable)
J = TypeVar("J", bound=Hashable)


@dataclasses.dataclass(frozen=True)
class Phrases(Generic[K]):
    """An ordered table of (kind, pattern) rows, and how a text is read with it."""

    rows: tuple[tuple[K, str], ...]
    _by_kind: dict[K, re.Pattern[str]] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        patterns: dict[K, list[str]] = {}
        for kind, pattern in self.rows:
            patterns.setdefault(kind, []).append(f"(?:{pattern})")
        compiled = {k: re.compile("|".join(p), re.IGNORECASE) for k, p in patterns.items()}
        object.__setattr__(self, "_by_kind", compiled)

    def plus(self, *rows: tuple[K, str]) -> Phrases[K]:
        """This table with more rows: a known kind's join its own, a new kind comes last."""
        return Phrases(self.rows + rows)

    def map(self, key: Callable[[K], J]) -> Phrases[J]:
        """The same rows with each kind turned into ``key(kind)``."""
        return Phrases(tuple((key(kind), pattern) for kind, pattern in self.rows))

    def says(self, kind: K, text: str) -> bool:
        """True when ``text`` holds one of ``kind``'s phrases."""
        pattern = self._by_kind.get(kind)
        return pattern is not None and pattern.search(text) is not None

    def kind_of(self, text: str) -> K | None:
        """The first kind (in table order) one of whose phrases ``text`` holds, or None."""
        return next((k for k, p in self._by_kind.items() if p.search(text)), None)

    def line(self, kind: K, texts: Iterable[str]) -> str | None:
        """The first line of ``texts`` (stripped) that holds one of ``kind``'s phrases."""
        pattern = self._by_kind.get(kind)
        if pattern is None:
            return None
        for text in texts:
            for line in text.splitlines():
                if pattern.search(line):
                    return line.strip()
        return None


# What an HTTP API writes in an error's message (the kinds in the order they are tried).
PROVIDER_PHRASES: Phrases[str] = Phrases((
    ("context_overflow",
     r"context[_ ]length|context window|maximum context|prompt is too long|"
     r"too many tokens|exceeds? (the )?context|input length .*exceed|"
     r"context_length_exceeded|reduce the length|input token count .*exceeds"),
    ("auth",
     r"invalid api key|invalid x-api-key|incorrect api key|authentication_error|"
     r"\bunauthori[sz]ed\b|authentication required|payment required"),
    ("rate_limited", r"rate[ _-]?limit|too many requests|resource_exhausted"),
    ("transport",
     r"connection (reset|refused|closed|error)|network error|unexpected end of|"
     r"premature close"),
    ("timeout", r"timed out|timeout|deadline exceeded"),
    ("server",
     r"overloaded|internal server error|service unavailable|temporarily unavailable|"
     r"bad gateway|gateway timeout|server error|api_error"),
))  # fmt: skip
