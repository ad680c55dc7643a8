"""Group commit and the merged run writes: start_run, the last step that ends the run,
finish_run(release=True), and queued writes of several runs in one transaction."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb import Store
from harnessnb.store._batch import WriteOp
from harnessnb.store._leases import Lease
from harnessnb.store._writes import commit_step, finish_run
from tests.store_helpers import AT, run_row, step_kwargs


def _last_steps_at_once(store: Store, leases: list[Lease], outcome: str) -> list[Future[Any]]:
    """Run i's last step (ending it ``outcome``) for each lease, queued while the writer
    is held, so the writer finds them all waiting at once."""
    db = store._db
    assert db is not None
    finish = {"outcome": outcome, "finished_at": AT + 9, "error": None}
    row, kwargs = step_kwargs(1, tokens=40)
    with db._lock:
        return [
            store.submit(commit_step(f"r{i}", row, **kwargs, lease=lease, finish=finish))
            for i, lease in enumerate(leases)
        ]


def test_start_run_writes_the_run_and_its_first_lease_together(store: Store) -> None:
    lease = store.start_run(run_row("r1"), "kernel-a", now=AT, ttl_s=30)
    assert (lease.run_id, lease.owner, lease.generation, lease.expires_at) == (
        "r1", "kernel-a", 1, AT + 30,
    )  # fmt: skip
    row, kwargs = step_kwargs(1)
    store.commit_step("r1", row, **kwargs, lease=lease)
    run = store.get_run("r1")
    assert run is not None and run["steps"] == 1


def test_start_run_conflicting_with_a_live_lease_writes_nothing(store: Store) -> None:
    store.acquire_lease("r1", "kernel-a", now=AT)  # a lease row with no run row yet
    with pytest.raises(hn.ConflictError):
        store.start_run(run_row("r1"), "kernel-b", now=AT + 1, owner_alive=lambda _: True)
    assert store.get_run("r1") is None


def test_start_run_of_an_existing_run_is_a_duplicate(store: Store) -> None:
    store.start_run(run_row("r1"), "kernel-a")
    with pytest.raises(hn.StoreError) as info:
        store.start_run(run_row("r1"), "kernel-a")
    assert info.value.kind == "duplicate"


def test_last_step_ends_the_run_and_releases_the_lease_in_one_commit(store: Store) -> None:
    lease = store.start_run(run_row("r1"), "kernel-a")
    row, kwargs = step_kwargs(1, tokens=50)
    finish = {"outcome": "finished", "finished_at": AT + 9, "error": None}
    store.commit_step("r1", row, **kwargs, lease=lease, finish=finish)
    run = store.get_run("r1")
    assert run is not None
    assert (run["steps"], run["tokens"], run["outcome"], run["finished_at"]) == (
        1, 50, "finished", AT + 9,
    )  # fmt: skip
    with pytest.raises(hn.ConflictError):  # released with the step
        store.renew_lease(lease)
    assert store.acquire_lease("r1", "kernel-b", owner_alive=lambda _: True).generation == 2


def test_finish_run_with_release_gives_the_lease_up(store: Store) -> None:
    lease = store.start_run(run_row("r1"), "kernel-a")
    store.finish_run("r1", outcome="denied", finished_at=AT + 1, lease=lease, release=True)
    with pytest.raises(hn.ConflictError):
        store.renew_lease(lease)


def test_queued_writes_of_many_runs_commit_in_one_transaction(
    store: Store, batches: list[list[str]]
) -> None:
    leases = [store.start_run(run_row(f"r{i}"), "me") for i in range(8)]
    db = store._db
    assert db is not None
    with db._lock:  # the writer waits for the lock: the writes queue up behind it
        futures = [_submit_step(store, f"r{i}", lease) for i, lease in enumerate(leases)]
    assert [f.result(timeout=10) for f in futures] == [None] * 8
    assert max(len(b) for b in batches) > 1
    assert store.runs()["steps"].tolist() == [1] * 8
    assert len(store.steps()) == 8 and len(store.attempts()) == 24


def test_an_error_in_a_group_fails_only_its_own_write(
    store: Store, batches: list[list[str]]
) -> None:
    leases = [store.start_run(run_row(f"r{i}"), "me", now=AT, ttl_s=1) for i in range(5)]
    store.acquire_lease("r3", "other", now=AT + 5)  # r3's first lease is now stale
    db = store._db
    assert db is not None
    with db._lock:
        futures = [_submit_step(store, f"r{i}", lease) for i, lease in enumerate(leases)]
        futures.append(store.submit(finish_run("r0", outcome="finished", finished_at=AT + 9,
                                               lease=leases[0], release=True)))  # fmt: skip
    errors = [f.exception(timeout=10) for f in futures]
    assert [type(e).__name__ if e else None for e in errors] == [
        None, None, None, "ConflictError", None, None,
    ]  # fmt: skip
    assert max(len(b) for b in batches) > 1  # the group failed, then each went alone
    steps = dict(zip(store.runs()["run_id"], store.runs()["steps"], strict=True))
    assert steps == {"r0": 1, "r1": 1, "r2": 1, "r3": 0, "r4": 1}
    assert store.get_run("r0")["outcome"] == "finished"  # type: ignore[index]
    assert sorted(store.steps()["run_id"]) == ["r0", "r1", "r2", "r4"]


def _submit_step(store: Store, run_id: str, lease: Lease) -> Future[Any]:
    row, kwargs = step_kwargs(1)
    return store.submit(commit_step(run_id, row, **kwargs, lease=lease))


def test_last_steps_of_many_runs_end_them_in_one_group(
    store: Store, batches: list[list[str]]
) -> None:
    leases = [store.start_run(run_row(f"r{i}"), "me") for i in range(6)]
    store.acquire_lease("r4", "other", owner_alive=lambda _: False)  # r4's lease is stale
    futures = _last_steps_at_once(store, leases, "finished")
    errors = [f.exception(timeout=10) for f in futures]
    assert [type(e).__name__ if e else None for e in errors] == [
        None, None, None, None, "ConflictError", None,
    ]  # fmt: skip
    assert max(len(b) for b in batches) > 1
    runs = store.runs().set_index("run_id")
    assert runs["outcome"].astype(object).fillna("-").to_dict() == {
        "r0": "finished", "r1": "finished", "r2": "finished", "r3": "finished", "r4": "-",
        "r5": "finished",
    }  # fmt: skip
    assert runs["steps"].to_dict() == {"r0": 1, "r1": 1, "r2": 1, "r3": 1, "r4": 0, "r5": 1}
    assert runs["tokens"].to_dict() == {"r0": 40, "r1": 40, "r2": 40, "r3": 40, "r4": 0, "r5": 40}
    released = store.sql("SELECT run_id FROM leases WHERE released ORDER BY run_id")
    assert released["run_id"].tolist() == ["r0", "r1", "r2", "r3", "r5"]


def test_last_steps_of_many_runs_merge_into_one_transaction(
    store: Store, batches: list[list[str]]
) -> None:
    leases = [store.start_run(run_row(f"r{i}"), "me") for i in range(5)]
    batches.clear()
    futures = _last_steps_at_once(store, leases, "step_cap")
    assert [f.result(timeout=10) for f in futures] == [None] * 5
    # Merged (some group of several), and no op redone alone after a failed group.
    assert max(len(b) for b in batches) > 1 and sum(len(b) for b in batches) == 5
    runs = store.runs()
    assert runs["outcome"].tolist() == ["step_cap"] * 5
    assert (runs["steps"].tolist(), runs["tokens"].tolist()) == ([1] * 5, [40] * 5)
    assert store.sql("SELECT count(*) AS n FROM leases WHERE released")["n"].tolist() == [5]


_AT_EXIT = """
import atexit, json, sys, threading
import harnessnb as hn
from harnessnb.store._batch import WriteOp

