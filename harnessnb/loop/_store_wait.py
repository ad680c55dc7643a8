"""A run's store writes, waited out while the store is busy or full.

Another process holding the file past the store's own wait (``busy``) and a full disk
(``full``) are ``StoreError``s a later try can cure, so a run does not let them escape:
it tries the write again, backing off, while the run has time left (its budget, or
``STORE_PATIENCE_S`` without one). Only then does the error leave, for the driver to
end the run with it (``Driver.store_gave_out``). Every other store error leaves at
once: a retry cannot cure a corrupt or read-only file.

A write is safe to repeat: a busy store never began it, and a failed commit (the full
disk) was rolled back. Opening the store a run is given as a path (or the default
store) is waited out the same way, off the event loop (``open_patiently``); the run
closes it when it ends (``close_opened``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, TypeVar

from ..rules._errors import StoreError
from ..rules._outcomes import RunOutcome
from ..rules._retry import Clock, RetryPolicy
from ..store._open import open_store, refuse_store_inside
from ._result import RunResult

if TYPE_CHECKING:
    from ..store._store import Store

__all__ = [
    "STORE_PATIENCE_S",
    "STORE_RETRY",
    "close_opened",
    "gave_out_outcome",
    "open_patiently",
    "patiently",
    "unopened_result",
]

T = TypeVar("T")

STORE_PATIENCE_S: Final = 600.0
"""How long a run without a time budget waits for a busy or full store."""

STORE_RETRY: Final = RetryPolicy(base_s=0.05, cap_s=2.0, jitter=0.5)
"""Backoff between tries of a store write (each busy try has waited for the file already)."""


async def patiently(
    write: Callable[[], Awaitable[T]],
    *,
    remaining: Callable[[], float | None],
    sleep: Callable[[float], Awaitable[None]],
) -> T:
    """``await write()``, tried again while it fails with a retryable ``StoreError``
    and the run has time left (``remaining()`` seconds; None: ``STORE_PATIENCE_S``).

    Raises:
        StoreError: a kind no retry cures, or a retryable one that outlasted the time.
    """
    started = time.monotonic()
    tries = 0
    while True:
        try:
            return await write()
        except StoreError as exc:
            if not exc.retryable:
                raise
            tries += 1
            delay = STORE_RETRY.delay(min(tries, 16))  # 2.0 ** a thousand overflows
            left = remaining()
            if left is None:
                left = STORE_PATIENCE_S - (time.monotonic() - started)
            if left <= 0:
                raise
            await sleep(min(delay, left))


def gave_out_outcome(budget_s: float | None) -> RunOutcome:
    """How a run ends when its store stayed busy or full: ``time_budget`` when its
    budget ran out waiting, ``escalated_retryable`` (resumable) without a budget."""
    return RunOutcome.TIME_BUDGET if budget_s is not None else RunOutcome.ESCALATED_RETRYABLE


async def open_patiently(
    store: Store | str | os.PathLike[str] | None,
    budget_s: float | None,
    clock: Clock,
    workspace: str | os.PathLike[str] | None = None,
) -> Store:
    """``open_store(store)`` on a worker thread (waiting for the file never blocks the
    event loop), tried again while the store is busy or full and the run has time.
    A ``Store`` given is open already: returned as it is, with no hop to a thread.
    A store inside ``workspace`` is refused first (``ConfigError``), before it is made:
    the agent must not reach its own record."""
    refuse_store_inside(store, workspace)
    if store is not None and not isinstance(store, str | os.PathLike):
        return store
    started = clock.monotonic()

    def remaining() -> float | None:
        return None if budget_s is None else budget_s - (clock.monotonic() - started)

    return await patiently(
        lambda: asyncio.to_thread(open_store, store), remaining=remaining, sleep=clock.sleep
    )


async def close_opened(opened: Store, given: Store | str | os.PathLike[str] | None) -> None:
    """Close ``opened`` when ``open_patiently`` opened it (from a path, or the default
    store), off the event loop (closing may checkpoint the file); a ``Store`` given is
    the caller's, left open. At interpreter exit, where no thread starts, it is closed
    here."""
    if opened is given:
        return
    try:
        await asyncio.to_thread(opened.close)
    except RuntimeError:  # at exit: "cannot schedule new futures after interpreter shutdown"
        opened.close()


def unopened_result(run_id: str, task: str, budget_s: float | None, exc: StoreError) -> RunResult:
    """The result of a run whose store could not be opened in its time: nothing of it
    was written, so the result alone reports it."""
    return RunResult(
        run_id=run_id, outcome=gave_out_outcome(budget_s), steps=0, tokens=0, error=exc, task=task
    )
