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

A waiter also holds a shared lock on the sidecar's second byte while it waits, so the
holder can ask ``wanted()`` (one ``F_OFD_GETLK``) and hand the file over as soon as it
has done a little work, instead of keeping it through its linger.

Where no sidecar can be made (a read-only folder, a shipped recording) or the system
has no OFD locks, there is no turn: the store falls back to DuckDB's lock alone. The
lock belongs to the open file description, not the process: a forked child must not
unlock its parent's turn (``forget``), and a thread in the same process with its own
descriptor waits like another process would.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import threading
import time
from typing import Final

from ..rules._errors import StoreError

__all__ = ["FileTurn", "sidecar_path"]

# struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks), padding.
_FLOCK: Final = "hhqqi4x"
_TURN_BYTE: Final = 0  # held exclusively by the process whose turn it is
_WAIT_BYTE: Final = 1  # held shared by every process waiting for a turn
_OFD_SETLK: Final = getattr(fcntl, "F_OFD_SETLK", None)
_OFD_SETLKW: Final = getattr(fcntl, "F_OFD_SETLKW", None)
_OFD_GETLK: Final = getattr(fcntl, "F_OFD_GETLK", None)
# The descriptors of turns inherited through fork(): never unlocked or closed in the
# child, since the lock is the parent's too.
_FORK_ORPHANS: list[int] = []


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

    ``take`` waits (blocking, woken by the kernel) up to a timeout; ``give`` lets the
    next waiter in. One ``FileTurn`` per ``SharedDb``; its caller serialises use.
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

    def take(self, timeout_s: float, *, defer_s: float = 0.0) -> None:
        """Take the turn, waiting up to ``timeout_s`` for the process that holds it.

        ``defer_s``: this process just handed the turn over; for up to that long it
        lets a waiter the kernel woke take the turn first, rather than racing it.

        Raises:
            StoreError: ``busy`` when the turn did not come within ``timeout_s``.
        """
        self.waited_s = 0.0
        if self._fd is not None or not self.usable:
            return
        fd = self._open()
        if fd is None:
            return
        if defer_s > 0:
            self._defer(fd, defer_s)
        try:
            _lock(fd, _OFD_SETLK, fcntl.F_WRLCK, _TURN_BYTE)  # type: ignore[arg-type]
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                os.close(fd)
                raise StoreError(
                    f"cannot lock {self.path}: {exc}", kind="io", path=self.path
                ) from exc
            self._wait(fd, timeout_s)
        self._fd = fd

    def give(self) -> None:
        """Let the next waiter in (closing the descriptor drops its locks)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

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

    def _defer(self, fd: int, defer_s: float) -> None:
        # Quirk: an unlock wakes the waiters but hands the lock to none of them, so
        # the process that let go would win it back before a sleeping waiter runs.
        until = time.monotonic() + defer_s
        while time.monotonic() < until and _others_hold(fd, _WAIT_BYTE, fcntl.F_WRLCK):
            if _others_hold(fd, _TURN_BYTE, fcntl.F_WRLCK):
                return  # a waiter has it: queue behind it as usual
            time.sleep(0.002)

    def forget(self) -> None:
        """In a forked child: drop the parent's turn without unlocking it."""
        if self._fd is not None:
            _FORK_ORPHANS.append(self._fd)
        self._fd = None

    def _open(self) -> int | None:
        """The sidecar's descriptor, or None (and no turn from now on) where the folder
        or the file cannot be written: such a store is only read."""
        try:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
            except FileExistsError:
                return os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
            self._created = True
            return fd
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOENT):
                self.usable = False
                return None
            raise StoreError(f"cannot open {self.path}: {exc}", kind="io", path=self.path) from exc

    def _wait(self, fd: int, timeout_s: float) -> None:
        """Sleep in the kernel until the turn is free; a helper thread makes the wait
        bounded (a blocked ``fcntl`` cannot time out), and closes the descriptor itself
        if the turn comes after the caller gave up."""
        started = time.monotonic()
        with contextlib.suppress(OSError):
            _lock(fd, _OFD_SETLK, fcntl.F_RDLCK, _WAIT_BYTE)  # type: ignore[arg-type]
        done = threading.Event()
        state: dict[str, object] = {}
        guard = threading.Lock()

        def wait() -> None:
            try:
                _lock(fd, _OFD_SETLKW, fcntl.F_WRLCK, _TURN_BYTE)  # type: ignore[arg-type]
            except OSError as exc:
                state["error"] = exc
            with guard:
                if state.get("abandoned"):
                    os.close(fd)
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
            os.close(fd)
            raise StoreError(f"cannot lock {self.path}: {error}", kind="io", path=self.path)
        with contextlib.suppress(OSError):
            _lock(fd, _OFD_SETLK, fcntl.F_UNLCK, _WAIT_BYTE)  # type: ignore[arg-type]
