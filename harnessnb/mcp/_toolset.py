"""``ToolServers``: a run's MCP servers, their tools offered to the model as one set.

``open`` starts every server at once and lists its tools. Each tool is offered under
its server's name for it, prefixed ``SERVER__`` only where two names clash: with a
name in ``reserved`` (the built-in and the user's tools) or with another server's
tool (then every one of that name is prefixed). A tool the model could not be
offered is left out and said in ``skipped`` as (server, tool, reason), never a
run-ending error: a name a provider refuses (``[A-Za-z0-9_-]{1,64}``), or an input
schema ``tools/_schema.check_schema`` refuses (not draft-07 JSON Schema, nested too
deeply to compile, a ``$ref`` to another document: never fetched). An input schema's
``pattern`` can be a regular expression that backtracks for ever on a crafted
argument (``(a+)+$``): the arguments of an MCP tool are checked against its schema
without ``pattern`` and ``patternProperties`` (``_tools.unpatterned``); the server, whose
schema it is, checks them.

``snapshot`` is what each server offered, for the store: its name, transport,
target (``describe()``: never a header or env value), sandbox, tools (each with the
name offered to the model, or None when skipped, and its effect) and ``tools_hash``,
the sha256 of the canonical JSON of its tools (names, descriptions, schemas,
annotations), so a server that changed its tools between runs is seen.

A dead server (``exited``, ``connection_closed``) is restarted once per run, before
the retry of a READ or IDEMPOTENT call (``_Live.restart``, asked by ``MCPTool``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from ..rules._errors import ConfigError, HarnessError
from ..rules._policy import Policy
from ..rules._text import clip
from ..tools._protocol import Effect, Tool
from ..tools._schema import check_schema
from ._tools import DESCRIPTION_LIMIT, HINTS, Answer, MCPTool, Offered

__all__ = ["MAX_SCHEMA_CHARS", "Connecting", "ServerSettings", "ToolServers", "tools_hash"]

log = logging.getLogger("harnessnb.mcp")

# The largest input schema offered (canonical JSON): checking one costs about 0.1 s per
# 20 KB on the event loop, and each is sent to the model with every request.
MAX_SCHEMA_CHARS = 64_000
# What the providers accept as a tool's name (OpenAI's and Anthropic's rule).
_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
# The tools offered from one server at most (the rest skipped, said in ``skipped``):
# every tool's spec goes to the model with every request.
MAX_TOOLS_PER_SERVER = 128


class ServerSettings(Protocol):
    """What the tool set reads of an ``MCPServer``."""

    @property
    def name(self) -> str: ...

    @property
    def transport(self) -> str: ...

    @property
    def trusted(self) -> bool: ...

    @property
    def effects(self) -> Mapping[str, Effect]: ...

    def describe(self) -> str: ...


class Connecting(Protocol):
    """A live session with one server (``Connection``)."""

    async def start(self) -> None: ...

    async def list_tools(self) -> Sequence[Offered]: ...

    async def call(
        self, tool: str, args: dict[str, Any], *, timeout_s: float | None = None
    ) -> Answer: ...

    @property
    def sandbox(self) -> str | None: ...

    async def aclose(self) -> None: ...


Connect = Callable[..., Connecting]


# How many failed calls a server remembers the connection of (``_Live.failed_on``).
_FAILURES_KEPT = 64


class _Live:
    """One server's connection, which a dead server's restart replaces (once)."""

    def __init__(self, server: ServerSettings, make: Callable[[], Connecting]) -> None:
        self.server = server
        self._make = make
        self.connection = make()
        self.restarted = False
        self.offered: list[Offered] = []
        self._lock = asyncio.Lock()
        # Each failed call's error with the connection it failed on: a call that failed
        # on a connection another call's restart has already replaced retries on the
        # new one. Kept by identity (errors are not weakly referable), the last few.
        self._failed: list[tuple[BaseException, Connecting]] = []

    async def call(
        self, tool: str, args: dict[str, Any], *, timeout_s: float | None = None
    ) -> Answer:
        connection = self.connection
        try:
            return await connection.call(tool, args, timeout_s=timeout_s)
        except Exception as err:
            self._failed = [*self._failed[-_FAILURES_KEPT + 1 :], (err, connection)]
            raise

    def failed_on(self, error: BaseException | None) -> Connecting | None:
        """The connection the call that raised ``error`` (or the error it was raised
        from) went to, if this server saw it fail."""
        for seen in (error, getattr(error, "__cause__", None)):
            for failed, connection in self._failed:
                if seen is not None and failed is seen:
                    return connection
        return None

    async def restart(self, error: BaseException | None = None) -> bool:
        """Replace a dead connection, once; True when the failed call may be retried
        (also when another call's restart already replaced the one it failed on)."""
        failed_on = self.failed_on(error)
        async with self._lock:
            if failed_on is not None and failed_on is not self.connection:
                return True
            if self.restarted:
                return False
            self.restarted = True
            log.info("restarting MCP server %s", self.server.name)
            with contextlib.suppress(HarnessError):
                await self.connection.aclose()
            fresh = self._make()
            await fresh.start()
            # Only a started connection takes calls: one made while this started would
            # have gone to a connection not yet open, and failed on it.
            self.connection = fresh
            return True

    @property
    def sandbox(self) -> str | None:
        return self.connection.sandbox


class ToolServers:
    """A run's MCP servers (see the module docstring).

    Args:
        servers: The servers (``MCPServer``); two with one name are a ``ConfigError``.
        workspace: The run's workspace (a stdio server runs there).
        policy: The run's policy (a stdio server's sandbox follows it).
        remaining: Seconds the run has left (None: no budget).
        connect: Makes a server's connection (``Connection``; injectable for tests).
    """

    def __init__(
        self,
        servers: Sequence[ServerSettings],
        *,
        workspace: Path,
        policy: Policy,
        remaining: Callable[[], float | None] | None = None,
        connect: Connect | None = None,
    ) -> None:
        twice = sorted(n for n, c in Counter(s.name for s in servers).items() if c > 1)
        if twice:
            raise ConfigError(f"two MCP servers are named {twice[0]!r}: give one name=")
        self.servers = list(servers)
        self.workspace = Path(workspace)
        self.policy = policy
        self.remaining = remaining
        self._connect = connect
        self._live: list[_Live] = []
        self.tools: list[MCPTool] = []
        self.skipped: list[tuple[str, str, str]] = []

    async def open(self, reserved: set[str]) -> list[Tool]:
        """Start every server, list its tools and build them (see the module docstring).

        Raises:
            MCPError: A server could not be started or listed (the first such failure).
            ConfigError: A server's ``effects`` names a tool it does not offer.
        """
        self._live = [_Live(s, self._maker(s)) for s in self.servers]
        outcomes = await asyncio.gather(
            *(self._list(live) for live in self._live), return_exceptions=True
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        for live in self._live:
            unknown = sorted(set(live.server.effects) - {t.name for t in live.offered})
            if unknown:
                raise ConfigError(
                    f"MCP server {live.server.name!r} offers no tool named {unknown[0]!r} "
                    "(its effects= names it)"
                )
        self.tools = self._build(reserved)
        return list(self.tools)

    def _maker(self, server: ServerSettings) -> Callable[[], Connecting]:
        connect = self._connect or _connection_class()

        def make() -> Connecting:
            return connect(
                server, workspace=self.workspace, policy=self.policy, remaining=self.remaining
            )

        return make

    @staticmethod
    async def _list(live: _Live) -> None:
        await live.connection.start()
        live.offered = list(await live.connection.list_tools())

    def _build(self, reserved: set[str]) -> list[MCPTool]:
        usable: list[tuple[_Live, Offered]] = []
        for live in self._live:
            for i, offered in enumerate(live.offered):
                reason = _unusable(offered)
                if reason is None and i >= MAX_TOOLS_PER_SERVER:
                    reason = f"the server offers more than {MAX_TOOLS_PER_SERVER} tools"
                if reason is None:
                    usable.append((live, offered))
                else:
                    self.skipped.append((live.server.name, offered.name, reason))
        counts = Counter(offered.name for _, offered in usable)
        tools: list[MCPTool] = []
        for live, offered in usable:
            name = offered.name
            if name in reserved or counts[name] > 1:
                name = f"{live.server.name}__{offered.name}"
            if not _TOOL_NAME.fullmatch(name) or name in reserved:
                self.skipped.append(
                    (live.server.name, offered.name, f"its name {name!r} clashes or is too long")
                )
                continue
            tool = MCPTool(
                offered,
                server=live.server.name,
                source=live,
                trusted=live.server.trusted,
                effect=live.server.effects.get(offered.name),
                name=name,
            )
            tools.append(tool)
        return tools

    def snapshot(self) -> list[dict[str, Any]]:
        """What each server offered (see the module docstring), one dict per server."""
        built = {(t.server, t.tool): t for t in self.tools}
        out: list[dict[str, Any]] = []
        for live in self._live:
            name = live.server.name
            tools = []
            for offered in live.offered:
                tool = built.get((name, offered.name))
                tools.append({
                    "name": offered.name,
                    "offered_as": None if tool is None else tool.name,
                    "description": clip(offered.description or "", DESCRIPTION_LIMIT),
                    "input_schema": _shown_schema(offered.input_schema),
                    "annotations": {hint: offered.annotations.get(hint) for hint in HINTS},
                    "effect": None if tool is None else tool.effect.value,
                })  # fmt: skip
            out.append({
                "server": name,
                "transport": live.server.transport,
                "target": live.server.describe(),
                "sandbox": live.connection.sandbox,
                "tools": tools,
                "tools_hash": tools_hash(live.offered),
            })  # fmt: skip
        return out

    async def aclose(self) -> None:
        """Close every connection (also after a failed ``open``); failures are logged."""
        live, self._live = self._live, []
        closing = await asyncio.gather(
            *(one.connection.aclose() for one in live), return_exceptions=True
        )
        for one, outcome in zip(live, closing, strict=True):
            if isinstance(outcome, Exception):
                log.warning("closing MCP server %s failed: %s", one.server.name, outcome)

    def __repr__(self) -> str:
        return f"ToolServers({[s.name for s in self.servers]})"


def tools_hash(offered: Sequence[Offered]) -> str:
    """sha256 of the canonical JSON of the tools (names, descriptions, schemas, hints)."""
    rows = sorted(
        (
            {
                "name": t.name,
                "description": t.description,
                "input_schema": _shown_schema(t.input_schema),
                "annotations": {hint: t.annotations.get(hint) for hint in HINTS},
            }
            for t in offered
        ),
        key=lambda row: str(row["name"]),
    )
    canonical = json.dumps(rows, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _shown_schema(schema: Any) -> Any:
    """The schema as stored and hashed; one too deep to encode as JSON, or too large to
    offer (``MAX_SCHEMA_CHARS``), is a marker: a skipped tool's schema is not kept."""
    encoded = _encoded(schema)
    if encoded is None:
        return {"x-harnessnb": "nested too deeply to store"}
    if len(encoded) > MAX_SCHEMA_CHARS:
        return {"x-harnessnb": f"{len(encoded)} characters of JSON: too large to store"}
    return schema


def _encoded(schema: Any) -> str | None:
    """The canonical JSON of a schema, or None when it is nested too deeply to encode."""
    try:
        return json.dumps(schema, sort_keys=True, separators=(",", ":"), default=repr)
    except (RecursionError, ValueError):
        return None


def _unusable(offered: Offered) -> str | None:
    """Why a tool cannot be offered, or None."""
    schema = offered.input_schema
    if not isinstance(schema, dict) or schema.get("type", "object") != "object":
        return "its input schema is not an object schema"
    encoded = _encoded(schema)
    if encoded is None:
        return "its input schema is nested too deeply"
    if len(encoded) > MAX_SCHEMA_CHARS:
        return f"its input schema is {len(encoded)} characters of JSON (at most {MAX_SCHEMA_CHARS})"
    try:
        check_schema(schema, f"MCP tool {offered.name!r}")
    except HarnessError as err:
        return err.message
    except (RecursionError, ValueError, TypeError) as exc:  # pragma: no cover - belt
        return f"its input schema cannot be checked: {type(exc).__name__}"
    return None


def _connection_class() -> Connect:
    """The real ``Connection`` (imported when needed: it needs the ``mcp`` extra)."""
    module = importlib.import_module(f"{__package__}._connection")
    made: Connect = module.Connection
    return made
