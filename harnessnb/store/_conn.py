"""One DuckDB connection per database file per process, held briefly and shared.

DuckDB lets one process hold a file at a time; a second process gets "Could not set
lock on file". So a process opens the file only while it works, and only in its turn
(``_turn``: a blocking OS lock on ``<store>.lock``, waited for in the kernel, no
polling): it keeps the connection while operations come fast, closes it after
``linger_s`` idle (a provider call takes seconds, which leaves other processes room),
and hands it over once another process waits for its turn and it has held it for
``_MIN_HOLD_S``; a program that takes no turn cannot be seen waiting: the file is let go
for it every ``_MAX_HOLD_UNSEEN_S`` (``MAX_HOLD_S`` with no turn). A turn that does not
come within ``busy_timeout_s`` is ``StoreError(kind="busy")``, which is retryable. Where
there is no turn to take (a read-only folder), or a program other than harnessnb holds
the file, DuckDB's lock is retried with jittered, bounded backoff instead.

Within a process every ``Store`` on the same real path shares one ``SharedDb`` whose
lock serialises all statements: concurrent runs in one kernel funnel through it. Writes
submitted asynchronously go to the ``SharedDb``'s writer thread, which commits every
write queued while the previous transaction ran as ONE transaction (group commit, see
``_store_batch``), so a hundred runs pay for a few statements, not a few hundred.

The store keeps to its own files. An existing file is first looked at through a
read-only connection: one that is not a harnessnb store (``stored_version``) is refused
before anything could write to it. A file that cannot be written (a read-only file or
folder, a read-only mount) is opened read-only: its readers work, its writes are
``StoreError(kind="read_only")``; one written by an older harnessnb is migrated in an
in-memory copy, never in place.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any, Final, TypeVar

import duckdb

from ..rules._errors import StoreError
from ._batch import Batch, Journal, WriteOp
from ._files import (
    check_header,
    check_kind,
    file_identity,
    has_content,
    is_fatal,
    store_error,
    writable,
)
from ._interrupt import interruptible
from ._journal import JOURNAL_IDLE_S, JOURNAL_MAX, journal_left, materialize, recover, settle
from ._schema import SCHEMA_VERSION, connect, ensure_schema, migrated_copy, stored_version
from ._threads import single_threaded, start_thread, threads_known
from ._turn import FileTurn

T = TypeVar("T")

__all__ = [
    "MAX_HOLD_S",
    "MEMORY",
    "SharedDb",
    "acquire_shared",
    "release_shared",
    "store_error",
]

MEMORY: Final = ":memory:"
# The longest hold without a turn, and with one for a program that takes none (a reopen
# costs the next read a cold cache, ~2x a warm ``failure_rates``: not paid for nobody).
MAX_HOLD_S: Final = 1.0
_MAX_HOLD_UNSEEN_S: Final = 10.0
# Hand the file over to a waiting process after holding it this long: an open and a
# close cost ~30 ms on a quiet machine (~130 ms on a loaded one), so a shorter turn
# would spend more on opening than on writing.
_MIN_HOLD_S: Final = 0.15
# Without a turn (DuckDB's lock alone): after a forced hand-over, wait this long
# (uniform) before reopening.
_YIELD_S: Final = (0.03, 0.08)
# The idle connection is checked this often for a waiting process.
_WANTED_POLL_S: Final = 0.02
_BACKOFF_FIRST_S: Final = 0.002
_BACKOFF_CAP_S: Final = 0.025
# The writer thread ends after this long with nothing to write (restarted on demand).
_WRITER_IDLE_S: Final = 2.0


class SharedDb:
    """A lazily opened, lingering connection to one database, guarded by one lock."""

    def __init__(self, path: str, *, linger_s: float) -> None:
        self.path = path
        self.linger_s = linger_s
        self.users = 0
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        self._con: duckdb.DuckDBPyConnection | None = None
        self._opened_at = 0.0
        self._last_used = 0.0
        self._reopen_after = 0.0
        self._reaper: threading.Thread | None = None
        self._closed = False
        self._turn = FileTurn(path)
        # How long each open of the file waited for its turn (seconds; the newest last).
        self.waits: deque[float] = deque(maxlen=4096)
        # Decided at the first open of a file: it could not be written, so it is read
        # read-only; ``_copy`` when that file's schema is older and it is read through
        # a migrated in-memory copy (kept open: closing it would lose it).
        self.read_only = False
        self._looked = False
        self._copy = False
        # The file (device, inode) whose macros and types were last checked whole
        # (``check_catalog``): each open checks its tables and views, and the slow rest
        # only when the file is another one than the last checked.
        self._checked: tuple[int, int] | None = None
        # Appenders of the open connection, reused by every batch (they die with it).
        self._appenders: dict[str, duckdb.Appender] = {}
        # Leases known current at the open connection's last commit (``Batch.leases``):
        # forgotten when it closes or is lent to any use but a batch.
        self._leases: dict[str, int] = {}
        # Rows of committed steps still in their journals (``_journal``).
        self._journal = Journal()
        # Group commit: writes waiting for the writer thread, guarded by _queue_lock.
        self._queue: deque[tuple[WriteOp[Any], Future[Any], float]] = deque()
        # When the oldest lingering op of the queue was queued (``WriteOp.linger_s``).
        self._linger_from = 0.0
        self._queue_lock = threading.Lock()
        self._queued = threading.Condition(self._queue_lock)
        self._writer: threading.Thread | None = None

    @property
    def memory(self) -> bool:
        """True for ``:memory:``: never closed until the store is."""
        return self.path == MEMORY

    @property
    def _pinned(self) -> bool:
        """A connection that holds the only copy of its data: never closed when idle."""
        return self.memory or self._copy

    @contextlib.contextmanager
    def connection(self, busy_timeout_s: float) -> Iterator[duckdb.DuckDBPyConnection]:
        """The open connection, held under the lock for the duration of the block.

        Driver errors leave as ``StoreError``; a broken connection is dropped so the
        next use reopens the file. A Ctrl-C during a query leaves as KeyboardInterrupt.
        """
        with _interrupts(), self._lock:
            con = self._con if self._con is not None else self._open(busy_timeout_s)
            self._leases.clear()  # any SQL may run on it (``Store.sql``)
            try:
                settle(con, self._journal, self._appenders)  # reads see every row
                with interruptible(con):
                    yield con
            except duckdb.Error as exc:
                if is_fatal(exc):
                    self._drop()
                raise store_error(exc, self.path) from exc
            finally:
                self._after_use()

    def close(self) -> None:
        """Close the connection now (a ``:memory:`` database is lost)."""
        with self._lock:
            self._drop()

    def shutdown(self) -> None:
        """Close for good: writes still queued fail with ``StoreError(closed)``."""
        with self._lock:
            self._closed = True
            self._drop()
        with self._queue_lock:
            self._queued.notify_all()  # a lingering write goes now (and fails: closed)

    # ------------------------------------------------------------------ writes

    def write(self, op: WriteOp[T], busy_timeout_s: float) -> T:
        """Run ``op`` in its own transaction in the calling thread; return its result."""
        with self._lock:
            try:
                return self._write_alone(op, busy_timeout_s)
            finally:
                self._after_use()

    def submit(self, op: WriteOp[T], busy_timeout_s: float) -> Future[T]:
        """Queue ``op`` for the writer thread, which commits it with the writes queued
        beside it in one transaction. The future holds the op's result or error."""
        future: Future[T] = Future()
        with self._queue_lock:
            if not self._queue:
                self._linger_from = time.monotonic()
            self._queue.append((op, future, busy_timeout_s))
            if self._writer is not None:
                self._queued.notify()
                return future
            self._writer = start_thread(self._write_queued, f"harnessnb-store-writer:{self.path}")
            if self._writer is not None:
                return future
            # No thread starts at exit: the write is done here.
            items = list(self._queue)
            self._queue.clear()
        self._write_items(items)
        return future

    def _write_queued(self) -> None:
        try:
            while True:
                items = []
                with self._queue_lock:
                    while not self._queue:
                        if self._journal:  # idle a moment with steps journaled: settle
                            if not self._queued.wait(JOURNAL_IDLE_S) and not self._queue:
                                break
                        elif not self._queued.wait(_WRITER_IDLE_S) and not self._queue:
                            self._writer = None  # under the lock: a submit starts another
                            return
                    if self._queue:
                        self._linger()
                        items = list(self._queue)
                        self._queue.clear()
                if not items:  # idle: the journal settled off the critical path
                    with self._lock, contextlib.suppress(StoreError):
                        if self._con is not None:
                            with self.connection(0.0):
                                pass
                    continue
                self._write_items(items)
        finally:
            with self._queue_lock:
                if self._writer is threading.current_thread():
                    self._writer = None  # ended by an error: the next submit starts another

    def _write_items(self, items: list[tuple[WriteOp[Any], Future[Any], float]]) -> None:
        # A caller that gave up (a cancelled run) before its write began: skip it.
        live = [item for item in items if item[1].set_running_or_notify_cancel()]
        try:
            if live:
                self._write_group(live)
        except BaseException as exc:
            for _, future, _ in live:  # no write is left waiting for ever
                if not future.done():
                    future.set_exception(exc)
            raise

    def _linger(self) -> None:
        """While every queued op may linger (a successful call's attempt rows), wait
        for company up to the shortest linger: the step commit that follows then shares
        their transaction, one commit per step instead of two. (``_queue_lock`` held.)"""
        while not self._closed and all(op.linger_s > 0 for op, _, _ in self._queue):
            left = self._linger_from + min(op.linger_s for op, _, _ in self._queue)
            left -= time.monotonic()
            if left <= 0:
                return
            self._queued.wait(left)

    def _write_group(self, items: list[tuple[WriteOp[Any], Future[Any], float]]) -> None:
        timeout = max(item[2] for item in items)
        with self._lock:
            try:
                if len(items) > 1:
                    try:
                        results = self._transact([op for op, _, _ in items], timeout)
                    except StoreError as exc:
                        if exc.kind in ("busy", "closed"):  # the file, not an op: all fail
                            for _, future, _ in items:
                                future.set_exception(exc)
                            return
                    except Exception:
                        pass  # rolled back: each op alone, so an error is only its own
                    else:
                        for (_, future, _), result in zip(items, results, strict=True):
                            future.set_result(result)
                        return
                for op, future, _ in items:
                    try:
                        future.set_result(self._write_alone(op, timeout))
                    except Exception as exc:
                        future.set_exception(exc)
            finally:
                self._after_use()

    def _write_alone(self, op: WriteOp[T], busy_timeout_s: float) -> T:
        try:
            result: T = self._transact([op], busy_timeout_s)[0]
            return result
        except StoreError as exc:
            if exc.kind != "duplicate" or op.fallback is None:
                raise
        fallback: T = self._transact([op.fallback], busy_timeout_s)[0]
        return fallback

    def _transact(self, ops: list[WriteOp[Any]], busy_timeout_s: float) -> list[Any]:
        """Run ``ops`` in one transaction (the lock held); driver errors as StoreError."""
        if self._closed:
            raise StoreError(f"the store {self.path} is closed", kind="closed", path=self.path)
        if self.read_only:
            raise StoreError(
                f"the store {self.path} is read-only (the file or its folder cannot be "
                "written): its runs can be read and replayed; copy it somewhere writable "
                "to add to it",
                kind="read_only",
                path=self.path,
            )
        con = self._con if self._con is not None else self._open(busy_timeout_s)
        batch = Batch(self._appenders, self.path, self._leases, journal=self._journal)
        # Enough steps journaled, or an op that reads: settled in this transaction.
        settled = self._journal if len(self._journal) >= JOURNAL_MAX or any(
            op.direct for op in ops) else None  # fmt: skip
        try:
            single_threaded(con)
            con.execute("BEGIN TRANSACTION")
            try:
                if settled:
                    materialize(con, settled, self._appenders)
                results = []
                for op in ops:
                    if op.direct:
                        batch.flush(con)
                    results.append(op.apply(con, batch))
                batch.flush(con)
                con.execute("COMMIT")
                if settled:
                    settled.clear()
                batch.committed()
            except BaseException:
                batch.discard()
                with contextlib.suppress(duckdb.Error):
                    con.execute("ROLLBACK")
                raise
        except duckdb.Error as exc:
            if is_fatal(exc):
                self._drop()
            raise store_error(exc, self.path) from exc
        return results

    # -------------------------------------------------------------- internals

    def _open(self, busy_timeout_s: float) -> duckdb.DuckDBPyConnection:
        con = connect(MEMORY) if self.memory else self._open_file(busy_timeout_s)
        try:
            con.execute("SET threads = 1")  # for writes; a reader raises it (``parallel``)
            identity = None if self.memory else file_identity(self.path)
            whole = identity is None or identity != self._checked
            if not self.read_only:
                ensure_schema(con, self.path, functions=whole)
                recover(con, self.path)  # steps journaled by a process killed before it settled
            elif stored_version(con, self.path, functions=whole) < SCHEMA_VERSION or (
                journal_left(con)
            ):
                con.close()
                con = migrated_copy(self.path)
                recover(con, self.path)
                self._copy = True
        except duckdb.Error as exc:
            con.close()
            self._turn.give()
            raise store_error(exc, self.path) from exc
        except BaseException:
            con.close()
            self._turn.give()
            raise
        if self._copy:
            self._turn.give()  # the migrated copy lives in memory: the file is not used
        self._checked = identity
        self._con = con
        threads_known(con, 0 if self._copy else 1)  # the migrated copy: not set yet
        self._opened_at = time.monotonic()
        return con

    def _open_file(self, busy_timeout_s: float) -> duckdb.DuckDBPyConnection:
        check_kind(self.path)  # before the turn: nothing is made beside a device
        deadline = time.monotonic() + busy_timeout_s
        self._turn.take(busy_timeout_s)
        self.waits.append(self._turn.waited_s)
        if not self._turn.held:
            wait = self._reopen_after - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        try:
            return self._connect_within(deadline, busy_timeout_s)
        except StoreError as exc:
            if exc.kind in ("corrupt", "foreign", "newer"):
                self._turn.discard()  # not a store of ours: leave nothing beside it
            self._turn.give()
            raise
        except BaseException:
            self._turn.give()
            raise

    def _connect_within(self, deadline: float, busy_timeout_s: float) -> duckdb.DuckDBPyConnection:
        """Connect, retrying DuckDB's own lock (a holder that takes no turn) with
        jittered backoff until ``deadline``."""
        delay = _BACKOFF_FIRST_S
        while True:
            check_header(self.path)
            try:
                return self._connect()
            except duckdb.Error as exc:
                err = store_error(exc, self.path)
                if err.kind != "busy":
                    raise err from exc
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreError(
                        f"the store {self.path} stayed locked by another process for "
                        f"{busy_timeout_s:g} s; try again ({exc})",
                        kind="busy",
                        path=self.path,
                    ) from exc
            # Jitter keeps processes that collided from retrying in lockstep.
            time.sleep(min(left, random.uniform(delay / 2, delay)))
            delay = min(delay * 2, _BACKOFF_CAP_S)

    def _connect(self) -> duckdb.DuckDBPyConnection:
        """Connect to the file: on its first open, look at it read-only before any
        connection that could write, and fall back to read-only when it is not writable."""
        if not self._looked and has_content(self.path):
            probe = connect(self.path, read_only=True)
            try:
                stored_version(probe, self.path)  # a foreign, newer or hostile file ends here
                self._checked = file_identity(self.path)
            finally:
                probe.close()
            self.read_only = not writable(self.path)
            self._looked = True
        if self.read_only:
            return connect(self.path, read_only=True)
        new = not has_content(self.path)
        try:
            con = connect(self.path)
        except duckdb.IOException as exc:
            text = str(exc).lower()
            if not has_content(self.path) or not (
                "read-only file system" in text or "permission denied" in text
            ):
                raise
        else:
            if new:  # made here, empty: nothing of another's to check
                self._checked = file_identity(self.path)
            return con
        # Root, or a read-only mount: the bits said writable, the system said no.
        self.read_only = True
        return connect(self.path, read_only=True)

    def _after_use(self) -> None:
        if self._con is None or self._pinned:
            return
        now = time.monotonic()
        self._last_used = now
        held = now - self._opened_at
        cap = _MAX_HOLD_UNSEEN_S if self._turn.held else MAX_HOLD_S
        if held > cap or (held > _MIN_HOLD_S and self._turn.wanted()):
            # Another process waits (or may: one that takes no turn cannot be seen), so
            # the file is handed over rather than held through a long burst.
            self._hand_over()
            return
        self._idle.notify_all()
        if self._reaper is None or not self._reaper.is_alive():
            self._reaper = start_thread(self._reap, f"harnessnb-store-linger:{self.path}")
            if self._reaper is None:
                self._drop()  # no reaper at exit: closed now rather than left open

    def _hand_over(self) -> None:
        self._drop()
        if not self._turn.usable:  # a turn is queued for in order; DuckDB's lock is raced
            self._reopen_after = time.monotonic() + random.uniform(*_YIELD_S)

    def _reap(self) -> None:
        with self._lock:
            while self._con is not None:
                idle = time.monotonic() - self._last_used
                held = time.monotonic() - self._opened_at
                if idle >= self.linger_s or (held >= _MIN_HOLD_S and self._turn.wanted()):
                    self._drop()  # idle, or idle through its turn while another waits
                    return
                self._idle.wait(min(self.linger_s - idle, _WANTED_POLL_S))

    def forget_after_fork(self) -> None:
        """In a forked child: let go of the parent's connection without closing it."""
        if self._con is not None:
            _FORK_ORPHANS.append(self._con)
            _FORK_ORPHANS.extend(self._appenders.values())
        self._con = None
        self._turn.forget()
        self._reaper = None
        self._lock = threading.RLock()
        self._idle = threading.Condition(self._lock)
        self._appenders = {}
        self._leases = {}
        self._journal = Journal()  # the parent's to settle
        # The parent's writer thread does not exist here; its queued writes are its own.
        self._queue = deque()
        self._queue_lock = threading.Lock()
        self._queued = threading.Condition(self._queue_lock)
        self._writer = None

    def _drop(self) -> None:
        con, self._con = self._con, None
        if con is not None and self._journal:
            with contextlib.suppress(duckdb.Error):  # else the next opener recovers them
                settle(con, self._journal, self._appenders)
        self._journal.clear()
        self._appenders.clear()
        self._leases.clear()
        if con is not None:
            threads_known(con, None)
            with contextlib.suppress(duckdb.Error):
                con.close()
        self._turn.give()


