"""The HTTP client: one ``httpx2.AsyncClient`` per event loop, closed with its loop;
``post``, which sends a request once more on a new connection when the pooled one it
went out on had been closed by the server while idle; reading a response's body to a
size, and draining it so its connection is reused.

The client's connection pool asks each idle connection whether the server closed it
(its socket readable) every time a request joins or leaves the pool; httpcore2's
anyio stream answers by building a dict of socket attributes and calling
``getpeername`` before it polls. With 100 calls in flight that was a third of a call's
CPU, so the pool's connections are made through ``_ProbedBackend``, whose streams keep
their socket and poll it directly (``_Readable``: the same answer as httpcore2's own
probe).

Split from ``providers/_http.py``, which is its only user (it re-exports
``shared_client`` and ``aclose_client``); the two files are all that knows httpx2.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import threading
import weakref
from collections.abc import AsyncIterator, Mapping
from typing import Any, NamedTuple

import httpcore2
import httpx2

from ..rules._errors import ProviderErrorKind
from ..rules._secrets import scrub_loggers

__all__ = [
    "HTTP_LOGGERS",
    "aclose_client",
    "drain",
    "error_kind",
    "new_client",
    "post",
    "read_limited",
    "shared_client",
]

# The client library's loggers (httpcore2 makes its own when a connection first logs):
# at DEBUG they print the headers a server echoes, so each one scrubs like harnessnb's.
HTTP_LOGGERS = (
    "httpx2",
    "httpcore2",
    "httpcore2.connection",
    "httpcore2.http11",
    "httpcore2.http2",
    "httpcore2.proxy",
    "httpcore2.socks",
)
scrub_loggers(*HTTP_LOGGERS)

# A dead host should not eat the whole 600 s deadline just to fail the TCP handshake.
_CONNECT_TIMEOUT = 10.0
_DRAIN_TIMEOUT = 0.5

# One client per event loop: an httpx2 pool's connections belong to the loop that
# opened them, so a client must never be shared across loops (threads, asyncio.run).
_clients_lock = threading.Lock()


class _LoopClient(NamedTuple):
    client: httpx2.AsyncClient
    closer: AsyncIterator[None]  # see _close_at_loop_shutdown; kept alive with the client
    starter: asyncio.Task[None]


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = (
    weakref.WeakKeyDictionary()
)


def shared_client() -> httpx2.AsyncClient:
    """The ``httpx2.AsyncClient`` of the running event loop, created on first use.

    It is closed when the loop shuts down (``asyncio.run``, ``asyncio.Runner``), or
    by ``aclose_client()``.
    """
    loop = asyncio.get_running_loop()
    entry = _clients.get(loop)
    if entry is not None and not entry[0].is_closed:
        return entry[0]
    with _clients_lock:
        # Forget clients of loops closed without a shutdown; their sockets can no
        # longer be closed gracefully, only released.
        for old in [lp for lp in _clients if lp.is_closed()]:
            del _clients[old]
        entry = _clients.get(loop)
        if entry is None or entry[0].is_closed:
            client = new_client()
            closer = _close_at_loop_shutdown(client)
            # Start it now: the loop then tracks it and closes it at shutdown.
            starter = loop.create_task(_start(closer))
            entry = _clients[loop] = _LoopClient(client, closer, starter)
    return entry[0]


async def _start(closer: AsyncIterator[None]) -> None:
    await anext(closer)


async def _close_at_loop_shutdown(client: httpx2.AsyncClient) -> AsyncIterator[None]:
    # asyncio has no "loop is closing" hook, but it does aclose() every live async
    # generator in shutdown_asyncgens(), which asyncio.run and Runner call: this
    # generator parks at its yield until then, and closes the client's sockets.
    try:
        yield
    finally:
        await client.aclose()


# Room for 100+ concurrent calls to one host (the SDKs use the same numbers).
_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=100)


def new_client() -> httpx2.AsyncClient:
    transport = httpx2.AsyncHTTPTransport(limits=_LIMITS)  # as AsyncClient makes its own
    pool = getattr(transport, "_pool", None)
    if isinstance(pool, httpcore2.AsyncConnectionPool) and hasattr(pool, "_network_backend"):
        # Read as each connection is made (tests/test_providers.py checks it still is).
        pool._network_backend = _ProbedBackend()
    return httpx2.AsyncClient(
        follow_redirects=False,  # a redirect is classified as a request error, never followed
        # The deadline is enforced per attempt with asyncio; httpx2 only bounds connect.
        timeout=httpx2.Timeout(None, connect=_CONNECT_TIMEOUT),
        limits=_LIMITS,
        transport=transport,
    )


class _ProbedStream(httpcore2.AsyncNetworkStream):
    """httpcore2's stream, its socket kept so the pool's "closed by the server?" probe
    polls it directly (see the module's docstring); everything else is the stream's."""

    __slots__ = ("_readable", "_stream")

    def __init__(self, stream: httpcore2.AsyncNetworkStream) -> None:
        self._stream = stream
        sock = stream.get_extra_info("socket")
        self._readable = None if sock is None else _Readable(sock)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.AsyncNetworkStream:
        return _ProbedStream(await self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable" and self._readable is not None:
            return self._readable()
        return self._stream.get_extra_info(info)


class _Readable:
    """Whether a read on a socket would return at once (data, or the end a server's
    close left): httpcore2's test, polled without waiting, through one poll object
    registered once per socket (a pool probes each idle one ~100 times a call with 100
    in flight). A socket without a descriptor any more reads as readable, as there."""

    __slots__ = ("_poll", "_socket")

    def __init__(self, sock: socket.socket) -> None:
        self._socket = sock
        self._poll: Any = None
        fd = sock.fileno()
        if hasattr(select, "poll") and fd >= 0:  # not on Windows: select there
            self._poll = select.poll()
            self._poll.register(fd, select.POLLIN)

    def __call__(self) -> bool:
        fd = self._socket.fileno()
        if fd < 0:  # closed: its number may belong to another socket by now
            return True
        if self._poll is None:
            return bool(select.select([fd], [], [], 0)[0])
        return bool(self._poll.poll(0))


class _ProbedBackend(httpcore2.AsyncNetworkBackend):
    """httpcore2's own backend under asyncio (anyio's), its streams ``_ProbedStream``."""

    def __init__(self) -> None:
        self._backend = httpcore2.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore2.AsyncNetworkStream:
        stream = await self._backend.connect_tcp(
            host, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )
        return _ProbedStream(stream)

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore2.AsyncNetworkStream:
        stream = await self._backend.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options
        )
        return _ProbedStream(stream)

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


async def aclose_client() -> None:
    """Close the running loop's shared client (the next call opens a new one)."""
    loop = asyncio.get_running_loop()
    with _clients_lock:
        entry = _clients.pop(loop, None)
    if entry is not None:
        await entry[0].aclose()


