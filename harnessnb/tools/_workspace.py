"""The workspace folder and its containment rule.

Containment: every path a tool receives is resolved inside the workspace before any
I/O on it. ``Workspace.resolve`` refuses NUL bytes, over-long names, absolute paths,
``..`` that climbs out, and symlinks (files or directories, at any component) whose
target lies outside; the refusal is a ``RefusedError`` with rule ``containment`` and
layer ``workspace``. It reads only link texts (``readlink``) and ``lstat``s of
components inside the workspace, never the outside target. The path it returns has
no symlink left in its existing part, so the I/O that follows opens what was checked
(a process racing to swap a component can still win; ``run_command`` is not
sandboxed either, so the workspace is a boundary for the model's file tools, not
for arbitrary code).
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
from pathlib import Path

from ..rules._errors import RefusedError

__all__ = ["SKIP_DIRS", "Workspace", "containment_refusal"]

SKIP_DIRS = frozenset({".git"})  # noise for the model; never a place to search
_MAX_COMPONENT_BYTES = 255
_MAX_PATH_BYTES = 4096
_MAX_SYMLINK_HOPS = 40  # as the Linux kernel
_FINGERPRINT_LIMIT = 50_000
_LINK_OUT = "a symlink in the path points outside the workspace"


class Workspace:
    """The folder the agent works in; every tool path is resolved inside it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

    def resolve(self, path: str, *, for_write: bool = False) -> Path:
        """The absolute path for ``path``, or ``RefusedError`` if it would leave the root."""
        act = "write" if for_write else "read"
        parts = self._lexical_parts(path, act)
        if for_write and not parts:
            raise containment_refusal("the workspace root itself cannot be written", act, path)
        return self._walk(parts, path, act)

    def relative(self, path: Path) -> str:
        """``path`` relative to the root, ``/``-separated; ``.`` for the root."""
        rel = path.relative_to(self.root).as_posix()
        return rel or "."

    def _lexical_parts(self, path: str, act: str) -> list[str]:
        """Check the text of ``path`` and collapse ``.`` and ``..`` without any I/O."""
        if not isinstance(path, str):
            raise containment_refusal("a path must be a string", act, repr(path))
        if "\x00" in path:
            raise containment_refusal("the path contains a NUL byte", act, path)
        if len(os.fsencode(path)) > _MAX_PATH_BYTES:
            raise containment_refusal(f"the path is longer than {_MAX_PATH_BYTES} bytes", act, path)
        if path.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:[\\/]", path):
            raise containment_refusal("absolute paths are outside the workspace", act, path)
        parts: list[str] = []
        for part in path.split("/"):
            if len(os.fsencode(part)) > _MAX_COMPONENT_BYTES:
                message = f"a path component is longer than {_MAX_COMPONENT_BYTES} bytes"
                raise containment_refusal(message, act, path)
            if part in ("", "."):
                continue
            if part == "..":
                if not parts:
                    raise containment_refusal(
                        "the path climbs out of the workspace with '..'", act, path
                    )
                parts.pop()
            else:
                parts.append(part)
        return parts

    def _walk(self, parts: list[str], original: str, act: str) -> Path:
        """Follow ``parts`` from the root, replacing symlinks by their (checked) targets."""
        current = self.root
        pending = list(parts)
        hops = 0
        exists = True
        while pending:
            part = pending.pop(0)
            if part in ("", "."):
                continue
            if part == "..":  # only from a relative symlink target
                if current == self.root:
                    raise containment_refusal(_LINK_OUT, act, original)
                current = current.parent
                continue
            candidate = current / part
            if exists:
                try:
                    mode = os.lstat(candidate).st_mode
                except (FileNotFoundError, NotADirectoryError):
                    exists = False  # nothing below a missing component exists either
                else:
                    if stat.S_ISLNK(mode):
                        hops += 1
                        if hops > _MAX_SYMLINK_HOPS:
                            raise containment_refusal("too many levels of symlinks", act, original)
                        link_parts, absolute = self._link_parts(candidate, original, act)
                        pending = link_parts + pending
                        if absolute:
                            current = self.root
                        continue
            current = candidate
        return current

    def _link_parts(self, link: Path, original: str, act: str) -> tuple[list[str], bool]:
        """A symlink's components, and whether they start at the root (absolute target)."""
        target = os.readlink(link)
        if not os.path.isabs(target):
            return target.split("/"), False
        normal = posixpath.normpath(target)
        root = str(self.root)
        if normal != root and not normal.startswith(root.rstrip("/") + "/"):
            raise containment_refusal(_LINK_OUT, act, original)
        return [p for p in normal[len(root) :].split("/") if p], True

    def fingerprint(self) -> frozenset[tuple[str, int, int]] | None:
        """Sizes and mtimes of every entry (``.git`` skipped); None when too many to list."""
        seen: set[tuple[str, int, int]] = set()
        stack = [self.root]
        while stack:
            folder = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                seen.add((entry.path, st.st_size, st.st_mtime_ns))
                if len(seen) > _FINGERPRINT_LIMIT:
                    return None
                if entry.is_dir(follow_symlinks=False) and entry.name not in SKIP_DIRS:
                    stack.append(Path(entry.path))
        return frozenset(seen)


def containment_refusal(message: str, act: str, target: str) -> RefusedError:
    """The ``RefusedError`` of a path (or pattern) that would leave the workspace."""
    return RefusedError(
        f"refused: {target!r}: {message}",
        act=act,
        target=target,
        rule="containment",
        layer="workspace",
    )
