"""The step journal (schema 14): a committed step's attempt and tool-call rows ride in
its steps row until the writer settles them into their tables. Against real DuckDB
files and real processes: a process killed (SIGKILL) with steps journaled leaves every
row to the next opener exactly once; a read-only opener and ``Store.combine`` never
read a table short of them; a schema-13 store made by the code before the journal
migrates, and its run resumes."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import pytest

import harnessnb as hn
from harnessnb.store._schema import SCHEMA_VERSION
from tests.store_helpers import ROOT, harnessnb_before

# A run of READ steps on a file store, killed (SIGKILL) by its own model when asked for
# its KILL_AT-th answer: the steps before it are committed (each commit is awaited
# before the next model call) and, the writer kept from settling when idle, journaled.
CHILD = """
import asyncio, os, signal, sys
from pathlib import Path
import harnessnb as hn
from harnessnb.store import _conn
if hasattr(_conn, "JOURNAL_IDLE_S"):
    _conn.JOURNAL_IDLE_S = 3600.0  # no idle settle: the kill finds the steps journaled
store, ws, kill_at = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
calls = []
def reply(messages):
    calls.append(1)
    if len(calls) == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"tool": "list_dir", "args": {"path": "."}}
contract = hn.TaskContract("crash", ws, max_steps=50, stall=hn.StallPolicy(window=0))
asyncio.run(hn.run(contract, hn.ScriptedProvider(reply), store=hn.Store(store)))
"""


def _killed_run(path: Path, ws: Path, kill_at: int, pythonpath: Path = ROOT) -> None:
    ws.mkdir(exist_ok=True)
    (ws / "a.txt").write_text("a\n")
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}  # cwd not the checkout: -c puts it first
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(ws), str(kill_at)],
        env=env, cwd=ws, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == -signal.SIGKILL, done.stderr


def _raw(path: Path, query: str) -> list[tuple[object, ...]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def _per_step(store: hn.Store, table: str) -> list[tuple[int, int]]:
    frame = store.sql(f"SELECT step, count(*) AS n FROM {table} GROUP BY step ORDER BY step")
    return [(int(s), int(n)) for s, n in zip(frame["step"], frame["n"], strict=True)]


def test_steps_journaled_by_a_killed_process_are_settled_once_by_the_next_opener(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs.duckdb"
    _killed_run(path, tmp_path / "ws", kill_at=5)
    # Left in the file: four committed steps, their rows in journals, not in the tables.
    journaled = _raw(path, "SELECT count(*) FROM steps WHERE journal IS NOT NULL")[0][0]
    assert _raw(path, "SELECT count(*) FROM steps")[0][0] == 4
    assert journaled >= 3  # the first step may commit before its lease is known
    assert _raw(path, "SELECT count(*) FROM tool_calls")[0][0] == 4 - journaled
    with hn.Store(path) as s:
        ones = [(step, 1) for step in range(1, 5)]
        assert _per_step(s, "attempts") == ones and _per_step(s, "tool_calls") == ones
        assert set(s.tool_calls()["status"]) == {"ok"}
        assert list(s.steps().columns) == [
            "run_id", "step", "decision", "tool_calls", "tokens", "changed_workspace",
            "provider", "at",
        ]  # fmt: skip
        run_id = str(s.runs()["run_id"].iloc[0])
    assert _raw(path, "SELECT count(*) FROM steps WHERE journal IS NOT NULL")[0][0] == 0
    with hn.Store(path) as s:  # settled once: opening again adds nothing
        assert _per_step(s, "attempts") == [(step, 1) for step in range(1, 5)]
        # The killed run resumes from its four steps, reading their recovered rows.
        result = hn.resume_sync(run_id, hn.ScriptedProvider(["done"]), store=s)
        assert result.outcome == "finished"
        assert _per_step(s, "attempts") == [(step, 1) for step in range(1, 6)]
        assert _per_step(s, "tool_calls") == [(step, 1) for step in range(1, 5)]


def test_concurrent_runs_steps_journaled_together_are_each_read_once(tmp_path: Path) -> None:
    # Many runs' steps commit in one batch (group commit): their journals go in one
    # append of step rows; settled, every attempt and tool call is there exactly once.
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")

    def reply(messages: object) -> dict[str, object]:
        return {"tool": "list_dir", "args": {"path": "."}}

    async def many(store: hn.Store) -> None:
        contract = hn.TaskContract("many", ws, max_steps=4, stall=hn.StallPolicy(window=0))
        await asyncio.gather(
            *(hn.run(contract, hn.ScriptedProvider(reply), store=store) for _ in range(30))
        )

    with hn.Store(tmp_path / "runs.duckdb") as s:
        asyncio.run(many(s))
        for table in ("attempts", "tool_calls"):
            counts = s.sql(f"SELECT run_id, step, count(*) AS n FROM {table} GROUP BY ALL")
            assert len(counts) == 30 * 4 and set(counts["n"]) == {1}, table
        assert len(s.steps()) == 30 * 4


def test_a_shard_left_with_journals_is_read_whole_by_combine_and_left_as_it_was(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shard.duckdb"
    _killed_run(path, tmp_path / "ws", kill_at=4)
    left = _raw(path, "SELECT count(*) FROM steps WHERE journal IS NOT NULL")[0][0]
    assert left >= 2
    combined = hn.Store.combine([path])
    try:
        assert len(combined.attempts()) == 3 and len(combined.tool_calls()) == 3
        assert len(combined.steps()) == 3 and int(combined.runs()["steps"].iloc[0]) == 3
    finally:
        combined.close()
    # Read through a settled copy: the shard itself is as its killed writer left it.
    assert _raw(path, "SELECT count(*) FROM steps WHERE journal IS NOT NULL")[0][0] == left


def test_a_read_only_opener_reads_the_journaled_rows_through_a_settled_copy(
    tmp_path: Path,
) -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is needed to read as an ordinary user")
    made = tmp_path / "made.duckdb"
    _killed_run(made, tmp_path / "ws", kill_at=4)
    shared = Path(tempfile.mkdtemp(prefix="hn-journal-", dir="/tmp"))  # not under 0700
    try:
        shared.chmod(0o755)  # readable, not writable, by an ordinary user
        path = shared / "runs.duckdb"
        shutil.copyfile(made, path)
        path.chmod(0o644)
        wal = made.with_name(made.name + ".wal")  # the killed process's commits
        if wal.exists():
            shutil.copyfile(wal, path.with_name(path.name + ".wal"))
            path.with_name(path.name + ".wal").chmod(0o644)
        code = (
            "import sys, harnessnb as hn\n"
            "s = hn.Store(sys.argv[1])\n"
            "print(s.read_only, len(s.attempts()), len(s.tool_calls()), len(s.steps()))\n"
        )
        as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        probe = subprocess.run(
            [*as_nobody, sys.executable, "-c", "import harnessnb, duckdb"],
            env=env, cwd=shared, capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        if probe.returncode != 0:  # e.g. a pyenv build whose libpython lies under /root
            pytest.skip(f"this interpreter cannot run as an ordinary user: {probe.stderr[-300:]}")
        done = subprocess.run(
            [*as_nobody, sys.executable, "-c", code, str(path)],
            env=env, cwd=shared, capture_output=True, text=True, check=False, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["True", "3", "3", "3"]
        # Read, not written: the journals are still in the file for its next writer.
        assert _raw(path, "SELECT count(*) FROM steps WHERE journal IS NOT NULL")[0][0] >= 2
    finally:
        shutil.rmtree(shared)


@pytest.mark.parametrize(
    "journal",
    [
        '{"attempts": 5}',
        "[1, 2]",
        "not json",
        '{"tool_calls": [[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]]}',
    ],
)
def test_a_journal_harnessnb_did_not_write_is_refused_and_the_file_kept(
    tmp_path: Path, journal: str
) -> None:
    path = tmp_path / "runs.duckdb"
    _killed_run(path, tmp_path / "ws", kill_at=3)
    con = duckdb.connect(str(path))
    con.execute("UPDATE steps SET journal = ? WHERE step = 2", [journal])
    con.close()
    before = path.read_bytes()
    with pytest.raises(hn.StoreError) as refused:
        hn.Store(path).runs()
    assert refused.value.kind == "foreign" and "journal" in refused.value.message
    assert path.read_bytes() == before  # nothing written
    with pytest.raises(hn.StoreError) as combined:
        hn.Store.combine([path]).runs()
    assert combined.value.kind == "foreign"


def test_a_schema_13_store_made_by_the_old_code_migrates_and_its_run_resumes(
    tmp_path: Path,
) -> None:
    old = harnessnb_before(14, tmp_path / "old")
    path = tmp_path / "runs.duckdb"
    _killed_run(path, tmp_path / "ws", kill_at=4, pythonpath=old)  # three steps, no journal
    assert _raw(path, "SELECT max(version) FROM schema_version")[0][0] == 13
    with hn.Store(path) as s:
        versions = s.sql("SELECT version FROM schema_version ORDER BY 1")["version"].tolist()
        assert versions == list(range(1, SCHEMA_VERSION + 1)) and SCHEMA_VERSION == 14
        ones = [(step, 1) for step in range(1, 4)]
        assert _per_step(s, "attempts") == ones and _per_step(s, "tool_calls") == ones
        run_id = str(s.runs()["run_id"].iloc[0])
        result = hn.resume_sync(run_id, hn.ScriptedProvider(["done"]), store=s)
        assert result.outcome == "finished" and result.steps == 4
        assert _per_step(s, "attempts") == [(step, 1) for step in range(1, 5)]
    # The old code refuses the migrated file: newer than it understands.
    code = (
        "import sys, harnessnb as hn\n"
        "try:\n"
        "    hn.Store(sys.argv[1]).runs()\n"
        "except hn.StoreError as e:\n"
        "    print(e.kind)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], env={**os.environ, "PYTHONPATH": str(old)},
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert done.stdout.split() == ["newer"], done.stderr
