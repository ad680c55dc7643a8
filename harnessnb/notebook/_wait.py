"""Waiting for a run in a cell: an interrupt that gets through, and its one line.

``wait_awake`` is how an awaiting ``%%harness`` cell waits for the run on harnessnb's
loop thread; ``RunInterrupted`` is how the cell ends when it is interrupted.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from typing import Any

__all__ = ["POLL_S", "RunInterrupted", "wait_awake"]

POLL_S = 0.1
"""How often an awaiting cell wakes the kernel's loop (see ``wait_awake``)."""


class RunInterrupted(KeyboardInterrupt):
    """The interrupt of a ``%harness`` cell: IPython shows its one line, no frames.

    A ``KeyboardInterrupt`` still, so the cell ends interrupted (an error for the
    kernel: queued cells do not run), but its traceback is the line that says where
    the run stopped and how to continue it.
    """

    def _render_traceback_(self) -> list[str]:
        return [str(self)]


async def wait_awake(future: concurrent.futures.Future[Any]) -> None:
    """Wait for ``future``, waking the kernel's loop every ``POLL_S`` seconds.

    Quirk (an interrupt that arrives when the run is over): ipykernel turns SIGINT
    into a cancellation of the cell from a Python signal handler, and Python runs
    signal handlers on the main thread only, when it next runs bytecode. The signal
    is often taken by another thread (harnessnb's loop thread, say), and with no
    wakeup fd set the kernel's loop sleeps in ``epoll`` until something else wakes
    it: without these wake-ups the cancellation arrived when the run had finished.
    """
    loop = asyncio.get_running_loop()
    done = asyncio.Event()

    def wake(_: object) -> None:
        with contextlib.suppress(RuntimeError):  # the kernel's loop closed meanwhile
            loop.call_soon_threadsafe(done.set)

    future.add_done_callback(wake)
    while not done.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), POLL_S)