@contextlib.contextmanager
def _interrupts() -> Iterator[None]:
    """DuckDB turns a SIGINT during a query on the main thread into
    ``RuntimeError("Query interrupted")``: give it back as the KeyboardInterrupt it was."""
    try:
        yield
    except RuntimeError as exc:
        if str(exc) != "Query interrupted":
            raise
        raise KeyboardInterrupt from exc


# ---------------------------------------------------------------- process registry

_REGISTRY: dict[str, SharedDb] = {}
_REGISTRY_LOCK = threading.Lock()
# Connections inherited through fork(): never closed or collected in the child, since
# closing would checkpoint into a file the parent still holds.
_FORK_ORPHANS: list[object] = []


def acquire_shared(path: str, *, linger_s: float) -> SharedDb:
    """The process's ``SharedDb`` for ``path`` (a new private one for ``:memory:``)."""
    if path == MEMORY:
        private = SharedDb(MEMORY, linger_s=linger_s)
        private.users = 1
        return private
    key = os.path.realpath(path)
    with _REGISTRY_LOCK:
        db = _REGISTRY.get(key) or SharedDb(path, linger_s=linger_s)
        _REGISTRY[key] = db
        db.users += 1
        db.linger_s = min(db.linger_s, linger_s)
        return db


def release_shared(db: SharedDb) -> None:
    """Drop one user of ``db``; the last one closes the connection."""
    with _REGISTRY_LOCK:
        db.users -= 1
        if db.users > 0:
            return
        if not db.memory:
            _REGISTRY.pop(os.path.realpath(db.path), None)
    db.shutdown()


def _close_all() -> None:
    """At exit: close every store for good, each once its write in flight is done, so no
    daemon thread (the writer, the reaper) opens or uses a connection while the
    interpreter finalizes (native code caught there aborts the process)."""
    with _REGISTRY_LOCK:
        dbs = list(_REGISTRY.values())
    for db in dbs:
        db.shutdown()


def _after_fork_in_child() -> None:
    global _REGISTRY_LOCK
    _REGISTRY_LOCK = threading.Lock()
    for db in _REGISTRY.values():
        db.forget_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all)
