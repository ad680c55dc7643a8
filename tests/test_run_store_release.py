"""A store ``hn.run`` opens itself (from a path, or the default store) is let go of when
the run ends: finished, failed or cancelled, awaited or run_sync. A ``Store`` given is
the caller's and stays open.

The process's registry of open store files (``store._conn``) is what tells: a file
whose last ``Store`` is closed leaves it (its connection closed, the file free for other
processes); one still used counts its users."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

import harnessnb as hn
from harnessnb.store import _conn
from harnessnb.store._batch import WriteOp
from tests.files_helpers import folder


def users(path: Path) -> int:
    """How many open ``Store``s of this process use the file (0: not open at all)."""
    with _conn._REGISTRY_LOCK:
        db = _conn._REGISTRY.get(os.path.realpath(path))
        return 0 if db is None else db.users


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return folder(tmp_path / "ws")


def contract(ws: Path) -> hn.TaskContract:
    return hn.TaskContract("say done", ws, max_steps=2)


async def test_a_run_given_a_path_closes_the_store_it_opened(ws: Path, tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    result = await hn.run(contract(ws), hn.ScriptedProvider(["done"]), store=path)
    assert result.outcome is hn.RunOutcome.FINISHED
    assert users(path) == 0  # was 1: the run's Store was never closed
    with hn.Store(path) as store:
        assert store.runs()["outcome"].astype(object).tolist() == ["finished"]


async def test_a_run_on_the_default_store_closes_it(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "default.duckdb"
    monkeypatch.setenv("HARNESSNB_STORE", str(path))
    await hn.run(contract(ws), hn.ScriptedProvider(["done"]))
    assert users(path) == 0


async def test_a_run_leaves_the_callers_own_store_of_that_file_open(
    ws: Path, tmp_path: Path
) -> None:
    path = tmp_path / "runs.duckdb"
    with hn.Store(path) as mine:
        await hn.run(contract(ws), hn.ScriptedProvider(["done"]), store=path)
        assert users(path) == 1  # the caller's, back to where it was
        await hn.run(contract(ws), hn.ScriptedProvider(["done"]), store=mine)
        assert users(path) == 1  # a Store given is not closed by the run
        assert len(mine.runs()) == 2
    assert users(path) == 0


async def test_a_run_that_fails_closes_the_store_it_opened(ws: Path, tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    await hn.run(contract(ws), hn.ScriptedProvider(["done"]), store=path, run_id="r1")
    with pytest.raises(hn.StoreError) as info:  # the run id is taken: its start refused
        await hn.run(contract(ws), hn.ScriptedProvider(["done"]), store=path, run_id="r1")
    assert info.value.kind == "duplicate"
    assert users(path) == 0
    with pytest.raises((AttributeError, hn.HarnessError)):  # not a tool: fails before its start
        await hn.run(contract(ws), hn.ScriptedProvider(["done"]), store=path, tools=[1])  # type: ignore[list-item]
    assert users(path) == 0


async def test_a_cancelled_run_closes_the_store_it_opened(ws: Path, tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    asked = asyncio.Event()

    class Waiting(hn.ScriptedProvider):
        async def complete(self, *args: object, **kwargs: object) -> hn.Completion:
            asked.set()
            await asyncio.Event().wait()  # never answers
            raise AssertionError("unreachable")

    task = asyncio.ensure_future(hn.run(contract(ws), Waiting(["done"]), store=path))
    await asyncio.wait_for(asked.wait(), 30)
    assert users(path) == 1  # the run's own, open while it runs
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert users(path) == 0
    with hn.Store(path) as store:
        assert store.runs()["outcome"].astype(object).tolist() == ["cancelled"]


async def test_a_run_cancelled_during_its_start_closes_the_store_it_opened(
    ws: Path, tmp_path: Path
) -> None:
    # The start is uncut: it ends, the run is recorded cancelled, and then the store
    # the start opened is closed too (it was left open).
    path = tmp_path / "runs.duckdb"
    began, gate = threading.Event(), threading.Event()

    def hold(con: object, batch: object) -> None:
        began.set()
        gate.wait(10)

    with hn.Store(path) as mine:
        mine.submit(WriteOp("hold", hold))  # the file's writer is busy: the start waits
        assert began.wait(10)
        run = hn.run(contract(ws), hn.ScriptedProvider(["done"]), store=path)
        task = asyncio.ensure_future(run)
        for _ in range(1000):  # until the run has opened its own Store of the file
            if users(path) == 2:
                break
            await asyncio.sleep(0.01)
        assert users(path) == 2
        task.cancel()
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert users(path) == 1  # mine alone
        assert mine.runs()["outcome"].astype(object).tolist() == ["cancelled"]


def test_run_sync_closes_the_store_it_opened(ws: Path, tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    result = hn.run_sync(contract(ws), hn.ScriptedProvider(["done"]), store=path)
    assert result.outcome is hn.RunOutcome.FINISHED
    assert users(path) == 0
