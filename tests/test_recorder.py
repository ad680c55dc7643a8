"""One run recorder (``loop/_recorder.py``) for the loop and the coding-agent CLIs.

Against a real DuckDB file: a run begun with its lease, the lease renewed (and a
CLI's session lease with it), steps with their rows, the run's end with its outcome
and the lease released; then a loop run and a CLI run recorded the same way.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

import harnessnb as hn
from harnessnb.events import FinishedEvent
from harnessnb.loop import _recorder
from harnessnb.loop._events import EventSink
from harnessnb.loop._outcome import invocation_outcome
from harnessnb.loop._recorder import RunRecorder
from harnessnb.store._writer import store_writer

sys.path.insert(0, str(Path(__file__).with_name("agents")))
from agent_helpers import CLIs  # the agents tests' stand-in CLIs


def lease_row(store: hn.Store, key: str) -> dict[str, Any]:
    frame = store.sql("SELECT * FROM leases WHERE run_id = ?", [key])
    assert len(frame) == 1, f"no lease {key!r}"
    return dict(frame.iloc[0])


def recorder(store: hn.Store, run_id: str = "r1") -> tuple[RunRecorder, list[hn.RunEvent]]:
    seen: list[hn.RunEvent] = []
    rec = RunRecorder(
        store, run_id, clock=hn.FakeClock(start=1000.0), events=EventSink(seen.append)
    )
    return rec, seen


def run_row(run_id: str) -> dict[str, Any]:
    return {"run_id": run_id, "task": "t", "workspace": "/w", "provider": "p", "started_at": 1000.0}


# ------------------------------------------------------------------ the recorder


async def test_start_holds_the_lease_and_a_final_step_commits_the_outcome_and_releases_it(
    store: hn.Store,
) -> None:
    rec, seen = recorder(store)
    await rec.start(run_row("r1"))
    assert rec.lease is not None and not lease_row(store, "r1")["released"]
    step = {"step": 1, "decision": "tool_calls", "tool_calls": 1, "tokens": 7, "at": 1000.0}
    tool = {
        "step": 1,
        "seq": 1,
        "tool": "read_file",
        "effect": "read",
        "args": {},
        "status": "ok",
        "at": 1000.0,
    }
    await rec.commit_step(step, checkpoint={"tokens": 7}, tool_calls=[tool])
    assert rec.lease is not None  # a step that does not end the run keeps it
    last = {**step, "step": 2, "decision": "answer", "tool_calls": 0}
    await rec.commit_step(last, checkpoint={"tokens": 9}, ending=hn.RunOutcome.FINISHED)
    await rec.emit(FinishedEvent(outcome="finished", steps=2, tokens=9), 2)

    assert rec.lease is None and lease_row(store, "r1")["released"]
    run = store.get_run("r1")
    assert run is not None and run["outcome"] == "finished" and run["error"] is None
    assert list(store.steps("r1")["step"]) == [1, 2]
    assert list(store.tool_calls("r1")["tool"]) == ["read_file"]
    assert [(e.kind, e.run_id, e.step) for e in seen] == [("finished", "r1", 2)]


async def test_finish_without_a_step_records_the_outcome_and_its_error(store: hn.Store) -> None:
    rec, _ = recorder(store)
    await rec.start(run_row("r1"))
    err = hn.HarnessError("it broke")
    await rec.finish(hn.RunOutcome.ESCALATED_TERMINAL, err)
    run = store.get_run("r1")
    assert run is not None and run["outcome"] == "escalated_terminal"
    assert "it broke" in str(run["error"])
    assert rec.lease is None and lease_row(store, "r1")["released"]


async def test_record_cancelled_ends_the_run_from_this_thread(store: hn.Store) -> None:
    rec, _ = recorder(store)
    await rec.start(run_row("r1"))
    rec.record_cancelled({"name": "RefusedError", "message": "not answered"})
    run = store.get_run("r1")
    assert run is not None and run["outcome"] == "cancelled"
    assert lease_row(store, "r1")["released"]


async def test_leases_are_renewed_while_driven_and_a_held_one_let_go(
    store: hn.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_recorder, "LEASE_TTL_S", 0.3)  # renewed every 0.1 s
    rec, _ = recorder(store)
    await rec.start(run_row("r1"))
    session = await rec.hold("agent-session:/w:s")
    first = {key: lease_row(store, key)["renewed_at"] for key in ("r1", "agent-session:/w:s")}
    renewer = asyncio.create_task(rec.keep_leases())
    try:
        for _ in range(200):
            await asyncio.sleep(0.05)
            now = {key: lease_row(store, key)["renewed_at"] for key in first}
            if all(now[k] != first[k] for k in first):
                break
        assert all(now[k] != first[k] for k in first), (first, now)
        assert rec.lease is not None and rec.lease.generation == 1
        await rec.let_go(session)
        assert lease_row(store, "agent-session:/w:s")["released"] and rec.held == []
    finally:
        renewer.cancel()
        await asyncio.gather(renewer, return_exceptions=True)
    await rec.finish(hn.RunOutcome.FINISHED)


async def test_a_store_that_gave_out_ends_the_run_by_the_budget_rule(store: hn.Store) -> None:
    rec, _ = recorder(store)
    await rec.start(run_row("r1"))
    busy = hn.StoreError("busy", kind="busy")
    assert await rec.gave_out(busy, 30.0) is hn.RunOutcome.TIME_BUDGET
    run = store.get_run("r1")
    assert run is not None and run["outcome"] == "time_budget"
    rec2, _ = recorder(store, "r2")
    await rec2.start(run_row("r2"))
    assert await rec2.gave_out(busy, None) is hn.RunOutcome.ESCALATED_RETRYABLE


@pytest.mark.parametrize(
    ("error", "cancelled", "outcome"),
    [
        (None, False, hn.RunOutcome.FINISHED),
        (hn.HarnessError("x"), True, hn.RunOutcome.CANCELLED),
        (hn.StoreError("busy", kind="busy"), False, hn.RunOutcome.ESCALATED_RETRYABLE),
        (hn.HarnessError("x"), False, hn.RunOutcome.ESCALATED_TERMINAL),
    ],
)
def test_how_an_invocation_ends_is_one_rule(
    error: hn.HarnessError | None, cancelled: bool, outcome: hn.RunOutcome
) -> None:
    assert invocation_outcome(error, cancelled=cancelled) is outcome


# ------------------------------------------------------------------ both kinds of run


def driver_of(contract: hn.TaskContract, provider: hn.Provider, store: hn.Store) -> Any:
    """A loop run's driver on ``store``, run id r1, a fake clock, no tools."""
    from harnessnb.loop._driver import Driver

    return Driver(
        contract,
        provider,
        store=store,
        policy=hn.Policy.default(),
        approver=None,
        tools=(),
        on_event=None,
        clock=hn.FakeClock(),
        run_id="r1",
    )


