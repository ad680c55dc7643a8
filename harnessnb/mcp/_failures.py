"""What an MCP failure was: any exception the SDK (or our own bounds) raised, as one
``MCPError`` of one ``MCPErrorKind``. Pure, but for reading the exception's attributes.

* Nested ``BaseExceptionGroup``s (anyio's task groups) are unwrapped to the first
  meaningful leaf (a ``CancelledError`` leaf only when there is nothing else).
* ``FileNotFoundError``/``PermissionError`` at spawn: ``spawn``, naming the command.
* ``mcp.MCPError``: -32000 "Connection closed" is ``exited`` when the process is known
  to have ended (its exit code), else ``connection_closed``; -32001 is ``timeout``;
  -32600/-32700, -32601 and a protocol-version mismatch are ``protocol``; "Unknown tool"
  is ``unknown_tool``. The SDK's own refusal of a server's protocol version (a
  ``RuntimeError``) is ``protocol`` on either transport.
* Our own bound (``TimeoutError``): ``timeout``.
* httpx2's errors, matched by class module and name (harnessnb's one httpx2 module is
  ``providers/_client.py``; this layer may not import it): ``transport``, with the status
  and ``Retry-After`` of a response when there is one (``classify_status`` decides
  whether a retry may help, ``parse_retry_after`` reads the wait).
* A ``CancelledError`` the caller did not cause (the SDK's task group torn down under a
  request): ``connection_closed`` (stdio) or ``transport`` (http).
* Anything unreadable the server sent (a parse or validation error): ``protocol``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..rules._errors import MCPError, MCPErrorKind, parse_retry_after

__all__ = ["Context", "classify", "leaf", "tool_error"]

CONNECTION_CLOSED = -32000
REQUEST_TIMEOUT = -32001
_PROTOCOL_CODES = frozenset({-32700, -32600, -32601})
_PROTOCOL_WORDS = ("protocol version", "unsupported protocol", "failed to parse", "invalid json")


@dataclass(frozen=True)
class Context:
    """What the classifier needs to know besides the exception."""

    server: str
    transport: str  # "stdio" or "http"
    command: str | None = None  # what was started (a spawn failure names it)
    tool: str | None = None
    exited: bool = False  # the stdio process is known to have ended
    exit_code: int | None = None
    stderr: str | None = None
    what: str = "request"  # "start", "tools/list", "tools/call"


def leaf(exc: BaseException) -> BaseException:
    """The first meaningful exception inside nested exception groups."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    leaves = [leaf(e) for e in exc.exceptions]
    for found in leaves:
        if not isinstance(found, asyncio.CancelledError | GeneratorExit):
            return found
    return leaves[0] if leaves else exc


def tool_error(text: str, *, server: str, tool: str) -> MCPError:
    """A result the tool itself flagged as an error (``isError``), as ``tool_error``:
    for a caller that wants an exception (``Called.is_error`` carries it otherwise);
    the tool's text is the message."""
    said = text.strip() or "(no text)"
    return MCPError(
        f"MCP tool {tool!r} of server {server!r} reported an error: {said}",
        kind=MCPErrorKind.TOOL_ERROR,
        server=server,
        tool=tool,
    )


def _is_httpx(exc: BaseException) -> bool:
    return type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore")


def _response(exc: BaseException) -> tuple[int | None, Mapping[str, str]]:
    response: Any = getattr(exc, "response", None)
    try:
        status = getattr(response, "status_code", None)
        headers = dict(getattr(response, "headers", {}) or {})
    except Exception:  # an error without a response raises on .response in httpx2
        return None, {}
    return (status if isinstance(status, int) else None), headers


