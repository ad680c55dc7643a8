"""The MCP tests' shared pieces: a workspace, connections closed after each test, the
hostile server's command, and where the npm servers are (``HARNESSNB_MCP_SERVERS``)."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb.mcp._connection import Connection

HOSTILE = str(Path(__file__).with_name("hostile_server.py"))
NPM_BINS = Path(os.environ.get("HARNESSNB_MCP_SERVERS", "/opt/harnessnb-mcp/node_modules/.bin"))


def _hostile(mode: str, *, timeout_s: float = 5.0, **kw: Any) -> hn.MCPServer:
    """The hostile server in ``mode``, run by this interpreter."""
    return hn.MCPServer.stdio(
        sys.executable, args=[HOSTILE, mode], name="hostile", timeout_s=timeout_s, **kw
    )


def _npm_server(name: str) -> str:
    """The path of an npm server's bin, or a skip saying where it was looked for."""
    path = NPM_BINS / name
    if not path.exists():
        pytest.skip(f"{name} is not installed under {NPM_BINS} (set HARNESSNB_MCP_SERVERS)")
    return str(path)


@pytest.fixture
def hostile() -> Callable[..., hn.MCPServer]:
    """``hostile(mode, timeout_s=5.0, **stdio_options)``: the hostile server."""
    return _hostile


@pytest.fixture
def npm_server() -> Callable[[str], str]:
    """``npm_server(bin_name)``: an npm server's path, or the test skipped."""
    return _npm_server


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


@pytest.fixture
async def connect(workspace: Path) -> AsyncIterator[Callable[..., Connection]]:
    """Make connections in the workspace (default policy); all closed after the test."""
    made: list[Connection] = []

    def make(server: hn.MCPServer, *, policy: hn.Policy | None = None, **kw: object) -> Connection:
        conn = Connection(
            server,
            workspace=workspace,
            policy=policy or hn.Policy.default(),
            **kw,  # type: ignore[arg-type]
        )
        made.append(conn)
        return conn

    yield make
    for conn in made:
        await conn.aclose()
