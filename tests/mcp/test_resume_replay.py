"""MCP servers across a resume and a replay: a resumed run opens its servers again and
leaves out a changed WRITE tool unless accepted; a resume without the servers is a
``ResumeError`` naming them; a WRITE MCP call cut off by a crash needs reconciling; a
replay answers MCP tools from the recorded rows with no server running.

Real servers only (the tests' hostile server in ``tools-v1``/``tools-v2``/``ok``/
``slow``); the model is a ``ScriptedProvider``; the crash kills a real process."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.client")

import harnessnb as hn
from harnessnb import events

HOSTILE = str(Path(__file__).with_name("hostile_server.py"))
Reply = str | dict[str, Any] | hn.ProviderError


def hostile(mode: str, *, script: str = HOSTILE, timeout_s: float = 10.0) -> hn.MCPServer:
    return hn.MCPServer.stdio(
        sys.executable, args=[script, mode], name="hostile", timeout_s=timeout_s
    )


def down() -> hn.ProviderError:
    """A provider that stays down: the run ends ``escalated_retryable`` (resumable)."""
    return hn.ProviderError("down", kind=hn.ProviderErrorKind.SERVER, status=503)


@pytest.fixture
def store(tmp_path: Path) -> hn.Store:
    return hn.Store(tmp_path / "runs.duckdb")


def contract(ws: Path) -> hn.TaskContract:
    return hn.TaskContract("use the tool server", ws)


async def first_run(ws: Path, store: hn.Store, replies: Sequence[Reply], mode: str) -> str:
    """A run with the hostile server in ``mode`` that stops resumably after ``replies``."""
    queue = list(replies)

    def reply(_messages: Sequence[dict[str, Any]]) -> Reply:
        return queue.pop(0) if queue else down()

    result = await hn.run(
        contract(ws),
        hn.ScriptedProvider(reply),
        store=store,
        approver=hn.ApproveAll(),
        mcp=[hostile(mode)],
    )
    assert result.outcome.resumable, (result.outcome, result.error)
    return result.run_id


@pytest.mark.parametrize("changed", ["leave_out", "accept"])
async def test_a_resume_leaves_out_a_changed_write_tool_unless_accepted(
    workspace: Path, store: hn.Store, changed: str
) -> None:
    run_id = await first_run(workspace, store, [{"tool": "alpha", "args": {}}], "tools-v1")
    seen: list[events.AnyEvent] = []
    result = await hn.resume(
        run_id,
        hn.ScriptedProvider([{"tool": "beta", "args": {}}, "done"]),
        store=store,
        approver=hn.ApproveAll(),
        mcp=[hostile("tools-v2")],
        mcp_changed=changed,  # type: ignore[arg-type]
        on_event=seen.append,
    )
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    rows = store.tool_calls(run_id).sort_values("step")
    assert rows["tool"].tolist() == ["alpha", "beta"]
    beta = rows.iloc[1]
    refused = [e for e in seen if isinstance(e, events.RefusedEvent)]
    if changed == "accept":
        assert (beta["status"], beta["server"], beta["output"]) == ("ok", "hostile", "b")
        assert refused == []
    else:  # not offered: the model's call of it is an unknown tool
        assert (beta["status"], beta["error_code"]) == ("error", "TOOL_UNKNOWN")
        assert [(e.target, e.reason) for e in refused] == [
            ("mcp:hostile/beta", "mcp_tools_changed")
        ]
    snapshots = store.mcp_servers(run_id)
    assert len(snapshots) == 2  # the first list and the changed one, side by side
    assert snapshots["tools_hash"].nunique() == 2


async def test_an_unchanged_server_goes_on_without_a_word(workspace: Path, store: hn.Store) -> None:
    run_id = await first_run(workspace, store, [{"tool": "echo", "args": {"text": "1"}}], "ok")
    seen: list[events.AnyEvent] = []
    result = await hn.resume(
        run_id,
        hn.ScriptedProvider([{"tool": "echo", "args": {"text": "2"}}, "done"]),
        store=store,
        approver=hn.ApproveAll(),
        mcp=[hostile("ok")],
        on_event=seen.append,
    )
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    assert store.tool_calls(run_id)["status"].tolist() == ["ok", "ok"]
    assert not [e for e in seen if isinstance(e, events.RefusedEvent)]
    assert len(store.mcp_servers(run_id)) == 1


async def test_a_resume_without_the_runs_servers_names_them(
    workspace: Path, store: hn.Store
) -> None:
    run_id = await first_run(workspace, store, [{"tool": "echo", "args": {"text": "1"}}], "ok")
    with pytest.raises(hn.ResumeError) as caught:
        await hn.resume(run_id, hn.ScriptedProvider(["done"]), store=store)
    assert caught.value.reason == "mcp_servers"
    assert "hostile" in caught.value.message
    with pytest.raises(hn.ConfigError):
        await hn.resume(
            run_id,
            hn.ScriptedProvider(["done"]),
            store=store,
            mcp=[hostile("ok")],
            mcp_changed="yes",  # type: ignore[arg-type]
        )


_CRASHING = textwrap.dedent(
    """
    import asyncio, sys, threading, time
    from pathlib import Path
    import harnessnb as hn

    ws, db, script, ready = sys.argv[1:5]
    store = hn.Store(db)
    server = hn.MCPServer.stdio(sys.executable, args=[script, "slow"], name="hostile",
                                timeout_s=60.0)
    provider = hn.ScriptedProvider([{"tool": "slow", "args": {}}, "done"])

    def say_when_intent_is_durable():
        while store.sql("SELECT 1 FROM tool_calls WHERE status = 'intent'").empty:
            time.sleep(0.05)
        Path(ready).write_text("intent")

    threading.Thread(target=say_when_intent_is_durable, daemon=True).start()
    asyncio.run(hn.run(hn.TaskContract("t", ws), provider, store=store, run_id="run_crash_mcp",
                       approver=hn.ApproveAll(), mcp=[server]))
    """
)


async def test_a_write_mcp_call_cut_off_by_a_crash_needs_reconciliation(
    workspace: Path, tmp_path: Path
) -> None:
    db, ready = tmp_path / "crash.duckdb", tmp_path / "ready"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CRASHING, str(workspace), str(db), HOSTILE, str(ready)],
        env=env,
        start_new_session=True,
    )
    try:
        for _ in range(600):  # until the slow call's intent is durable (at most a minute)
            if ready.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert ready.exists(), "the run never wrote its MCP call's intent"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the run and its server with it
        proc.wait()
    store = hn.Store(db)
    try:
        result = await hn.resume(
            "run_crash_mcp", hn.ScriptedProvider(["never asked"]), store=store, mcp=[hostile("ok")]
        )
        assert result.outcome is hn.RunOutcome.NEEDS_RECONCILIATION
        row = store.tool_calls("run_crash_mcp").iloc[0]
        assert (row["tool"], row["server"], row["status"]) == (
            "slow",
            "hostile",
            "needs_reconciliation",
        )
    finally:
        store.close()


async def test_a_replay_answers_mcp_tools_from_the_rows_with_no_server(
    workspace: Path, tmp_path: Path, store: hn.Store
) -> None:
    script = workspace / "server.py"  # where the server's sandbox can read it
    shutil.copyfile(HOSTILE, script)
    replies: list[Reply] = [
        {"tool": "echo", "args": {"text": "recorded"}},
        {"tool": "fail", "args": {"why": "recorded"}},
        "done",
    ]
    recorded = await hn.run(
        contract(workspace),
        hn.Record(hn.ScriptedProvider(replies), store),
        store=store,
        approver=hn.ApproveAll(),
        mcp=[hostile("ok", script=str(script))],
    )
    assert recorded.outcome is hn.RunOutcome.FINISHED, recorded.error
    script.unlink()  # the server cannot run any more
    target = hn.Store(tmp_path / "replay.duckdb")
    replayed = await hn.replay(recorded.run_id, store, store=target)
    assert replayed.outcome is recorded.outcome, replayed.error
    assert replayed.text == recorded.text
    columns = ["tool", "server", "status", "error_kind", "output"]
    before = store.tool_calls(recorded.run_id).sort_values("step")[columns]
    after = target.tool_calls(replayed.run_id).sort_values("step")[columns]
    assert before["status"].tolist() == ["ok", "error"]
    assert before.astype(str).values.tolist() == after.astype(str).values.tolist()
