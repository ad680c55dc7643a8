"""A sweep run's slot and kept files (``add_sweep_run``): appended with other writes the
first time, replaced whole when the run is written again (queued or not)."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

import harnessnb as hn
from harnessnb.store import _writes
from harnessnb.store._writer import store_writer


def _slot(run_id: str, repeat: int) -> Any:
    return {"sweep_id": "sw", "run_id": run_id, "sample_id": "q", "provider": "p",
            "repeat": repeat, "sample": {"input": "task"}}  # fmt: skip


def _files(store: hn.Store, run_id: str) -> dict[str, bytes]:
    frame = store.sql(
        "SELECT path, content FROM run_files WHERE run_id = ? ORDER BY path", [run_id]
    )
    return {str(p): bytes(c) for p, c in zip(frame["path"], frame["content"], strict=True)}


def test_many_runs_queued_together_are_each_written_once(tmp_path: Path) -> None:
    with hn.Store(tmp_path / "s.duckdb") as s:
        writer = store_writer(s)
        futures = [
            writer.submit(_writes.add_sweep_run(_slot(f"r{i}", i), [
                {"path": "a.txt", "content": f"a{i}".encode(), "size": 2},
                {"path": "b/c.txt", "content": b"c" * 1000, "size": 1000},
            ]))
            for i in range(40)
        ]  # fmt: skip
        concurrent.futures.wait(futures)
        assert [f.result() for f in futures] == [None] * 40
        slots = s.sql("SELECT run_id, repeat FROM sweep_runs ORDER BY repeat")
        assert slots["run_id"].tolist() == [f"r{i}" for i in range(40)]
        assert _files(s, "r7") == {"a.txt": b"a7", "b/c.txt": b"c" * 1000}
        assert s.sql("SELECT count(*) AS n FROM run_files")["n"].tolist() == [80]


def test_a_run_written_again_keeps_only_its_last_slot_and_files(tmp_path: Path) -> None:
    with hn.Store(tmp_path / "s.duckdb") as s:
        writer = store_writer(s)
        first = [{"path": "old.txt", "content": b"old", "size": 3},
                 {"path": "same.txt", "content": b"one", "size": 3}]  # fmt: skip
        writer.submit(_writes.add_sweep_run(_slot("r", 0), first)).result()
        # queued: the append clashes on sweep_runs' key and the op alone replaces
        again = [{"path": "same.txt", "content": b"two", "size": 3}]
        writer.submit(_writes.add_sweep_run(_slot("r", 1), again)).result()
        assert _files(s, "r") == {"same.txt": b"two"}
        # now: written directly, replaced the same way
        writer.write(_writes.add_sweep_run(_slot("r", 2), []))
        assert _files(s, "r") == {}
        assert s.sql("SELECT repeat FROM sweep_runs")["repeat"].tolist() == [2]
