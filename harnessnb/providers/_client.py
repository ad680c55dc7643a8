"""The HTTP client: one ``httpx2.AsyncClient`` per event loop, closed with its loop.

Split from ``providers/_http.py``, which is its only user (it re-exports
``shared_client`` and ``aclose_client``); the two files are all that knows httpx2.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncIterator
from typing import NamedTuple

import httpx2

from ..rules._secrets import scrub_loggers

__all__ = ["HTTP_LOGGERS", "aclose_client", "new_client", "shared_client"]

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


def new_client() -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        follow_redirects=False,  # a redirect is classified as a request error, never followed
        # The deadline is enforced per attempt with asyncio; httpx2 only bounds connect.
        timeout=httpx2.Timeout(None, connect=_CONNECT_TIMEOUT),
        # Room for 100+ concurrent calls to one host (the SDKs use the same numbers).
        limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=100),
    )


async def aclose_client() -> None:
    """Close the running loop's shared client (the next call opens a new one)."""
    loop = asyncio.get_running_loop()
    with _clients_lock:
        entry = _clients.pop(loop, None)
    if entry is not None:
        await entry[0].aclose()
