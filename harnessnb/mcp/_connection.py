"""``Connection``: one live session with one MCP server, owned by one task.

The SDK's ``mcp.Client`` holds anyio cancel scopes: it must be entered and left in the
same task. So each connection has an owner task that enters the client, waits until it
is closed, and leaves it; a request runs in a task of its own that the caller waits
for, together with the owner (a dead server ends the owner) and its bound. A
``CancelledError`` the SDK leaks when a transport is torn down therefore never reaches
the caller as an interrupt: it ends a request task or the owner and is classified
(``_failures``); a real cancel of the caller cancels its request task and leaves the
connection usable.

Every wait is bounded on the caller's side (``asyncio.wait``'s timeout: the server's
``timeout_s`` and the run's ``remaining()``, whichever is first), ``start`` too; the SDK
is never trusted to time out.

A stdio server starts lazily (``start``), in the command sandbox (``tools._sandbox``:
the workspace its working folder and only writable place, a minimal environment plus
the server's ``env``, no network unless ``network=True`` and the policy allow it), under
the watcher of ``_stderr`` (its pid and exit code), its stderr drained into a bounded,
scrubbed ring; the workspace is its MCP root. An http server is reached with
``mcp.Client`` over Streamable HTTP with its headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..rules._errors import MCPError
from ..rules._policy import Policy
from ..rules._secrets import scrub_loggers
from ..tools._process import confine_off_loop
from ..tools._protocol import OUTPUT_LIMIT, bound_output
from ..tools._sandbox import Confined
from ._failures import Context, classify, leaf, tool_error
from ._server import MCPServer, require_sdk
from ._stderr import StderrPipe, watched

if TYPE_CHECKING:
    from mcp import Client

__all__ = ["Called", "Connection", "ServedTool", "called_text"]

_T = TypeVar("_T")
_CLOSE_S = 10.0  # the SDK's own shutdown: close stdin, 2 s grace, SIGTERM, SIGKILL
_EXIT_WAIT_S = 1.0  # how long a closed connection waits to learn the exit code
_MAX_PAGES = 100  # tools/list pages read at most
_HINTS = ("readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint")


@dataclass(frozen=True)
class ServedTool:
    """One tool a server offers, as it described it (its hints untrusted)."""

    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, bool | None] = field(default_factory=dict)
    title: str | None = None


@dataclass(frozen=True)
class Called:
    """What a tool call answered: its text (bounded) and whether the tool said it failed."""

    text: str
    is_error: bool

    def raise_for_error(self, *, server: str, tool: str) -> Called:
        """Itself, or ``MCPError(tool_error)`` with its text when the tool said it failed."""
        if self.is_error:
            raise tool_error(self.text, server=server, tool=tool)
        return self


class Connection:
    """One session with ``server``; every failure raises ``MCPError``.

    Args:
        server: The server.
        workspace: The run's workspace: a stdio server's working folder and MCP root.
        policy: The run's policy (the sandbox masks its secret paths; network by it).
        remaining: Seconds the run has left (None: no budget); each wait is bounded by
            it as well as by ``server.timeout_s``.
    """

    def __init__(
        self,
        server: MCPServer,
        *,
        workspace: Path,
        policy: Policy,
        remaining: Callable[[], float | None] | None = None,
    ) -> None:
        self.server = server
        self._workspace = Path(workspace).resolve()
        self._policy = policy
        self._remaining = remaining
        self._owner: asyncio.Task[None] | None = None
        self._client: Client | None = None
        self._closing = asyncio.Event()
        self._dead: BaseException | None = None  # what ended the owner
        self._stream_error: Exception | None = None  # what the transport reported
        self._pipe: StderrPipe | None = None
        self._confined: Confined | None = None
        self._sandbox: str | None = None
        self._http_status: tuple[int, dict[str, str]] | None = None
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------ state

    @property
    def stderr_tail(self) -> str:
        """The last of the server's stderr, scrubbed ("" for http or before start)."""
        return self._pipe.tail() if self._pipe is not None else ""

    @property
    def sandbox(self) -> str | None:
        """The sandbox label a stdio server runs under; None for http (or not started)."""
        return self._sandbox

    @property
    def pid(self) -> int | None:
        """The stdio server's watcher pid (its process group), once it said it."""
        return self._pipe.pid if self._pipe is not None else None

    @property
    def alive(self) -> bool:
        """Started and not ended."""
        return self._owner is not None and not self._owner.done()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the server (once; again after ``aclose``/``restart``), bounded in time.

        Raises:
            MCPError: spawn, exited, timeout, protocol or transport.
            ConfigError: the ``mcp`` SDK is not installed.
        """
        async with self._lock:
            if self._owner is not None:
                if self._owner.done():  # it died: a call says so, ``restart`` revives it
                    raise await self._failure(self._dead or EOFError(), "start", None)
                return
            require_sdk()
            self._closing = asyncio.Event()
            self._dead = self._stream_error = None
            # A fresh stderr ring per process (the old one's exit must not end this one).
            self._pipe = StderrPipe() if self.server.transport == "stdio" else None
            loop = asyncio.get_running_loop()
            ready: asyncio.Future[None] = loop.create_future()
            self._owner = asyncio.create_task(self._own(ready), name=f"mcp-{self.server.name}")
            watch = self._exit_watch()
            waited: set[asyncio.Future[Any]] = {ready, self._owner, *watch}
            try:
                await asyncio.wait(
                    waited,
                    timeout=self._limit(None),
                    return_when=asyncio.FIRST_COMPLETED,
                )
            except asyncio.CancelledError:
                await self._stop()
                raise
            finally:
                for future in watch:
                    future.cancel()
            if ready.done() and not ready.cancelled() and ready.exception() is None:
                return
            owner, pipe = self._owner, self._pipe
            try:
                if not owner.done() and (
                    ready.done() or (pipe is not None and pipe.exited.is_set())
                ):
                    # It exited, or the owner is ending (it gave up ``ready`` and removes
                    # the scratch folder): the owner says why, if it can (a refused
                    # handshake, a bad answer), before the exit alone is taken for it.
                    await asyncio.wait({owner}, timeout=_EXIT_WAIT_S)
                failure: BaseException | None = self._dead if owner.done() else None
                # The exit is the reason unless the owner learnt a better one (a refused
                # handshake): a timeout the SDK met on the way out is not one.
                vague = failure is None or isinstance(leaf(failure), TimeoutError)
                if vague and pipe is not None and await self._exited(pipe, owner.done()):
                    failure = EOFError("the server exited")
                if failure is None:
                    failure = TimeoutError() if self._stream_error is None else self._stream_error
                err = await self._failure(failure, "start", None)
            finally:  # a cancel meanwhile leaves no server either
                await self._stop()
                self._owner = None  # a failed start may be tried again
            raise err

    @staticmethod
    async def _exited(pipe: StderrPipe, ended: bool) -> bool:
        """Whether the server's command ended; after the owner ``ended`` (the SDK gave
        up on a closing pipe), its exit may still be on its way from the watcher."""
        if pipe.exited.is_set() or not ended:
            return pipe.exited.is_set()
        return await asyncio.to_thread(pipe.wait_exited, _EXIT_WAIT_S)

    async def restart(self) -> None:
        """Close (whatever state it is in) and start again: a dead stdio server revived."""
        await self.aclose()
        await self.start()

    async def aclose(self) -> None:
        """Close the session; a stdio server's process group is left empty."""
        async with self._lock:
            await self._stop()
            self._owner = None

    def _exit_watch(self) -> list[asyncio.Future[None]]:
        """A future done when the stdio server's command ends (none for http)."""
        return [self._pipe.on_exit()] if self._pipe is not None else []

    async def _stop(self) -> None:
        owner = self._owner
        if owner is not None and not owner.done():
            self._closing.set()
            # Never entered (a start that failed): nothing to leave politely.
            done = (
                set()
                if self._client is None
                else (await asyncio.wait({owner}, timeout=_CLOSE_S))[0]
            )
            if not done:
                owner.cancel()
                await asyncio.wait({owner}, timeout=_CLOSE_S)
        self._kill_group()
        self._client = None

    def _kill_group(self) -> None:
        """SIGKILL whatever is left in the server's process group (the SDK kills the
        tree it knows; a child that left it is the sandbox's to end)."""
        pid = self.pid
        if pid is not None:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)

    async def _own(self, ready: asyncio.Future[None]) -> None:
        """The owner task: enter the client, wait until closed, leave it (one task)."""
        try:
            client = await self._make_client()
            try:
                async with client:
                    if self._pipe is not None:
                        self._pipe.close_writer()
                    self._client = client
                    ready.set_result(None)
                    await self._closing.wait()
            finally:
                if self._pipe is not None:
                    self._pipe.close_writer()
        except BaseException as exc:  # recorded; the waiter classifies it
            self._dead = exc
        finally:
            if self._pipe is not None:  # a spawn that failed: the reader ends too
                self._pipe.close_writer()
            self._client = None
            if self._dead is None:
                self._dead = EOFError("closed")
            if not ready.done():
                ready.cancel()
            if self._confined is not None:
                # Its process group first: a server still ending (npx writing its log
                # in HOME) would write into the scratch folder while it is removed.
                self._kill_group()
                await asyncio.to_thread(self._confined.close)
                self._confined = None

    async def _make_client(self) -> Client:
        from mcp import Client, StdioServerParameters
        from mcp.client.stdio import stdio_client

        scrub_loggers("mcp")  # the SDK logs what a server sent (a bad line, an error)
        server = self.server
        common: dict[str, Any] = {
            "list_roots_callback": self._roots,
            "message_handler": self._on_message,
        }
        if server.transport == "http":
            return Client(self._http_transport(), **common)
        net = None if server.network else False
        confined = await confine_off_loop(
            [server.command or "", *server.args],
            workspace=self._workspace,
            policy=self._policy,
            env=dict(server.env),
            net=net,
            argv_paths=True,
        )
        self._confined, self._sandbox = confined, confined.label
        assert self._pipe is not None  # made by ``start`` for a stdio server
        argv = watched(confined.argv)
        params = StdioServerParameters(
            command=argv[0], args=argv[1:], env=confined.env, cwd=self._workspace
        )
        return Client(stdio_client(params, errlog=self._pipe.errlog), **common)

    def _http_transport(self) -> Any:
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        scrub_loggers("mcp")  # its loggers made by the imports just above too
        http = create_mcp_http_client(headers=dict(self.server.headers))

        async def seen(response: Any) -> None:  # the status the SDK turns into -32603
            if response.status_code >= 400:
                self._http_status = (response.status_code, dict(response.headers))

        http.event_hooks["response"].append(seen)
        return streamable_http_client(self.server.url or "", http_client=http)

    async def _roots(self, context: Any) -> Any:
        from mcp.types import ListRootsResult, Root
        from pydantic import FileUrl

        del context
        root = Root(uri=FileUrl(self._workspace.as_uri()), name="workspace")
        return ListRootsResult(roots=[root])

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, Exception) and self._stream_error is None:
            self._stream_error = message

    # ------------------------------------------------------------------ requests

    async def list_tools(self) -> list[ServedTool]:
        """The server's tools (every page), as ``ServedTool``s."""

        async def ask(client: Client) -> list[ServedTool]:
            tools: list[ServedTool] = []
            cursor: str | None = None
            for _ in range(_MAX_PAGES):
                page = await client.list_tools(cursor=cursor)
                tools += [_served(t) for t in page.tools]
                cursor = page.next_cursor
                if not cursor:
                    break
            return tools

        return await self._request("tools/list", None, ask, None)

    async def call(
        self, tool: str, args: dict[str, Any], *, timeout_s: float | None = None
    ) -> Called:
        """Call ``tool`` with ``args``: its text and error flag (an error the tool itself
        reports is ``Called.is_error``, not an exception)."""

        async def ask(client: Client) -> Called:
            result = await client.call_tool(tool, args)
            called = Called(text=called_text(result), is_error=bool(result.is_error))
            if called.is_error and called.text.startswith("Unknown tool"):
                # Python servers answer an unknown name as a tool error; others raise.
                raise _UnknownTool(called.text)
            return called

        return await self._request("tools/call", tool, ask, timeout_s)

    async def _request(
        self,
        what: str,
        tool: str | None,
        make: Callable[[Client], Awaitable[_T]],
        timeout_s: float | None,
    ) -> _T:
        await self.start()
        owner, client = self._owner, self._client
        if owner is None or owner.done() or client is None:
            raise await self._failure(self._dead or EOFError(), what, tool)
        self._http_status = None
        task: asyncio.Task[_T] = asyncio.create_task(_run(make, client))
        watch = self._exit_watch()
        waited: set[asyncio.Future[Any]] = {task, owner, *watch}
        try:
            done, _ = await asyncio.wait(
                waited,
                timeout=self._limit(timeout_s),
                return_when=asyncio.FIRST_COMPLETED,
            )
        except asyncio.CancelledError:  # the caller's own cancel: its request only
            task.cancel()
            raise
        finally:
            for future in watch:
                future.cancel()
        if task not in done and self._pipe is not None and self._pipe.exited.is_set():
            await asyncio.wait({task}, timeout=_EXIT_WAIT_S)  # its own failure, if it says
            if not task.done():
                task.cancel()
                raise await self._failure(EOFError("the server exited"), what, tool)
        if task in done or task.done():
            if not task.cancelled() and task.exception() is None:
                return task.result()
            failure: BaseException = (
                asyncio.CancelledError() if task.cancelled() else task.exception()  # type: ignore[assignment]
            )
            raise await self._failure(failure, what, tool)
        task.cancel()
        if owner.done():
            raise await self._failure(self._dead or EOFError(), what, tool)
        raise await self._failure(TimeoutError(), what, tool)

    def _limit(self, timeout_s: float | None) -> float:
        limits = [self.server.timeout_s]
        if timeout_s is not None:
            limits.append(timeout_s)
        left = self._remaining() if self._remaining is not None else None
        if left is not None:
            limits.append(left)
        return max(0.0, min(limits))

    async def _failure(self, exc: BaseException, what: str, tool: str | None) -> MCPError:
        """``exc`` classified, with what is known of the process (exit code, stderr)."""
        pipe = self._pipe
        exited, code = False, None
        if pipe is not None:
            if not isinstance(exc, TimeoutError | FileNotFoundError | PermissionError):
                exited = await asyncio.to_thread(pipe.wait_exited, _EXIT_WAIT_S)
            else:
                exited = pipe.exited.is_set()
            code = pipe.exit_code
        if isinstance(exc, TimeoutError) and self._stream_error is not None:
            exc = self._stream_error  # it said something unreadable, then nothing
        ctx = Context(
            server=self.server.name,
            transport=self.server.transport,
            command=self.server.command,
            tool=tool,
            exited=exited,
            exit_code=code,
            stderr=self.stderr_tail or None,
            what=what,
        )
        err = classify(exc, ctx)
        if self.server.transport == "http" and self._http_status and err.status is None:
            status, headers = self._http_status
            err = classify(_StatusSeen(status, headers), ctx)
        return err


