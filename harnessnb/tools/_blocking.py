"""Blocking work awaited from the event loop, on daemon threads.

``asyncio.to_thread`` runs on the loop's default executor, whose threads are joined
at interpreter exit (and by ``asyncio.run`` when it closes the loop): a tool call that
never returns (a user tool sleeping, a stuck network call) would hold the process open
after its run ended. ``run_blocking`` runs each call on its own daemon thread instead,
so a call abandoned at the run's deadline is left behind without holding exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["run_blocking"]

T = TypeVar("T")


async def run_blocking(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Await ``fn(*args, **kwargs)`` run on a fresh daemon thread (context copied).

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

    def work() -> None:
        try:
            value, error = call(), None
        except BaseException as exc:  # handed to the awaiting task, never lost
            value, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(settle, value, error)

    name = f"harnessnb-blocking-{getattr(fn, '__name__', 'call')}"
    threading.Thread(target=work, name=name, daemon=True).start()
    return await future