def classify(exc: BaseException, ctx: Context) -> MCPError:
    """``exc`` as an ``MCPError`` (an ``MCPError`` given is returned as it is)."""
    found = leaf(exc)
    if isinstance(found, MCPError):
        return found
    kind, message, status, retry_after = _kind(found, ctx)
    if kind is MCPErrorKind.CONNECTION_CLOSED and ctx.exited:
        kind = MCPErrorKind.EXITED
    if kind is MCPErrorKind.EXITED:
        code = "" if ctx.exit_code is None else f" with exit code {ctx.exit_code}"
        message = f"MCP server {ctx.server!r} exited{code} ({ctx.what})"
    err = MCPError(
        message,
        kind=kind,
        server=ctx.server,
        tool=ctx.tool,
        status=status,
        retry_after_s=retry_after,
        exit_code=ctx.exit_code if kind is MCPErrorKind.EXITED else None,
        stderr=ctx.stderr or None,
    )
    err.__cause__ = found
    return err


def _kind(exc: BaseException, ctx: Context) -> tuple[MCPErrorKind, str, int | None, float | None]:
    name = f"MCP server {ctx.server!r}"
    said = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, FileNotFoundError | PermissionError) and ctx.what == "start":
        why = "not found" if isinstance(exc, FileNotFoundError) else "not executable"
        return MCPErrorKind.SPAWN, f"{name}: cannot start {ctx.command!r} ({why})", None, None
    if isinstance(exc, TimeoutError):
        return MCPErrorKind.TIMEOUT, f"{name}: {ctx.what} timed out", None, None
    code = getattr(exc, "code", None) if type(exc).__module__.split(".")[0] == "mcp" else None
    if isinstance(code, int):
        text = str(getattr(exc, "message", exc))
        if code == CONNECTION_CLOSED:
            kind = MCPErrorKind.CONNECTION_CLOSED
            if ctx.transport == "http":
                kind = MCPErrorKind.TRANSPORT
            return kind, f"{name}: connection closed ({ctx.what})", None, None
        if code == REQUEST_TIMEOUT:
            return MCPErrorKind.TIMEOUT, f"{name}: {ctx.what} timed out ({text})", None, None
        if "unknown tool" in text.lower():
            return MCPErrorKind.UNKNOWN_TOOL, f"{name}: {text}", None, None
        if code in _PROTOCOL_CODES or any(w in text.lower() for w in _PROTOCOL_WORDS):
            return MCPErrorKind.PROTOCOL, f"{name}: protocol error {code}: {text}", None, None
        return MCPErrorKind.PROTOCOL, f"{name}: error {code}: {text}", None, None
    if _is_httpx(exc):
        status, headers = _response(exc)
        wait = parse_retry_after(headers) if headers else None
        shown = f"HTTP {status}" if status is not None else said
        return MCPErrorKind.TRANSPORT, f"{name}: {shown} ({ctx.what})", status, wait
    if isinstance(exc, asyncio.CancelledError):
        kind = MCPErrorKind.TRANSPORT if ctx.transport == "http" else MCPErrorKind.CONNECTION_CLOSED
        return kind, f"{name}: the connection was torn down ({ctx.what})", None, None
    if any(w in str(exc).lower() for w in _PROTOCOL_WORDS):  # the SDK's RuntimeError
        return MCPErrorKind.PROTOCOL, f"{name}: {said}", None, None
    if isinstance(exc, ConnectionError | EOFError | BrokenPipeError) or (
        type(exc).__module__.startswith("anyio")
    ):
        kind = MCPErrorKind.TRANSPORT if ctx.transport == "http" else MCPErrorKind.CONNECTION_CLOSED
        return kind, f"{name}: connection closed ({said})", None, None
    if isinstance(exc, ValueError | TypeError | KeyError):  # pydantic's ValidationError too
        return MCPErrorKind.PROTOCOL, f"{name}: unreadable answer ({said})", None, None
    if isinstance(exc, OSError) and ctx.what == "start":
        return MCPErrorKind.SPAWN, f"{name}: cannot start {ctx.command!r} ({said})", None, None
    kind = MCPErrorKind.TRANSPORT if ctx.transport == "http" else MCPErrorKind.PROTOCOL
    return kind, f"{name}: {said}", None, None
