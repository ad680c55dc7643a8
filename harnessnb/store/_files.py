"""What a store path may be: nothing yet (a store is created), or a regular file that
is a DuckDB database. Checked before DuckDB, or the store's turn, touches the path:
a folder, a device such as ``/dev/null``, a pipe or a socket is refused and left as
it is; a file of another format is refused untouched. Also what the connection asks
of the path before it opens it: is anything there, may it be written, which file
it is; and a driver error on it as the typed ``StoreError`` it is (``store_error``)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from typing import Final

import duckdb

from ..rules._errors import StoreError

__all__ = [
    "check_header",
    "check_kind",
    "file_identity",
    "has_content",
    "io_error",
    "is_fatal",
    "store_error",
    "writable",
]

# The first 12 bytes of a DuckDB file: an 8-byte checksum, then the magic "DUCK".
_MAGIC: Final = b"DUCK"


def io_error(path: str, message: str) -> StoreError:
    """A ``StoreError`` of kind ``io`` about ``path`` (the store, a sidecar or its lock)."""
    return StoreError(message, kind="io", path=path)


def _mode(path: str, stat_of: Callable[[str], os.stat_result], name: str) -> int | None:
    """``path``'s mode as ``stat_of`` sees it, None when nothing is there; a path that
    cannot be read is a ``StoreError(io)`` naming it as ``name``."""
    try:
        return stat_of(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise io_error(path, f"cannot read {name}: {exc}") from exc


def check_kind(path: str) -> None:
    """Refuse a path that is there but is no regular file: a folder, a device such as
    ``/dev/null``, a pipe or a socket. A store is a file; a pipe would hang the open,
    and an empty device must never be taken for an empty file and replaced."""
    then = ", left untouched: a store is a file (pass a file path; a missing one is created)"
    _refuse_irregular(path, os.stat, f"the store {path}", then)
    _check_sidecars(path)


def _check_sidecars(path: str) -> None:
    """Refuse a store whose WAL or lock file is there as anything but a regular file
    (a symlink above all): DuckDB and the turn write them, and a write must never go
    through a link to a file elsewhere."""
    then = "; the store was refused and nothing was written through it: remove it"
    for sidecar in (path + ".wal", path + ".lock"):
        _refuse_irregular(sidecar, os.lstat, f"the store's sidecar {sidecar}", then)


# What a path that is no regular file is, in a refusal; the first test that holds.
_NOT_REGULAR: Final = ((stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symbolic link"))


def _refuse_irregular(
    path: str, stat_of: Callable[[str], os.stat_result], name: str, then: str
) -> None:
    """A ``StoreError(io)`` saying ``{name} is {what}{then}`` when ``path`` is there
    (as ``stat_of`` sees it) as anything but a regular file."""
    mode = _mode(path, stat_of, name)
    if mode is None or stat.S_ISREG(mode):
        return
    what = next(
        (word for test, word in _NOT_REGULAR if test(mode)),
        "no regular file (a device, pipe or socket)",
    )
    raise io_error(path, f"{name} is {what}{then}")


def check_header(path: str) -> None:
    """Refuse, before DuckDB sees it, a file that is not a DuckDB database.

    A regular file of zero bytes holds nothing to keep (``tempfile.mkstemp`` makes
    one): it is removed so DuckDB can create the store in its place.
    """
    check_kind(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(12)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreError(f"cannot read the store {path}: {exc}", kind="io", path=path) from exc
    if not head:
        with contextlib.suppress(FileNotFoundError):
            if os.path.getsize(path) == 0:
                os.unlink(path)
        return
    if head[8:12] != _MAGIC:
        raise StoreError(
            f"{path} is not a DuckDB database (another format); it was left "
            "untouched: pass another path or move the file away",
            kind="corrupt",
            path=path,
        )


def file_identity(path: str) -> tuple[int, int] | None:
    """The file's (device, inode), None when nothing is there: which file was checked."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino)


def has_content(path: str) -> bool:
    """Whether a file with at least one byte is there (an empty one is a new store)."""
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def writable(path: str) -> bool:
    """Whether the file and its folder (where DuckDB puts its WAL) can be written."""
    folder = os.path.dirname(os.path.abspath(path))
    return os.access(path, os.W_OK) and os.access(folder, os.W_OK)


def store_error(exc: duckdb.Error, path: str) -> StoreError:
    """The typed error for a driver error (the driver's text kept, no traceback)."""
    text = str(exc)
    lower = text.lower()
    if "could not set lock" in lower or "conflicting lock" in lower:
        kind = "busy"
    elif any(word in lower for word in _FULL_WORDS):
        kind = "full"
        text = f"the disk of the store {path} is full (the transaction was rolled back): {text}"
    elif "read-only mode" in lower:
        kind = "read_only"  # ``Store.sql`` asked to write to a store opened read-only
    elif "corrupt" in lower or "not a valid duckdb" in lower or "checksum" in lower:
        kind = "corrupt"
        text = f"the store {path} is corrupt and was left untouched: {text}"
    elif isinstance(exc, duckdb.ConstraintException):
        kind = "duplicate"
    elif isinstance(
        exc,
        duckdb.ParserException
        | duckdb.BinderException
        | duckdb.CatalogException
        | duckdb.InvalidInputException,
    ):
        kind = "query"
    elif isinstance(exc, duckdb.IOException):
        kind = "io"
    else:
        kind = "internal"
    return StoreError(text, kind=kind, path=path)


# strerror of ENOSPC, EDQUOT and EFBIG (a file size limit): a write that may succeed
# once space is freed.
_FULL_WORDS: Final = ("no space left on device", "disk quota exceeded", "file too large")


def is_fatal(exc: duckdb.Error) -> bool:
    # After these DuckDB may have invalidated the database; reopening is the cure.
    return isinstance(exc, duckdb.IOException | duckdb.FatalException | duckdb.InternalException)
