"""Schema v4: ``runs`` is a view whose steps, tokens and updated_at come from the step
rows, for a run in progress, a finished run and a run whose process was killed; and
the ordered migration of a hand-built v2 file."""

from __future__ import annotations

import datetime as dt
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

import harnessnb as hn
from harnessnb import Store
from harnessnb.store._conn import SharedDb
from harnessnb.store._leases import Lease
from harnessnb.store._schema import COLUMNS, SCHEMA_VERSION
from harnessnb.store._writes import commit_step
from tests.store_helpers import AT, ROOT, child, old_store, run_row, step_kwargs


def _ts(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)  # the readers are tz-aware UTC


def _counts(store: Store) -> dict[str, tuple[Any, ...]]:
    frame = store.runs()
    return {
        r.run_id: (r.steps, r.tokens, r.outcome, r.updated_at)
        for r in frame.astype(object).where(frame.notna(), None).itertuples()
    }


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "runs.duckdb")
    yield s
    s.close()


def _v2_file(path: Path) -> None:
    """A store as harnessnb wrote it at schema version 2: runs is a table with counters."""
    con = old_store(path, 2)
    runs = [
        # run_id, outcome, steps, tokens, finished_at, updated_at
        ("done", "finished", 2, 30, _ts(AT + 9), _ts(AT + 9)),
        ("live", None, 1, 10, None, _ts(AT + 1)),
        ("fresh", None, 0, 0, None, _ts(AT)),
    ]
    for run_id, outcome, steps, tokens, finished_at, updated_at in runs:
        con.execute(
            "INSERT INTO runs (run_id, task, workspace, provider, model, started_at, "
            "finished_at, outcome, steps, tokens, schema_version, contract, policy, "
            "updated_at) VALUES (?, 'old task', '/ws', 'openai', 'gpt-x', ?, ?, ?, ?, ?, 2, "
            "'{\"max_steps\": 12}', '{\"layers\": []}', ?)",
            [run_id, _ts(AT), finished_at, outcome, steps, tokens, updated_at],
        )
    for run_id, step, tokens in (("done", 1, 10), ("done", 2, 20), ("live", 1, 10)):
        con.execute(
            'INSERT INTO steps (run_id, step, decision, tokens, "at", checkpoint) '
            "VALUES (?, ?, 'tool_calls', ?, ?, '{}')",
            [run_id, step, tokens, _ts(AT + step)],
        )
    con.execute(
        "INSERT INTO leases VALUES ('live', 'kernel-a', 1, ?, ?, ?, false)",
        [_ts(AT), _ts(AT), _ts(AT + 30)],
    )
    con.close()


def test_v2_store_is_migrated_to_a_runs_view_keeping_every_run(tmp_path: Path) -> None:
    path = tmp_path / "v2.duckdb"
    _v2_file(path)
    with Store(path) as s:
        versions = s.sql("SELECT version FROM schema_version ORDER BY 1")["version"].tolist()
        assert versions == list(range(1, SCHEMA_VERSION + 1))
        views = s.sql("SELECT view_name FROM duckdb_views() WHERE NOT internal")
        assert views["view_name"].tolist() == ["runs"]
        assert list(s.runs().columns) == list(COLUMNS["runs"])
        assert _counts(s) == {
            "done": (2, 30, "finished", _ts(AT + 9)),
            "fresh": (0, 0, None, _ts(AT)),
            "live": (1, 10, None, _ts(AT + 1)),
        }
        done = s.get_run("done")
        assert done is not None
        assert (done["task"], done["contract"], done["finished_at"], done["schema_version"]) == (
            "old task", {"max_steps": 12}, AT + 9, 2)  # fmt: skip
        # The migrated run goes on under its old lease.
        lease = Lease("live", "kernel-a", 1, AT + 30)
        row, kwargs = step_kwargs(2, tokens=5)
        s.commit_step("live", row, **kwargs, lease=lease)
        assert _counts(s)["live"] == (2, 15, None, _ts(AT + 2))
    con = duckdb.connect(str(path))
    types = dict(con.execute("SELECT column_name, data_type FROM duckdb_columns() "
                             "WHERE table_name = 'runs'").fetchall())  # fmt: skip
    con.close()
    assert (types["steps"], types["tokens"], types["updated_at"]) == (
        "INTEGER", "BIGINT", "TIMESTAMP")  # fmt: skip


