"""``hn.sweep(..., executor=client, shards=folder)``: the runs of a sweep on a Dask cluster.

The runs go in chunks: one task (``_sweep_worker.run_chunk_on_worker``, a module-level
function the workers import) makes several runs one after another, so Dask's cost per
task (the round trip through the scheduler, the pickles: the provider and options once
per chunk) is shared by them. The chunk size (``chunk_size``) gives about
``CHUNKS_PER_THREAD`` chunks to each worker thread the sweep can use over the sweep (a
slow chunk at the end leaves the others little to wait for); a chunk makes one run at a
time, so at most ``concurrency`` chunks out keep at most ``concurrency`` runs going. With
a spend limit (``max_cost_usd``) a chunk is at most ``concurrency`` over the threads and
at most ``concurrency`` runs are submitted, so the limit stops the launches within
``concurrency`` runs of it. A sweep of few runs, or on a cluster with no worker yet, is
a run a task. A worker process
writes its own shard store, ``<shards>/<host>-<pid>.duckdb``, opened once per process
and kept (DuckDB lets one process write a file at a time, so no two processes share one)
until the Dask worker closes (a worker plugin's ``teardown`` closes it once no run uses
it: ``_sweep_worker``), and drives ``hn.run`` on harnessnb's loop thread in a private
copy of the workspace, as the local sweep does. The client keeps at most ``concurrency``
chunks submitted (runs, with a spend limit), and calls ``on_run`` on its loop for each
run's row as its chunk comes back (``distributed.as_completed``, waited on in a thread:
the event loop never blocks). The result's store is ``Store.combine(shards)``.

A run is claimed as it starts: ``<shards>/claims/<run_id>`` made with ``O_EXCL``,
holding the shard's path. Dask reschedules the tasks of a worker that died; a chunk
that finds one of its runs claimed returns an ``unfinished`` row for it naming the
shard (where the run's committed steps are, for ``hn.resume(run_id, store=shard)``)
and never runs it again, so no run is in two shards; the chunk's runs not claimed yet
run. An unfinished run that did end before its worker died is reported with its
stored outcome.

Providers travel to the workers by pickle (their keys with them, as they must); a
task's key is ``harnessnb-<run_id>`` of its chunk's first run, never anything of the
provider. Events
(``on_event``) and an approver that asks a person cannot cross to a worker: both are
refused with an executor.

Cancelling the sweep stops its runs on the workers too, though Dask does not
interrupt a running task: the client writes ``<shards>/cancel/<sweep_id>`` and cancels
the submitted tasks (those not started are dropped). A task drives its run on
harnessnb's loop thread while Dask's thread waits for it, and that waiting thread
looks for the marker every ``CANCEL_POLL_S`` (one ``stat``; the loop pays nothing):
seen, it cancels the run, which records itself ``cancelled`` in the shard (its lease
released, its workspace copy removed) as ``hn.run`` does, and the worker is free for
its next task. A chunk that finds the marker before it claims a run starts none of
its runs left. The marker lives in the shards folder because the client and every worker see
that folder already (Dask's ``Event`` would need each task to reach the scheduler);
it is named by the sweep's id, so an old cancelled sweep never stops a new one (a
sweep given the id of a cancelled one removes its marker first).

Resumed (``hn.sweep(..., sweep_id=ID)``), a sweep reads the slots it finished from the
shards already in the folder (``Store.combine``) and submits only the others; a
finished slot's row is its stored run, with its stored scores and the shard its claim
names. The combined store takes no writes, so a scorer that a finished run has no
stored row of is refused before any run (``hn.rescore`` scores a merged copy).

Dask is imported here and in ``_sweep_worker`` only, on first use; ``import harnessnb``
does not load it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from ..loop._contract import TaskContract
from ..loop._driver import new_id
from ..rules._errors import ConfigError
from ._rescore import finished_slots, scorers_lacking, stored_run
from ._sample import Sample
from ._sweep_result import UNFINISHED, SweepRun
from ._sweep_run import NamedScorer
from ._sweep_worker import (
    WorkerJob,
    cancel_marker,
    failed,
    holder,
    run_chunk_on_worker,
)

if TYPE_CHECKING:
    from ..providers._completion import Provider
    from ..store._store import Store

__all__ = [
    "CHUNKS_PER_THREAD",
    "Job",
    "cancel_marker",
    "check_cluster_options",
    "chunk_size",
    "sweep_on_cluster",
]

_log = logging.getLogger("harnessnb.sweep")
CHUNKS_PER_THREAD: Final = 4
"""About how many tasks (chunks of runs) a sweep hands each worker thread."""
_INSTALL: Final = "pip install 'harnessnb[dask]'"

Job: TypeAlias = "tuple[TaskContract, str, Provider, int, Sample]"
"""One planned run of a sweep: contract, the sweep's name of the provider, the
provider, the repeat, the sample."""


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
    over_budget: Callable[[float], bool] | None,
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
    rows in plan order and the combined store of the shards. ``over_budget`` (None: no
    spend limit) says, given the finished runs' spend, when to stop launching."""
    loop = asyncio.get_running_loop()
    rows = await _finished(jobs, folder, options, scorers)

    def delivered(row: SweepRun) -> None:  # on the loop, as the local sweep does
        if on_run is not None:
            try:
                on_run(row)
            except Exception:  # a display's fault must not orphan the other runs
                _log.exception("sweep %s: on_run raised; the sweep goes on", options["sweep_id"])

    chunks = _Chunks(client, folder, concurrency, (keep, options, scorers), over_budget)
    for i in sorted(rows):  # the finished slots of a resumed sweep, told first
        delivered(rows[i])
    marker = cancel_marker(folder, options["sweep_id"])
    with contextlib.suppress(FileNotFoundError):  # this id's earlier sweep was cancelled
        os.unlink(marker)

    def deliver(row: SweepRun) -> None:  # from the thread to the loop
        loop.call_soon_threadsafe(delivered, row)

    try:
        await asyncio.to_thread(chunks.drive, jobs, rows, deliver)
    except asyncio.CancelledError:
        chunks.stop.set()
        _mark(marker)  # the runs begun stop (their tasks watch for it)
        client.cancel(list(chunks.submitted))  # the runs not begun are dropped
        raise
    store = await asyncio.to_thread(_combined, folder)
    found = await asyncio.to_thread(
        _settle, [r for r in rows.values() if r.outcome == UNFINISHED], store
    )
    return [_in_plan(job, rows.get(i), found) for i, job in enumerate(jobs)], store