class Recorded(NamedTuple):
    """What the store holds of a run: its outcome, its lease let go, its rows."""

    outcome: str
    released: bool
    steps: int
    attempts: int
    tool_calls: int


def recorded(store: hn.Store, run_id: str) -> Recorded:
    run = store.get_run(run_id)
    assert run is not None
    return Recorded(
        outcome=run["outcome"],
        released=bool(lease_row(store, run_id)["released"]),
        steps=len(store.steps(run_id)),
        attempts=len(store.attempts(run_id)),
        tool_calls=len(store.tool_calls(run_id)),
    )


async def test_a_loop_run_is_recorded_with_its_lease_steps_and_rows(
    tmp_path: Path, store: hn.Store
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("hello\n")
    provider = hn.ScriptedProvider([{"tool": "read_file", "args": {"path": "a.txt"}}, "done"])
    kinds: list[str] = []
    result = await hn.run(
        hn.TaskContract("read a.txt", ws),
        provider,
        store=store,
        on_event=lambda e: kinds.append(str(e.kind)),
    )
    assert result.outcome is hn.RunOutcome.FINISHED
    assert recorded(store, result.run_id) == Recorded(
        "finished", released=True, steps=2, attempts=2, tool_calls=1
    )
    assert kinds[0] == "started" and kinds[-1] == "finished"


@pytest.fixture
def clis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[CLIs]:
    (tmp_path / "cli").mkdir()
    c = CLIs(tmp_path / "cli")
    monkeypatch.setenv("PATH", f"{c.bin}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("HOME", str(c.home))
    yield c
    c.store.close()


async def test_a_cli_run_is_recorded_the_same_way_its_session_lease_let_go(clis: CLIs) -> None:
    clis.scenario(mode="ok", text="a.txt says hello")
    kinds: list[str] = []
    result = await hn.agents.run(
        hn.agents.ClaudeCode(),
        "read a.txt",
        clis.ws,
        store=clis.store,
        session="s1",
        on_event=lambda e: kinds.append(str(e.kind)),
    )
    assert result.outcome is hn.RunOutcome.FINISHED
    assert recorded(clis.store, result.run_id) == Recorded(
        "finished", released=True, steps=1, attempts=1, tool_calls=1
    )
    assert lease_row(clis.store, f"agent-session:{clis.ws.resolve()}:s1")["released"]
    assert kinds[0] == "started" and kinds[-1] == "finished"


async def test_a_cli_that_is_missing_ends_the_run_without_a_step(
    clis: CLIs, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(clis.home))  # no CLI there
    result = await hn.agents.run(hn.agents.Codex(), "x", clis.ws, store=clis.store)
    assert result.outcome is hn.RunOutcome.ESCALATED_TERMINAL
    assert recorded(clis.store, result.run_id) == Recorded(
        "escalated_terminal", released=True, steps=0, attempts=0, tool_calls=0
    )


def test_the_driver_composes_its_collaborators_instead_of_inheriting_them(
    tmp_path: Path, store: hn.Store
) -> None:
    from harnessnb.loop._driver import Driver
    from harnessnb.loop._step_tools import StepTools

    assert not issubclass(Driver, StepTools)
    provider = hn.ScriptedProvider(["done"])
    (tmp_path / "ws").mkdir()
    driver = driver_of(hn.TaskContract("t", tmp_path / "ws"), provider, store)
    assert isinstance(driver.tools, StepTools) and driver.tools.recorder is driver.recorder
    assert driver.model_calls.rows is driver.recorder.attempt_rows


def state_of(state: Any) -> dict[str, Any]:
    """A ``RunState`` as plain values, to compare two of them."""
    checks = state.checks
    return {
        "messages": state.conversation.messages,
        "step": state.step,
        "tokens": state.tokens,
        "text": state.text,
        "calls": state.calls,
        "checks": (checks.detector.state(), checks.feedback_given, checks.verified, checks.refused),
    }


async def test_the_run_state_is_the_checkpoint_restored_whole(
    tmp_path: Path, store: hn.Store
) -> None:
    from harnessnb.loop._state import RunState

    ws = tmp_path / "ws"  # the store (tmp_path/runs.duckdb) is outside it
    ws.mkdir()
    (ws / "a.txt").write_text("hello\n")
    contract = hn.TaskContract("read a.txt", ws, verification=hn.FileContains("a.txt", "hello"))
    provider = hn.ScriptedProvider(
        [
            {"tool": "read_file", "args": {"path": "a.txt"}},
            {"tool": "read_file", "args": {"path": "a.txt"}},
            "done",
        ]
    )
    driver = driver_of(contract, provider, store)
    result = await driver.drive(fresh=True)
    assert result.steps >= 1
    restored = RunState.from_checkpoints(contract, store.checkpoints("r1"))
    assert state_of(restored) == state_of(driver.state)
    assert restored.calls.attempts == result.attempts and restored.tokens == result.tokens


class _NotACompletion:
    attempts: tuple[Any, ...] = ()  # past the provider call, the loop trips on the rest


class _Broken(hn.ScriptedProvider):
    """Answers with something that is no Completion: a bug the loop does not expect."""

    async def complete(self, messages: Any, tools: Any = None) -> Any:
        return _NotACompletion()


async def test_a_bug_in_the_loop_ends_the_run_terminal_with_its_lease_released(
    tmp_path: Path, store: hn.Store
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with pytest.raises(hn.HarnessError, match="no attribute"):
        await hn.run(hn.TaskContract("t", ws), _Broken(["x"]), store=store, run_id="rb")
    run = store.get_run("rb")
    assert run is not None and run["outcome"] == "escalated_terminal"
    assert lease_row(store, "rb")["released"]  # another process may take the run at once


async def test_a_cli_run_cancelled_during_its_start_is_recorded_cancelled(clis: CLIs) -> None:
    # As a loop run (issue #24): the run row's write is queued behind another when the
    # interrupt comes; the start is let commit and the run recorded cancelled.
    import threading

    from harnessnb.store._batch import WriteOp

    clis.scenario(mode="ok")
    gate = threading.Event()
    store_writer(clis.store).submit(WriteOp("hold", lambda con, batch: gate.wait(10)))
    task = asyncio.ensure_future(
        hn.agents.run(hn.agents.ClaudeCode(), "x", clis.ws, store=clis.store, run_id="rc")
    )
    await asyncio.sleep(0.2)  # the run waits for its start commit, queued behind "hold"
    threading.Timer(0.2, gate.set).start()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    run = clis.store.get_run("rc")
    assert run is not None and run["outcome"] == "cancelled"
    assert lease_row(clis.store, "rc")["released"]
    assert clis.calls() == []  # the CLI was never started
