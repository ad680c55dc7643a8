"""Whose turn it is to open a store file: a blocking OS lock on ``<store>.lock``.

DuckDB's own file lock cannot be waited for: a second process gets "Could not set
lock on file" at once and can only try again later, and processes that retry on a
timer race each other, so one that is slow to be scheduled (a busy machine) can lose
every race for longer than it may wait. So a process first takes its turn on a
sidecar file, ``<store>.lock``, with an open-file-description lock (Linux
``F_OFD_SETLKW``): the kernel puts the waiter to sleep and wakes it when the holder
lets go, with no polling. Only the turn's holder opens the database, so DuckDB's lock
is free when it connects (a process that is not harnessnb may still hold it; that
case keeps the bounded retries in ``_conn``).

Turns come in order of asking (FIFO), because an unlock wakes every waiter and hands
the lock to none: left to race, a waiter the scheduler is slow to run (a loaded
machine) can lose again and again. So a process first draws a ticket (a counter in
the sidecar, under a short lock on its third byte) and holds the lock byte of its
ticket until it gives its turn; it waits for the lock byte of the ticket before its
own, then for the turn itself. A process that dies or gives up releases its ticket's
byte, so its successor moves up; the turn's own lock keeps two processes out of the
file whatever the queue does.

A waiter also holds a shared lock on the sidecar's second byte while it waits, so the
holder can ask ``wanted()`` (one ``F_OFD_GETLK``) and hand the file over as soon as it
has done a little work, instead of keeping it through its linger.

Where no sidecar can be made (a read-only folder, a shipped recording) or the system
has no OFD locks, there is no turn: the store falls back to DuckDB's lock alone. The
lock belongs to the open file description, not the process: a forked child must not
unlock its parent's turn, and must not keep it either: a forked child's copy of the
descriptor would hold the lock after the parent gave it, until the child exited, so
every descriptor of a turn is closed in a forked child at once (closing a copy drops
no lock while another copy is open). A thread in the same process with its own
descriptor waits like another process would.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import struct
import threading
import time
from typing import Final

from ..rules._errors import StoreError
from ._files import io_error

__all__ = ["FileTurn", "sidecar_path"]

# struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks), padding.
_FLOCK: Final = "hhqqi4x"
_TURN_BYTE: Final = 0  # held exclusively by the process whose turn it is
_WAIT_BYTE: Final = 1  # held shared by every process waiting for a turn
_COUNTER_BYTE: Final = 2  # held exclusively while a ticket is drawn
_COUNTER_AT: Final = 16  # where the next ticket number is kept (8 bytes, little-endian)
_QUEUE_AT: Final = 1 << 20  # ticket n's lock byte is _QUEUE_AT + n
_OFD_SETLK: Final = getattr(fcntl, "F_OFD_SETLK", None)
_OFD_SETLKW: Final = getattr(fcntl, "F_OFD_SETLKW", None)
_OFD_GETLK: Final = getattr(fcntl, "F_OFD_GETLK", None)
# Every descriptor of a turn open in this process (held, waiting or abandoned).
_OPEN: set[int] = set()
_OPEN_LOCK = threading.Lock()


def _opened(fd: int) -> int:
    with _OPEN_LOCK:
        _OPEN.add(fd)
    return fd


def _close(fd: int) -> None:
    with _OPEN_LOCK:
        _OPEN.discard(fd)
    os.close(fd)


def _close_inherited() -> None:
    """In a forked child: close the parent's turn descriptors (its locks stay its own)."""
    global _OPEN_LOCK
    _OPEN_LOCK = threading.Lock()
    for fd in list(_OPEN):
        with contextlib.suppress(OSError):
            os.close(fd)
    _OPEN.clear()


os.register_at_fork(after_in_child=_close_inherited)


def sidecar_path(path: str) -> str:
    """The lock file beside the store file ``path``."""
    return path + ".lock"