class _UnknownTool(Exception):
    """A server's "Unknown tool" answer, classified as ``unknown_tool``."""

    __module__ = "mcp._unknown"  # read by ``_failures`` as an SDK error would be

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.code = -32602
        self.message = text


class _StatusSeen(Exception):
    """An HTTP error status seen on the wire (the SDK reports it as -32603 only)."""

    __module__ = "httpx2._seen"

    def __init__(self, status: int, headers: dict[str, str]) -> None:
        super().__init__(f"HTTP {status}")
        self.response = _Response(status, headers)


@dataclass(frozen=True)
class _Response:
    status_code: int
    headers: dict[str, str]


async def _run(make: Callable[[Client], Awaitable[_T]], client: Client) -> _T:
    return await make(client)


def _served(tool: Any) -> ServedTool:
    hints = tool.annotations
    annotations: dict[str, bool | None] = {
        "readOnlyHint": getattr(hints, "read_only_hint", None),
        "destructiveHint": getattr(hints, "destructive_hint", None),
        "idempotentHint": getattr(hints, "idempotent_hint", None),
        "openWorldHint": getattr(hints, "open_world_hint", None),
    }
    title = tool.title or getattr(hints, "title", None)
    schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
    return ServedTool(
        name=str(tool.name),
        description=str(tool.description or ""),
        input_schema=dict(schema),
        annotations=annotations,
        title=str(title) if title else None,
    )


