"""File I/O on the descriptors of a workspace walk: how the file tools read and write.

* The policy is judged again on the path the walk actually took (``admit``): a path
  swapped while a call ran reads or writes nothing the gate did not pass.
* Reads open only regular files, by name relative to the folder the walk holds, with
  ``O_NOFOLLOW | O_NONBLOCK``; the type is checked by ``lstat`` before the open and
  ``fstat`` after it, so a FIFO, socket or device is refused at once, never waited on.
* A file with more than one name is refused when the policy denies reading another of
  its names in the workspace (``LinkGuard``): a hard link to ``.env`` reads nothing.
  So is a file seen denied under another name before (``_workspace.secret_name``: a
  command renamed it, or a folder above it), judged by its old name.
* Writes never modify a file in place: a temporary file in the same folder, then an
  atomic rename over the name. A hard link to a file elsewhere keeps its old content,
  and a symlink swapped in at the last moment is replaced, not followed.
* Trees (``find_files``, ``grep``) are walked folder by folder with ``O_NOFOLLOW``;
  symlinks and non-regular files are not listed.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, NamedTuple

from ..rules._errors import RefusedError, SandboxError
from ._workspace import SKIP_DIRS, Walked, Workspace, open_dir_at, secret_name

if TYPE_CHECKING:
    from ..rules._policy import Policy, Verdict
    from ._protocol import ToolContext

__all__ = [
    "MAX_READ_BYTES",
    "Found",
    "LinkGuard",
    "admit",
    "file_mode",
    "iter_files",
    "list_folder",
    "read_at",
    "replace_walked",
]

MAX_READ_BYTES = 1 << 20  # 1 MiB: larger files are refused with their size (use grep)
_BINARY_SNIFF = 8192
_SCAN_LIMIT = 200_000  # files a hard-link check looks at before it gives up (and refuses)
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# A write's temporary file: ``.<target name's hash>.<pid>.<random>`` + this.
_TEMP_SUFFIX = ".harnessnb-tmp"
_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISLNK, "a symlink"),
)


# ------------------------------------------------------------------ the policy, again


def admit(ctx: ToolContext, act: str, rel: str) -> None:
    """Judge the path the walk took: allowed, or the very target the gate passed."""
    if ctx.policy is None:
        return
    verdict = ctx.policy.explain(act, rel)
    if verdict.allowed or (not verdict.denied and ctx.judged == (act, rel)):
        return
    if verdict.denied:
        message = f"refused: {act} {rel} is denied by {verdict.reason()}"
    else:
        message = (
            f"refused: {act} {rel}: the path changed while the call ran, and {rel} "
            f"needs approval ({verdict.reason()})"
        )
    raise RefusedError(message, act=act, target=rel, rule=verdict.rule, layer=verdict.layer)


class LinkGuard:
    """Refuses a file that is another name (hard link) of a file the policy denies reading.

    The workspace is scanned once, lazily, and only when a file with more than one
    name is read; a workspace too big to scan refuses such files instead.
    """

    def __init__(self, workspace: Workspace, policy: Policy | None) -> None:
        self.workspace = workspace
        self.policy = policy
        self._denied: dict[tuple[int, int], Verdict] | None = None
        self._complete = True

    def check(self, st: os.stat_result, rel: str) -> None:
        if self.policy is None:
            return
        self._check_identity(st, rel)
        if st.st_nlink < 2:
            return
        if self._denied is None:
            self._denied, self._complete = _denied_inodes(self.workspace, self.policy)
        verdict = self._denied.get((st.st_dev, st.st_ino))
        if verdict is not None:
            message = (
                f"refused: read {rel}: it is another name (a hard link) of a file "
                f"whose reading is denied by {verdict.reason()}"
            )
            raise RefusedError(
                message, act="read", target=rel, rule=verdict.rule, layer=verdict.layer
            )
        if not self._complete:
            message = (
                f"refused: read {rel}: it has {st.st_nlink} names and the workspace is too "
                "large to check that none of them is a denied file"
            )
            raise RefusedError(message, act="read", target=rel, rule="hard-link", layer="workspace")

    def _check_identity(self, st: os.stat_result, rel: str) -> None:
        """Refuse a file first seen denied under another name (a command renamed it,
        or its folder: ``mv .aws x``); its old name is judged by the policy again."""
        assert self.policy is not None
        was = secret_name(st, str(self.workspace.root))
        if was is None or was == rel:
            return
        verdict = self.policy.explain("read", was)
        if verdict.denied:
            message = (
                f"refused: read {rel}: it is {was}, moved or renamed, whose reading is "
                f"denied by {verdict.reason()}"
            )
            raise RefusedError(
                message, act="read", target=rel, rule=verdict.rule, layer=verdict.layer
            )


def _denied_inodes(
    workspace: Workspace, policy: Policy
) -> tuple[dict[tuple[int, int], Verdict], bool]:
    """The inodes of multi-name files the policy denies reading; False if cut short."""
    denied: dict[tuple[int, int], Verdict] = {}
    seen = 0
    with contextlib.closing(_walk_tree(workspace.open_root(), "", skip=frozenset())) as tree:
        for folder, name, rel in tree:
            seen += 1
            if seen > _SCAN_LIMIT:
                return denied, False
            try:
                st = os.stat(name, dir_fd=folder, follow_symlinks=False)
            except OSError:
                continue
            if st.st_nlink > 1:
                verdict = policy.explain("read", rel)
                if verdict.denied:
                    denied[(st.st_dev, st.st_ino)] = verdict
    return denied, True


# ------------------------------------------------------------------ reads


def _refuse_kind(mode: int, shown: str) -> None:
    """Raise unless ``mode`` is a regular file: folders as such, the rest refused."""
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a folder", shown)
    kind = next((word for test, word in _KINDS if test(mode)), "not a regular file")
    raise SandboxError(
        f"{shown} is {kind}; only regular files are read or written", reason="not_regular"
    )


def file_mode(walked: Walked) -> int | None:
    """The ``lstat`` mode of the walk's last name; None when it does not exist."""
    if walked.name is None:
        return stat.S_IFDIR
    try:
        return os.stat(walked.name, dir_fd=walked.folder, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None


class Found(NamedTuple):
    """A regular file a tree walk found (``iter_files``): the descriptor of the folder
    that holds it (valid until the walk goes on), its name there, its relative path."""

    folder: int
    name: str
    rel: str


def read_at(
    at: Walked | Found,
    shown: str,
    *,
    guard: LinkGuard | None,
    limit: int = MAX_READ_BYTES,
    text: bool = True,
) -> bytes:
    """The bytes of the regular file a walk ended at, or a tree walk found: never
    blocks on a FIFO.

    Refuses folders (the workspace root a walk of ``.`` ends at among them),
    non-regular files, files over ``limit`` bytes, binary files (NUL bytes near the
    start, when ``text``) and, through ``guard``, other names of denied files.
    """
    folder, name, rel = at.folder, at.name, at.rel
    if name is None:
        raise IsADirectoryError(errno.EISDIR, "is a folder", shown)
    _refuse_kind(os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode, shown)
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=folder)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # swapped for a symlink since the lstat
            raise SandboxError(f"{shown} changed while it was opened", reason="changed") from exc
        raise
    try:
        st = os.fstat(fd)
        _refuse_kind(st.st_mode, shown)  # swapped since the lstat: still never read
        if st.st_size > limit:
            raise _too_large(shown, st.st_size, limit)
        if guard is not None:
            guard.check(st, rel)
        data = _read_all(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise _too_large(shown, len(data), limit)
    if text and b"\x00" in data[:_BINARY_SNIFF]:
        raise SandboxError(f"{shown} looks binary (NUL bytes); not shown", reason="binary")
    return data


def _too_large(shown: str, size: int, limit: int) -> SandboxError:
    return SandboxError(
        f"{shown} is {size} bytes, over the {limit} byte read limit; "
        "use grep to find the lines you need",
        reason="too_large",
    )


def _read_all(fd: int, most: int) -> bytes:
    chunks: list[bytes] = []
    left = most
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# ------------------------------------------------------------------ writes


def replace_walked(walked: Walked, data: bytes, shown: str) -> bool:
    """Land ``data`` at the walk's last name by an atomic replace; False if already so.

    The new content goes to a temporary file in the same folder, then ``rename``
    puts it in place: the old inode (and every other name it has) is left as it was.
    The file's permission bits are kept.
    """
    if walked.name is None:
        raise IsADirectoryError(errno.EISDIR, "is a folder", shown)
    folder, name = walked.folder, walked.name
    mode = file_mode(walked)
    if mode is not None:
        _refuse_kind(mode, shown)
        if not os.access(name, os.W_OK, dir_fd=folder, follow_symlinks=False):
            raise PermissionError(errno.EACCES, "not writable", shown)
        if _holds(folder, name, data):
            return False
    tag = hashlib.sha1(name.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    _clear_stale_temps(folder, tag)
    temp = f".{tag}.{os.getpid()}.{secrets.token_hex(4)}{_TEMP_SUFFIX}"
    fd = os.open(temp, _TEMP_FLAGS, 0o666, dir_fd=folder)
    try:
        try:
            if mode is not None:
                os.fchmod(fd, stat.S_IMODE(mode))
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=folder)
        raise
    return True


def _clear_stale_temps(folder: int, tag: str) -> None:
    """Remove the temporary files a killed process left for the same target (its name's
    ``tag``) in ``folder``: a write redone after a kill leaves nothing of the first."""
    prefix = f".{tag}."
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            name = entry.name
            if not (name.startswith(prefix) and name.endswith(_TEMP_SUFFIX)):
                continue
            pid = name[len(prefix) :].split(".", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=folder)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def _holds(folder: int, name: str, data: bytes) -> bool:
    """True when the regular file ``name`` already has exactly ``data``."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=folder)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != len(data):
            return False
        return _read_all(fd, len(data) + 1) == data
    finally:
        os.close(fd)


# ------------------------------------------------------------------ folders and trees


def list_folder(walked: Walked) -> list[os.DirEntry[str]]:
    """The entries of the folder the walk ended at (``NotADirectoryError`` for a file)."""
    fd = walked.folder if walked.name is None else _open_folder(walked.folder, walked.name)
    try:
        with os.scandir(fd) as entries:
            return list(entries)
    finally:
        if walked.name is not None:
            os.close(fd)


def _open_folder(folder: int, name: str) -> int:
    try:
        return open_dir_at(folder, name)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # swapped for a symlink since the walk
            raise NotADirectoryError(errno.ENOTDIR, "changed while it was opened", name) from exc
        raise


def iter_files(walked: Walked) -> Iterator[Found]:
    """``(folder descriptor, name, relative path)`` of every regular file below the walk.

    ``.git`` is skipped; symlinks are neither listed nor followed. A descriptor is
    valid until the next item. The order is the walk's; sort by path if it matters.
    """
    if walked.name is None:
        start = os.dup(walked.folder)
    else:
        start = _open_folder(walked.folder, walked.name)
    prefix = "" if walked.rel == "." else walked.rel + "/"
    with contextlib.closing(_walk_tree(start, prefix, skip=SKIP_DIRS)) as tree:
        yield from tree


def _walk_tree(start: int, prefix: str, *, skip: frozenset[str]) -> Generator[Found, None, None]:
    """Regular files under the folder ``start`` (which it closes), depth first.

    One descriptor per level is held (not one per pending folder), so a wide tree
    cannot run the process out of descriptors.
    """
    frames: list[tuple[int, str, Iterator[str]]] = []

    def enter(folder: int, base: str) -> list[str]:
        try:
            with os.scandir(folder) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError:
            entries = []
        subfolders = [
            e.name for e in entries if e.is_dir(follow_symlinks=False) and e.name not in skip
        ]
        frames.append((folder, base, iter(subfolders)))
        return [e.name for e in entries if e.is_file(follow_symlinks=False)]

    try:
        for name in enter(start, prefix):
            yield Found(start, name, prefix + name)
        while frames:
            folder, base, subfolders = frames[-1]
            sub = next(subfolders, None)
            if sub is None:
                os.close(folder)
                frames.pop()
                continue
            try:
                child = open_dir_at(folder, sub)
            except OSError:  # gone, or swapped for a symlink
                continue
            for name in enter(child, f"{base}{sub}/"):
                yield Found(child, name, f"{base}{sub}/{name}")
    finally:
        for folder, _, _ in frames:
            os.close(folder)
