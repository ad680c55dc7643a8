"""The store's own threads (the writer, the idle linger) and the interpreter's exit; and
DuckDB's threads per connection (``parallel`` for a read, ``single_threaded`` for writes).

Quirk: ``sys.is_finalizing()`` is still False while the exit hooks (``atexit``) run, yet
from Python 3.12 on ``Thread.start`` raises ``RuntimeError: can't create new thread at
interpreter shutdown`` there, and a thread started on 3.11 or 3.13 could be inside DuckDB
when the interpreter finalizes. The main thread having ended is what tells, on all three.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

__all__ = ["exiting", "parallel", "single_threaded", "start_thread", "threads_known"]


def exiting() -> bool:
    """True once the interpreter is shutting down: its main thread has ended (threads
    that outlive it are joined, then the exit hooks run) or it is finalizing."""
    return sys.is_finalizing() or not threading.main_thread().is_alive()


def start_thread(target: Callable[[], object], name: str) -> threading.Thread | None:
    """``target`` on a new daemon thread, unless the interpreter is exiting (or refuses
    a new thread): then None, and the caller does the work without it."""
    if exiting():
        return None
    thread = threading.Thread(target=target, name=name, daemon=True)
    try:
        thread.start()
    except RuntimeError:  # at interpreter shutdown (3.12+), or out of threads
        return None
    return thread


@contextlib.contextmanager
def parallel(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """An analytic query on every core, kept for the next until a write (``single_threaded``)."""
    _set_threads(con, os.cpu_count() or 1)
    yield con


def single_threaded(con: duckdb.DuckDBPyConnection) -> None:
    """One thread for writes: they skip the scheduler's hand-offs (~20% faster each)."""
    _set_threads(con, 1)


# ``threads`` of each connection a ``SharedDb`` holds, by ``id`` (0: not set yet), so a
# ``SET`` (~0.2 ms) is said only when it changes; any other connection is set each time.
_THREADS: dict[int, int] = {}


def threads_known(con: duckdb.DuckDBPyConnection, threads: int | None) -> None:
    """Follow ``con``'s ``threads`` from now (it is ``threads``; 0: not known), or stop
    following it (None: it is closed, its ``id`` may be another's next)."""
    if threads is None:
        _THREADS.pop(id(con), None)
    else:
        _THREADS[id(con)] = threads


def _set_threads(con: duckdb.DuckDBPyConnection, threads: int) -> None:
    known = _THREADS.get(id(con))
    if known != threads:
        con.execute(f"SET threads = {threads}")
        if known is not None:
            _THREADS[id(con)] = threads
