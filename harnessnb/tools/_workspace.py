"""The workspace folder and its containment rule.

Containment: every path a tool receives is walked inside the workspace before any I/O
on it. The walk refuses NUL bytes, over-long names, absolute paths and ``..`` that
climbs out, then goes from an open descriptor of the root one component at a time
(``openat`` with ``O_NOFOLLOW``), so a symlink is never followed by the kernel: its
text is read (``readlinkat``) and walked again from the folders already held open. A
symlink whose target stays inside is resolved that way; one that points outside (an
absolute target outside the root, or ``..`` below the root) is refused with rule
``containment``, layer ``workspace``. The tools then do their I/O on the descriptor of
the folder the walk ended in (``_fileio``), so a component swapped for a symlink while
a call runs cannot carry it outside. The outside target is never opened or stat'ed.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import re
import stat
from pathlib import Path

from ..rules._errors import RefusedError

__all__ = [
    "SKIP_DIRS",
    "Walked",
    "Workspace",
    "containment_refusal",
    "note_secret",
    "open_dir_at",
    "secret_name",
]

SKIP_DIRS = frozenset({".git"})  # noise for the model; never a place to search
_MAX_COMPONENT_BYTES = 255
_MAX_PATH_BYTES = 4096
_MAX_SYMLINK_HOPS = 40  # as the Linux kernel
_FINGERPRINT_LIMIT = 50_000
_LINK_OUT = "a symlink in the path points outside the workspace"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Every file and folder a walk for secret paths found denied, by identity (device,
# inode) -> (workspace root, the relative path it had): a secret a command renamed is
# still known for what it is. This process only; the oldest dropped past the cap.
_SECRETS_SEEN: dict[tuple[int, int], tuple[str, str]] = {}
_MAX_SECRETS_SEEN = 100_000


class Walked:
    """A path walked from the root: the folders on the way held open, the last name.

    ``folder`` is the descriptor of the folder that holds ``name`` (``name`` is None
    when the path is the root itself); ``rel`` is the workspace-relative path the walk
    actually took, symlinks replaced by their targets. ``missing`` holds the names
    below a folder that does not exist (only for ``Workspace.resolve``, which checks
    containment without needing the file). Close it (or use ``with``).
    """

    def __init__(self, root_fd: int) -> None:
        self.fds = [root_fd]
        self.names: list[str] = []
        self.name: str | None = None
        self.missing: list[str] = []

    @property
    def folder(self) -> int:
        return self.fds[-1]

    @property
    def rel(self) -> str:
        parts = [*self.names, *self.missing, *([self.name] if self.name else [])]
        return "/".join(parts) or "."

    def down(self, fd: int, name: str) -> None:
        self.fds.append(fd)
        self.names.append(name)

    def up(self) -> None:
        os.close(self.fds.pop())
        self.names.pop()

    def to_root(self) -> None:
        while self.names:
            self.up()
        self.missing.clear()

    def close(self) -> None:
        for fd in reversed(self.fds):
            os.close(fd)
        self.fds.clear()

    def __enter__(self) -> Walked:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Workspace:
    """The folder the agent works in; every tool path is walked inside it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r})"

    def resolve(self, path: str, *, for_write: bool = False) -> Path:
        """The absolute path for ``path``, or ``RefusedError`` if it would leave the root.

        Only containment: the path need not exist (names below a missing folder are
        taken as written). Tools do their I/O through ``walk`` instead.
        """
        act = "write" if for_write else "read"
        with self._walk(path, act, lenient=True, create=False) as walked:
            rel = walked.rel
        return self.root if rel == "." else self.root / rel

    def walk(self, path: str, *, act: str = "read", create: bool = False) -> Walked:
        """Walk ``path`` from the root's descriptor; the caller closes the result.

        ``create`` makes missing folders on the way (for writes). A missing folder or
        a file where a folder should be raises ``FileNotFoundError`` or
        ``NotADirectoryError``; escapes raise ``RefusedError``.
        """
        return self._walk(path, act, lenient=False, create=create)

    def relative(self, path: Path) -> str:
        """``path`` relative to the root, ``/``-separated; ``.`` for the root."""
        rel = path.relative_to(self.root).as_posix()
        return rel or "."

    def open_root(self) -> int:
        """A descriptor of the root folder (the caller closes it)."""
        return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def _walk(self, path: str, act: str, *, lenient: bool, create: bool) -> Walked:
        parts = self._lexical_parts(path, act)
        if act == "write" and not parts:
            raise containment_refusal("the workspace root itself cannot be written", act, path)
        walked = Walked(self.open_root())
        try:
            self._follow(walked, parts, path, act, lenient=lenient, create=create)
        except BaseException:
            walked.close()
            raise
        return walked

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

    def _follow(
        self,
        walked: Walked,
        parts: list[str],
        original: str,
        act: str,
        *,
        lenient: bool,
        create: bool,
    ) -> None:
        """Walk ``parts`` one ``openat`` at a time; a symlink's text joins the parts."""
        pending = collections.deque(parts)
        hops = 0
        while pending:
            part = pending.popleft()
            if part in ("", "."):
                continue
            if part == "..":  # only from a symlink's text: the held parent, never a name
                if walked.missing:
                    walked.missing.pop()
                elif walked.names:
                    walked.up()
                else:
                    raise containment_refusal(_LINK_OUT, act, original)
                continue
            if walked.missing:  # below a missing folder (lenient): text only
                walked.missing.append(part)
                continue
            link = self._step(walked, part, last=not pending, lenient=lenient, create=create)
            if link is None:
                continue
            hops += 1
            if hops > _MAX_SYMLINK_HOPS:
                raise containment_refusal("too many levels of symlinks", act, original)
            pending.extendleft(reversed(self._link_parts(walked, part, link, original, act)))

    def _step(
        self, walked: Walked, part: str, *, last: bool, lenient: bool, create: bool
    ) -> str | None:
        """Take one component: the symlink's text when it is one, else None (taken)."""
        if last:
            try:
                mode = os.stat(part, dir_fd=walked.folder, follow_symlinks=False).st_mode
            except (FileNotFoundError, NotADirectoryError):
                mode = None
            if mode is not None and stat.S_ISLNK(mode):
                return _readlink(walked.folder, part)
            walked.name = part
            return None
        try:
            fd = os.open(part, _DIR_FLAGS, dir_fd=walked.folder)
        except FileNotFoundError:
            if create:
                _mkdir(walked.folder, part)
                return self._step(walked, part, last=False, lenient=lenient, create=False)
            if not lenient:
                raise
            walked.missing.append(part)
            return None
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            if _is_link(walked.folder, part):
                return _readlink(walked.folder, part)
            if not lenient:
                raise NotADirectoryError(errno.ENOTDIR, "not a folder", part) from exc
            walked.missing.append(part)
            return None
        walked.down(fd, part)
        return None

    def _link_parts(
        self, walked: Walked, name: str, target: str, original: str, act: str
    ) -> list[str]:
        """The components a symlink's ``target`` stands for, walked from where it lives."""
        if not target:
            raise FileNotFoundError(errno.ENOENT, "empty symlink", name)
        if not target.startswith("/"):
            return target.split("/")
        root = str(self.root).rstrip("/")
        if target != root and not target.startswith(root + "/"):
            raise containment_refusal(_LINK_OUT, act, original)
        walked.to_root()
        return target[len(root) :].split("/")

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


