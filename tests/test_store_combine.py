"""``Store.combine`` and ``Store.merge``: shard files read as one store, written into one."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pandas as pd
import pytest

import harnessnb as hn
from harnessnb.demo import demo_server
from harnessnb.demo._model import provider_for
from harnessnb.store._schema import SCHEMA_VERSION
from harnessnb.store._writer import store_writer
from tests.store_helpers import old_store

_RUN_TABLES = ("run_rows", "steps", "attempts", "tool_calls", "stalls", "markers",
               "pending_steps", "leases", "sweep_runs", "run_files")  # fmt: skip


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """One store of real runs (a sweep on a flaky chaos server and a scripted
    provider), and the same runs split into two shard files."""
    root = tmp_path_factory.mktemp("combine")
    ws = root / "ws"
    ws.mkdir()
    (ws / "README.md").write_text("# Title\n")
    whole = root / "whole.duckdb"
    with demo_server(seed=3, rates={"server": 0.2, "rate_limited": 0.1}) as flaky:
        providers = {"flaky": provider_for(flaky, name="flaky"),
                     "fine": hn.ScriptedProvider(lambda m: "done", name="fine")}  # fmt: skip
        with hn.Store(whole) as store:
            result = hn.sweep_sync([f"task {i}" for i in range(6)], providers, workspace=ws,
                                   repeats=2, store=store, sweep_id="sweep_one")  # fmt: skip
    run_ids = sorted(result.runs["run_id"])
    shards = root / "shards"
    shards.mkdir()
    halves = {"a.duckdb": run_ids[::2], "b.duckdb": run_ids[1::2]}
    for name, keep in halves.items():
        shutil.copy(whole, shards / name)
        con = duckdb.connect(str(shards / name))
        for table in _RUN_TABLES:
            con.execute(f"DELETE FROM {table} WHERE run_id NOT IN ?", [keep])
        con.close()
    yield {"whole": whole, "shards": shards, "run_ids": run_ids, "root": root}


def _same(left: hn.Store, right: hn.Store) -> None:
    pd.testing.assert_frame_equal(left.runs(), right.runs())
    pd.testing.assert_frame_equal(left.runs(sweep="sweep_one"), right.runs(sweep="sweep_one"))
    pd.testing.assert_frame_equal(left.attempts(), right.attempts())
    pd.testing.assert_frame_equal(left.steps(), right.steps())
    pd.testing.assert_frame_equal(left.tool_calls(), right.tool_calls())
    pd.testing.assert_frame_equal(left.markers(), right.markers())
    for kept in ("SELECT * FROM sweep_runs ORDER BY run_id",
                 "SELECT * FROM run_files ORDER BY run_id, path"):  # fmt: skip
        pd.testing.assert_frame_equal(left.sql(kept), right.sql(kept))
    pd.testing.assert_frame_equal(left.failure_rates(), right.failure_rates())
    pd.testing.assert_frame_equal(left.failure_rates("provider", sweep="sweep_one"),
                                  right.failure_rates("provider", sweep="sweep_one"))  # fmt: skip
    pd.testing.assert_frame_equal(left.failure_rates("provider", every="1h"),
                                  right.failure_rates("provider", every="1h"))  # fmt: skip


def test_combined_shards_read_as_the_one_store_and_merge_writes_it(
    made: dict[str, object], tmp_path: Path
) -> None:
    shards = Path(str(made["shards"]))
    with hn.Store(Path(str(made["whole"]))) as whole:
        combined = hn.Store.combine(shards)
        assert sorted(Path(p).name for p in combined.paths) == ["a.duckdb", "b.duckdb"]
        assert len(combined.runs()) == 24 and combined.read_only
        assert combined.failure_rates("provider")["failures"].sum() > 0  # real failures
        _same(combined, whole)
        run_id = str(made["run_ids"][0])  # type: ignore[index]
        assert combined.get_run(run_id) == whole.get_run(run_id)
        assert combined.checkpoints(run_id) == whole.checkpoints(run_id)
        query = "SELECT provider, count(*) AS n FROM runs GROUP BY 1 ORDER BY 1"
        pd.testing.assert_frame_equal(combined.sql(query), whole.sql(query))
        # An explicit list reads the same.
        _same(hn.Store.combine([shards / "b.duckdb", shards / "a.duckdb"]), whole)
        merged = combined.merge(into=tmp_path / "merged.duckdb")
        with merged:
            assert not merged.read_only and merged.path == str(tmp_path / "merged.duckdb")
            _same(merged, whole)


def test_a_combined_store_refuses_every_write(made: dict[str, object]) -> None:
    combined = hn.Store.combine(Path(str(made["shards"])))
    contract = hn.TaskContract("x", Path(str(made["root"])) / "ws")  # the shards beside it
    with pytest.raises(hn.StoreError, match="read-only: combined from 2 shards") as err:
        store_writer(combined).create_run({"run_id": "run_x", "task": "x"})
    assert err.value.kind == "read_only"
    with pytest.raises(hn.StoreError, match="read-only: combined from 2 shards"):
        store_writer(combined).add_marker("run_x", "resumed", "", 0.0)
    with pytest.raises(hn.StoreError, match="read-only"):
        hn.run_sync(contract, hn.ScriptedProvider(lambda m: "done"), store=combined)
    assert len(combined.runs()) == 24


def test_a_reader_sees_what_the_shards_hold_at_the_call(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    fine = hn.ScriptedProvider(lambda m: "done", name="fine")
    shards = tmp_path / "shards"
    shards.mkdir()
    with hn.Store(shards / "one.duckdb") as one:
        hn.sweep_sync(["a"], [fine], workspace=ws, store=one)
        combined = hn.Store.combine(shards)
        assert len(combined.runs()) == 1
        # A writer holding its shard open (its turn, lingering) is waited for, not broken.
        hn.sweep_sync(["b", "c"], [fine], workspace=ws, store=one)
        assert len(combined.runs()) == 3
        hn.sweep_sync(["d"], [fine], workspace=ws, store=one)  # and it still writes after
    assert len(combined.runs()) == 4


def test_a_writer_in_another_process_is_never_broken(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    script = textwrap.dedent(f"""
        import harnessnb as hn
        fine = hn.ScriptedProvider(lambda m: "done", name="fine")
        with hn.Store({str(shards / "w.duckdb")!r}) as store:
            for i in range(15):
                hn.sweep_sync(["t"], [fine], workspace={str(ws)!r}, store=store)
    """)
    with hn.Store(shards / "w.duckdb"):
        pass  # the shard exists before the writer starts
    writer = subprocess.Popen([sys.executable, "-c", script])
    combined = hn.Store.combine(shards)
    seen = []
    while writer.poll() is None:
        seen.append(len(combined.runs()))
    assert writer.wait() == 0
    assert seen == sorted(seen) and len(combined.runs()) == 15


def test_bad_sources_are_typed_errors(tmp_path: Path, made: dict[str, object]) -> None:
    with pytest.raises(hn.ConfigError, match="not a folder or a file"):
        hn.Store.combine(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(hn.ConfigError, match="holds no"):
        hn.Store.combine(tmp_path / "empty")
    with pytest.raises(hn.ConfigError, match="no store file"):
        hn.Store.combine([tmp_path / "gone.duckdb"])
    with pytest.raises(hn.ConfigError, match="non-empty list"):
        hn.Store.combine([])
    text = tmp_path / "text"
    text.mkdir()
    (text / "notes.duckdb").write_text("hello, I am not a database\n" * 10)
    with pytest.raises(hn.StoreError, match="not a DuckDB database") as err:
        hn.Store.combine(text)
    assert err.value.kind == "corrupt"
    assert (text / "notes.duckdb").read_text().startswith("hello")  # left as it was
    assert sorted(p.name for p in text.iterdir()) == ["notes.duckdb"]  # nothing beside it
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    con = duckdb.connect(str(foreign / "other.duckdb"))
    con.execute("CREATE TABLE t (x INTEGER)")
    con.close()
    with pytest.raises(hn.StoreError) as err:
        hn.Store.combine(foreign)
    assert err.value.kind == "foreign"
    assert sorted(p.name for p in foreign.iterdir()) == ["other.duckdb"]
    shards = Path(str(made["shards"]))
    with pytest.raises(hn.ConfigError, match="named twice"):
        hn.Store.combine([shards / "a.duckdb", shards / "a.duckdb"])


def test_a_run_in_two_shards_is_refused(made: dict[str, object], tmp_path: Path) -> None:
    shards = Path(str(made["shards"]))
    twice = tmp_path / "twice"
    twice.mkdir()
    shutil.copy(shards / "a.duckdb", twice / "a.duckdb")
    shutil.copy(shards / "a.duckdb", twice / "a-copy.duckdb")
    with pytest.raises(hn.StoreError, match="more than one shard") as err:
        hn.Store.combine(twice)
    assert err.value.kind == "duplicate"
    assert "a.duckdb" in str(err.value) and "a-copy.duckdb" in str(err.value)


def test_an_older_shard_says_how_to_upgrade(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    old = shards / "old.duckdb"
    con = old_store(old, 6)
    con.close()
    said = rf"version 6, older than {SCHEMA_VERSION}: open it once as hn\.Store"
    with pytest.raises(hn.StoreError, match=said):
        hn.Store.combine(shards)
    hn.Store(old).close()  # migrates it
    assert len(hn.Store.combine(shards).runs()) == 0


def test_merge_refuses_what_would_lose_or_clash(made: dict[str, object], tmp_path: Path) -> None:
    shards = Path(str(made["shards"]))
    combined = hn.Store.combine(shards)
    with pytest.raises(hn.ConfigError, match="another store file"):
        combined.merge(into=shards / "a.duckdb")
    # Into a store that already holds one of the runs: refused, the target unchanged.
    target = tmp_path / "has_a.duckdb"
    shutil.copy(shards / "a.duckdb", target)
    before = len(hn.Store(target).runs())
    with pytest.raises(hn.StoreError, match="already holds the run") as err:
        combined.merge(into=target)
    assert err.value.kind == "duplicate"
    with hn.Store(target) as kept:
        assert len(kept.runs()) == before
    # Into a store of other runs: added beside them.
    with hn.Store.combine([shards / "b.duckdb"]).merge(into=target) as both:
        assert len(both.runs()) == 24
    # A plain store merges too; a file that is no store is refused and left as it was.
    alien = tmp_path / "alien.txt"
    alien.write_text("not a store")
    with hn.Store(shards / "a.duckdb") as plain, pytest.raises(hn.StoreError):
        plain.merge(into=alien)
    assert alien.read_text() == "not a store"
    with hn.Store(shards / "a.duckdb") as plain, plain.merge(into=tmp_path / "a2.duckdb") as a2:
        pd.testing.assert_frame_equal(a2.runs(), plain.runs())
