"""A pooled keep-alive connection the server closed while idle is no provider failure.

A raw HTTP/1.1 server on loopback answers with keep-alive, then drops the connection
just as the next request arrives on it, without reading it (as a proxy or a load
balancer whose idle timer fires does): the request is sent once more on a new
connection inside the same attempt, and only that request. A failure on a connection
the request opened itself, or after any byte of an answer, stays ``transport``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import select
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb.providers import _http

HI = [{"role": "user", "content": "hi"}]
_ANSWER = {
    "id": "chatcmpl-1", "object": "chat.completion", "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}  # fmt: skip
_CHUNK = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m"}


def _sse() -> bytes:
    events = [
        {**_CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi"}}]},
        {**_CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
         "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}},
    ]  # fmt: skip
    text = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    return text.encode()


class RawServer:
    """Plays ``plan`` in order, one action per request the client sends:

    ``answer``: read the request, answer it (keep-alive; streamed when asked);
    ``stale``: on a kept connection, wait until the next request arrives and close the
    socket without reading it (the kernel resets the connection; not in ``seen``);
    ``stale-eof``: the same, but the bytes are taken off the socket unanswered first,
    so the close is an orderly end of stream (not in ``seen``);
    ``drop``: read the request, send the answer's head and part of its body, close;
    ``answer-fin``: answer (keep-alive), then close the connection at once, while idle;
    ``close``: read the request, close without a byte of an answer.

    ``seen`` lists ``(connection number, path)`` for every request read; ``closed``
    counts the connections the server has closed.
    """

    def __init__(self, plan: list[str]) -> None:
        self.plan = list(plan)
        self.seen: list[tuple[int, str]] = []
        self.connections = 0
        self.closed = 0
        self._lock = threading.Lock()
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen()
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._sock.close()

    def _next(self) -> str:
        with self._lock:
            return self.plan[0] if self.plan else "answer"

    def _pop(self) -> None:
        with self._lock:
            if self.plan:
                self.plan.pop(0)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                number = self.connections
            threading.Thread(target=self._serve, args=(conn, number), daemon=True).start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        try:
            self._converse(conn, number)
        finally:
            with self._lock:
                self.closed += 1

    def _converse(self, conn: socket.socket, number: int) -> None:
        with conn:
            served = 0
            while True:
                if served and (action := self._next()).startswith("stale"):
                    select.select([conn], [], [], 30)  # the request's bytes arrive...
                    self._pop()
                    if action == "stale-eof":
                        _read_request(conn)  # ...are dropped, and the close is a FIN
                    return  # ...or the socket closes unread (the kernel resets it)
                request = _read_request(conn)
                if request is None:
                    return
                path, stream = request
                action = self._next()
                self._pop()
                with self._lock:
                    self.seen.append((number, path))
                if action == "close":
                    return
                conn.sendall(_response(stream, cut=action == "drop"))
                if action in ("drop", "answer-fin"):
                    return
                served += 1


def _read_request(conn: socket.socket) -> tuple[str, bool] | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = next(int(v) for k, _, v in (line.partition(":") for line in lines[1:])
                  if k.strip().lower() == "content-length")  # fmt: skip
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        body += chunk
    return lines[0].split()[1], bool(json.loads(body).get("stream"))


def _response(stream: bool, *, cut: bool = False) -> bytes:
    if stream:
        events = _sse()
        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(events), events)
        head = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n")  # fmt: skip
        return head + (chunked[: len(chunked) // 2] if cut else chunked)
    body = json.dumps(_ANSWER).encode()
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    return head % len(body) + (body[: len(body) // 2] if cut else body)


@pytest.fixture(autouse=True)
async def _own_client() -> AsyncIterator[None]:
    yield
    await _http.aclose_client()


@contextlib.contextmanager
def raw_server(*plan: str) -> Iterator[RawServer]:
    server = RawServer(list(plan))
    try:
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("close", ["stale", "stale-eof"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_pooled_connection_closed_while_idle_is_sent_again_on_a_new_one(
    stream: bool, close: str
) -> None:
    with raw_server("answer", close, "answer") as srv:
        provider = hn.OpenAI("m", base_url=srv.url, stream=stream)
        assert (await provider.complete(HI)).text == "hi"
        done = await provider.complete(HI)
        assert done.text == "hi"
        # One attempt, a success: the dropped connection is no failure of the provider.
        assert [(a.kind, a.status) for a in done.attempts] == [(None, 200)]
        # The request on the dropped connection was never read; it went again on a new one.
        assert srv.seen == [(1, "/v1/chat/completions"), (2, "/v1/chat/completions")]
        assert srv.connections == 2


@pytest.mark.parametrize("stream", [False, True])
async def test_a_request_on_a_connection_it_opened_is_not_sent_twice(stream: bool) -> None:
    with raw_server("close") as srv:
        provider = hn.OpenAI("m", base_url=srv.url, stream=stream)
        with pytest.raises(hn.ProviderError) as info:
            await provider.complete(HI)
        assert info.value.kind is hn.ProviderErrorKind.TRANSPORT
        assert [a.kind for a in info.value.attempts] == ["transport"]
        assert srv.seen == [(1, "/v1/chat/completions")] and srv.connections == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_a_pooled_connection_that_dies_mid_answer_is_not_sent_again(stream: bool) -> None:
    # The server read the request and began to answer: sending it again could do it twice.
    with raw_server("answer", "drop") as srv:
        provider = hn.OpenAI("m", base_url=srv.url, stream=stream)
        await provider.complete(HI)
        with pytest.raises(hn.ProviderError) as info:
            await provider.complete(HI)
        assert info.value.kind is hn.ProviderErrorKind.TRANSPORT
        assert [a.kind for a in info.value.attempts] == ["transport"]
        assert [n for n, _ in srv.seen] == [1, 1] and srv.connections == 1


async def test_a_run_over_a_dropped_pooled_connection_has_one_attempt_row_per_call(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    with raw_server("answer", "stale", "answer") as srv, hn.Store(tmp_path / "s.duckdb") as store:
        provider = hn.OpenAI("m", base_url=srv.url)
        for task in ("one", "two"):
            result = await hn.run(hn.TaskContract(task, ws), provider, store=store)
            assert result.outcome is hn.RunOutcome.FINISHED
        rows = store.attempts()
        assert rows["kind"].isna().tolist() == [True, True]
        assert rows["status"].tolist() == [200, 200]
        rates = store.failure_rates(by="provider")
        assert rates[["provider", "attempts", "failures"]].values.tolist() == [["openai", 2, 0]]
        assert len(srv.seen) == 2 and srv.connections == 2


@pytest.mark.parametrize("stream", [False, True])
async def test_the_pool_finds_a_connection_the_server_closed_while_idle_before_using_it(
    stream: bool,
) -> None:
    """The pool's probe of idle connections (harnessnb polls their sockets itself:
    ``_client._ProbedStream``) sees the server's close: the next request goes on a new
    pooled connection of the shared client (the third reuses it), not on the dead one
    and not through the stale-connection resend (a client used once)."""
    with raw_server("answer-fin", "answer", "answer") as srv:
        provider = hn.OpenAI("m", base_url=srv.url, stream=stream)
        assert (await provider.complete(HI)).text == "hi"
        for _ in range(500):  # until the server has closed it (loopback: its FIN is here)
            if srv.closed:
                break
            await asyncio.sleep(0.01)
        assert srv.closed == 1
        for _ in range(2):
            done = await provider.complete(HI)
            assert [(a.kind, a.status) for a in done.attempts] == [(None, 200)]
        assert [n for n, _ in srv.seen] == [1, 2, 2] and srv.connections == 2


async def test_the_pools_probe_of_idle_connections_builds_no_socket_attributes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each request joining or leaving the pool probes every idle connection; anyio's
    stream answered by building its dict of socket attributes (``getpeername``
    included) per probe, a third of a call's CPU with 100 in flight. harnessnb's
    streams poll their socket directly: once the connections are made, calls build
    none."""
    from anyio.abc._sockets import _SocketProvider

    built: list[int] = []
    attributes = _SocketProvider.extra_attributes

    def counted(self: Any) -> Any:
        built.append(1)
        return attributes.fget(self)  # type: ignore[attr-defined]

    monkeypatch.setattr(_SocketProvider, "extra_attributes", property(counted))
    with raw_server() as srv:
        provider = hn.OpenAI("m", base_url=srv.url)
        await asyncio.gather(*(provider.complete(HI) for _ in range(8)))  # 8 connections
        opened = srv.connections
        built.clear()
        for _ in range(10):  # each probes the idle connections twice (joining, leaving)
            await provider.complete(HI)
        assert srv.connections == opened  # no connection made: only probes ran
        assert built == []


class TLSServer(RawServer):
    """``RawServer`` over TLS (its certificate made for 127.0.0.1)."""

    def __init__(self, plan: list[str], context: ssl.SSLContext) -> None:
        self._context = context
        super().__init__(plan)
        self.url = self.url.replace("http://", "https://")

    def _converse(self, conn: socket.socket, number: int) -> None:
        try:
            wrapped = self._context.wrap_socket(conn, server_side=True)
        except (OSError, ssl.SSLError):
            conn.close()
            return
        super()._converse(wrapped, number)


@pytest.mark.parametrize("stream", [False, True])
async def test_the_probed_connections_speak_tls_and_are_reused(
    stream: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """harnessnb's client makes its connections through its own backend
    (``_client._ProbedBackend``): a TLS connection's stream is wrapped after its
    handshake too, kept in the pool, probed and used again."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # read as the client is made
    await _http.aclose_client()
    server = TLSServer([], context)
    try:
        provider = hn.OpenAI("m", base_url=server.url, stream=stream)
        for _ in range(3):
            assert (await provider.complete(HI)).text == "hi"
        assert server.connections == 1 and len(server.seen) == 3
    finally:
        server.close()