def test_runs_view_counts_the_steps_of_a_run_in_progress_and_a_finished_run(
    store: Store, tmp_path: Path
) -> None:
    seen: list[tuple[Any, ...]] = []

    def reply(messages: object) -> dict[str, Any] | str:
        # Asked for step n: n-1 steps are committed, and the run has no outcome yet.
        frame = store.sql("SELECT steps, tokens, outcome FROM runs")
        seen.append(tuple(frame.astype(object).where(frame.notna(), None).iloc[0]))
        return "done" if len(seen) == 3 else {"tool": "list_dir", "args": {"path": "."}}

    ws = tmp_path / "ws"  # beside the store: a store is never inside its workspace
    ws.mkdir()
    contract = hn.TaskContract("look around", ws, max_steps=5)
    provider = hn.ScriptedProvider(reply, tokens_per_reply=(10, 5))
    result = hn.run_sync(contract, provider, store=store)
    assert result.outcome is hn.RunOutcome.FINISHED
    assert seen == [(0, 0, None), (1, 15, None), (2, 30, None)]
    run = store.get_run(result.run_id)
    assert run is not None
    assert (run["steps"], run["tokens"], run["outcome"]) == (3, 45, "finished")
    assert (run["steps"], run["tokens"]) == (result.steps, result.tokens)
    # As in v2: the last write, here the last step (stamped just after the end time).
    last_at = store.sql('SELECT max("at") AS t FROM steps')["t"].iloc[0]
    assert _ts(run["updated_at"]) == last_at >= _ts(run["finished_at"])


# A child that starts a run, commits three steps and dies without a word (SIGKILL).
_COMMIT_THEN_DIE = """
import os, signal, sys
sys.path.insert(0, sys.argv[2])
from tests.store_helpers import run_row, step_kwargs
from harnessnb import Store
store = Store(sys.argv[1])
lease = store.start_run(run_row("crashed"), "kernel-a")
for step in (1, 2, 3):
    row, kw = step_kwargs(step, tokens=7)
    store.commit_step("crashed", row, **kw, lease=lease)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_runs_view_counts_the_steps_of_a_run_whose_process_was_killed(tmp_path: Path) -> None:
    path = tmp_path / "crash.duckdb"
    proc = child(_COMMIT_THEN_DIE, str(path), str(ROOT), stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, err
    with Store(path) as s:
        assert _counts(s) == {"crashed": (3, 21, None, _ts(AT + 3))}
        frame = s.sql("SELECT steps, tokens, finished_at FROM runs WHERE run_id = 'crashed'")
        assert frame.iloc[0].tolist()[:2] == [3, 21]
        assert frame["finished_at"].isna().all()


def test_queued_steps_without_a_lease_are_guarded_by_their_run(store: Store) -> None:
    for run_id in ("r1", "r2"):
        store.create_run(run_row(run_id))
    db: SharedDb | None = store._db
    assert db is not None
    row, kwargs = step_kwargs(1)
    with db._lock:  # the writes queue up behind the lock and commit in a group
        futures = [store.submit(commit_step(r, row, **kwargs)) for r in ("r1", "nope", "r2")]
    errors = [f.exception(timeout=10) for f in futures]
    assert errors[0] is None and errors[2] is None
    assert isinstance(errors[1], hn.StoreError) and errors[1].kind == "missing"
    assert sorted(store.steps()["run_id"]) == ["r1", "r2"]
    assert store.runs()["steps"].tolist() == [1, 1]
