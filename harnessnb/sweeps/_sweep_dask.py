"""``hn.sweep(..., executor=client, shards=folder)``: the runs of a sweep on a Dask cluster.

Each run is a task (``run_on_worker``, a module-level function the workers import). A
worker process writes its own shard store, ``<shards>/<host>-<pid>.duckdb``, opened
once per process and kept (DuckDB lets one process write a file at a time, so no two
processes share one), and drives ``hn.run`` on harnessnb's loop thread in a private
copy of the workspace, as the local sweep does. The client keeps at most
``concurrency`` runs submitted (so ``max_cost_usd`` can stop launching, and a cancel
has little to take back), and calls ``on_run`` on its loop as each run's row comes
back (``distributed.as_completed``, waited on in a thread: the event loop never
blocks). The result's store is ``Store.combine(shards)``.

A run is claimed before it starts: ``<shards>/claims/<run_id>`` made with ``O_EXCL``,
holding the shard's path. Dask reschedules the tasks of a worker that died; a task
that finds its run claimed returns an ``unfinished`` row naming the shard (where the
run's committed steps are, for ``hn.resume(run_id, store=shard)``) and never runs it
again, so no run is in two shards. An unfinished run that did end before its worker
died is reported with its stored outcome.

Providers travel to the workers by pickle (their keys with them, as they must); a
task's key is ``harnessnb-<run_id>``, never anything of the provider. Events
(``on_event``) and an approver that asks a person cannot cross to a worker: both are
refused with an executor.

Cancelling the sweep stops its runs on the workers too, though Dask does not
interrupt a running task: the client writes ``<shards>/cancel/<sweep_id>`` and cancels
the submitted tasks (those not started are dropped). A task drives its run on
harnessnb's loop thread while Dask's thread waits for it, and that waiting thread
looks for the marker every ``CANCEL_POLL_S`` (one ``stat``; the loop pays nothing):
seen, it cancels the run, which records itself ``cancelled`` in the shard (its lease
released, its workspace copy removed) as ``hn.run`` does, and the worker is free for
its next task. A task that finds the marker before it claims its run does not start
it. The marker lives in the shards folder because the client and every worker see
that folder already (Dask's ``Event`` would need each task to reach the scheduler);
it is named by the sweep's id, so an old cancelled sweep never stops a new one (a
sweep given the id of a cancelled one removes its marker first).

Resumed (``hn.sweep(..., sweep_id=ID)``), a sweep reads the slots it finished from the
shards already in the folder (``Store.combine``) and submits only the others; a
finished slot's row is its stored run, with its stored scores and the shard its claim
names. The combined store takes no writes, so a scorer that a finished run has no
stored row of is refused before any run (``hn.rescore`` scores a merged copy).

Dask is imported here only, on first use; ``import harnessnb`` does not load it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import string
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from ..loop._contract import RunOutcome, TaskContract
from ..loop._driver import new_id
from ..loop._tracing import Nested, parent_from
from ..rules._errors import ConfigError, wrap_unknown
from ._rescore import finished_slots, scorers_lacking, stored_run
from ._sample import Sample
from ._sweep_result import UNFINISHED, SweepRun
from ._sweep_run import NamedScorer, crashed, one_run

if TYPE_CHECKING:
    from ..providers._completion import Provider
    from ..store._store import Store

__all__ = [
    "CANCEL_POLL_S",
    "Job",
    "cancel_marker",
    "check_cluster_options",
    "run_on_worker",
    "sweep_on_cluster",
]

_log = logging.getLogger("harnessnb.sweep")
CANCEL_POLL_S: Final = 0.25
"""How often a task on a worker looks for its sweep's cancel marker."""
_INSTALL: Final = "pip install 'harnessnb[dask]'"
# The shard store of this worker process, per shards folder (opened once, kept).
_SHARDS: dict[str, Store] = {}
_SHARDS_LOCK = threading.Lock()

Job: TypeAlias = "tuple[TaskContract, str, Provider, int, Sample]"
"""One planned run of a sweep: contract, the sweep's name of the provider, the
provider, the repeat, the sample."""


@dataclasses.dataclass(frozen=True)
class WorkerJob:
    """What one run on a worker needs (pickled to it)."""

    contract: TaskContract
    name: str
    provider: Provider
    repeat: int
    run_id: str
    shards: str
    keep: bool
    options: dict[str, Any]
    sample: Sample
    scorers: tuple[NamedScorer, ...] = ()

    def unstarted(self) -> SweepRun:
        """The row of this run not started (cancelled before it began)."""
        return SweepRun(
            self.contract.task,
            self.name,
            self.provider.model,
            self.repeat,
            sample_id=self.sample.id,
        )


