"""MCP servers in a run (``hn.run(mcp=[...])``): opened once the run is recorded, their
tools offered and called, their rows (``server``, ``error_kind``) and snapshot stored,
and every server process gone when the run ends, whatever the end.

Real servers only (the tests' hostile server, ``mcp-server-git``); the model is a
``ScriptedProvider``. A unique marker argument on each server's command line finds its
processes (the sandbox's too) in /proc."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

pytest.importorskip("mcp.client")

import harnessnb as hn
from harnessnb import events
from harnessnb.rules._errors import MCPErrorKind

HOSTILE = str(Path(__file__).with_name("hostile_server.py"))

Reply = str | dict[str, Any]


def marked(mode: str, *, timeout_s: float = 5.0, name: str = "hostile") -> tuple[hn.MCPServer, str]:
    """The hostile server in ``mode`` with a marker of its own on its command line."""
    marker = f"hn-mark-{uuid.uuid4().hex}"
    server = hn.MCPServer.stdio(
        sys.executable, args=[HOSTILE, mode, marker], name=name, timeout_s=timeout_s
    )
    return server, marker


def running(marker: str) -> list[int]:
    """The pids whose command line holds ``marker``."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            pids.append(int(proc.name))
    return pids


def script(replies: Sequence[Reply], marker: str, seen: list[int]) -> hn.ScriptedProvider:
    """Answer ``replies`` in order, noting how many marked processes ran at each call
    (so "none left after" is checked against a server that did run)."""
    queue = list(replies)

    def reply(_messages: Sequence[dict[str, Any]]) -> Reply:
        seen.append(len(running(marker)))
        return queue.pop(0) if queue else "done"

    return hn.ScriptedProvider(reply)


@pytest.fixture
def store(tmp_path: Path) -> hn.Store:
    return hn.Store(tmp_path / "runs.duckdb")


def contract(ws: Path, **kw: Any) -> hn.TaskContract:
    return hn.TaskContract("use the tool server", ws, **kw)


async def test_a_runs_server_tools_are_called_recorded_and_the_server_closed(
    workspace: Path, store: hn.Store
) -> None:
    server, marker = marked("ok")
    seen: list[int] = []
    provider = script(
        [{"tool": "echo", "args": {"text": "hello"}}, {"tool": "fail", "args": {"why": "no"}}],
        marker,
        seen,
    )
    result = await hn.run(
        contract(workspace), provider, store=store, approver=hn.ApproveAll(), mcp=[server]
    )
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    assert seen[0] >= 1  # the server ran while the model was asked
    assert running(marker) == []
    rows = store.tool_calls(result.run_id).sort_values("step")
    assert rows["tool"].tolist() == ["echo", "fail"]
    assert rows["server"].tolist() == ["hostile", "hostile"]
    assert rows["status"].tolist() == ["ok", "error"]
    assert rows["error_kind"].tolist()[1] == "tool_error"
    assert rows["error_kind"].isna().tolist()[0]
    assert "hello" in str(rows["output"].tolist()[0])
    snapshot = store.mcp_servers(result.run_id)
    assert snapshot["server"].tolist() == ["hostile"]
    assert {t["name"] for t in snapshot["tools"].iloc[0]} >= {"echo", "fail"}


@pytest.mark.parametrize(
    ("mode", "outcome", "kind", "limit_s"),
    [
        # A server that exits does so in well under a second: a generous start limit
        # keeps a loaded machine from making its exit a timeout.
        ("exit-at-start", hn.RunOutcome.ESCALATED_RETRYABLE, MCPErrorKind.EXITED, 60.0),
        ("hang", hn.RunOutcome.ESCALATED_RETRYABLE, MCPErrorKind.TIMEOUT, 1.0),
    ],
)
async def test_a_server_that_cannot_start_is_a_recorded_run_with_its_typed_error(
    workspace: Path,
    store: hn.Store,
    mode: str,
    outcome: hn.RunOutcome,
    kind: MCPErrorKind,
    limit_s: float,
) -> None:
    server, marker = marked(mode, timeout_s=limit_s)
    provider = hn.ScriptedProvider(["never asked"])
    result = await hn.run(contract(workspace), provider, store=store, mcp=[server])
    assert result.outcome is outcome
    assert isinstance(result.error, hn.MCPError)
    assert (result.error.kind, result.error.server) == (kind, "hostile")
    if mode == "exit-at-start":
        assert "bad config" in (result.error.stderr or "")
    assert provider.calls == []
    run = store.runs(result.run_id).iloc[0]
    assert run["outcome"] == outcome.value
    assert running(marker) == []


