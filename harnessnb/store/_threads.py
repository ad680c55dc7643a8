"""The store's own threads (the writer, the idle linger) and the interpreter's exit.

Quirk: ``sys.is_finalizing()`` is still False while the exit hooks (``atexit``) run, yet
from Python 3.12 on ``Thread.start`` raises ``RuntimeError: can't create new thread at
interpreter shutdown`` there, and a thread started on 3.11 or 3.13 could be inside DuckDB
when the interpreter finalizes. The main thread having ended is what tells, on all three.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

__all__ = ["exiting", "start_thread"]


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