def check_cluster_options(
    executor: object,
    shards: str | os.PathLike[str] | None,
    store: object,
    approver: object,
    on_event: object,
) -> str:
    """The shards folder (made, with its ``claims``), or ConfigError for what cannot
    go with an executor."""
    try:
        import distributed
    except ImportError:
        raise ConfigError(
            f"sweep: executor= needs Dask's distributed, which is not installed: {_INSTALL}"
        ) from None
    if not isinstance(executor, distributed.Client):
        raise ConfigError(
            f"sweep: executor must be a dask.distributed.Client, not {type(executor).__name__}"
        )
    if executor.asynchronous:
        raise ConfigError("sweep: pass a blocking Client (asynchronous=False) as executor")
    if store is not None:
        raise ConfigError(
            "sweep: with executor= every worker process writes its own store file (one "
            "process writes a DuckDB file at a time): pass shards=FOLDER (shared by the "
            "workers), not store=; the result's store is Store.combine(FOLDER)"
        )
    if shards is None:
        raise ConfigError("sweep: executor= needs shards=FOLDER, where each worker writes")
    if on_event is not None:
        raise ConfigError(
            "sweep: on_event cannot be called from the workers of an executor; on_run is "
            "called here as each run ends"
        )
    module = type(approver).__module__
    if type(approver).__name__ == "PromptApprover" or module.startswith("harnessnb.notebook"):
        raise ConfigError(
            "sweep: an approver that asks a person cannot run on a Dask worker: allow the "
            "acts up front in the policy, or pass hn.ApproveAll()/hn.DenyAll()"
        )
    folder = os.path.abspath(os.fspath(shards))
    try:
        os.makedirs(os.path.join(folder, "claims"), exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"sweep: cannot make the shards folder {folder!r}: {exc}") from exc
    return folder


async def sweep_on_cluster(
    jobs: Sequence[Job],
    over_budget: Callable[[float], bool],
    client: Any,
    folder: str,
    concurrency: int,
    options: dict[str, Any],
    keep: bool,
    on_run: Callable[[SweepRun], None] | None,
    scorers: tuple[NamedScorer, ...] = (),
) -> tuple[list[SweepRun], Store]:
    """Every job as a task on ``client``'s cluster, but a job whose slot the sweep
    finished in the shards already there (a resumed sweep): that is its stored row; the
    rows in plan order and the combined store of the shards."""
    loop = asyncio.get_running_loop()
    stop = threading.Event()
    submitted: dict[Any, tuple[int, WorkerJob]] = {}
    rows = await _finished(jobs, folder, options, scorers)

    def delivered(row: SweepRun) -> None:  # on the loop, as the local sweep does
        if on_run is not None:
            try:
                on_run(row)
            except Exception:  # a display's fault must not orphan the other runs
                _log.exception("sweep %s: on_run raised; the sweep goes on", options["sweep_id"])

    def drive() -> None:
        import distributed

        pending = iter([(i, job) for i, job in enumerate(jobs) if i not in rows])
        done: Any = getattr(distributed, "as_completed")()  # noqa: B009 (untyped)
        spent = [sum(row.spend for row in rows.values())]  # a resumed sweep's, as here

        def launch() -> None:
            if stop.is_set() or over_budget(spent[0]):
                return
            nxt = next(pending, None)
            if nxt is None:
                return
            i, (contract, name, provider, repeat, sample) = nxt
            where = (new_id("run"), folder, keep, options, sample, scorers)
            job = WorkerJob(contract, name, provider, repeat, *where)
            future = client.submit(run_on_worker, job, key=f"harnessnb-{job.run_id}", pure=False)
            submitted[future] = (i, job)
            done.add(future)

        for _ in range(concurrency):
            launch()
        for future in done:
            i, job = submitted.pop(future)
            row = _row_of(future, job)
            if row.outcome is None:
                continue  # cancelled before it started
            rows[i] = row
            spent[0] += row.spend
            loop.call_soon_threadsafe(delivered, row)
            launch()

    for i in sorted(rows):  # the finished slots of a resumed sweep, told first
        delivered(rows[i])
    marker = cancel_marker(folder, options["sweep_id"])
    with contextlib.suppress(FileNotFoundError):  # this id's earlier sweep was cancelled
        os.unlink(marker)
    try:
        await asyncio.to_thread(drive)
    except asyncio.CancelledError:
        stop.set()
        _mark(marker)  # the runs begun stop (their tasks watch for it)
        client.cancel(list(submitted))  # the runs not begun are dropped
        raise
    store = await asyncio.to_thread(_combined, folder)
    found = await asyncio.to_thread(
        _settle, [r for r in rows.values() if r.outcome == UNFINISHED], store
    )
    return [_in_plan(job, rows.get(i), found) for i, job in enumerate(jobs)], store