async def test_no_server_outlives_a_run_that_fails(workspace: Path, store: hn.Store) -> None:
    server, marker = marked("ok")
    seen: list[int] = []

    def reply(_messages: Sequence[dict[str, Any]]) -> Reply | hn.ProviderError:
        seen.append(len(running(marker)))
        return hn.ProviderError("no key", kind=hn.ProviderErrorKind.AUTH)

    provider = hn.ScriptedProvider(reply)
    result = await hn.run(contract(workspace), provider, store=store, mcp=[server])
    assert result.outcome is hn.RunOutcome.ESCALATED_TERMINAL
    assert seen and seen[0] >= 1
    assert running(marker) == []


async def test_no_server_outlives_a_run_whose_time_runs_out(
    workspace: Path, store: hn.Store
) -> None:
    server, marker = marked("slow", timeout_s=30.0)
    seen: list[int] = []
    provider = script([{"tool": "slow", "args": {}}], marker, seen)
    result = await hn.run(
        contract(workspace, max_time_s=3.0),
        provider,
        store=store,
        approver=hn.ApproveAll(),
        mcp=[server],
    )
    assert result.outcome is hn.RunOutcome.TIME_BUDGET
    assert seen[0] >= 1
    rows = store.tool_calls(result.run_id)
    assert rows["error_kind"].tolist() == ["timeout"]  # the call was cut at the run's end
    assert running(marker) == []


async def test_no_server_outlives_a_run_that_raises(workspace: Path, tmp_path: Path) -> None:
    server, marker = marked("ok")
    seen: list[int] = []
    store = hn.Store(tmp_path / "closed.duckdb")

    def reply(_messages: Sequence[dict[str, Any]]) -> Reply:
        seen.append(len(running(marker)))
        store.close()  # the step's commit then raises StoreError(closed) out of the run
        return "done"

    with pytest.raises(hn.StoreError):
        await hn.run(contract(workspace), hn.ScriptedProvider(reply), store=store, mcp=[server])
    assert seen and seen[0] >= 1
    assert running(marker) == []


async def test_cancelling_a_run_waiting_on_a_hung_server_ends_it_cancelled(
    workspace: Path, store: hn.Store
) -> None:
    server, marker = marked("slow", timeout_s=30.0)
    seen: list[int] = []
    provider = script([{"tool": "slow", "args": {}}], marker, seen)
    calling = asyncio.Event()

    def on_event(event: events.AnyEvent) -> None:
        if isinstance(event, events.ApprovalDecidedEvent):  # the slow call goes next
            calling.set()

    task = asyncio.create_task(
        hn.run(
            contract(workspace),
            provider,
            store=store,
            approver=hn.ApproveAll(),
            mcp=[server],
            on_event=on_event,
            run_id="run_cancel_mcp",
        )
    )
    await asyncio.wait_for(calling.wait(), 10)
    await asyncio.sleep(0.5)  # let the call reach the server, which sleeps 60 s
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen[0] >= 1
    assert running(marker) == []
    assert store.runs("run_cancel_mcp").iloc[0]["outcome"] == "cancelled"


def _git_repo(path: Path) -> Path:
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "a.txt").write_text("a\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t"}
    env |= {"GIT_COMMITTER_EMAIL": "t@x", "PATH": "/usr/bin:/bin"}
    subprocess.run(["git", "-C", str(path), "add", "a.txt"], check=True, env=env)
    subprocess.run(["git", "-C", str(path), "commit", "-qm", "first"], check=True, env=env)
    return path


async def test_failure_rates_say_which_server_fails_and_how(
    workspace: Path, store: hn.Store
) -> None:
    repo = _git_repo(workspace / "repo")
    git = hn.MCPServer.stdio(
        sys.executable, args=["-m", "mcp_server_git", "--repository", str(repo)], timeout_s=20.0
    )
    hostile, _ = marked("ok")
    dying, _ = marked("die-mid-call", name="dying")
    slow, _ = marked("slow", name="slow", timeout_s=5.0)  # its start too
    calls: list[Reply] = [
        {"tool": "git_status", "args": {"repo_path": str(repo)}},
        {"tool": "git_log", "args": {"repo_path": str(repo)}},
        {"tool": "hostile__echo", "args": {"text": "x"}},  # three servers offer echo
        {"tool": "hostile__fail", "args": {"why": "y"}},
        {"tool": "die", "args": {}},
        {"tool": "slow", "args": {}},
    ]
    result = await hn.run(
        contract(workspace),
        hn.ScriptedProvider([*calls, "done"]),
        store=store,
        approver=hn.ApproveAll(),
        mcp=[git, hostile, dying, slow],
    )
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    rows = store.tool_calls(result.run_id).sort_values("step")
    kinds = {
        tool: None if pd.isna(kind) else kind
        for tool, kind in zip(rows["tool"], rows["error_kind"], strict=True)
    }
    assert rows["server"].tolist() == ["git", "git", "hostile", "hostile", "dying", "slow"]
    assert (kinds["git_status"], kinds["hostile__echo"]) == (None, None)
    assert (kinds["hostile__fail"], kinds["die"], kinds["slow"]) == (
        "tool_error",
        "exited",
        "timeout",
    )
    died = rows[rows["tool"] == "die"].iloc[0]
    assert "exit code 9" in died["output"] and "hostile: dying now" in died["output"]
    rates = store.failure_rates(of="tool_calls", by=("server", "kind"))
    rates = rates[rates["server"].notna()]
    got = {
        (r.server, None if pd.isna(r.kind) else r.kind): (r.failures, r.calls)
        for r in rates.itertuples()
    }
    assert got[("git", None)] == (0, 2)
    assert got[("hostile", "tool_error")] == (1, 2)
    assert got[("dying", "exited")] == (1, 1)
    assert got[("slow", "timeout")] == (1, 1)


