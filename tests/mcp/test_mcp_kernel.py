"""The notebook's interrupt button (a real kernel's SIGINT) cancels a run whose MCP call
a server holds: the run is recorded ``cancelled`` and no server process is left."""

from __future__ import annotations

import os
import queue
import time
import uuid
from pathlib import Path

import pytest
from notebook_helpers import started_kernel

import harnessnb as hn

HOSTILE = str(Path(__file__).with_name("hostile_server.py"))
CELL_TIMEOUT_S = 60.0


def _running(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in (Path("/proc") / pid / "cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            continue
    return found


def test_the_interrupt_button_cancels_a_run_an_mcp_server_holds(tmp_path: Path) -> None:
    pytest.importorskip("mcp.client")
    ws, store = tmp_path / "ws", tmp_path / "runs.duckdb"
    ws.mkdir()
    marker = f"hn-kernel-{uuid.uuid4().hex}"
    code = f"""
import sys
import harnessnb as hn
hn.set_testing(True)
server = hn.MCPServer.stdio(sys.executable, args=[{HOSTILE!r}, "slow", {marker!r}],
                            name="hostile", timeout_s=120)
provider = hn.ScriptedProvider([{{"tool": "slow", "args": {{}}}}, "done"])
hn.run_sync(hn.TaskContract("wait", workspace={str(ws)!r}), provider, store={str(store)!r},
            approver=hn.ApproveAll(), mcp=[server])
"""
    with started_kernel(tmp_path) as (km, kc):
        msg_id = kc.execute(code)
        deadline = time.monotonic() + CELL_TIMEOUT_S
        interrupted_at = None
        while True:
            assert time.monotonic() < deadline, "the cell did not end"
            if interrupted_at is None and (ws / "slow.started").exists():
                interrupted_at = time.monotonic()
                km.interrupt_kernel()
            try:
                msg = kc.get_iopub_msg(timeout=0.05)
            except queue.Empty:
                continue
            done = msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle"
            if msg["parent_header"].get("msg_id") == msg_id and done:
                break
        ended_at = time.monotonic()
    assert interrupted_at is not None, "the server's tool never started"
    assert ended_at - interrupted_at < 15  # the tool would sleep for a minute
    opened = hn.Store(store, linger_s=0)
    (outcome,) = opened.runs()["outcome"].tolist()
    assert outcome == "cancelled"
    assert opened.tool_calls()["tool"].tolist() == ["slow"]  # the call was in flight
    gone_by = time.monotonic() + 5
    while _running(marker) and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert _running(marker) == []