store = hn.Store(sys.argv[1], linger_s=0.01)
started = []

def mark(n):
    return WriteOp("mark", lambda con, batch: con.execute("INSERT INTO marks VALUES (?)", [n]))

def at_exit():
    for thread in threading.enumerate():  # the store's idle connection closes, and ends
        if thread.name.startswith("harnessnb-store"):
            thread.join(10)
    start = threading.Thread.start
    def recording(thread):
        started.append(thread.name)
        start(thread)
    threading.Thread.start = recording
    store.submit(mark(1)).result(10)  # queued for the writer thread, which is gone
    store.write(mark(2))  # in this thread: its idle connection would linger on a thread
    print(json.dumps(started))

store.sql("CREATE TABLE marks (n INTEGER)")
atexit.register(at_exit)  # registered after the store's own hook: runs before it
"""


def test_writes_at_interpreter_exit_are_committed_without_starting_a_thread(
    tmp_path: Path,
) -> None:
    # Python 3.12 refuses a new thread once the exit began ("can't create new thread at
    # interpreter shutdown"): the queued write raised it, and a blocking write's linger
    # thread failed after its commit. No thread is started at exit on any Python: the
    # queued write is done in the submitting thread, the connection closed at once.
    path = tmp_path / "exit.duckdb"
    out = subprocess.run([sys.executable, "-c", _AT_EXIT, str(path)],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == []
    with Store(path) as store:
        assert store.sql("SELECT n FROM marks ORDER BY n")["n"].tolist() == [1, 2]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_writer_thread_ended_by_an_error_fails_its_writes_and_is_replaced(
    store: Store,
) -> None:
    # An error escaping a group (here a SystemExit raised by an op) ended the writer
    # thread with its future never resolved, and every later write queued for a writer
    # that was gone: both waited for ever.
    store.sql("CREATE TABLE marks (n INTEGER)")

    def fatal(con: object, batch: object) -> None:
        raise SystemExit("an op that ends its thread")

    failed = store.submit(WriteOp("fatal", fatal))
    with pytest.raises(SystemExit):
        failed.result(timeout=10)
    insert = WriteOp("mark", lambda con, batch: con.execute("INSERT INTO marks VALUES (1)"))
    store.submit(insert).result(timeout=10)  # a new writer thread takes it
    assert store.sql("SELECT n FROM marks")["n"].tolist() == [1]
