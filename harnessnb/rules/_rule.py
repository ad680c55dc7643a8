"""One policy rule and how its pattern matches a target (see ``_policy``'s docstring for
the matching rules of each act)."""

from __future__ import annotations

import dataclasses
import fnmatch
import posixpath
import re
from functools import lru_cache
from typing import Literal

__all__ = ["NAMED_EXEC", "Act", "EffectName", "Rule", "literal", "normalise_path"]

Act = Literal["read", "write", "exec", "net"]
EffectName = Literal["allow", "ask", "deny"]

_GLOB_CHARS = frozenset("*?[")
# Exec targets that name a tool (a user tool's, an MCP server's), not a command line:
# matched on the whole name only.
NAMED_EXEC = ("tool:", "mcp:")


@dataclasses.dataclass(frozen=True)
class Rule:
    """One rule: ``effect`` applies to ``act`` on targets matching ``pattern``."""

    act: Act
    effect: EffectName
    pattern: str

    def __str__(self) -> str:
        return f"{self.effect} {self.act} {self.pattern}"

    def matches(self, target: str) -> bool:
        """True when ``pattern`` matches ``target`` under this act's matching rules."""
        if self.act in ("read", "write") and self.effect != "allow":
            return _broad(self.pattern).match(normalise_path(target).lower()) is not None
        candidates = _candidates(self.act, target)
        pattern = self.pattern
        if self.act == "net":
            pattern = pattern.lower()
            candidates = [c.lower() for c in candidates]
        return any(fnmatch.fnmatchcase(c, pattern) for c in candidates)


def _candidates(act: str, target: str) -> list[str]:
    """The strings a pattern is tried against for one target (narrow matching)."""
    if act in ("read", "write"):
        path = normalise_path(target)
        return [path, posixpath.basename(path)]
    if act == "exec":
        if target.startswith(NAMED_EXEC):
            return [target]
        program = target.split(" ", 1)[0]
        return [target, program, posixpath.basename(program)]
    host = target.rsplit(":", 1)[0] if target.count(":") == 1 else target
    return [target, host]


@lru_cache(maxsize=1024)
def _broad(pattern: str) -> re.Pattern[str]:
    """A deny/ask path pattern as a regex: any run of whole components, any case."""
    glob = fnmatch.translate(pattern.lower()).removesuffix(r"\Z")
    return re.compile(rf"(?:.*/)?{glob}(?:/.*)?\Z", re.DOTALL)


def literal(pattern: str) -> str | None:
    """The one string a glob matches, or None when it has wildcards (``[*]`` is ``*``)."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern[i] == "[" and pattern[i + 2 : i + 3] == "]" and pattern[i + 1] != "!":
            out.append(pattern[i + 1])
            i += 3
        elif pattern[i] in _GLOB_CHARS:
            return None
        else:
            out.append(pattern[i])
            i += 1
    return "".join(out)


def normalise_path(path: str) -> str:
    # Targets arrive workspace-relative already; this only keeps "./a" and "a" alike.
    path = path.replace("\\", "/")
    while path.startswith("./"):
        path = path[2:]
    return path or "."
