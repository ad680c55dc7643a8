"""A start cancelled while ``confine`` runs in its worker thread leaves no scratch folder.

``confine`` makes a private ``harnessnb-cmd-*`` folder (the command's ``/tmp`` and
``HOME``) and is blocking, so both of its callers, a command (``tools/_process.run_argv``)
and a stdio MCP server (``mcp/_connection``), run it in a thread. A caller cancelled
while that thread runs (a run cancelled, an MCP start timed out) never receives the
``Confined``; before the fix nobody removed its folder (a CI run of notebook 06 once
found one left in the kernel's TMPDIR).

The real ``confine`` runs here; only its return is held back (a ``threading.Event`` with
a timeout, touched from the worker thread; no asyncio object is) until the caller has
been cancelled. ``asyncio.run`` joins the default executor before it returns, so the
worker thread has finished when the folder is looked for. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb.rules._errors import MCPErrorKind
from harnessnb.tools import _process, _sandbox
from harnessnb.tools._process import run_argv

_WAIT_S = 10.0  # every wait's bound: nothing here may hang


@dataclass
class Gate:
    """The real ``confine``, its return held until ``release`` (or ``_WAIT_S``)."""

    entered: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    made: list[Path] = field(default_factory=list)

    def wrap(self, real: Any) -> Any:
        def slow(*args: Any, **kwargs: Any) -> Any:
            confined = real(*args, **kwargs)
            self.made.append(confined.scratch)
            self.entered.set()
            self.release.wait(_WAIT_S)
            return confined

        return slow


@pytest.fixture
def temp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary folder the test owns, where ``confine`` makes its scratch folders."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Gate:
    held = Gate()
    slow = held.wrap(_sandbox.confine)
    monkeypatch.setattr(_sandbox, "confine", slow)
    monkeypatch.setattr(_process, "confine", slow, raising=False)
    try:
        from harnessnb.mcp import _connection
    except ImportError:  # pragma: no cover - the mcp extra is not installed
        pass
    else:
        monkeypatch.setattr(_connection, "confine", slow, raising=False)
    return held


def _left(temp: Path) -> list[str]:
    return sorted(p.name for p in temp.glob("harnessnb-cmd-*"))


def test_a_command_cancelled_while_confined_leaves_no_scratch(
    tmp_path: Path, temp: Path, gate: Gate
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()

    async def main() -> None:
        task = asyncio.create_task(run_argv(["true"], cwd=ws, timeout_s=5.0))
        assert await asyncio.to_thread(gate.entered.wait, _WAIT_S)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gate.release.set()

    asyncio.run(asyncio.wait_for(main(), 3 * _WAIT_S))
    assert len(gate.made) == 1  # the folder was made, in the test's temp folder
    assert gate.made[0].parent == temp
    assert _left(temp) == []


def test_a_command_not_cancelled_still_runs_and_cleans_up(
    tmp_path: Path, temp: Path, gate: Gate
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    gate.release.set()
    result = asyncio.run(asyncio.wait_for(run_argv(["true"], cwd=ws, timeout_s=5.0), _WAIT_S))
    assert result.exit_code == 0
    assert len(gate.made) == 1 and _left(temp) == []


@pytest.mark.parametrize("how", ["start timed out", "start cancelled"])
def test_an_mcp_start_stopped_while_confined_leaves_no_scratch(
    tmp_path: Path, temp: Path, gate: Gate, how: str
) -> None:
    pytest.importorskip("mcp")
    from harnessnb.mcp._connection import Connection

    ws = tmp_path / "ws"
    ws.mkdir()
    server = hn.MCPServer.stdio(sys.executable, args=["-c", "pass"], name="slow", timeout_s=0.5)

    async def main() -> None:
        conn = Connection(server, workspace=ws, policy=hn.Policy.default())
        try:
            if how == "start timed out":  # the server's timeout passes inside confine
                with pytest.raises(hn.MCPError) as caught:
                    await conn.start()
                assert caught.value.kind is MCPErrorKind.TIMEOUT
                assert gate.entered.is_set()
            else:
                task = asyncio.create_task(conn.start())
                assert await asyncio.to_thread(gate.entered.wait, _WAIT_S)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
        finally:
            gate.release.set()
            await conn.aclose()

    asyncio.run(asyncio.wait_for(main(), 3 * _WAIT_S))
    assert len(gate.made) == 1 and gate.made[0].parent == temp
    assert _left(temp) == []
