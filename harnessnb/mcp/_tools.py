"""``MCPTool``: one tool an MCP server offers, as a harnessnb ``Tool``.

Its policy target is ``("exec", "mcp:SERVER/TOOL")`` (``SERVER/TOOL`` the server's own
names, whatever the model calls it), and it is always judged (``Tool.read_only`` for a
READ one: the exec default allows it, but a deny or ask rule naming it applies).

Its effect (``effect_of``) comes from the server's annotations only when the server
is trusted (``MCPServer(trusted=True)``): ``readOnlyHint`` is READ, else
``idempotentHint`` IDEMPOTENT, else WRITE. An untrusted server's tools are WRITE
whatever they claim: the specification says clients must treat the hints as
untrusted unless the server is. ``effects={"tool": Effect.READ}`` on the server
overrides one tool either way. ``destructiveHint`` is shown to the approver
("destructive") and changes nothing else.

``openWorldHint``: a trusted tool that says ``openWorldHint: true`` explicitly also
needs the policy's ``net`` verdict on ``*`` (``also_judged``). An absent hint does
not count, although the specification defaults it to true: a server that says
nothing would otherwise need ``allow_net("*")`` for every tool, which would teach
people to allow the whole network; an untrusted server is asked for every call
anyway.

A call goes to the tool's ``ToolSource`` (the server's connection): an answer with
``is_error`` is raised as ``MCPError(kind=tool_error)``, which the executor hands to
the model as the tool's result; a clean one is the output. Before the executor
retries a READ or IDEMPOTENT call that failed because the server died (``kind``
``exited`` or ``connection_closed``), the source is restarted, once per run
(``before_retry``); a WRITE call is never retried, so never restarts one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from ..rules._errors import HarnessError, MCPError, MCPErrorKind
from ..rules._text import clip
from ..tools._protocol import PREVIEW_LIMIT, Effect, Tool, ToolContext, ToolOutput, bound_output

__all__ = [
    "DEAD_SERVER",
    "DESCRIPTION_LIMIT",
    "STDERR_IN_ROW",
    "Answer",
    "MCPTool",
    "Offered",
    "ToolSource",
    "effect_of",
    "tool_error",
    "unpatterned",
    "with_stderr",
]

log = logging.getLogger("harnessnb.mcp")

# The kinds of MCPError that say the server is gone: a restart may cure them.
DEAD_SERVER = frozenset({"exited", "connection_closed"})
# A server's description of a tool goes to the model with every request, so it is cut
# (head and tail kept) to this many characters: a server cannot make each call cost more.
DESCRIPTION_LIMIT = 4_000
STDERR_IN_ROW = 2_000  # characters of a server's stderr kept in a failed call's message
HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


class Answer(Protocol):
    """What a call returned (``Called``): its text and whether the tool said it failed."""

    @property
    def text(self) -> str: ...

    @property
    def is_error(self) -> bool: ...


class Offered(Protocol):
    """A tool as a server lists it (``ServedTool``)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def input_schema(self) -> dict[str, Any]: ...

    @property
    def annotations(self) -> Mapping[str, bool | None]: ...


class ToolSource(Protocol):
    """Where an MCP tool's calls go: its server's connection."""

    async def call(
        self, tool: str, args: dict[str, Any], *, timeout_s: float | None = None
    ) -> Answer: ...

    async def restart(self, error: BaseException | None = None) -> bool:
        """Start the server again after it died (``error``: what the failed call
        raised); False when it may not (once per run)."""
        ...

    @property
    def sandbox(self) -> str | None: ...


def effect_of(
    annotations: Mapping[str, bool | None], *, trusted: bool, override: Effect | None = None
) -> Effect:
    """A tool's effect: the override, else (trusted only) its hints, else WRITE."""
    if override is not None:
        return Effect(override)
    if not trusted:
        return Effect.WRITE
    if annotations.get("readOnlyHint") is True:
        return Effect.READ
    if annotations.get("idempotentHint") is True:
        return Effect.IDEMPOTENT
    return Effect.WRITE


