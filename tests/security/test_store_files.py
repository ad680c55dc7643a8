"""The store keeps to its own files: foreign databases refused untouched, read-only
files read (and replayed) in place, and values DuckDB cannot hold made safe first."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

import harnessnb as hn
from harnessnb.chaos import ChaosServer, Reply
from harnessnb.rules._errors import StoreErrorKind
from harnessnb.store._writer import store_writer

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "notebooks" / "data" / "recorded-run.duckdb"


# ------------------------------------------------------------ foreign files


def _foreign(path: Path, *statements: str) -> bytes:
    con = duckdb.connect(str(path))
    for statement in statements:
        con.execute(statement)
    con.close()
    return path.read_bytes()


@pytest.mark.parametrize(
    "statements",
    [
        ["CREATE TABLE customers (id INTEGER)", "INSERT INTO customers VALUES (1)"],
        ["CREATE TABLE runs (x INTEGER)"],
        ["CREATE TABLE schema_version (version INTEGER)", "INSERT INTO schema_version VALUES (7)"],
        ["CREATE SCHEMA crm", "CREATE TABLE crm.people (id INTEGER)"],
        ["CREATE VIEW answer AS SELECT 42 AS x"],
    ],
    ids=["table", "runs-table", "other-schema-version", "other-schema", "view"],
)
def test_duckdb_file_of_another_program_is_refused_and_left_byte_identical(
    tmp_path: Path, statements: list[str]
) -> None:
    path = tmp_path / "warehouse.duckdb"
    before = _foreign(path, *statements)
    with pytest.raises(hn.StoreError) as info:
        hn.Store(path)
    assert info.value.kind == StoreErrorKind.FOREIGN == "foreign"
    assert "not a harnessnb store" in info.value.message and str(path) in info.value.message
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["warehouse.duckdb"]


def test_a_run_pointed_at_a_foreign_file_fails_before_touching_it(tmp_path: Path) -> None:
    path = tmp_path / "warehouse.duckdb"
    before = _foreign(path, "CREATE TABLE customers (id INTEGER)")
    ws = tmp_path / "ws"
    ws.mkdir()
    with pytest.raises(hn.StoreError) as info:
        hn.run_sync(hn.TaskContract("t", ws), hn.ScriptedProvider(["done"]), store=str(path))
    assert info.value.kind == "foreign"
    assert path.read_bytes() == before


@pytest.mark.parametrize("how", ["new-path", "empty-database", "zero-bytes"])
def test_a_new_path_or_an_empty_file_becomes_a_store(tmp_path: Path, how: str) -> None:
    path = tmp_path / "runs.duckdb"
    if how == "empty-database":
        duckdb.connect(str(path)).close()
    elif how == "zero-bytes":
        path.write_bytes(b"")
    with hn.Store(path) as store:
        assert store.read_only is False
        store_writer(store).create_run({"run_id": "r1", "task": "t", "started_at": 0.0})
        assert store.runs()["run_id"].tolist() == ["r1"]
    with hn.Store(path) as again:
        assert again.runs()["run_id"].tolist() == ["r1"]


# ------------------------------------------------------------ read-only files


def _read_only_mount(folder: Path) -> list[str]:
    """argv prefix that runs a command with ``folder`` mounted read-only.

    Permission bits do not bind root, so a read-only bind mount (bubblewrap, else a
    private mount namespace) is what makes the folder truly unwritable.
    """
    bwrap = shutil.which("bwrap")
    if bwrap:
        probe = subprocess.run([bwrap, "--dev-bind", "/", "/", "true"], capture_output=True)
        if probe.returncode == 0:
            return [bwrap, "--dev-bind", "/", "/", "--ro-bind", str(folder), str(folder)]
    pytest.skip("no way to mount a folder read-only here (bubblewrap unusable)")


_REPLAY = """
import sys, harnessnb as hn
from harnessnb.store._writer import store_writer
from harnessnb.demo import make_demo_workspace
src, ws = sys.argv[1], make_demo_workspace(sys.argv[2])
store = hn.Store(src)
assert store.read_only, "a store on a read-only mount opens read-only"
run_id = store.runs()["run_id"].tolist()[0]
try:
    store_writer(store).add_marker(run_id, "note", "x", 0.0)
except hn.StoreError as exc:
    print("write refused:", exc.kind)
