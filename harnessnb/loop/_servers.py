"""A run's MCP servers (``hn.run(mcp=[...])``): opened once the run row is written,
their tools offered beside the others, closed when the run ends, whatever the end.

``RunServers.open`` starts every server (``mcp._toolset.ToolServers``), records what
each offered (``record_mcp_servers``, patiently like every write) and adds the tools
to the executor; a server that cannot start is the run's typed error instead.

On resume the snapshot stored for each server is compared with what it offers now
(``tools_hash``): a server whose tools changed is logged, naming it and the tools, and
a changed or new tool that is not READ is left out of the offered tools (with a
``refused`` event, reason ``mcp_tools_changed``) unless ``mcp_changed="accept"``.

A replay answers MCP tools from the recorded rows: ``stand_ins`` builds them from the
stored snapshot (the same names, specs and effects), with no server and no connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from ..rules import _events as ev
from ..rules._errors import ConfigError, HarnessError, ResumeError, ToolError
from ..store._writer import store_writer
from ..tools._protocol import Effect

if TYPE_CHECKING:
    from pathlib import Path

    from ..mcp._server import MCPServer
    from ..mcp._tools import Answer, MCPTool
    from ..mcp._toolset import ToolServers
    from ..rules._policy import Policy
    from ..store._row_types import MCPServerRow
    from ..store._store import Store
    from ..tools._executor import ToolExecutor
    from ._recorder import RunRecorder

__all__ = [
    "MCPChanged",
    "RunServers",
    "given_servers",
    "needed_servers",
    "resumed_servers",
    "stand_ins",
]

log = logging.getLogger("harnessnb.mcp")

MCPChanged = Literal["leave_out", "accept"]
_TOOL_KEYS = ("description", "input_schema", "annotations")


class RunServers:
    """One run's MCP servers (see the module docstring)."""

    def __init__(
        self,
        servers: Sequence[MCPServer],
        *,
        workspace: Path,
        policy: Policy,
        remaining: Callable[[], float | None],
    ) -> None:
        from ..mcp._toolset import ToolServers

        self.set: ToolServers = ToolServers(
            servers, workspace=workspace, policy=policy, remaining=remaining
        )

    async def open(
        self,
        executor: ToolExecutor,
        recorder: RunRecorder,
        emit: Callable[[ev.AnyEvent], Awaitable[None]],
        *,
        stored: Sequence[dict[str, Any]] = (),
        changed: MCPChanged = "leave_out",
    ) -> HarnessError | None:
        """Start the servers, record their snapshot, offer their tools; the error that
        ends the run instead (an ``MCPError``: a server could not start or list)."""
        try:
            await self.set.open(reserved=executor.names())
        except HarnessError as err:
            return err
        tools = list(self.set.tools)
        snapshot = self.set.snapshot()
        rows = cast("list[MCPServerRow]", snapshot)
        await recorder.patient(
            lambda: recorder.writer.queued.record_mcp_servers(recorder.run_id, rows)
        )
        if stored:
            tools = await self._unchanged(tools, snapshot, stored, changed, recorder.run_id, emit)
        # In server-name order, as a replay reads the snapshot back (its requests match).
        ordered: list[MCPTool] = sorted(tools, key=lambda t: t.server_name)
        executor.add(ordered)
        return None

    async def _unchanged(
        self,
        tools: list[MCPTool],
        snapshot: list[dict[str, Any]],
        stored: Sequence[dict[str, Any]],
        changed: MCPChanged,
        run_id: str,
        emit: Callable[[ev.AnyEvent], Awaitable[None]],
    ) -> list[MCPTool]:
        """The tools a resume offers: a changed or new WRITE one only when accepted."""
        before = {row["server"]: row for row in stored}  # a server's last snapshot
        differ: dict[str, set[str]] = {}
        for now in snapshot:
            old = before.get(now["server"])
            if old is None or old.get("tools_hash") == now["tools_hash"]:
                continue
            old_tools = {t.get("name"): t for t in old.get("tools") or []}
            names = {
                t["name"]
                for t in now["tools"]
                if t["name"] not in old_tools
                or any(old_tools[t["name"]].get(k) != t.get(k) for k in _TOOL_KEYS)
            }
            differ[now["server"]] = names
            log.warning(
                "MCP server %s offers other tools than when run %s began: changed or new %s",
                now["server"],
                run_id,
                ", ".join(sorted(names)) or "none (some were removed)",
            )
        kept: list[MCPTool] = []
        for tool in tools:
            same = tool.tool not in differ.get(tool.server_name, set())
            if same or tool.effect is Effect.READ or changed == "accept":
                kept.append(tool)
            else:
                message = (
                    f"MCP server {tool.server_name!r} changed its tool {tool.tool!r} (or added it) "
                    "since the run began, and it is not read-only: left out; resume with "
                    'mcp_changed="accept" to offer it'
                )
                log.warning("%s", message)
                await emit(
                    ev.RefusedEvent(
                        act="exec",
                        target=f"mcp:{tool.server_name}/{tool.tool}",
                        rule=None,
                        layer="mcp",
                        tool=tool.name,
                        source="mcp",
                        message=message,
                        reason="mcp_tools_changed",
                    )
                )
        return kept

    async def aclose(self) -> None:
        """Close every server (its process gone); failures are logged."""
        await self.set.aclose()


