"""Ctrl-C during a query on the main thread ends the query, always.

DuckDB's Python client notices a SIGINT by polling for signals while a query runs, and
it misses some during a parallel query: the query then runs on for minutes (a test's
``count(*)`` over 1e11 rows, seen on 3.11 and 3.13). So while a query runs on the main
thread, the interpreter's signal wakeup fd is a pipe a watcher thread reads: a SIGINT
written there interrupts the connection (``con.interrupt()``, which DuckDB allows from
any thread), and the query's ``InterruptException`` leaves as the KeyboardInterrupt it
was. The wakeup fd that was set before (an event loop's) gets the same bytes, so a loop
that handles signals through it loses none.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

import duckdb

__all__ = ["interruptible"]

_lock = threading.Lock()
_pipe: int | None = None  # the write end, set as the wakeup fd during a query
# The main thread's query in progress: its connection and the wakeup fd it replaced.
_querying: list[tuple[duckdb.DuckDBPyConnection, int]] = []
_fired: list[duckdb.DuckDBPyConnection] = []  # connections this module interrupted


@contextlib.contextmanager
def interruptible(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Run the block's queries on ``con`` so a SIGINT interrupts them: on the main
    thread while Python's own SIGINT handler (KeyboardInterrupt) is set; otherwise, or
    where the wakeup fd cannot be set, the block runs as it is."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):  # a handler of the program's own decides what a Ctrl-C does: left to it
        yield
        return
    try:
        before = signal.set_wakeup_fd(_wakeup(), warn_on_full_buffer=False)
    except (ValueError, OSError):  # not the main interpreter, or no pipe
        yield
        return
    with _lock:
        _querying.append((con, before))
    try:
        yield
    except duckdb.InterruptException as exc:
        with _lock:
            ours = con in _fired
        if ours:
            raise KeyboardInterrupt from exc
        raise
    finally:
        with _lock:
            _querying.remove((con, before))
            with contextlib.suppress(ValueError):
                _fired.remove(con)
        signal.set_wakeup_fd(before)


def _wakeup() -> int:
    """The pipe's write end (made once, with its watcher thread)."""
    global _pipe
    with _lock:
        if _pipe is None:
            read, write = os.pipe()
            os.set_blocking(write, False)
            threading.Thread(
                target=_watch, args=(read,), name="harnessnb-ctrl-c", daemon=True
            ).start()
            _pipe = write
        return _pipe


def _watch(read: int) -> None:
    """Read the signal numbers the interpreter writes; on SIGINT, interrupt the query."""
    while True:
        try:
            data = os.read(read, 512)
        except OSError:
            return
        if not data:
            return
        with _lock:
            querying = list(_querying)
            if signal.SIGINT in data:
                _fired.extend(con for con, _ in querying)
        for con, before in querying:
            if before >= 0:
                with contextlib.suppress(OSError):
                    os.write(before, data)
            if signal.SIGINT in data:
                with contextlib.suppress(duckdb.Error, RuntimeError):
                    con.interrupt()
