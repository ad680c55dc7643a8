"""A sweep's runs on a Dask worker (``_sweep_dask`` submits them): ``run_chunk_on_worker``
makes a chunk's runs one after another, each claimed as it starts
(``<shards>/claims/<run_id>``, ``O_EXCL``) and driven on harnessnb's loop thread while
Dask's thread watches for the sweep's cancel marker (``cancel_marker``); the worker
process's shard store (``shard_store``: ``<shards>/<host>-<pid>.duckdb``) opened once
and kept, closed as the Dask worker closes (a worker plugin's ``teardown``, once no run
uses it: ``close_shards``). What the client reads back of a claim (``holder``) and the
rows of runs not run (``unfinished``, ``failed``) are here too: both sides name them.

Dask is imported here only inside functions a worker runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import string
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

from ..loop._contract import RunOutcome, TaskContract
from ..loop._tracing import Nested, parent_from
from ..rules._errors import wrap_unknown
from ._sample import Sample
from ._sweep_result import UNFINISHED, SweepRun
from ._sweep_run import NamedScorer, crashed, one_run

if TYPE_CHECKING:
    from ..providers._completion import Provider
    from ..store._store import Store

__all__ = [
    "CANCEL_POLL_S",
    "CLOSE_WAIT_S",
    "WorkerJob",
    "cancel_marker",
    "close_shards",
    "failed",
    "holder",
    "run_chunk_on_worker",
    "run_on_worker",
    "shard_store",
    "unfinished",
]

_log = logging.getLogger("harnessnb.sweep")
CANCEL_POLL_S: Final = 0.25
"""How often a task on a worker looks for its sweep's cancel marker."""
# The shard store of this worker process, per shards folder (opened once, kept).
_SHARDS: dict[str, Store] = {}
_SHARDS_LOCK = threading.Lock()
# The runs in this process using a shard now; the worker's end waits for them.
_IN_USE = [0]
_IDLE = threading.Condition(_SHARDS_LOCK)
CLOSE_WAIT_S: Final = 10.0
"""How long a closing worker waits for its runs to end (a cancelled run records itself
``cancelled``) before it closes its shards; still running then, they are left open."""


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


def cancel_marker(folder: str, sweep_id: str) -> str:
    """``<folder>/cancel/<sweep_id>`` (the id's bytes other than ``A-Za-z0-9_-`` as
    ``%XX``: any id is one file name there)."""
    name = "".join(chr(b) if chr(b) in _NAME_SAFE else f"%{b:02X}" for b in sweep_id.encode())
    return os.path.join(folder, "cancel", name)


_NAME_SAFE: Final = frozenset(string.ascii_letters + string.digits + "_-")


def failed(job: WorkerJob, exc: Exception) -> SweepRun:
    """A run whose task raised: unfinished in the shard its claim names, else crashed."""
    held = _claim_holder(job)
    if held is not None:
        return unfinished(job, held, type(exc).__name__)
    row = crashed(job.contract, job.name, job.provider, job.repeat, job.run_id, wrap_unknown(exc))
    return dataclasses.replace(row, sample_id=job.sample.id)


def shard_store(folder: str) -> Store:
    """This worker process's shard in ``folder`` (opened on first use, then kept; closed
    when the Dask worker closes: ``_close_at_worker_end``)."""
    with _SHARDS_LOCK:
        return _shard(folder)


def _shard(folder: str) -> Store:
    """``shard_store`` with ``_SHARDS_LOCK`` held."""
    from ..store._store import Store

    store = _SHARDS.get(folder)
    if store is None:
        path = os.path.join(folder, f"{socket.gethostname()}-{os.getpid()}.duckdb")
        store = _SHARDS[folder] = Store(path)
        _close_at_worker_end()
    return store


@contextlib.contextmanager
def _shard_in_use(folder: str) -> Iterator[Store]:
    """The shard, not closed by ``close_shards`` while the block runs."""
    with _IDLE:
        store = _shard(folder)
        _IN_USE[0] += 1
    try:
        yield store
    finally:
        with _IDLE:
            _IN_USE[0] -= 1
            _IDLE.notify_all()


