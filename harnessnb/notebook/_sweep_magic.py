"""``%%harness sweep``: one task per line of the cell body (or ``%harness sweep
--samples FILE``'s samples, on a line magic), every provider, a live table; ``--score
SPEC`` scores each run.

The table (per provider: done/total, outcomes, errors by kind, spend) is the
``SweepResult``'s own, shown as it fills: updated through a display handle in a page,
a line per finished run elsewhere; the final ``SweepResult`` replaces it. A sweep asks
nobody: an act that needs approval is refused (allow it with ``--allow-write``). An
interrupt cancels the runs in flight (recorded ``cancelled``) and ends the cell with
one line naming the sweep.
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError

from ..launch._sweep_options import cluster, providers_from, sweep_kwargs, sweep_tasks
from ..loop._bridge import run_blocking
from ..loop._contract import TaskContract
from ..rules._errors import ConfigError
from ..sweeps._sample import Sample, sample_id
from ..sweeps._sweep import sweep
from ..sweeps._sweep_result import SweepResult, SweepRun
from ..tools._approval import DenyAll
from ._args import interpolate
from ._env import widget_frontend
from ._ipython import display
from ._wait import RunInterrupted

__all__ = ["plan_sweep"]

# Samples are a sweep's tasks as a cell body's lines are: --samples goes on a line magic
# (IPython refuses a cell magic with an empty body).
_LINE_MAGIC = " (write the line magic: %harness sweep --samples FILE ...)"
_REFUSE = DenyAll("a sweep asks nobody: allow the act up front (e.g. --allow-write GLOB)")


def plan_sweep(
    shell: Any, args: argparse.Namespace, cell: str | None, open_store: Callable[[Any], Any]
) -> SweepResult | None:
    """Run the sweep the cell describes; its ``SweepResult`` is the cell's output.

    ``open_store`` is the kernel's store for a ``--store`` value (``_magics._store``).

    Raises:
        UsageError: no task line and no ``--samples``, both, or a bad option (one line,
            no traceback).
        RunInterrupted: the sweep was interrupted.
    """
    body = interpolate(cell or "", shell.user_ns)
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    if not lines and args.samples is None:
        raise UsageError(
            "%%harness sweep: write one task per line of the cell body (or --samples FILE)"
        )
    try:
        kwargs = sweep_kwargs(args, "notebook", shell.user_ns)
        contracts = sweep_tasks(args, lines, "cell body", _LINE_MAGIC)
        providers = providers_from(args, shell.user_ns)
    except ConfigError as err:
        raise UsageError(f"%%harness sweep: {err.message}") from None
    store = open_store(args.store)
    sweep_id = kwargs.pop("sweep_id")
    tasks = [_task(c) for c in contracts]
    live = _LiveTable(sweep_id, store, tasks, list(providers), args.repeats, shell)
    try:
        with cluster(args) as client:
            where = (
                {"store": store} if client is None else {"executor": client, "shards": args.shards}
            )
            result = run_blocking(
                sweep(
                    contracts,
                    providers,
                    approver=_REFUSE,
                    sweep_id=sweep_id,
                    on_run=live.add,
                    **where,
                    **kwargs,
                )
            )
    except ConfigError as err:
        live.close()
        raise UsageError(f"%%harness sweep: {err.message}") from None
    except KeyboardInterrupt:
        live.close()
        raise RunInterrupted(
            f"sweep {sweep_id} cancelled: the runs in flight are recorded cancelled, the "
            f"rest were not started (%harness runs; store.runs(sweep={sweep_id!r}))"
        ) from None
    shown = live.close(result)
    if args.out:
        shell.user_ns[args.out] = result
        return None
    return None if shown else result


def _task(task: TaskContract | tuple[TaskContract, Sample]) -> tuple[str, str]:
    """A task's text and the id of its sample, as the sweep's rows carry them (two
    samples may share a text)."""
    if isinstance(task, tuple):
        return task[0].task, task[1].id
    return task.task, sample_id(task.task)


class _LiveTable:
    """The sweep's table while it runs: its rows so far, unstarted runs as pending."""

    def __init__(
        self,
        sweep_id: str,
        store: Any,
        tasks: list[tuple[str, str]],
        names: list[str],
        repeats: int,
        shell: Any,
    ) -> None:
        self.sweep_id, self.store = sweep_id, store
        self.records = {
            (sample, name, repeat): SweepRun(task, name, "", repeat, sample_id=sample)
            for repeat in range(repeats)
            for task, sample in tasks
            for name in names
        }
        self.lock = threading.Lock()
        self.handle = None
        if widget_frontend(shell):
            self.handle = display(self.result(), display_id=True)

    def result(self) -> SweepResult:
        return SweepResult(self.sweep_id, self.store, tuple(self.records.values()))

    def add(self, row: SweepRun) -> None:
        """A run ended (called on harnessnb's loop thread)."""
        with self.lock:
            self.records[(row.sample_id or "", row.provider, row.repeat)] = row
            current = self.result()
        if self.handle is not None:
            self.handle.update(current)
        else:
            print(f"{row.provider} · {row.task[:60]} · {row.outcome}", flush=True)

    def close(self, result: SweepResult | None = None) -> bool:
        """The final table replaces the live one (or the live one goes, when
        interrupted); True when the final table is shown that way."""
        if self.handle is None:
            return False
        if result is None:
            self.handle.update({"text/plain": ""}, raw=True)
        else:
            self.handle.update(result)
        self.handle = None
        return result is not None