class MCPTool(Tool):
    """One MCP server's tool, called through ``source``.

    Args:
        offered: The tool as the server listed it.
        server: The server's name (``mcp:SERVER/TOOL``).
        source: Where its calls go.
        trusted: Whether the server's annotations decide the effect.
        effect: An override of the effect (the server's ``effects``).
        name: The name the model sees (default: the server's tool name).
    """

    def __init__(
        self,
        offered: Offered,
        *,
        server: str,
        source: ToolSource,
        trusted: bool = False,
        effect: Effect | None = None,
        name: str | None = None,
    ) -> None:
        self.tool = offered.name
        self.name = name or offered.name
        self.server = self.server_name = server
        described = clip(offered.description or "", DESCRIPTION_LIMIT)
        self.description = described or f"{offered.name} (MCP server {server})"
        self.parameters = offered.input_schema
        self.annotations: dict[str, bool | None] = {
            hint: _hint(offered.annotations.get(hint)) for hint in HINTS
        }
        self.trusted = trusted
        self.effect = effect_of(self.annotations, trusted=trusted, override=effect)
        self.read_only = self.effect is Effect.READ
        self.source = source
        self._checked: dict[str, Any] | None = None

    def argument_schema(self) -> dict[str, Any]:
        """The schema without its regular expressions (``unpatterned``): an
        untrusted server's ``pattern`` could backtrack for ever; the server checks it."""
        if self._checked is None:
            self._checked = unpatterned(self.parameters)
        return self._checked

    @property
    def open_world(self) -> bool:
        """True when a trusted server says this tool reaches the open world, explicitly."""
        return self.trusted and self.annotations.get("openWorldHint") is True

    @property
    def destructive(self) -> bool:
        """True when the server says the tool may destroy (shown, not judged)."""
        return self.annotations.get("destructiveHint") is True and self.effect is not Effect.READ

    def target(self, args: Mapping[str, Any]) -> tuple[str, str]:
        return ("exec", f"mcp:{self.server_name}/{self.tool}")

    def also_judged(self, args: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
        return (("net", "*"),) if self.open_world else ()

    def preview(self, args: Mapping[str, Any], workspace: Any) -> str:
        words = [f"MCP server {self.server}, tool {self.tool}"]
        if self.destructive:
            words.append("(destructive)")
        if self.open_world:
            words.append("(open world)")
        shown = json.dumps(dict(args), ensure_ascii=False, default=str, indent=1)
        return bound_output(" ".join(words) + "\narguments: " + shown, PREVIEW_LIMIT)

    async def invoke(self, args: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        ctx.sandbox = self.source.sandbox
        try:
            answer = await self.source.call(self.tool, dict(args), timeout_s=None)
        except MCPError as err:
            raise with_stderr(err) from err
        if answer.is_error:
            raise tool_error(
                answer.text or "(the tool gave no reason)", self.server_name, self.tool
            )
        return ToolOutput(answer.text)

    async def before_retry(self, error: BaseException) -> bool:
        if str(getattr(error, "kind", "")) not in DEAD_SERVER:
            return True
        try:
            return await self.source.restart(error)
        except Exception as err:  # the call fails with its own error
            log.warning("MCP server %s could not be restarted: %s", self.server, err)
            return False

    def __repr__(self) -> str:
        return f"MCPTool({self.name!r}, server={self.server!r}, effect={self.effect.name})"


def tool_error(message: str, server: str, tool: str) -> HarnessError:
    """The error of a tool that answered ``isError``: ``MCPError(kind=tool_error)``."""
    return MCPError(message, kind=MCPErrorKind.TOOL_ERROR, server=server, tool=tool)


def with_stderr(err: MCPError) -> MCPError:
    """``err`` with the tail of its server's stderr in its message, for the tool call's
    row and the model (a run's error card shows ``stderr`` on its own instead): the
    reason a server died is often only there. Scrubbed and bounded by ``MCPError``."""
    if not err.stderr:
        return err
    tail = err.stderr[-STDERR_IN_ROW:]
    return MCPError(
        f"{err.message}; its stderr ends:\n{tail}",
        kind=err.kind,
        server=err.server,
        tool=err.tool,
        status=err.status,
        retry_after_s=err.retry_after_s,
        exit_code=err.exit_code,
        stderr=err.stderr,
    )


def _hint(value: object) -> bool | None:
    return value if isinstance(value, bool) else None


# Keywords whose value maps names to schemas (the names are data), and data keywords.
_NAME_MAPS = frozenset({"properties", "definitions", "$defs", "dependencies"})
_DATA = frozenset({"enum", "const", "default", "examples", "required", "title", "description"})


def unpatterned(schema: Any) -> Any:
    """``schema`` without ``pattern`` and ``patternProperties`` at any depth (and the
    ``additionalProperties`` beside a ``patternProperties``, which it qualified)."""
    if isinstance(schema, list):
        return [unpatterned(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "pattern" or key == "patternProperties":
            continue
        if key == "additionalProperties" and "patternProperties" in schema:
            continue
        if key in _DATA:
            out[key] = value
        elif key in _NAME_MAPS and isinstance(value, dict):
            out[key] = {name: unpatterned(sub) for name, sub in value.items()}
        else:
            out[key] = unpatterned(value)
    return out