def called_text(result: Any, limit: int = OUTPUT_LIMIT) -> str:
    """A ``CallToolResult``'s content as text: text items joined, each other item one
    line (``[image/png, 1234 bytes]``), ``structuredContent`` as JSON when there is no
    text; cut to ``limit`` (head and tail, ``bound_output``). Each text item is cut to
    ``limit`` before joining, so a huge answer is not copied whole once more."""
    parts: list[str] = []
    for item in result.content or ():
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(bound_output(str(item.text), limit))
        elif kind in ("image", "audio"):
            size = len(item.data) * 3 // 4 if isinstance(item.data, str) else 0
            parts.append(f"[{item.mime_type or kind}, {_decoded_size(item.data, size)} bytes]")
        elif kind == "resource":
            res = item.resource
            body = getattr(res, "text", None)
            if body is not None:
                parts.append(bound_output(f"[resource {res.uri}]\n{body}", limit))
            else:
                blob = getattr(res, "blob", "") or ""
                mime = res.mime_type or "application/octet-stream"
                parts.append(f"[{mime}, {_decoded_size(blob, 0)} bytes: {res.uri}]")
        elif kind == "resource_link":
            parts.append(f"[link {item.uri}" + (f" {item.mime_type}]" if item.mime_type else "]"))
        else:
            parts.append(f"[{kind or type(item).__name__}]")
    if not any(p for p in parts) and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False, default=str)]
    return bound_output("\n".join(parts), limit)


def _decoded_size(data: Any, fallback: int) -> int:
    if not isinstance(data, str):
        return fallback
    padding = data[-2:].count("=")
    return max(0, len(data) * 3 // 4 - padding) if data else 0