def close_shards(wait_s: float = CLOSE_WAIT_S) -> bool:
    """Close this process's shard stores once no run uses one (waiting up to
    ``wait_s``); a later task opens its shard again. False when runs were still going:
    the shards are then left open (the process's exit lets go of them)."""
    with _IDLE:
        if not _IDLE.wait_for(lambda: _IN_USE[0] == 0, timeout=wait_s):
            _log.warning("sweep: runs still going as the worker closes; shards left open")
            return False
        stores = list(_SHARDS.values())
        _SHARDS.clear()
        for store in stores:  # under the lock: no run takes a store being closed
            try:
                store.close()
            except Exception:  # one shard's failure must not keep the others open
                _log.exception("sweep: closing the shard %s failed", store.path)
    return True


_PLUGIN: Final = "harnessnb-shards"
_PLUGIN_ADDED: list[bool] = []  # this process's plugin added (once: a second would
# replace the first, whose teardown would close the shards in use)


def _close_at_worker_end() -> None:
    """On a Dask worker, once per process: a worker plugin whose ``teardown`` (run as
    the worker closes) closes the shards; added on the worker's own event loop."""
    try:
        from distributed import get_worker
        from distributed.diagnostics.plugin import WorkerPlugin

        worker: Any = get_worker()
    except (ImportError, ValueError):  # not in a Dask worker: the store closes at exit
        return
    if _PLUGIN_ADDED:  # (under _SHARDS_LOCK) another folder's shard added it
        return

    class ClosesShards(WorkerPlugin):
        async def teardown(self, worker: Any) -> None:
            with _SHARDS_LOCK:
                _PLUGIN_ADDED.clear()  # a shard opened after this adds it again
            await asyncio.to_thread(close_shards)  # off the worker's loop: it may wait

    _PLUGIN_ADDED.append(True)
    worker.loop.add_callback(worker.plugin_add, ClosesShards(), name=_PLUGIN)


def run_chunk_on_worker(jobs: Sequence[WorkerJob]) -> list[SweepRun]:
    """A chunk of a sweep's runs on a Dask worker, one after another, in the process's
    shard: each claimed as it starts (``run_on_worker``), so a chunk rescheduled after
    its worker died runs only the runs it had not claimed, and reports the others
    ``unfinished``; once the sweep is cancelled the runs not begun are not started."""
    rows = []
    for job in jobs:
        try:
            rows.append(run_on_worker(job))
        except Exception as exc:  # this run's row; the chunk's other runs go on
            rows.append(failed(job, exc))
    return rows


def run_on_worker(job: WorkerJob) -> SweepRun:
    """One run of a sweep on a Dask worker, in the process's shard; ``unfinished`` if
    another attempt of this task claimed the run first (its worker died)."""
    marker = cancel_marker(job.shards, job.options["sweep_id"])
    if os.path.exists(marker):  # the sweep was cancelled before this task began
        return job.unstarted()
    with _shard_in_use(job.shards) as store:
        return _claimed_run(job, store, marker)


def _claimed_run(job: WorkerJob, store: Store, marker: str) -> SweepRun:
    """``run_on_worker``'s run, claimed first."""
    from ..loop._bridge import run_blocking

    claim = os.path.join(job.shards, "claims", job.run_id)
    try:
        fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return unfinished(job, _claim_holder(job) or "?", "worker_lost")
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
    return holder(job.shards, job.run_id)


def holder(folder: str, run_id: str) -> str | None:
    """The shard a run's claim names, or None (no claim; a run id from a store that
    is no file name of the claims folder)."""
    if not run_id or run_id in (".", "..") or "/" in run_id or os.sep in run_id:
        return None
    try:
        with open(os.path.join(folder, "claims", run_id), encoding="utf-8") as fh:
            return fh.read() or "?"
    except OSError:
        return None


def unfinished(job: WorkerJob, shard: str, why: str) -> SweepRun:
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