class _Chunks:
    """The client's side of a sweep on a cluster, in a thread: the jobs submitted in
    chunks (``chunk_size``) while at most ``concurrency`` chunks are out (a chunk makes
    one run at a time), or, with a spend limit, ``concurrency`` runs, and the spend
    allows; each chunk's rows taken back as it ends (``distributed.as_completed``)."""

    def __init__(
        self,
        client: Any,
        folder: str,
        concurrency: int,
        each: tuple[bool, dict[str, Any], tuple[NamedScorer, ...]],
        over_budget: Callable[[float], bool] | None,
    ) -> None:
        self.client, self.folder, self.concurrency = client, folder, concurrency
        self.each, self.over_budget = each, over_budget
        self.stop = threading.Event()
        self.submitted: dict[Any, list[tuple[int, WorkerJob]]] = {}
        self.out = 0  # runs submitted whose rows have not come back
        self.cap = concurrency  # how many runs may be out (a spend limit's; else per chunk)
        self.spent = 0.0

    def drive(
        self, jobs: Sequence[Job], rows: dict[int, SweepRun], deliver: Callable[[SweepRun], None]
    ) -> None:
        """Every job not in ``rows`` run, its row put there and delivered."""
        import distributed

        pending = [(i, job) for i, job in enumerate(jobs) if i not in rows]
        limited = self.over_budget is not None
        size = chunk_size(len(pending), _threads(self.client), self.concurrency, limited)
        self.cap = self.concurrency if limited else self.concurrency * size
        todo = iter(pending)
        done: Any = getattr(distributed, "as_completed")()  # noqa: B009 (untyped)
        self.spent = sum(row.spend for row in rows.values())  # a resumed sweep's, as here
        while self.out + size <= self.cap and self._launch(todo, size, done):
            pass
        for future in done:
            chunk = self.submitted.pop(future)
            self.out -= len(chunk)
            for (i, _), row in zip(chunk, _rows_of(future, chunk), strict=True):
                if row.outcome is None:
                    continue  # cancelled before it started
                rows[i] = row
                self.spent += row.spend
                deliver(row)
            while self.out + size <= self.cap and self._launch(todo, size, done):
                pass

    def _launch(self, todo: Iterator[tuple[int, Job]], size: int, done: Any) -> bool:
        """The next chunk submitted; False when none is (none left, stopped, spent)."""
        if self.stop.is_set() or (self.over_budget and self.over_budget(self.spent)):
            return False
        keep, options, scorers = self.each
        chunk = []
        for i, (contract, name, provider, repeat, sample) in itertools.islice(todo, size):
            where = (new_id("run"), self.folder, keep, options, sample, scorers)
            chunk.append((i, WorkerJob(contract, name, provider, repeat, *where)))
        if not chunk:
            return False
        batch = tuple(job for _, job in chunk)
        key = f"harnessnb-{batch[0].run_id}"  # its first run's: nothing of the provider
        future = self.client.submit(run_chunk_on_worker, batch, key=key, pure=False)
        self.submitted[future] = chunk
        self.out += len(chunk)
        done.add(future)
        return True


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
        held = await asyncio.to_thread(holder, folder, row.run_id or "")
        rows[i] = dataclasses.replace(row, shard=held)
    return rows


