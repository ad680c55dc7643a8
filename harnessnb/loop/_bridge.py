"""The sync bridge: one event-loop thread that harnessnb owns.

``run_sync`` and the magics must work both in a plain script and inside a Jupyter
kernel, whose main thread already runs an event loop (so ``asyncio.run`` fails
there). Rather than patch asyncio globally (nest_asyncio), every blocking call
submits its coroutine to this one long-lived loop thread and waits. The HTTP
client, cached per loop, lives on this loop too, so connections are reused across
calls.

At interpreter exit, what still runs on that loop is cancelled and wound down
(``_wind_down``), so no harnessnb thread is inside DuckDB when the interpreter
finalizes: a daemon thread caught in native code there aborts the whole process
("terminate called ... exception not rethrown", exit 134). A run cut short by the
exit is recorded ``cancelled``, resumable.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import contextvars
import functools
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

__all__ = [
    "AWAKE_S",
    "blocks_main_thread",
    "keep_awake",
    "loop_thread",
    "run_blocking",
    "stay_awake",
    "sync_twin",
]

# How long the exit waits for cancelled runs to record themselves, and the loop to stop.
EXIT_GRACE_S = 5.0

T = TypeVar("T")
P = ParamSpec("P")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


# A scheduling flag, not data between layers: whether the main thread waits, blocked,
# for the run this coroutine is part of (the one ContextVar harnessnb keeps; attempts,
# streamed text and the calling run are arguments and values, never ambient).
_main_waits: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "harnessnb_main_waits", default=False
)


def blocks_main_thread() -> bool:
    """True inside a coroutine that ``run_blocking`` runs for the main thread, which
    waits for it, blocked. In a kernel that thread is the cell's: no widget click
    reaches the kernel until it returns (see ``notebook._approver``)."""
    return _main_waits.get()


AWAKE_S = 0.1
"""How often a run driven on the main thread wakes its loop (see ``keep_awake``)."""


async def keep_awake() -> None:
    """Wake the running loop every ``AWAKE_S`` seconds, for as long as it is awaited.

    Quirk (a late interrupt): Python runs signal handlers on the main thread only, when
    it next runs bytecode. A SIGINT taken by another thread (the store's writer,
    harnessnb's loop thread) leaves a main-thread loop asleep in ``epoll`` when no
    wakeup fd is set (ipykernel's handler for an awaiting cell sets none): the
    interrupt button reached ``await hn.run(...)`` only when something else woke the
    loop, up to a lease renewal later.
    """
    while True:
        await asyncio.sleep(AWAKE_S)


# One waker per loop, however many runs it drives: [task, runs holding it].
_wakers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[Any]] = (
    weakref.WeakKeyDictionary()
)


def stay_awake() -> Callable[[], None]:
    """``keep_awake`` for the running loop until the returned function is called: a
    hundred concurrent runs share one waker rather than wake the loop a hundred times."""
    loop = asyncio.get_running_loop()
    entry = _wakers.get(loop)
    if entry is None or entry[0].done():
        entry = _wakers[loop] = [loop.create_task(keep_awake()), 0]
    entry[1] += 1
    released = False

    def release() -> None:
        nonlocal released
        if released:
            return
        released = True
        entry[1] -= 1
        if entry[1] == 0:
            entry[0].cancel()
            if _wakers.get(loop) is entry:
                del _wakers[loop]

    return release


def loop_thread() -> asyncio.AbstractEventLoop:
    """The harness-owned loop, started on first use (a daemon thread)."""
    global _loop, _thread
    with _lock:
        if _loop is None or _thread is None or not _thread.is_alive():
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def serve() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            thread = threading.Thread(target=serve, name="harnessnb-loop", daemon=True)
            thread.start()
            # Registered here, after the store module's own exit hook (atexit runs
            # last-in first-out): runs wind down while their stores can still write.
            # The store module is imported first for its hook to be there: a run given
            # a path would import it later, on this thread, and its hook (closing every
            # store) would then run first, before the run could record its end.
            from ..store import _conn  # noqa: F401

            atexit.unregister(_wind_down)
            atexit.register(_wind_down)
            ready.wait()
            _loop, _thread = loop, thread
        return _loop


def run_blocking(
    coro: Coroutine[Any, Any, T],
    *,
    poll_s: float = 0.1,
    cancel_if: Callable[[], bool] | None = None,
) -> T:
    """Run ``coro`` on the harness loop and block until it ends.

    A KeyboardInterrupt in the waiting thread cancels the coroutine, waits for it
    to wind down (so a run records ``cancelled`` and stays resumable), then
    re-raises. ``cancel_if``, asked in the waiting thread every ``poll_s`` seconds
    while the coroutine runs, does the same when it returns True, then raises
    ``asyncio.CancelledError``. Calling this from the harness loop itself would
    deadlock and is refused.
    """
    loop = loop_thread()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coro.close()
        raise RuntimeError("run_sync was called from harnessnb's own loop; use `await` there")
    finished = threading.Event()
    main = threading.current_thread() is threading.main_thread()

    async def tracked() -> T:
        if main:
            _main_waits.set(True)  # this task's own context: the run's and its children's
        try:
            return await coro
        finally:
            finished.set()

    future = asyncio.run_coroutine_threadsafe(tracked(), loop)
    try:
        while True:
            try:
                # Short waits keep the main thread able to receive KeyboardInterrupt.
                return future.result(timeout=poll_s)
            except concurrent.futures.TimeoutError:
                if cancel_if is not None and cancel_if() and future.cancel():
                    finished.wait(timeout=30)  # as below: the run records itself
                    raise asyncio.CancelledError from None
    except KeyboardInterrupt:
        future.cancel()
        # The concurrent future reports "cancelled" at once; wait for the task's own
        # cleanup (recording the cancelled run) before handing control back.
        finished.wait(timeout=30)
        raise


def sync_twin(fn: Callable[P, Coroutine[Any, Any, T]], doc: str) -> Callable[P, T]:
    """The blocking twin of the coroutine function ``fn`` (``run`` -> ``run_sync``): the
    same parameters, typed (a misspelled keyword is a type error, as for ``fn``), run by
    ``run_blocking``. ``inspect.signature`` and ``help`` show ``fn``'s parameters."""

    def twin(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_blocking(fn(*args, **kwargs))

    functools.update_wrapper(twin, fn)  # the signature (``__wrapped__``), the module
    twin.__name__ = f"{fn.__name__}_sync"
    twin.__qualname__ = f"{fn.__qualname__}_sync"
    twin.__doc__ = doc
    return twin


def _wind_down(grace_s: float = EXIT_GRACE_S) -> None:
    """Cancel every task on the harness loop, let them finish, stop the loop, join it."""
    with _lock:
        loop, thread = _loop, _thread
    if loop is None or thread is None or not thread.is_alive() or loop.is_closed():
        return

    async def cancel_all() -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)
        # As asyncio.run does before it closes a loop: every async generator still open
        # on this loop (the HTTP client's closer, a stream left unread) is closed here,
        # on its own loop, not left to the garbage collector while the interpreter tears
        # down (where one was seen finalized mid-close: "Exception ignored in: <async
        # generator ...> ValueError: async generator already executing" on stderr).
        await asyncio.wait_for(loop.shutdown_asyncgens(), grace_s)

    with contextlib.suppress(Exception):  # the exit goes on, whatever a run did
        asyncio.run_coroutine_threadsafe(cancel_all(), loop).result(2 * grace_s + 1.0)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(grace_s)
    if not thread.is_alive():
        loop.close()  # nothing can be scheduled on it any more (a late finalizer's aclose)