async def _finished(
    jobs: Sequence[Job],
    folder: str,
    options: dict[str, Any],
    scorers: tuple[NamedScorer, ...],
) -> dict[int, SweepRun]:
    """Plan index -> the stored row of each job whose slot the sweep finished in the
    shards (``_rescore.finished_slots``), with its stored scores and its shard; or
    ConfigError, before any run, when one of them has no score of a scorer given: the
    shards, read as one store, take no writes."""
    if not await asyncio.to_thread(_holds_shards, folder):
        return {}
    # The end reads every shard of the folder as one store: a file there that cannot be
    # read so (not a store, an old schema) fails now, before any run is paid for.
    store = await asyncio.to_thread(_combined, folder)
    slots = await asyncio.to_thread(finished_slots, store, str(options["sweep_id"]))
    mine = {
        i: slots[(sample.id, name, repeat)]
        for i, (_, name, _, repeat, sample) in enumerate(jobs)
        if (sample.id, name, repeat) in slots
    }
    if not mine:
        return {}
    # Each read of a combined store attaches every shard anew (a third of a second a
    # run read back, for the several reads of a run); one copy is read instead.
    with tempfile.TemporaryDirectory(prefix="harnessnb-resume-") as tmp:
        copy = await asyncio.to_thread(store.merge, os.path.join(tmp, "shards.duckdb"))
        try:
            return await _stored_rows(mine, copy, folder, options, scorers)
        finally:
            copy.close()


async def _stored_rows(
    mine: dict[int, dict[str, Any]],
    store: Store,
    folder: str,
    options: dict[str, Any],
    scorers: tuple[NamedScorer, ...],
) -> dict[int, SweepRun]:
    """Each finished slot's row read from ``store`` (see ``_finished``)."""
    lacking: dict[str, None] = {}
    for slot in mine.values():
        found = await asyncio.to_thread(scorers_lacking, store, str(slot["run_id"]), scorers)
        lacking |= dict.fromkeys(found)
    if lacking:
        names, sweep_id = ", ".join(repr(n) for n in lacking), options["sweep_id"]
        raise ConfigError(
            f"sweep: the finished runs of the sweep {sweep_id!r} in {folder} have no score "
            f"of {names}, and a sweep resumed on a cluster cannot write scores into its "
            "shards; resume it with the scorers it ran with, then score its runs with "
            f"hn.rescore({sweep_id!r}, [...], store=hn.Store.combine(...).merge(into=FILE))"
        )
    rows = {}
    for i, slot in mine.items():
        row = await stored_run(store, slot, scorers, options, every=False)
        holder = await asyncio.to_thread(_holder, folder, row.run_id or "")
        rows[i] = dataclasses.replace(row, shard=holder)
    return rows


def _in_plan(job: Job, row: SweepRun | None, found: dict[str, SweepRun]) -> SweepRun:
    """A job's row: the one that came back (as stored, for a run found ended), else
    the job not started."""
    contract, name, provider, repeat, sample = job
    row = row or SweepRun(contract.task, name, provider.model, repeat, sample_id=sample.id)
    return found.get(row.run_id or "", row)


def _row_of(future: Any, job: WorkerJob) -> SweepRun:
    """The row a task handed back; a task that failed (its worker died too often) is the
    run unfinished in the shard its claim names, or, never claimed, a crashed row."""
    if future.cancelled():
        return job.unstarted()
    try:
        row: SweepRun = future.result()
        return row
    except Exception as exc:
        holder = _claim_holder(job)
        if holder is not None:
            return _unfinished(job, holder, type(exc).__name__)
        row = crashed(
            job.contract, job.name, job.provider, job.repeat, job.run_id, wrap_unknown(exc)
        )
        return dataclasses.replace(row, sample_id=job.sample.id)