def test_ctrl_c_on_run_sync_waiting_on_a_hung_server_cancels_it(
    workspace: Path, store: hn.Store
) -> None:
    import _thread
    import threading

    server, marker = marked("slow", timeout_s=30.0)
    seen: list[int] = []
    provider = script([{"tool": "slow", "args": {}}], marker, seen)

    def on_event(event: events.AnyEvent) -> None:
        if isinstance(event, events.ApprovalDecidedEvent):  # the slow call goes next
            threading.Timer(0.5, _thread.interrupt_main).start()

    with pytest.raises(KeyboardInterrupt):
        hn.run_sync(
            contract(workspace),
            provider,
            store=store,
            approver=hn.ApproveAll(),
            mcp=[server],
            on_event=on_event,
            run_id="run_ctrl_c_mcp",
        )
    assert seen[0] >= 1
    assert running(marker) == []
    assert store.runs("run_ctrl_c_mcp").iloc[0]["outcome"] == "cancelled"


async def test_one_server_failing_to_start_closes_the_others_and_a_bad_setting_is_terminal(
    workspace: Path, store: hn.Store
) -> None:
    good, marker = marked("ok", name="good")
    bad, _ = marked("exit-at-start", name="bad", timeout_s=60.0)
    result = await hn.run(
        contract(workspace), hn.ScriptedProvider(["never"]), store=store, mcp=[good, bad]
    )
    assert result.outcome is hn.RunOutcome.ESCALATED_RETRYABLE
    assert isinstance(result.error, hn.MCPError) and result.error.server == "bad"
    assert running(marker) == []  # the server that did start is closed too
    misnamed = hn.MCPServer.stdio(
        sys.executable, args=[HOSTILE, "ok"], name="hostile", effects={"nope": hn.Effect.READ}
    )
    result = await hn.run(
        contract(workspace), hn.ScriptedProvider(["never"]), store=store, mcp=[misnamed]
    )
    assert result.outcome is hn.RunOutcome.ESCALATED_TERMINAL
    assert isinstance(result.error, hn.ConfigError) and "nope" in result.error.message
    assert store.runs(result.run_id).iloc[0]["outcome"] == "escalated_terminal"


async def test_a_bad_mcp_keyword_is_the_callers_error_before_any_run_is_recorded(
    workspace: Path, store: hn.Store
) -> None:
    server, _ = marked("ok")
    provider = hn.ScriptedProvider(["never asked"])
    for bad in (server, [server, server], ["python -m mcp_server_time"]):
        with pytest.raises(hn.ConfigError, match="mcp"):
            await hn.run(contract(workspace), provider, store=store, mcp=bad)  # type: ignore[arg-type]
    assert store.runs().empty and provider.calls == []


@pytest.mark.parametrize("trusted", [False, True])
async def test_a_server_lying_in_its_annotations_is_judged_a_write_unless_trusted(
    workspace: Path, store: hn.Store, trusted: bool
) -> None:
    """The hostile server's ``harmless`` claims ``readOnlyHint`` and writes a file: from
    an untrusted server (the default) it is a WRITE the default policy asks about; only
    ``trusted=True`` lets the claim count (then the default policy allows a read)."""
    server = hn.MCPServer.stdio(
        sys.executable, args=[HOSTILE, "lies"], name="hostile", timeout_s=10.0, trusted=trusted
    )
    asked: list[hn.ApprovalRequest] = []

    async def deny(request: hn.ApprovalRequest) -> hn.Decision:
        asked.append(request)
        return hn.Decision.deny("not approved")

    provider = hn.ScriptedProvider([{"tool": "harmless", "args": {"name": "w.txt"}}, "done"])
    result = await hn.run(contract(workspace), provider, store=store, approver=deny, mcp=[server])
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    (row,) = store.tool_calls(result.run_id).to_dict("records")
    assert (row["tool"], row["server"]) == ("harmless", "hostile")
    if trusted:
        assert asked == [] and (row["effect"], row["status"]) == ("read", "ok")
        assert (workspace / "w.txt").exists()
    else:
        assert [r.target for r in asked] == ["mcp:hostile/harmless"]
        assert (row["effect"], row["status"]) == ("write", "refused")
        assert not (workspace / "w.txt").exists()
