"""Blocking work awaited from the event loop, on daemon threads.

``asyncio.to_thread`` runs on the loop's default executor, whose threads are joined
at interpreter exit (and by ``asyncio.run`` when it closes the loop): a tool call that
never returns (a user tool sleeping, a stuck network call) would hold the process open
after its run ended. ``run_blocking`` runs each call on a daemon thread instead, so a
call abandoned at the run's deadline is left behind without holding exit.

The daemon threads are kept a few seconds after their call for the next one (starting a
thread costs 0.2-0.5 ms, a tenth of a step): a call takes an idle thread if there is
one, else starts another, so a stuck call never holds up the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import os
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["run_blocking"]

T = TypeVar("T")


async def run_blocking(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Await ``fn(*args, **kwargs)`` run on a daemon thread (context copied).

    Cancelling the await abandons the call: the thread finishes on its own and its
    result is dropped.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)

    def settle(value: Any, error: BaseException | None) -> None:
        if future.done():  # cancelled: the caller has moved on
            return
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)

    def work() -> Callable[[], None]:
        try:
            value, error = call(), None
        except BaseException as exc:  # handed to the awaiting task, never lost
            value, error = None, exc

        def answer() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                loop.call_soon_threadsafe(settle, value, error)

        return answer

    _hand(work)
    return await future


# A call's work returns how to answer its caller, done once its thread is idle again
# (so a caller that calls again at once finds that thread free).
_Work = Callable[[], Callable[[], None]]
# Idle workers: each waits on its own slot (a one-item queue) for its next call.
_IDLE: list[queue.SimpleQueue[_Work]] = []
_IDLE_LOCK = threading.Lock()
IDLE_KEPT_S = 5.0
"""How long a worker thread waits for another call before it ends."""


def _forget_workers() -> None:
    """In a forked child: the parent's workers do not exist here."""
    global _IDLE_LOCK
    _IDLE.clear()
    _IDLE_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_workers)


def _hand(work: _Work) -> None:
    """Run ``work`` on an idle worker thread, or on a new one when none is idle."""
    with _IDLE_LOCK:
        slot = _IDLE.pop() if _IDLE else None
    if slot is None:
        slot = queue.SimpleQueue()
        threading.Thread(
            target=_serve, args=(slot,), name="harnessnb-blocking", daemon=True
        ).start()
    slot.put(work)


def _serve(slot: queue.SimpleQueue[_Work]) -> None:
    while True:
        try:
            work = slot.get(timeout=IDLE_KEPT_S)
        except queue.Empty:
            with _IDLE_LOCK:
                if slot in _IDLE:  # nobody took it meanwhile: end
                    _IDLE.remove(slot)
                    return
            continue  # handed a call as it timed out: it is in the slot now
        answer = work()
        del work  # the call's frame is not kept while idle
        with _IDLE_LOCK:
            _IDLE.append(slot)
        answer()
        del answer