def _lock(fd: int, command: int, kind: int, byte: int) -> None:
    fcntl.fcntl(fd, command, struct.pack(_FLOCK, kind, os.SEEK_SET, byte, 1, 0))


def _others_hold(fd: int, byte: int, kind: int) -> bool:
    """True when another descriptor holds a lock on ``byte`` that ``kind`` would meet."""
    probe = struct.pack(_FLOCK, kind, os.SEEK_SET, byte, 1, 0)
    try:
        found = fcntl.fcntl(fd, _OFD_GETLK, probe)  # type: ignore[arg-type]
    except OSError:
        return False
    return bool(struct.unpack(_FLOCK, found)[0] != fcntl.F_UNLCK)


class FileTurn:
    """The sidecar lock of one store file, taken before the file is opened.

    ``take`` waits (blocking, woken by the kernel, first come first served) up to a
    timeout; ``give`` lets the next in line in. One ``FileTurn`` per ``SharedDb``; its
    caller serialises use.
    """

    def __init__(self, path: str) -> None:
        self.store_path = path
        self.path = sidecar_path(path)
        self._fd: int | None = None
        # False once the sidecar could not be made: the store relies on DuckDB's lock.
        self.usable = _OFD_SETLKW is not None
        self.waited_s = 0.0  # how long the last ``take`` waited
        self._created = False  # this process made the sidecar (``discard`` removes it)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def take(self, timeout_s: float) -> None:
        """Take the turn, waiting up to ``timeout_s`` for those ahead in line.

        Raises:
            StoreError: ``busy`` when the turn did not come within ``timeout_s``.
        """
        self.waited_s = 0.0
        if self._fd is not None or not self.usable:
            return
        fd = self._open()
        if fd is None:
            return
        try:
            ticket = _draw(fd)
            if not (_free(fd, ticket - 1) and _try(fd, fcntl.F_WRLCK, _TURN_BYTE)):
                self._wait(fd, ticket, timeout_s)  # closes fd when it raises
                return
        except OSError as exc:
            _close(fd)
            raise StoreError(f"cannot lock {self.path}: {exc}", kind="io", path=self.path) from exc
        self._fd = fd

    def give(self) -> None:
        """Let the next in line in (closing the descriptor drops its locks)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            _close(fd)

    def discard(self) -> None:
        """Give the turn and remove the sidecar this process made: for a file refused
        as no store (nothing is left beside a file harnessnb would not touch)."""
        self.give()
        if self._created:
            self._created = False
            with contextlib.suppress(OSError):
                os.unlink(self.path)

    def wanted(self) -> bool:
        """True when another process (or descriptor) is waiting for the turn."""
        if self._fd is None:
            return False
        return _others_hold(self._fd, _WAIT_BYTE, fcntl.F_WRLCK)

    def forget(self) -> None:
        """In a forked child: drop the parent's turn (its descriptor is closed already,
        by ``_close_inherited``; the lock stays the parent's)."""
        self._fd = None

    def _open(self) -> int | None:
        """The sidecar's descriptor, or None (and no turn from now on) where the folder
        or the file cannot be written: such a store is only read.

        The sidecar is written (its ticket counter), so it is never followed through a
        symlink (``O_NOFOLLOW``) and must be a regular file of ours with one link: a
        lock replaced by a link to a file elsewhere is refused, nothing written.
        """
        flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
        try:
            try:
                fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                fd = os.open(self.path, flags)
            else:
                self._created = True
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT):
                self.usable = False
                return None
            if exc.errno == errno.ELOOP:
                raise _refused(self.path, "is a symbolic link") from exc
            raise StoreError(f"cannot open {self.path}: {exc}", kind="io", path=self.path) from exc
        found = os.fstat(fd)
        why = (
            "is no regular file"
            if not stat.S_ISREG(found.st_mode)
            else "belongs to another user"
            if found.st_uid != os.geteuid()
            else "has other hard links"
            if found.st_nlink != 1
            else ""
        )
        if why:
            os.close(fd)
            raise _refused(self.path, why)
        return _opened(fd)

    def _wait(self, fd: int, ticket: int, timeout_s: float) -> None:
        """Sleep in the kernel until those ahead are done and the turn is free; a
        helper thread makes the wait bounded (a blocked ``fcntl`` cannot time out),
        and closes the descriptor itself if the turn comes after the caller gave up."""
        started = time.monotonic()
        with contextlib.suppress(OSError):
            _lock(fd, _OFD_SETLK, fcntl.F_RDLCK, _WAIT_BYTE)  # type: ignore[arg-type]
        done = threading.Event()
        state: dict[str, object] = {}
        guard = threading.Lock()

        def wait() -> None:
            try:
                if ticket > 0:  # the one ahead has given its turn, died or given up
                    _lock(fd, _OFD_SETLKW, fcntl.F_RDLCK, _QUEUE_AT + ticket - 1)  # type: ignore[arg-type]
                    _lock(fd, _OFD_SETLK, fcntl.F_UNLCK, _QUEUE_AT + ticket - 1)  # type: ignore[arg-type]
                _lock(fd, _OFD_SETLKW, fcntl.F_WRLCK, _TURN_BYTE)  # type: ignore[arg-type]
            except OSError as exc:
                state["error"] = exc
            with guard:
                if state.get("abandoned"):
                    _close(fd)
                done.set()

        threading.Thread(target=wait, name=f"harnessnb-store-turn:{self.path}", daemon=True).start()
        if not done.wait(max(timeout_s, 0.0)):
            with guard:
                if not done.is_set():
                    state["abandoned"] = True
            if state.get("abandoned"):
                raise StoreError(
                    f"the store {self.store_path} stayed locked by another process for "
                    f"{timeout_s:g} s; try again",
                    kind="busy",
                    path=self.store_path,
                )
        self.waited_s = time.monotonic() - started
        error = state.get("error")
        if isinstance(error, OSError):
            _close(fd)
            raise StoreError(f"cannot lock {self.path}: {error}", kind="io", path=self.path)
        with contextlib.suppress(OSError):
            _lock(fd, _OFD_SETLK, fcntl.F_UNLCK, _WAIT_BYTE)  # type: ignore[arg-type]
        self._fd = fd