def note_secret(st: os.stat_result, root: str, rel: str) -> None:
    """Remember that the file or folder ``st`` was at ``rel`` under ``root`` when the
    policy denied reading it (``secret_name`` answers for it under any later name)."""
    key = (st.st_dev, st.st_ino)
    _SECRETS_SEEN.pop(key, None)
    _SECRETS_SEEN[key] = (root, rel)
    while len(_SECRETS_SEEN) > _MAX_SECRETS_SEEN:
        _SECRETS_SEEN.pop(next(iter(_SECRETS_SEEN)))


def secret_name(st: os.stat_result, root: str) -> str | None:
    """The path under ``root`` at which ``st`` (a file or folder) was seen denied, or
    None. An inode freed and reused for another file keeps the old name until the
    next walk sees it: it is refused, never shown, meanwhile."""
    seen = _SECRETS_SEEN.get((st.st_dev, st.st_ino))
    return seen[1] if seen is not None and seen[0] == root else None


def open_dir_at(folder: int, name: str) -> int:
    """Open the folder ``name`` in ``folder`` without following a symlink there."""
    return os.open(name, _DIR_FLAGS, dir_fd=folder)


def _is_link(folder: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _readlink(folder: int, name: str) -> str:
    try:
        return os.readlink(name, dir_fd=folder)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        return name  # swapped back from a symlink meanwhile: take the name again


def _mkdir(folder: int, name: str) -> None:
    # Made meanwhile (or a symlink there, which the next open sees): fine either way.
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o777, dir_fd=folder)


def containment_refusal(message: str, act: str, target: str) -> RefusedError:
    """The ``RefusedError`` of a path (or pattern) that would leave the workspace."""
    return RefusedError(
        f"refused: {target!r}: {message}",
        act=act,
        target=target,
        rule="containment",
        layer="workspace",
    )
