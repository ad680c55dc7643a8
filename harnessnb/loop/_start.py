"""A run's start as one piece an interrupt does not cut (issue #24).

A face shows a run's id once the run is begun (the store open, the driver built, the
run row written), so an interrupt at any moment must leave a run ``resume`` finds.
``uncut`` awaits the start in a task of its own: an interrupt during it lets the
start end (opening the store and writing one row take moments), records the begun
run ``cancelled`` and goes on. A second interrupt stops the wait.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

from ..rules._errors import HarnessError, StoreError, wrap_unknown
from ..rules._retry import Clock
from ._bridge import stay_awake
from ._contract import TaskContract
from ._result import RunResult
from ._store_wait import close_opened, open_patiently, unopened_result

if TYPE_CHECKING:
    from ..store._store import Store

__all__ = ["awake_on_main_thread", "begin_run", "uncut"]

T = TypeVar("T")


@runtime_checkable
class Cancellable(Protocol):
    """What a start an interrupt let end gives back, to record ``cancelled``: a
    ``loop._driver.Driver``, or the ``RunRecorder`` of a coding-agent CLI's run."""

    store: Store

    def record_cancelled(self) -> None: ...


@runtime_checkable
class Begun(Cancellable, Protocol):
    """What ``begin_run`` builds: a ``loop._driver.Driver``."""

    async def begin(self) -> None: ...
    async def store_gave_out(self, exc: StoreError) -> RunResult: ...


B = TypeVar("B", bound=Begun)


async def begin_run(
    store: Store | str | os.PathLike[str] | None,
    contract: TaskContract,
    run_id: str,
    clock: Clock,
    build: Callable[[Store], B],
) -> B | RunResult:
    """Open the store, ``build`` the driver on it, and write the run row (``begin``);
    a store busy or full past the run's time is the result instead. A store opened
    here (a path, the default) is closed when the start ends the run or fails."""
    try:
        opened = await open_patiently(store, contract._budget_s, clock, contract.workspace)
    except StoreError as exc:
        if not exc.retryable:
            raise
        return unopened_result(run_id, contract.task, contract._budget_s, exc)
    try:
        driver = build(opened)
        try:
            await driver.begin()
        except StoreError as exc:
            if not exc.retryable:
                raise
            ended = await driver.store_gave_out(exc)
            await close_opened(opened, store)
            return ended
    except BaseException:
        await close_opened(opened, store)
        raise
    return driver


def awake_on_main_thread() -> Callable[[], None] | None:
    """Keep a main-thread loop woken while a run is awaited on it (``stay_awake``:
    an interrupt gets through at once); its stop, or None on another thread."""
    if threading.current_thread() is threading.main_thread():
        return stay_awake()
    return None


async def uncut(begin: Coroutine[Any, Any, T], store: Store | str | os.PathLike[str] | None) -> T:
    """``await begin``, which an interrupt does not cut; then the interrupt goes on
    (the store the start opened, unless ``store`` was it, closed).

    Raises:
        HarnessError: the start's own, or an unexpected error wrapped (a bug: no
            row was written to end).
    """
    beginning = asyncio.ensure_future(begin)
    awake = awake_on_main_thread()
    try:
        return await asyncio.shield(beginning)
    except asyncio.CancelledError:
        await _cancelled_in_start(beginning, store)
        raise
    except HarnessError:
        raise
    except Exception as exc:
        raise wrap_unknown(exc) from exc
    finally:
        if awake is not None:
            awake()


async def _cancelled_in_start(
    beginning: asyncio.Future[Any], store: Store | str | os.PathLike[str] | None
) -> None:
    """Let the start end, then record what it began ``cancelled``. A second interrupt
    stops the wait; a start that failed leaves the interrupt to report."""
    try:
        begun = await asyncio.shield(beginning)
    except asyncio.CancelledError:
        beginning.cancel()
        return
    except Exception:  # the start's own error: the interrupt is what the caller asked
        return
    if isinstance(begun, Cancellable):
        try:
            begun.record_cancelled()
        finally:
            await close_opened(begun.store, store)