store.close()
result = hn.replay_sync(run_id, src, store=":memory:", workspace=ws, approver=hn.ApproveAll())
print("replayed:", result.outcome.value, result.steps)
"""


def test_a_recording_in_a_read_only_folder_is_replayed(tmp_path: Path) -> None:
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    src = shelf / "recorded.duckdb"
    shutil.copyfile(RECORDING, src)
    src.chmod(0o444)
    shelf.chmod(0o555)
    before = src.read_bytes()
    argv = [*_read_only_mount(shelf), sys.executable, "-c", _REPLAY, str(src),
            str(tmp_path / "project")]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "write refused: read_only" in done.stdout
    assert "replayed: success 3" in done.stdout
    assert src.read_bytes() == before
    assert sorted(p.name for p in shelf.iterdir()) == ["recorded.duckdb"]


# ------------------------------------------------- values DuckDB cannot hold


def _run_against(tmp_path: Path, reply: Reply, *, stream: bool) -> tuple[hn.RunResult, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    path = tmp_path / "runs.duckdb"
    with ChaosServer(responder=lambda request: reply) as srv:
        provider = hn.OpenAI("m", api_key="sk-test", base_url=srv.openai_url, stream=stream)
        contract = hn.TaskContract("say something", ws, max_steps=1)
        result = hn.run_sync(contract, provider, store=str(path))
        assert srv.requests[0].stream is stream
    return result, path


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_an_answer_with_a_lone_surrogate_is_stored_and_the_run_closed(
    tmp_path: Path, stream: bool
) -> None:
    result, path = _run_against(tmp_path, Reply(text="bad \ud800 half"), stream=stream)
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    with hn.Store(path) as store:
        runs = store.runs()
        assert runs["outcome"].tolist() == ["finished"]
        assert runs["finished_at"].notna().all()
        assert store.attempts(result.run_id)["kind"].isna().all()
        # The checkpoint keeps the text exactly (JSON escapes it), so resume is faithful.
        state = store_writer(store).last_checkpoint(result.run_id)
    assert state is not None and state["state"]["text"] == "bad \ud800 half"


def test_usage_of_ten_to_the_thirty_is_malformed_and_the_run_closed(tmp_path: Path) -> None:
    # No answer uses 10^30 tokens: the usage is malformed (issue 25), so no cost is inf
    # and nothing is stored as a wrong number; the run still ends cleanly.
    reply = Reply(text="done", input_tokens=10**30, output_tokens=2**64)
    result, path = _run_against(tmp_path, reply, stream=False)
    assert result.outcome is hn.RunOutcome.ESCALATED_RETRYABLE, result.error
    assert result.error is not None and "not a token count" in result.error.message
    with hn.Store(path) as store:
        runs = store.runs()
        assert runs["finished_at"].notna().all() and runs["outcome"].notna().all()
        attempts = store.attempts(result.run_id)
    assert set(attempts["kind"].astype(str)) == {"malformed"}
    # the answer arrived, so it is billed: by an estimate, never by the absurd count
    assert attempts["usage_estimated"].all() and attempts["input_tokens"].lt(10**6).all()
    assert not attempts["cost_usd"].isin([float("inf")]).any()


_READ = """
import sys, harnessnb as hn
from harnessnb.store._writer import store_writer
store = hn.Store(sys.argv[1])
print("read_only:", store.read_only, store.runs()["run_id"].tolist())
writer = store_writer(store)
for write in (lambda: writer.create_run({"run_id": "r2", "task": "t", "started_at": 0.0}),
              lambda: store.sql("DELETE FROM steps")):
    try:
        write()
    except hn.StoreError as exc:
        print("refused:", exc.kind)
"""


def test_a_current_store_on_a_read_only_mount_is_read_in_place(tmp_path: Path) -> None:
    shelf = tmp_path / "shelf"
    shelf.mkdir()
    path = shelf / "runs.duckdb"
    with hn.Store(path) as store:
        store_writer(store).create_run({"run_id": "r1", "task": "t", "started_at": 0.0})
    before = path.read_bytes()
    argv = [*_read_only_mount(shelf), sys.executable, "-c", _READ, str(path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "read_only: True ['r1']",
        "refused: read_only",
        "refused: read_only",
    ]
    assert path.read_bytes() == before