def _refused(path: str, why: str) -> StoreError:
    return io_error(
        path,
        f"the store's lock file {path} {why}; it was refused and nothing was written "
        "through it: remove it (harnessnb makes a new one)",
    )


def _draw(fd: int) -> int:
    """Draw the next ticket and hold its lock byte (until the descriptor closes)."""
    _lock(fd, _OFD_SETLKW, fcntl.F_WRLCK, _COUNTER_BYTE)  # type: ignore[arg-type]
    try:
        raw = os.pread(fd, 8, _COUNTER_AT)
        ticket = int.from_bytes(raw, "little") if len(raw) == 8 else 0
        os.pwrite(fd, (ticket + 1).to_bytes(8, "little"), _COUNTER_AT)
        _lock(fd, _OFD_SETLK, fcntl.F_WRLCK, _QUEUE_AT + ticket)  # type: ignore[arg-type]
    finally:
        _lock(fd, _OFD_SETLK, fcntl.F_UNLCK, _COUNTER_BYTE)  # type: ignore[arg-type]
    return ticket


def _free(fd: int, ticket: int) -> bool:
    """True when nobody holds ticket ``ticket``'s byte (or there is no such ticket)."""
    return ticket < 0 or not _others_hold(fd, _QUEUE_AT + ticket, fcntl.F_RDLCK)


def _try(fd: int, kind: int, byte: int) -> bool:
    """Take a lock on ``byte`` if no one holds it; False if someone does."""
    try:
        _lock(fd, _OFD_SETLK, kind, byte)  # type: ignore[arg-type]
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True
