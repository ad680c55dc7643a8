"""A store file is untrusted input (a shared notebook's ``runs.duckdb``): it is data,
never code. A file whose views, macros or tables are not harnessnb's own is refused
before any of its rows is read; no connection harnessnb opens reads another file or
reaches the network; the store's sidecar files are never written through a link.

Every test plants a secret file beside the store and asserts that no output (rows,
errors, the command's streams) holds it and that no file outside was changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest

import harnessnb as hn
from harnessnb.store._writer import store_writer
from tests.store_helpers import run_row

ROOT = Path(__file__).resolve().parents[2]
SECRET = "BEGIN-OPENSSH-PRIVATE-KEY-hostile-store-7f3a"


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "home" / ".ssh" / "id_rsa"
    path.parent.mkdir(parents=True)
    path.write_text(SECRET + "\n")
    return path


def _store(path: Path) -> None:
    """A harnessnb store holding one run."""
    with hn.Store(path) as store:
        store_writer(store).create_run(run_row("r1"))
    for sidecar in (path.with_name(path.name + ".lock"), path.with_name(path.name + ".wal")):
        sidecar.unlink(missing_ok=True)


def _tamper(path: Path, *statements: str) -> bytes:
    con = duckdb.connect(str(path))  # the attacker's connection: everything allowed
    for statement in statements:
        con.execute(statement)
    con.close()
    return path.read_bytes()


def _runs_view_reading(secret: Path) -> list[str]:
    return [
        "DROP VIEW runs",
        "CREATE VIEW runs AS SELECT r.run_id, content AS task, r.workspace, r.provider, "
        "r.model, r.started_at, r.finished_at, r.outcome, 0 AS steps, 0 AS tokens, "
        "r.schema_version, r.contract, r.policy, r.error, r.extras, r.updated_at, "
        f"0.0 AS cost_usd, r.sweep_id FROM run_rows r, read_text('{secret}')",
    ]


def _run_rows_view_reading(secret: Path) -> list[str]:
    return [
        "DROP VIEW runs",
        "ALTER TABLE run_rows RENAME TO kept",
        "CREATE VIEW run_rows AS SELECT run_id, content AS task, workspace, provider, model, "
        "started_at, finished_at, outcome, schema_version, contract, policy, error, extras, "
        f"updated_at, sweep_id, output_mode, output FROM kept, read_text('{secret}')",
        _ours_runs_view(),
    ]


def _ours_runs_view() -> str:
    from harnessnb.store._combine import _runs_view

    return _runs_view()


HOSTILE: dict[str, Callable[[Path], list[str]]] = {
    "runs-view-read_text": _runs_view_reading,
    "run_rows-view-read_text": _run_rows_view_reading,
    "extra-view-read_csv": lambda s: [
        f"CREATE VIEW notes AS SELECT * FROM read_csv('{s}', header=false, "
        "columns={'a': 'VARCHAR'})"
    ],
    "macro-shadowing-greatest": lambda s: [
        f"CREATE MACRO greatest(a, b) AS (SELECT content FROM read_text('{s}'))"
    ],
    "table-macro-httpfs": lambda s: [
        "CREATE MACRO remote(url) AS TABLE SELECT * FROM read_csv(url)"
    ],
    "sequence": lambda s: ["CREATE SEQUENCE counter"],
    "index": lambda s: ["CREATE INDEX by_run ON attempts (run_id)"],
    "type": lambda s: ["CREATE TYPE mood AS ENUM ('calm', 'cross')"],
    "view-in-another-schema": lambda s: [
        "CREATE SCHEMA spare",
        f"CREATE VIEW spare.leak AS SELECT content FROM read_text('{s}')",
    ],
    "generated-column": lambda s: [
        "CREATE TABLE pad (x VARCHAR)",
        "ALTER TABLE markers RENAME TO markers_old",
        "CREATE TABLE markers (run_id VARCHAR NOT NULL, kind VARCHAR NOT NULL, "
        "detail VARCHAR, \"at\" TIMESTAMP, extra VARCHAR AS (upper(detail)))",
    ],
}


@pytest.fixture(params=sorted(HOSTILE))
def hostile(
    request: pytest.FixtureRequest, tmp_path: Path, secret: Path
) -> tuple[Path, bytes, str]:
    path = tmp_path / "shared" / "runs.duckdb"
    path.parent.mkdir()
    _store(path)
    before = _tamper(path, *HOSTILE[request.param](secret))
    return path, before, request.param


def _untouched(path: Path, before: bytes) -> None:
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_a_store_holding_code_of_its_own_is_refused_unread(
    hostile: tuple[Path, bytes, str], secret: Path
) -> None:
    path, before, _ = hostile
    with pytest.raises(hn.StoreError) as info:
        hn.Store(path).runs()
    assert info.value.kind == "foreign"
    assert "not a harnessnb store as harnessnb writes it" in info.value.message
    assert SECRET not in str(info.value) and SECRET not in repr(info.value.to_dict())
    _untouched(path, before)
    assert secret.read_text() == SECRET + "\n"


def test_a_hostile_shard_is_refused_by_combine_and_merge(
    hostile: tuple[Path, bytes, str], tmp_path: Path
) -> None:
    path, before, _ = hostile
    with pytest.raises(hn.StoreError) as info:
        hn.Store.combine([path]).runs()
    assert info.value.kind == "foreign" and SECRET not in str(info.value)
    into = tmp_path / "all.duckdb"
    with pytest.raises(hn.StoreError):
        hn.Store.combine([path]).merge(into=into)
    assert not into.exists() or SECRET.encode() not in into.read_bytes()
    _untouched(path, before)


def test_harnessnb_runs_on_a_hostile_store_shows_no_secret(
    hostile: tuple[Path, bytes, str],
) -> None:
    path, before, _ = hostile
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "harnessnb", "runs", "--store", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode != 0
    assert "not a harnessnb store" in done.stderr + done.stdout
    assert SECRET not in done.stdout + done.stderr
    _untouched(path, before)


def test_merge_into_a_hostile_store_is_refused(tmp_path: Path, secret: Path) -> None:
    source = tmp_path / "mine.duckdb"
    _store(source)
    target = tmp_path / "shared" / "runs.duckdb"
    target.parent.mkdir()
    _store(target)
    before = _tamper(target, *_runs_view_reading(secret), "DELETE FROM run_rows")
    with pytest.raises(hn.StoreError) as info:
        hn.Store(source).merge(into=target)
    assert info.value.kind == "foreign" and SECRET not in str(info.value)
    _untouched(target, before)


# ------------------------------------------------------------ no external access


@pytest.mark.parametrize(
    "query",
    [
        "SELECT content FROM read_text('{secret}')",
        "SELECT * FROM read_csv('{secret}', header=false)",
        "COPY (SELECT 1) TO '{outside}'",
        "SELECT * FROM read_csv('https://127.0.0.1:9/key.csv')",
        "ATTACH '{outside}' AS other",
    ],
    ids=["read_text", "read_csv", "copy-to", "httpfs", "attach"],
)
def test_no_query_reads_or_writes_outside_the_store(
    tmp_path: Path, secret: Path, query: str
) -> None:
    path = tmp_path / "runs.duckdb"
    _store(path)
    outside = tmp_path / "outside.csv"
    text = query.format(secret=secret, outside=outside)
    for store in (hn.Store(path), hn.Store(":memory:"), hn.Store.combine([path])):
        with pytest.raises(hn.StoreError) as info:
            store.sql(text)
        assert "disabled by configuration" in info.value.message
        assert SECRET not in str(info.value)
        store.close()
    assert not outside.exists()


# ------------------------------------------------------------ sidecar files


def _link_sidecar(path: Path, suffix: str, target: Path) -> Path:
    sidecar = path.with_name(path.name + suffix)
    sidecar.unlink(missing_ok=True)
    sidecar.symlink_to(target)
    return sidecar


@pytest.mark.parametrize("suffix", [".lock", ".wal"])
@pytest.mark.parametrize("reader", ["store", "combine"])
def test_a_symlinked_sidecar_is_refused_and_nothing_is_written_through_it(
    tmp_path: Path, suffix: str, reader: str
) -> None:
    path = tmp_path / "shared" / "runs.duckdb"
    path.parent.mkdir()
    _store(path)
    bashrc = tmp_path / "home" / ".bashrc"
    bashrc.parent.mkdir()
    bashrc.write_bytes(b"# my shell\n" * 4)
    sidecar = _link_sidecar(path, suffix, bashrc)
    with pytest.raises(hn.StoreError) as info:
        if reader == "store":
            hn.Store(path).runs()
        else:
            hn.Store.combine([path]).runs()
    assert str(sidecar) in info.value.message
    assert bashrc.read_bytes() == b"# my shell\n" * 4
    assert sidecar.is_symlink()


@pytest.mark.parametrize("suffix", [".lock", ".wal"])
def test_a_sidecar_that_is_a_folder_is_refused_and_named_a_folder(
    tmp_path: Path, suffix: str
) -> None:
    # The store and its sidecars are judged by one table of what a path that is no
    # regular file is: a folder is said to be one, for the store as for a sidecar.
    path = tmp_path / "runs.duckdb"
    _store(path)
    sidecar = path.with_name(path.name + suffix)
    sidecar.mkdir()
    with pytest.raises(hn.StoreError) as info:
        hn.Store(path).runs()
    assert info.value.kind == "io"
    assert f"the store's sidecar {sidecar} is a folder;" in info.value.message
    assert sidecar.is_dir() and not any(sidecar.iterdir())


@pytest.mark.parametrize("how", ["hard-link", "other-owner", "fifo"])
def test_a_lock_file_that_is_not_ours_alone_is_refused(tmp_path: Path, how: str) -> None:
    path = tmp_path / "runs.duckdb"
    _store(path)
    lock = path.with_name(path.name + ".lock")
    other = tmp_path / "elsewhere"
    if how == "hard-link":
        other.write_bytes(b"\0" * 32)
        os.link(other, lock)
    elif how == "other-owner":
        if os.geteuid() != 0:
            pytest.skip("needs root to give the lock to another user")
        lock.write_bytes(b"\0" * 32)
        os.chown(lock, 65534, 65534)
    else:
        os.mkfifo(lock)
    with pytest.raises(hn.StoreError) as info:
        hn.Store(path).runs()
    assert str(lock) in info.value.message
    if how == "hard-link":
        assert other.read_bytes() == b"\0" * 32


def test_an_honest_store_opens_and_reads_as_before(tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    _store(path)
    assert list(hn.Store(path).runs()["run_id"]) == ["r1"]
    assert list(hn.Store.combine([path]).runs()["run_id"]) == ["r1"]
    into = tmp_path / "all.duckdb"
    assert list(hn.Store.combine([path]).merge(into=into).runs()["run_id"]) == ["r1"]
    shutil.copy(path, tmp_path / "copy.duckdb")
    assert list(hn.Store(tmp_path / "copy.duckdb").runs()["run_id"]) == ["r1"]


# ------------------------------------------------------------ a store in the workspace


def _erase_the_record(ws: Path, store: Path | hn.Store | None) -> hn.RunResult:
    """The attack: under Policy.permissive(), the agent overwrites the store file."""
    script: list[object] = [
        {"tool": "write_file", "args": {"path": "runs.duckdb", "content": "gone"}},
        "done",
    ]
    contract = hn.TaskContract("tidy up", ws, max_steps=3)
    return hn.run_sync(
        contract, hn.ScriptedProvider(script), store=store, policy=hn.Policy.permissive()
    )


@pytest.mark.parametrize("how", ["default", "explicit", "store-object"])
def test_a_run_refuses_a_store_inside_its_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "README.md").write_text("hi\n")
    monkeypatch.chdir(ws)  # --workspace . with the default ./runs.duckdb
    monkeypatch.delenv("HARNESSNB_STORE", raising=False)
    store: Path | hn.Store | None = None
    if how == "explicit":
        store = ws / "runs.duckdb"
    elif how == "store-object":
        (ws / "sub").mkdir()
        store = hn.Store(ws / "sub" / "runs.duckdb")
    with pytest.raises(hn.ConfigError) as info:
        _erase_the_record(ws, store)
    assert "inside the workspace" in info.value.message
    if how != "store-object":
        assert sorted(p.name for p in ws.iterdir()) == ["README.md"]  # nothing made


def test_a_store_beside_the_workspace_keeps_its_record(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    store = tmp_path / "runs.duckdb"
    result = _erase_the_record(ws, store)
    assert result.outcome is hn.RunOutcome.FINISHED
    assert (ws / "runs.duckdb").read_text() == "gone"  # the agent's own file, not the record
    assert hn.Store(store).runs()["outcome"].tolist() == ["finished"]


def test_resume_refuses_a_store_inside_the_recorded_workspace(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "runs.duckdb"
    contract = hn.TaskContract("say hi", ws, max_steps=1)
    with hn.Store(outside) as store:
        done = hn.run_sync(contract, hn.ScriptedProvider(["hi"]), store=store, run_id="r")
    assert done.outcome is hn.RunOutcome.FINISHED
    shutil.copy(outside, ws / "runs.duckdb")  # the record moved where the agent works
    with pytest.raises(hn.ConfigError, match="inside the workspace"):
        hn.resume_sync("r", hn.ScriptedProvider(["hi"]), store=ws / "runs.duckdb")


def test_harnessnb_run_with_workspace_dot_and_the_default_store_is_refused(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "HARNESSNB_STORE"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "harnessnb", "run", "--workspace", ".", "--provider", "demo",
         "say hi"],
        cwd=ws, capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert done.returncode != 0
    assert "inside the workspace" in done.stderr + done.stdout
    assert list(ws.iterdir()) == []
