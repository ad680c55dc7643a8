"""The faces' MCP tool servers: ``--mcp SPEC`` and ``--mcp-trust NAME``.

``--mcp SPEC`` (repeatable; both faces, on run, resume and sweep) adds an MCP tool
server to the run's ``mcp=``: ``SPEC`` is a command line (``"python -m
mcp_server_time"``, run in the command sandbox), ``NAME=COMMAND ARGS`` or an http(s)
URL (``hn.MCPServer.parse``); a bad one is a usage error naming ``--mcp``. A face
cannot say per-tool effects: ``--mcp-trust NAME`` (repeatable) believes the named
server's tool annotations (read-only tools then run without asking), which is all
trust a face can give; per-tool ``effects=`` need Python (``hn.MCPServer.stdio``).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING

from ..rules._errors import ConfigError

if TYPE_CHECKING:
    from ..mcp._server import MCPServer

__all__ = ["mcp_from", "mcp_spec"]


def mcp_spec(text: str) -> MCPServer:
    """An argparse type: ``--mcp SPEC`` as an ``hn.MCPServer`` (``MCPServer.parse``:
    ``COMMAND ARGS``, ``NAME=COMMAND ARGS`` or an http(s) URL)."""
    from ..mcp._server import MCPServer

    try:
        return MCPServer.parse(text)
    except ConfigError as err:
        raise argparse.ArgumentTypeError(
            f'{err.message}; write it as "COMMAND ARGS", NAME="COMMAND ARGS" or a URL, '
            'e.g. --mcp "python -m mcp_server_time"'
        ) from None


def mcp_from(args: argparse.Namespace) -> tuple[MCPServer, ...]:
    """The run's ``mcp=`` from ``--mcp`` and ``--mcp-trust`` (empty without ``--mcp``).

    Raises:
        ConfigError: ``--mcp-trust`` naming no ``--mcp`` server, or two servers with
            one name.
    """
    from ..mcp._server import checked_servers

    servers = list(getattr(args, "mcp", None) or [])
    trust = list(getattr(args, "mcp_trust", None) or [])
    names = [server.name for server in servers]
    for name in trust:
        if name not in names:
            known = ", ".join(names) or "none"
            raise ConfigError(
                f"--mcp-trust {name!r} names no --mcp server (their names: {known}); name a "
                'server with --mcp NAME="COMMAND ARGS"'
            )
    servers = [
        dataclasses.replace(server, trusted=True) if server.name in trust else server
        for server in servers
    ]
    return checked_servers(servers, "--mcp")