def cancel_marker(folder: str, sweep_id: str) -> str:
    """``<folder>/cancel/<sweep_id>`` (the id's bytes other than ``A-Za-z0-9_-`` as
    ``%XX``: any id is one file name there)."""
    name = "".join(chr(b) if chr(b) in _NAME_SAFE else f"%{b:02X}" for b in sweep_id.encode())
    return os.path.join(folder, "cancel", name)


_NAME_SAFE: Final = frozenset(string.ascii_letters + string.digits + "_-")


def _mark(marker: str) -> None:
    try:
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        with open(marker, "w", encoding="utf-8"):
            pass
    except OSError as exc:  # the runs begun then go on to their end, as Dask's would
        _log.warning("sweep: cannot write the cancel marker %s: %s", marker, exc)


def _holds_shards(folder: str) -> bool:
    return any(name.endswith(".duckdb") for name in os.listdir(folder))


def _combined(folder: str) -> Store:
    from ..store._store import Store

    return Store.combine(folder)


def _settle(unfinished: list[SweepRun], store: Store) -> dict[str, SweepRun]:
    """The unfinished runs that did end before their worker died, as stored."""
    if not unfinished:
        return {}
    found = {}
    for row in unfinished:
        stored = store.get_run(row.run_id or "")
        if stored is not None and stored.get("outcome"):
            found[row.run_id or ""] = dataclasses.replace(
                row,
                outcome=str(stored["outcome"]),
                steps=int(stored.get("steps") or 0),
                tokens=int(stored.get("tokens") or 0),
                cost_usd=stored.get("cost_usd"),
                error_kind=None,
            )
    return found


# ----------------------------------------------------------------- on a worker


def shard_store(folder: str) -> Store:
    """This worker process's shard in ``folder`` (opened on first use, then kept)."""
    from ..store._store import Store

    with _SHARDS_LOCK:
        store = _SHARDS.get(folder)
        if store is None:
            path = os.path.join(folder, f"{socket.gethostname()}-{os.getpid()}.duckdb")
            store = _SHARDS[folder] = Store(path)
        return store


def run_on_worker(job: WorkerJob) -> SweepRun:
    """One run of a sweep on a Dask worker, in the process's shard; ``unfinished`` if
    another attempt of this task claimed the run first (its worker died)."""
    from ..loop._bridge import run_blocking

    marker = cancel_marker(job.shards, job.options["sweep_id"])
    if os.path.exists(marker):  # the sweep was cancelled before this task began
        return job.unstarted()
    store = shard_store(job.shards)
    claim = os.path.join(job.shards, "claims", job.run_id)
    try:
        fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return _unfinished(job, _claim_holder(job) or "?", "worker_lost")
    try:
        os.write(fd, store.path.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    options = {**job.options, "store": store}
    parent = parent_from(options.pop("trace_parent", {}))  # the client's sweep span
    if parent is not None:  # handed to the run with the worker's provider (factory)
        options["tracer_provider"] = Nested(options.get("tracer_provider"), parent)
    work = one_run(
        job.contract,
        job.name,
        job.provider,
        job.repeat,
        job.keep,
        options,
        run_id=job.run_id,
        sample=job.sample,
        scorers=job.scorers,
    )
    try:
        row = run_blocking(work, poll_s=CANCEL_POLL_S, cancel_if=lambda: os.path.exists(marker))
    except asyncio.CancelledError:  # recorded ``cancelled`` in the shard by now
        row = SweepRun(
            job.contract.task,
            job.name,
            job.provider.model,
            job.repeat,
            RunOutcome.CANCELLED.value,
            run_id=job.run_id,
            sample_id=job.sample.id,
        )
    return dataclasses.replace(row, shard=store.path)


def _claim_holder(job: WorkerJob) -> str | None:
    return _holder(job.shards, job.run_id)


def _holder(folder: str, run_id: str) -> str | None:
    """The shard a run's claim names, or None (no claim; a run id from a store that
    is no file name of the claims folder)."""
    if not run_id or run_id in (".", "..") or "/" in run_id or os.sep in run_id:
        return None
    try:
        with open(os.path.join(folder, "claims", run_id), encoding="utf-8") as fh:
            return fh.read() or "?"
    except OSError:
        return None


def _unfinished(job: WorkerJob, shard: str, why: str) -> SweepRun:
    return SweepRun(
        job.contract.task,
        job.name,
        job.provider.model,
        job.repeat,
        UNFINISHED,
        error_kind=why,
        run_id=job.run_id,
        shard=shard,
        sample_id=job.sample.id,
    )
