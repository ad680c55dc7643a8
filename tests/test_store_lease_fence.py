"""A step's lease is fenced without a statement of its own: the connection knows the
leases that were current at its last commit, and forgets what it cannot vouch for
(another op of a batch took or gave up the lease, a batch rolled back, any SQL on the
connection, the connection closed and another process wrote the file)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb
import pytest

import harnessnb as hn
from harnessnb import Store
from harnessnb.store import _conn
from harnessnb.store._batch import Batch, WriteOp
from harnessnb.store._leases import Lease
from harnessnb.store._writer import store_writer
from harnessnb.store._writes import acquire_lease
from tests.store_helpers import AT, ROOT, run_row, step_kwargs


def _logged(store: Store) -> None:
    """Log every statement of the store's connection (DuckDB's own query log)."""
    store.sql("CALL enable_logging('QueryLog')")


def _queries(store: Store) -> list[str]:
    found = store.sql("SELECT message FROM duckdb_logs WHERE type = 'QueryLog'")
    return [str(m) for m in found["message"]]


def _steps(store: Store, run_id: str = "r1") -> list[int]:
    found = store.sql("SELECT step FROM steps WHERE run_id = ? ORDER BY step", [run_id])
    return [int(s) for s in found["step"]]


def _commit(store: Store, step: int, lease: Lease, **extra: Any) -> None:
    row, kwargs = step_kwargs(step)
    store_writer(store).commit_step("r1", row, **kwargs, lease=lease, **extra)


def test_a_lone_start_and_its_steps_read_no_lease_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The connection kept open throughout (no idle close, no hand-over after a second
    # on a loaded machine): the query log lives with it, and a reopen forgets leases.
    monkeypatch.setattr(_conn, "MAX_HOLD_S", 3600.0)
    store = Store(tmp_path / "runs.duckdb", linger_s=600)
    _logged(store)
    lease = store_writer(store).start_run(run_row("r1"), "kernel-a", now=AT)
    for step in (1, 2, 3):
        _commit(store, step, lease)
    queries = _queries(store)
    assert not [q for q in queries if "FROM leases" in q or "ON CONFLICT" in q], queries
    assert [q for q in queries if q.startswith("INSERT INTO steps")], queries
    assert _steps(store) == [1, 2, 3]
    store.close()


def test_a_lease_taken_over_in_this_process_fences_the_old_holder(store: Store) -> None:
    lease = store_writer(store).start_run(run_row("r1"), "kernel-a", now=AT)
    _commit(store, 1, lease)  # the lease is known current now
    taken = store_writer(store).acquire_lease("r1", "kernel-b", owner_alive=lambda _: False)
    assert taken.generation == 2
    with pytest.raises(hn.ConflictError):
        _commit(store, 2, lease)
    _commit(store, 2, taken)
    assert _steps(store) == [1, 2]


def test_a_lease_released_with_the_last_step_fences_a_later_step(store: Store) -> None:
    lease = store_writer(store).start_run(run_row("r1"), "kernel-a", now=AT)
    _commit(store, 1, lease)
    _commit(store, 2, lease, finish={"outcome": "finished", "finished_at": AT + 9, "error": None})
    with pytest.raises(hn.ConflictError):
        _commit(store, 3, lease)
    assert _steps(store) == [1, 2]


def test_a_lease_taken_in_a_batch_that_rolled_back_is_not_known(store: Store) -> None:
    lease = store_writer(store).start_run(run_row("r1"), "kernel-a", now=AT)
    _commit(store, 1, lease)
    take = acquire_lease("r1", "kernel-b", owner_alive=lambda _: False)

    def take_then_fail(con: duckdb.DuckDBPyConnection, batch: Batch) -> None:
        take.apply(con, batch)  # generation 2, in this transaction only
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        store_writer(store).write(WriteOp("take_then_fail", take_then_fail))
    # Generation 2 never committed: a step under it is refused, generation 1 still holds.
    with pytest.raises(hn.ConflictError):
        _commit(store, 2, Lease("r1", "kernel-b", 2, AT + 60))
    _commit(store, 2, lease)
    assert _steps(store) == [1, 2]


def test_a_lease_changed_by_any_sql_on_the_connection_is_not_trusted(store: Store) -> None:
    lease = store_writer(store).start_run(run_row("r1"), "kernel-a", now=AT)
    _commit(store, 1, lease)
    store.sql("UPDATE leases SET generation = 7, owner = 'someone' WHERE run_id = 'r1'")
    with pytest.raises(hn.ConflictError):
        _commit(store, 2, lease)
    assert _steps(store) == [1]


# Another process takes the run over (its owner is not alive as far as it can tell).
TAKE_OVER = """
import sys
sys.path.insert(0, sys.argv[2])
from harnessnb import Store
from harnessnb.store._writer import store_writer
store = Store(sys.argv[1])
lease = store_writer(store).acquire_lease("r1", "other-process", owner_alive=lambda _: False)
store.close()
print(lease.generation)
"""


def test_a_lease_taken_by_another_process_fences_this_one(tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    store = Store(path)
    try:
        lease = store_writer(store).start_run(run_row("r1"), "kernel-a", now=AT)
        _commit(store, 1, lease)
        assert store._db is not None
        store._db.close()  # the file let go (as when another process waits its turn)
        done = subprocess.run(
            [sys.executable, "-c", TAKE_OVER, str(path), str(ROOT)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["2"]
        with pytest.raises(hn.ConflictError):
            _commit(store, 2, lease)
        assert _steps(store) == [1]
    finally:
        store.close()


def test_a_lone_start_over_a_stray_released_lease_takes_the_next_generation(
    store: Store,
) -> None:
    taken = store_writer(store).acquire_lease("r1", "kernel-a", now=AT)
    store_writer(store).release_lease(taken)
    lease = store_writer(store).start_run(run_row("r1"), "kernel-b", now=AT + 1)
    assert (lease.owner, lease.generation) == ("kernel-b", 2)
    _commit(store, 1, lease)
    with pytest.raises(hn.ConflictError):
        _commit(store, 2, taken)
    assert _steps(store) == [1]