def _in_plan(job: Job, row: SweepRun | None, found: dict[str, SweepRun]) -> SweepRun:
    """A job's row: the one that came back (as stored, for a run found ended), else
    the job not started."""
    contract, name, provider, repeat, sample = job
    row = row or SweepRun(contract.task, name, provider.model, repeat, sample_id=sample.id)
    return found.get(row.run_id or "", row)


def chunk_size(runs: int, threads: int, concurrency: int, spend_limited: bool = True) -> int:
    """How many runs one task makes: about ``CHUNKS_PER_THREAD`` chunks per worker
    thread the sweep can use (``concurrency`` of them at most) over the sweep, so a slow
    chunk at the end leaves the others little to wait for; at least one; one while the
    cluster has no worker yet (an adaptive one: the workers it starts each get a run).
    With a spend limit (``spend_limited``), at most ``concurrency`` over the threads: every
    thread can hold a chunk while at most ``concurrency`` runs are submitted, so the
    limit stops the launches within ``concurrency`` runs of it."""
    if threads < 1:
        return 1
    if not spend_limited:
        return max(1, -(-runs // (CHUNKS_PER_THREAD * min(threads, concurrency))))
    per_thread = max(1, concurrency // threads)
    return max(1, min(-(-runs // (CHUNKS_PER_THREAD * threads)), per_thread))


def _threads(client: Any) -> int:
    """The cluster's worker threads now (0 when it cannot say)."""
    try:
        return sum(client.nthreads().values())
    except Exception:  # a scheduler that cannot say: a run a task, as with no worker
        _log.debug("sweep: the cluster's threads unknown", exc_info=True)
        return 0


def _rows_of(future: Any, chunk: list[tuple[int, WorkerJob]]) -> list[SweepRun]:
    """The rows a task handed back, one per run of its chunk; a task that failed (its
    worker died too often) is, per run, the run unfinished in the shard its claim
    names, or, never claimed, a crashed row."""
    if future.cancelled():
        return [job.unstarted() for _, job in chunk]
    try:
        rows: list[SweepRun] = future.result()
        return rows
    except Exception as exc:
        return [failed(job, exc) for _, job in chunk]


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
