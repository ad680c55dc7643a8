"""The chaos server itself: reproducible rates, faults on the wire, shutdown, concurrency."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import httpx2
import pytest

import harnessnb as hn
from harnessnb.chaos import RATE_FAULTS, ChaosRequest, ChaosServer, Fault, Reply, echo_responder
from harnessnb.providers import _http

OPENAI_BODY = {"model": "m", "messages": [{"role": "user", "content": "ping"}]}


def post(url: str, body: Any = OPENAI_BODY, **kw: Any) -> httpx2.Response:
    kw.setdefault("timeout", 5)
    return httpx2.post(url + "/chat/completions", json=body, **kw)


def fault_sequence(seed: int, n: int, rates: dict[str | Fault, float]) -> list[Fault | None]:
    with ChaosServer(seed=seed, rates=rates) as srv, httpx2.Client(timeout=5) as client:
        for _ in range(n):
            client.post(srv.openai_url + "/chat/completions", json=OPENAI_BODY)
        return [r.fault for r in srv.requests]


RATES: dict[str | Fault, float] = {
    "rate_limited": 0.2,
    "server": 0.1,
    "malformed": 0.1,
    "empty": 0.05,
    Fault.status(418): 0.05,
}


def test_same_seed_gives_the_same_fault_sequence() -> None:
    first = fault_sequence(7, 60, RATES)
    assert first == fault_sequence(7, 60, RATES)
    assert first != fault_sequence(8, 60, RATES)
    kinds = {f.kind if f else None for f in first}
    assert {"status", "malformed", None} <= kinds
    # The proportions follow the rates roughly.
    assert 0.35 < sum(f is not None for f in first) / len(first) < 0.75


def test_reset_restarts_the_draw() -> None:
    with ChaosServer(seed=3, rates={"server": 0.5}) as srv, httpx2.Client() as client:
        for _ in range(20):
            client.post(srv.openai_url + "/chat/completions", json=OPENAI_BODY)
        first = [r.fault for r in srv.requests]
        srv.reset()
        assert srv.requests == []
        for _ in range(20):
            client.post(srv.openai_url + "/chat/completions", json=OPENAI_BODY)
        assert [r.fault for r in srv.requests] == first


def test_unknown_rate_name_and_excess_total_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault rate"):
        ChaosServer(rates={"gremlins": 0.1})
    with pytest.raises(ValueError, match="more than 1"):
        ChaosServer(rates={"server": 0.7, "rate_limited": 0.6})
    assert set(RATE_FAULTS) >= {"rate_limited", "server", "timeout", "malformed", "transport"}


def test_queue_beats_default_and_requests_are_recorded_redacted() -> None:
    with ChaosServer() as srv:
        srv.set_default(Fault.status(503))
        srv.push(Fault.status(429, retry_after="1", retry_after_ms="1000"))
        r1 = post(srv.openai_url, headers={"Authorization": "Bearer sk-live-xyz"})
        r2 = post(srv.openai_url)
        srv.set_default(None)
        r3 = post(srv.openai_url)
        assert [r1.status_code, r2.status_code, r3.status_code] == [429, 503, 200]
        assert r1.headers["retry-after"] == "1" and r1.headers["retry-after-ms"] == "1000"
        assert r1.json()["error"]["type"] == "rate_limit_error"
        assert r3.json()["choices"][0]["message"]["content"] == "ping"
        assert all(r.headers["x-request-id"] for r in (r1, r2, r3))
        first = srv.requests[0]
        assert first.headers["authorization"] == "REDACTED"
        assert "sk-live" not in repr(srv.requests)
        assert (first.protocol, first.model, first.stream, first.path) == (
            "openai",
            "m",
            False,
            "/v1/chat/completions",
        )
        assert first.fault == Fault.status(429, retry_after="1", retry_after_ms="1000")


def test_anthropic_error_bodies_and_request_id_header() -> None:
    with ChaosServer() as srv:
        srv.push(Fault.status(529), Fault.status(400, body="prompt is too long"))
        body = {"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
        r1 = httpx2.post(srv.anthropic_url + "/v1/messages", json=body)
        r2 = httpx2.post(srv.anthropic_url + "/v1/messages", json=body)
        assert r1.json() == {
            "type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded."},
        }
        assert r2.json()["error"]["message"] == "prompt is too long"
        assert r1.headers["request-id"] == srv.requests[0].request_id


def test_redirect_carries_a_location_and_custom_body_is_sent_as_is() -> None:
    with ChaosServer() as srv:
        srv.push(Fault.status(302), Fault.status(200, body={"weird": True}, headers={"x-a": "b"}))
        r1 = post(srv.openai_url)
        r2 = post(srv.openai_url)
        assert r1.status_code == 302 and "location" in r1.headers
        assert r2.json() == {"weird": True} and r2.headers["x-a"] == "b"


def test_keep_alive_serves_many_requests_on_one_connection() -> None:
    with (
        ChaosServer() as srv,
        socket.create_connection(("127.0.0.1", int(srv.url.rsplit(":", 1)[1]))) as s,
    ):
        payload = json.dumps(OPENAI_BODY).encode()
        request = (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
        )
        s.sendall(request * 3)
        s.settimeout(2)
        data = b""
        while data.count(b"HTTP/1.1 200") < 3:
            data += s.recv(65536)
        assert data.count(b"HTTP/1.1 200 OK") == 3
        assert len(srv.requests) == 3


def test_chunked_request_body_is_read() -> None:
    with ChaosServer() as srv:

        def gen() -> Any:
            yield json.dumps(OPENAI_BODY).encode()

        r = httpx2.post(srv.openai_url + "/chat/completions", content=gen())
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "ping"


def test_a_failing_responder_answers_500_with_its_error() -> None:
    def broken(request: ChaosRequest) -> Reply:
        raise KeyError("no script for this turn")

    with ChaosServer(responder=broken) as srv:
        r = post(srv.openai_url)
        assert r.status_code == 500
        assert "no script for this turn" in r.json()["error"]["message"]


def test_unknown_path_is_404_and_bad_json_is_400() -> None:
    with ChaosServer() as srv:
        assert httpx2.post(srv.url + "/v2/whatever", json={}).status_code == 404
        assert httpx2.post(srv.openai_url + "/chat/completions", content=b"{").status_code == 400


def test_hanging_and_stalled_connections_do_not_block_shutdown() -> None:
    srv = ChaosServer().start()
    srv.set_default(Fault.hang(60))
    with pytest.raises(httpx2.ReadTimeout):
        post(srv.openai_url, timeout=0.2)
    srv.set_default(Fault.stall_stream(after_events=1, seconds=60))
    with (
        pytest.raises(httpx2.ReadTimeout),
        httpx2.stream(
            "POST",
            srv.openai_url + "/chat/completions",
            json={**OPENAI_BODY, "stream": True},
            timeout=0.2,
        ) as r,
    ):
        r.read()
    started = time.perf_counter()
    srv.stop()
    assert time.perf_counter() - started < 1.0


def test_drop_mid_body_cuts_the_body() -> None:
    with ChaosServer() as srv:
        srv.push(Fault.drop_mid_body())
        with pytest.raises(httpx2.RemoteProtocolError):
            post(srv.openai_url)
        assert post(srv.openai_url).status_code == 200  # the server lives on


def test_empty_reply_has_no_choice_and_zero_output_tokens() -> None:
    with ChaosServer() as srv:
        srv.push(Fault.empty())
        body = post(srv.openai_url).json()
        assert body["choices"] == [] and body["usage"]["completion_tokens"] == 0
        assert body["usage"]["prompt_tokens"] > 0


def test_responder_and_echo_default() -> None:
    req = ChaosRequest(
        "anthropic",
        "/v1/messages",
        {
            "model": "c",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "first"}]},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [{"type": "text", "text": "second"}]},
            ],
            "tools": [{"name": "grep"}],
        },
        {},
        "req_1",
    )
    assert echo_responder(req) == Reply(text="second")
    assert req.tools == ["grep"] and req.model == "c" and not req.stream


async def test_hundred_concurrent_connections_each_stream_their_own_answer() -> None:
    seen: list[str] = []

    def responder(request: ChaosRequest) -> Reply:
        seen.append(request.model)
        return Reply(text=f"answer for {request.model}")

    with ChaosServer(responder=responder) as srv:
        # 100 calls in flight at once: the shared pool opens a connection for each.
        providers = [hn.OpenAI(f"m{i}", base_url=srv.openai_url) for i in range(100)]
        results = await asyncio.gather(
            *(p.complete([{"role": "user", "content": "x"}], stream=True) for p in providers)
        )
        assert [r.text for r in results] == [f"answer for m{i}" for i in range(100)]
        assert len(seen) == 100
        await _http.aclose_client()


def test_a_stream_its_client_left_is_not_written_on(caplog: pytest.LogCaptureFixture) -> None:
    # The demo's stalled stream: the client gives up during the stall, the server then
    # wrote every remaining event, and asyncio logged "socket.send() raised exception."
    # for each write after the fifth (seen on the demo's stderr).
    words = " ".join(f"w{i}" for i in range(40))
    with ChaosServer(responder=lambda request: Reply(text=words)) as srv:
        srv.push(Fault.stall_stream(after_events=1, seconds=0.3))
        host, port = "127.0.0.1", int(srv.url.rsplit(":", 1)[1])
        payload = json.dumps({**OPENAI_BODY, "stream": True}).encode()
        with socket.create_connection((host, port)) as s:
            s.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (len(payload), payload)
            )
            s.settimeout(2)
            assert s.recv(65536).startswith(b"HTTP/1.1 200")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        with caplog.at_level("WARNING", logger="asyncio"):
            time.sleep(0.8)  # the stall ends, the server finds the client gone
            assert post(srv.openai_url).status_code == 200  # and lives on
    assert "socket.send() raised exception." not in caplog.text