async def resumed_servers(
    store: Store, run_id: str, given: Sequence[MCPServer], changed: str
) -> list[dict[str, Any]]:
    """The snapshots stored for ``run_id``, once a resume is seen to give its servers.

    Raises:
        ConfigError: ``changed`` is neither ``"leave_out"`` nor ``"accept"``.
        ResumeError: ``reason="mcp_servers"`` (``needed_servers``).
    """
    if changed not in ("leave_out", "accept"):
        raise ConfigError(f'mcp_changed= takes "leave_out" or "accept", not {changed!r}')
    given = given_servers(given, "resume")
    stored = await asyncio.to_thread(store_writer(store).mcp_servers_of, run_id)
    needed_servers(stored, given)
    return stored


def given_servers(servers: Sequence[MCPServer], where: str) -> tuple[MCPServer, ...]:
    """``mcp=`` checked before anything starts: a list of ``MCPServer`` with distinct
    names, and the SDK installed when there is one (``ConfigError`` naming the extra),
    so a bad ``mcp=`` is the caller's error, not a recorded run's."""
    from ..mcp._server import checked_servers, require_sdk

    checked = checked_servers(servers, where)
    if checked:
        require_sdk()
    return checked


def needed_servers(stored: Sequence[dict[str, Any]], given: Sequence[MCPServer]) -> None:
    """A resume must be given every server the run had (by name).

    Raises:
        ResumeError: ``reason="mcp_servers"``, naming the servers missing.
    """
    missing = sorted({str(row["server"]) for row in stored} - {s.name for s in given})
    if missing:
        raise ResumeError(
            f"the run used the MCP servers {', '.join(missing)}: resume it with "
            "mcp=[...] giving them (hn.MCPServer.stdio/.http with the same name=)",
            reason="mcp_servers",
        )


def stand_ins(stored: Sequence[dict[str, Any]]) -> list[MCPTool]:
    """The MCP tools a run offered, from its stored snapshot (each server's last),
    for a replay: same names, specs and effects; never invoked (no server runs)."""
    from ..mcp._tools import MCPTool

    last = {row["server"]: row for row in stored}
    tools: list[MCPTool] = []
    for server in sorted(last):
        for item in last[server].get("tools") or []:
            if item.get("offered_as") is None:
                continue
            tools.append(
                MCPTool(
                    _Stored(item),
                    server=server,
                    source=_NoServer(server),
                    effect=Effect(item["effect"]) if item.get("effect") else None,
                    name=str(item["offered_as"]),
                )
            )
    return tools


class _Stored:
    """A stored tool as the ``Offered`` shape."""

    def __init__(self, item: dict[str, Any]) -> None:
        self.name = str(item["name"])
        self.description = str(item.get("description") or "")
        self.input_schema: dict[str, Any] = dict(item.get("input_schema") or {})
        self.annotations: dict[str, bool | None] = dict(item.get("annotations") or {})


class _NoServer:
    """A replay's tool source: no server runs, so a call is a refusal (a replay never
    invokes a tool; its recorded row answers)."""

    def __init__(self, server: str) -> None:
        self.server = server

    async def call(
        self, tool: str, args: dict[str, Any], *, timeout_s: float | None = None
    ) -> Answer:
        raise ToolError(f"replay: MCP server {self.server!r} does not run", code="TOOL_REPLAY")

    async def restart(self, error: BaseException | None = None) -> bool:
        return False

    @property
    def sandbox(self) -> str | None:
        return None