async def read_limited(response: httpx2.Response, limit: int) -> bytes:
    """The response's body, cut at ``limit`` bytes (read no further)."""
    out = bytearray()
    async for chunk in response.aiter_bytes():
        out += chunk
        if len(out) >= limit:
            break
    return bytes(out[:limit])


async def drain(chunks: AsyncIterator[bytes]) -> None:
    """Read what follows the last event (the chunk terminator) so the connection is reused.

    A server that keeps the stream open, or drops it, after its last event does not
    turn a complete answer into a failure: the connection is just not reused.
    """
    with contextlib.suppress(TimeoutError, httpx2.HTTPError):
        async with asyncio.timeout(_DRAIN_TIMEOUT):
            async for _ in chunks:
                pass


# httpcore's words for a connection that closed before any byte of an answer came back.
_NO_ANSWER = "Server disconnected without sending a response"


class _ConnectionUse:
    """What httpcore's ``trace`` extension says of one request: whether it opened a
    connection of its own (else it went out on a pooled one, kept from an earlier
    answer) and whether the head of an answer came back."""

    __slots__ = ("answered", "opened")

    def __init__(self) -> None:
        self.opened = False
        self.answered = False

    async def __call__(self, event: str, info: Mapping[str, Any]) -> None:
        if event.startswith(("connection.connect_tcp.", "connection.connect_unix_socket.")):
            self.opened = True
        elif event.endswith(".receive_response_headers.complete"):
            self.answered = True


def _stale(exc: httpx2.TransportError, use: _ConnectionUse) -> bool:
    """Whether ``exc`` is a pooled connection the server had closed while idle: the
    request went out on a reused connection and it was reset, or closed with nothing
    said, before any byte of an answer."""
    if use.opened or use.answered:
        return False
    if isinstance(exc, httpx2.RemoteProtocolError):
        return str(exc).startswith(_NO_ANSWER)
    return isinstance(exc, httpx2.ReadError | httpx2.WriteError)


async def _send(
    client: httpx2.AsyncClient,
    url: httpx2.URL,
    body: Any,
    headers: Mapping[str, str],
    use: _ConnectionUse,
) -> httpx2.Response:
    request = client.build_request(
        "POST", url, json=body, headers=headers, extensions={"trace": use}
    )
    return await client.send(request, stream=True)


@contextlib.asynccontextmanager
async def post(
    url: httpx2.URL, body: Any, headers: Mapping[str, str]
) -> AsyncIterator[httpx2.Response]:
    """POST ``body`` as JSON through the running loop's client; yield the response, its
    body not yet read (status and headers are known even if the body dies), closed on
    exit.

    A server (or a proxy, a load balancer) may close an idle keep-alive connection
    without saying so, just as the next request goes out on it: that request fails on
    the reused connection, reset or closed before any byte of an answer came back, and
    the server never began it. Such a request is sent once more on a new connection of
    its own (a client used once), and only that one: a failure on a connection the
    request opened, or after any of an answer arrived, is raised as it is.
    """
    async with contextlib.AsyncExitStack() as stack:
        use = _ConnectionUse()
        try:
            response = await _send(shared_client(), url, body, headers, use)
        except httpx2.TransportError as exc:
            if not _stale(exc, use):
                raise
            fresh = await stack.enter_async_context(new_client())
            response = await _send(fresh, url, body, headers, _ConnectionUse())
        stack.push_async_callback(response.aclose)
        yield response


def error_kind(exc: httpx2.HTTPError) -> tuple[ProviderErrorKind, str]:
    """The kind of an httpx2 failure that produced no usable response."""
    name = type(exc).__name__
    detail = str(exc) or name
    if isinstance(exc, httpx2.TimeoutException):
        return ProviderErrorKind.TIMEOUT, f"{name}: {detail}"
    if isinstance(exc, httpx2.UnsupportedProtocol | httpx2.LocalProtocolError):
        # Our own request could not be sent as given: no retry can cure that.
        return ProviderErrorKind.REQUEST, f"{name}: {detail}"
    if isinstance(exc, httpx2.DecodingError):
        return ProviderErrorKind.MALFORMED, f"{name}: {detail}"
    # Refused, reset, DNS, TLS, a connection dying mid-body or mid-stream, proxies.
    return ProviderErrorKind.TRANSPORT, f"{name}: {detail}"
