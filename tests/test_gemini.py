"""``hn.Gemini`` over real loopback HTTP against the chaos server's Gemini dialect: every
fault row the other providers are held to (``tests/test_providers.py``'s table), then
Gemini's own failures (RetryInfo, a daily quota, ErrorInfo, blocked prompts, candidates
ended with no content), streamed and not; the wire shape; the key."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb import cli
from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply, google_error
from harnessnb.demo import DemoModel, make_demo_workspace
from harnessnb.demo._chaos_gemini import thought_signature
from harnessnb.launch._choose import choose_provider
from harnessnb.providers import _http
from harnessnb.providers._gemini import SIGNATURE_STAND_IN
from harnessnb.rules._classify import read_google_error
from harnessnb.rules._retry import retry_decision
from tests.test_providers import CONVERSATION, HI, ROWS, TOOLS, Row, tool_responder

KEY = "AIzaSyD-SECRET-canary-0123456789abcdefg"
K = hn.ProviderErrorKind
DAILY = "GenerateRequestsPerDayPerProjectPerModel-FreeTier"
OVERFLOW = (
    "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."
)


@pytest.fixture(autouse=True)
async def srv(module_srv: ChaosServer) -> AsyncIterator[ChaosServer]:
    module_srv.reset()
    yield module_srv
    await _http.aclose_client()


def make(srv: ChaosServer, **kw: Any) -> hn.Gemini:
    kw.setdefault("api_key", KEY)
    return hn.Gemini("gemini-test", base_url=srv.gemini_url, **kw)


async def fail(provider: Any, stream: bool) -> hn.ProviderError:
    with pytest.raises(hn.ProviderError) as info:
        await provider.complete(HI, stream=stream)
    return info.value


def _status(code: int, **kw: Any) -> Fault:
    headers = kw.pop("headers", None)
    return Fault.status(code, body=google_error(code, **kw), headers=headers)


# Gemini's own failures: what the body says decides, not the status alone.
GEMINI_ROWS = [
    Row("429-retryinfo", _status(429, retry_delay="30s"), "rate_limited", 429, 30.0),
    Row("429-retryinfo-fraction", _status(429, retry_delay="1.5s"), "rate_limited", 429, 1.5),
    Row(
        "429-header-before-body",
        _status(429, retry_delay="30s", headers={"retry-after": "4"}),
        "rate_limited",
        429,
        4.0,
    ),
    Row(
        "429-daily-quota",
        _status(429, retry_delay="37s", quota_id=DAILY, quota_value="50"),
        "rate_limited",
        429,
        37.0,
        retryable=False,
    ),
    Row(
        "429-per-minute-quota",
        _status(429, retry_delay="9s", quota_id="GenerateRequestsPerMinutePerProjectPerModel"),
        "rate_limited",
        429,
        9.0,
        retryable=True,
    ),
    Row("400-invalid-argument", _status(400), "request", 400),
    Row("400-api-key-invalid", _status(400, reason="API_KEY_INVALID"), "auth", 400),
    Row("403-permission-denied", _status(403), "auth", 403),
    Row("401-unauthenticated", _status(401), "auth", 401),
    Row("503-unavailable", _status(503), "server", 503),
    Row("500-internal", _status(500), "server", 500),
    Row("504-deadline-exceeded", _status(504), "timeout", 504),
    # The status word decides where the HTTP status would say otherwise.
    Row("400-says-unavailable", _status(400, status="UNAVAILABLE"), "server", 400),
    Row("400-input-token-count", _status(400, message=OVERFLOW), "context_overflow", 400),
    Row("prompt-blocked", Fault.blocked("SAFETY"), "request", 200),
    Row("prompt-blocked-other", Fault.blocked("OTHER"), "request", 200),
    Row("candidate-safety", Fault.finish_empty("SAFETY"), "request", 200),
    Row("candidate-recitation", Fault.finish_empty("RECITATION"), "request", 200),
    Row("candidate-max-tokens", Fault.finish_empty("MAX_TOKENS"), "malformed", 200),
    Row(
        "resource-exhausted-in-200",
        Fault.error_in_200(google_error(429)["error"]),
        "rate_limited",
        200,
    ),
    Row(
        "daily-quota-in-200",
        Fault.error_in_200(google_error(429, retry_delay="20s", quota_id=DAILY)["error"]),
        "rate_limited",
        200,
        20.0,
        retryable=False,
    ),
    Row(
        "retryinfo-mid-stream",
        Fault.stream_error(google_error(429, retry_delay="12s")["error"], after_events=1),
        "rate_limited",
        200,
        12.0,
        modes=(True,),
    ),
    Row(
        "daily-quota-mid-stream",
        Fault.stream_error(google_error(429, quota_id=DAILY)["error"], after_events=2),
        "rate_limited",
        200,
        retryable=False,
        modes=(True,),
    ),
    Row(
        "unavailable-mid-stream",
        Fault.stream_error(google_error(503)["error"], after_events=1),
        "server",
        200,
        modes=(True,),
    ),
]

CASES = [
    pytest.param(row, stream, id=f"{'stream' if stream else 'json'}-{row.id}")
    for row in [*ROWS, *GEMINI_ROWS]
    for stream in row.modes
]


@pytest.mark.parametrize(("row", "stream"), CASES)
async def test_classification_row(row: Row, stream: bool, srv: ChaosServer) -> None:
    srv.push(row.fault() if callable(row.fault) else row.fault)
    provider = make(srv, **dict(row.provider_kw))
    err = await fail(provider, stream)

    assert err.kind.value == row.kind, err.message
    assert err.status == row.status
    if row.id == "429-http-date":
        assert err.retry_after_s is not None and abs(err.retry_after_s - 120.0) < 5
    else:
        assert err.retry_after_s == row.retry_after
    expected = row.retryable if row.retryable is not None else err.kind.retryable
    assert err.retryable is expected
    assert err.provider == "gemini" and err.model == "gemini-test"
    (request,) = srv.requests
    assert request.protocol == "gemini" and request.stream is stream
    assert err.request_id == (request.request_id if row.answered else None)
    (attempt,) = err.attempts
    assert (attempt.provider, attempt.kind, attempt.status) == ("gemini", row.kind, row.status)
    assert attempt.retry_after_s == err.retry_after_s
    assert attempt.error == err.message
    assert KEY not in repr(attempt) and KEY not in str(err)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_daily_quota_is_named_and_not_retried(stream: bool, srv: ChaosServer) -> None:
    srv.push(_status(429, retry_delay="37s", quota_id=DAILY, quota_value="50"))
    err = await fail(make(srv), stream)
    assert DAILY in err.message and "limit 50" in err.message
    assert not err.retryable
    # The retry rule reads it so: no wait of 37 s for a quota that resets tomorrow.
    decision = retry_decision(
        err, retries_done=0, max_retries=2, policy=hn.RetryPolicy(), elapsed=0.0, max_seconds=None
    )
    assert (decision.action, decision.reason) == ("stop", "not_retryable")
    srv.push(_status(429, retry_delay="3s"))
    minute = await fail(make(srv), stream)
    again = retry_decision(
        minute, retries_done=0, max_retries=2, policy=hn.RetryPolicy(), elapsed=0.0,
        max_seconds=None,
    )  # fmt: skip
    assert again.action == "retry" and again.delay >= 3.0


@pytest.mark.parametrize("stream", [False, True])
async def test_a_blocked_prompt_keeps_its_reason(stream: bool, srv: ChaosServer) -> None:
    srv.push(Fault.blocked("PROHIBITED_CONTENT"))
    err = await fail(make(srv), stream)
    assert "PROHIBITED_CONTENT" in err.message and not err.retryable
    (attempt,) = err.attempts
    assert attempt.input_tokens > 0  # the blocked answer reported what it read


@pytest.mark.parametrize("stream", [False, True])
async def test_the_key_goes_in_the_header_never_the_url(stream: bool, srv: ChaosServer) -> None:
    await make(srv).complete(HI, stream=stream)
    (request,) = srv.requests
    assert request.headers["x-goog-api-key"] == "REDACTED"
    assert "authorization" not in request.headers
    method = "streamGenerateContent" if stream else "generateContent"
    assert request.path == f"/v1/models/gemini-test:{method}"
    assert KEY not in request.path


async def test_a_key_echoed_in_an_error_is_scrubbed(srv: ChaosServer) -> None:
    srv.push(_status(400, message=f"API key not valid: {KEY}", reason="API_KEY_INVALID"))
    err = await fail(make(srv), False)
    assert err.kind is K.AUTH
    assert KEY not in str(err) and KEY not in err.message


@pytest.mark.parametrize("stream", [False, True])
async def test_text_usage_and_finish_reason(stream: bool, srv: ChaosServer) -> None:
    said = "say something long enough to split"
    chunks: list[str] = []

    async def on_text(piece: str, first: bool) -> None:
        chunks.append(piece)

    c = await make(srv).complete(
        [{"role": "user", "content": said}], stream=stream, on_text=on_text
    )
    assert (c.text, c.tool_calls, c.finish_reason) == (said, (), "stop")
    assert c.usage.input_tokens > 0 and c.usage.output_tokens > 0 and not c.usage.estimated
    assert c.request_id == srv.requests[-1].request_id
    if stream:
        assert len(chunks) >= 3 and "".join(chunks) == said
        assert c.ttft_ms is not None


async def test_tool_calls_parse_as_every_other_protocol_does() -> None:
    with ChaosServer(seed=1, responder=tool_responder) as srv:
        seen = set()
        for stream in (False, True):
            c = await make(srv).complete(HI, tools=TOOLS, stream=stream)
            assert c.finish_reason == "tool_calls" and c.text == "Reading it."
            assert c.usage == hn.Usage(321, 45)
            assert len({call.id for call in c.tool_calls}) == 2
            seen.add(tuple((t.name, repr(t.arguments)) for t in c.tool_calls))
        await _http.aclose_client()
    assert seen == {
        (
            ("read_file", repr({"path": "src/a b.py", "lines": [1, 20]})),
            ("grep", repr({"pattern": "def \\w+\\(", "path": "."})),
        )
    }


async def test_the_wire_has_contents_system_instruction_and_function_parts(
    srv: ChaosServer,
) -> None:
    await make(srv).complete(CONVERSATION, tools=TOOLS, max_tokens=77, stream=True)
    request = srv.requests[-1]
    body = request.json
    assert body["systemInstruction"] == {"parts": [{"text": "You are terse."}]}
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    calls = body["contents"][1]["parts"]
    # Calls this provider never saw answered: the stand-in signature on the turn's first.
    assert calls[0] == {
        "functionCall": {"id": "t1", "name": "read_file", "args": {"path": "a"}},
        "thoughtSignature": SIGNATURE_STAND_IN,
    }
    assert calls[1] == {"functionCall": {"id": "t2", "name": "read_file", "args": {"path": "b"}}}
    answers = body["contents"][2]["parts"]
    assert answers[1] == {
        "functionResponse": {"id": "t2", "name": "read_file", "response": {"result": "B"}}
    }
    assert answers[2] == {"text": "Now summarise."}
    declared = body["tools"][0]["functionDeclarations"][0]
    assert declared["name"] == "read_file"
    assert declared["parametersJsonSchema"] == TOOLS[0]["parameters"]
    assert body["generationConfig"] == {"maxOutputTokens": 77}
    # The chaos server (and the demo model behind it) reads it like any protocol.
    assert request.tools == ["read_file", "grep"]
    assert [m["role"] for m in request.messages] == [
        "system", "user", "assistant", "tool", "tool", "user",
    ]  # fmt: skip
    assert request.messages[4] == {"role": "tool", "tool_call_id": "t2", "content": "B"}


def _calls_twice(request: ChaosRequest) -> Reply:
    if any(m.get("role") == "tool" for m in request.messages):
        return Reply(text="done")
    return Reply(tool_calls=[{"name": "grep", "arguments": {"pattern": "a"}}] * 2)


async def test_calls_without_ids_are_answered_by_name_in_order() -> None:
    # Gemini sends function calls without ids: harnessnb makes them up and sends none
    # back, so the responses pair with the calls by name and order, as Gemini pairs them.
    with ChaosServer(responder=_calls_twice) as srv:
        provider = make(srv)
        first = await provider.complete(HI, tools=TOOLS)
        ids = [c.id for c in first.tool_calls]
        assert len(set(ids)) == 2
        history: list[dict[str, Any]] = [
            *HI,
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in first.tool_calls
            ]},
            *({"role": "tool", "tool_call_id": i, "content": f"r{n}"} for n, i in enumerate(ids)),
        ]  # fmt: skip
        second = await provider.complete(history, tools=TOOLS)
        sent = srv.requests[-1]
        await _http.aclose_client()
    assert second.text == "done"
    parts = sent.json["contents"][2]["parts"]
    assert [p["functionResponse"]["name"] for p in parts] == ["grep", "grep"]
    assert all("id" not in p["functionResponse"] for p in parts)
    tool_messages = [m for m in sent.messages if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["r0", "r1"]
    assert len({m["tool_call_id"] for m in tool_messages}) == 2


def _history(first: hn.Completion) -> list[dict[str, Any]]:
    calls = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in first.tool_calls]
    return [
        *HI,
        {"role": "assistant", "content": "", "tool_calls": calls},
        *({"role": "tool", "tool_call_id": c["id"], "content": "r"} for c in calls),
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_calls_thought_signature_goes_back_verbatim(stream: bool) -> None:
    # Gemini 3 refuses a turn whose function calls lost their signatures (HTTP 400).
    with ChaosServer(responder=_calls_twice) as srv:
        provider = make(srv)
        first = await provider.complete(HI, tools=TOOLS, stream=stream)
        signed = thought_signature(srv.requests[-1].request_id)
        await provider.with_timeout(30).complete(_history(first), tools=TOOLS, stream=stream)
        parts = srv.requests[-1].json["contents"][1]["parts"]
        # Another object (a resumed run in a new process) never saw it: the stand-in.
        await make(srv).complete(_history(first), tools=TOOLS, stream=stream)
        fresh = srv.requests[-1].json["contents"][1]["parts"]
        # The Gemini 2 models need none: nothing is made up for them.
        await make(srv, name="g2").complete(_history(first), tools=TOOLS, stream=stream)
        await hn.Gemini(
            "gemini-2.5-flash", api_key=KEY, base_url=srv.gemini_url
        ).complete(_history(first), tools=TOOLS, stream=stream)
        old = srv.requests[-1].json["contents"][1]["parts"]
        await _http.aclose_client()
    assert [p.get("thoughtSignature") for p in parts] == [signed, None]
    assert [p.get("thoughtSignature") for p in fresh] == [SIGNATURE_STAND_IN, None]
    assert [p.get("thoughtSignature") for p in old] == [None, None]


async def test_thoughts_are_not_the_answer_but_are_billed(srv: ChaosServer) -> None:
    body = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"text": "pondering", "thought": True}, {"text": "42"}],
                },
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 10,
            "candidatesTokenCount": 2,
            "thoughtsTokenCount": 30,
            "cachedContentTokenCount": 4,
        },
    }
    srv.push(Fault.status(200, body=body))
    c = await make(srv).complete(HI, stream=False)
    assert c.text == "42"
    assert c.usage == hn.Usage(10, 32, cached_input_tokens=4)


async def _ends_before_its_finish_reason(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    await reader.readuntil(b"\r\n\r\n")
    chunk = json.dumps({"candidates": [{"content": {"parts": [{"text": "half an ans"}]}}]})
    event = f"data: {chunk}\r\n\r\n".encode()
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(event), event)
    )
    await writer.drain()
    writer.close()


def _stream_of(*chunks: dict[str, Any]) -> Any:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        events = b"".join(f"data: {json.dumps(c)}\r\n\r\n".encode() for c in chunks)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(events), events)
        )
        await writer.drain()
        writer.close()

    return serve


async def test_usage_sent_after_the_finish_reason_is_billed() -> None:
    # The finish reason and the usage need not share a chunk: the usage after it counts.
    text = {"content": {"role": "model", "parts": [{"text": "fine"}]}, "index": 0}
    server = await asyncio.start_server(
        _stream_of(
            {"candidates": [text]},
            {"candidates": [{"finishReason": "STOP", "index": 0}]},
            {"usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 3}},
        ),
        "127.0.0.1",
        0,
    )
    port = server.sockets[0].getsockname()[1]
    async with server:
        provider = hn.Gemini("m", api_key=KEY, base_url=f"http://127.0.0.1:{port}")
        done = await provider.complete(HI, stream=True)
        await _http.aclose_client()
    assert (done.text, done.finish_reason) == ("fine", "stop")
    assert done.usage == hn.Usage(7, 3)


async def test_a_stream_closed_before_its_finish_reason_is_not_an_answer() -> None:
    # Gemini's stream has no end marker: a clean close before a finishReason is a cut,
    # not a short answer.
    server = await asyncio.start_server(_ends_before_its_finish_reason, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        provider = hn.Gemini("m", api_key=KEY, base_url=f"http://127.0.0.1:{port}")
        err = await fail(provider, True)
        await _http.aclose_client()
    assert err.kind is K.MALFORMED and "finishReason" in err.message


@pytest.mark.parametrize("stream", [False, True])
async def test_connection_refused_is_transport(stream: bool) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    provider = hn.Gemini("m", api_key=KEY, base_url=f"http://127.0.0.1:{port}")
    err = await fail(provider, stream)
    assert err.kind is K.TRANSPORT and err.retryable


def test_the_key_comes_from_gemini_then_google(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GEMINI_BASE_URL", "GEMINI_MODEL"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(hn.ConfigError, match="GEMINI_API_KEY"):
        hn.Gemini("m")
    with pytest.raises(hn.ConfigError, match="GEMINI_API_KEY"):
        hn.Gemini.from_env()
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    for provider in (hn.Gemini("m"), hn.Gemini.from_env("m")):
        assert provider._headers["x-goog-api-key"] == KEY
        assert KEY not in repr(provider)
        assert provider.hosts() == ["generativelanguage.googleapis.com"]
    monkeypatch.setenv("GEMINI_API_KEY", KEY + "2")
    assert hn.Gemini.from_env().model == hn.Gemini.DEFAULT_MODEL
    assert hn.Gemini("m")._headers["x-goog-api-key"] == KEY + "2"


def test_a_model_named_with_its_models_prefix_is_the_same_model() -> None:
    provider = hn.Gemini("models/gemini-2.5-pro", api_key=KEY, api_version="v1beta")
    assert str(provider._url_for(True)) == (
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro"
        ":streamGenerateContent?alt=sse"
    )
    with pytest.raises(hn.ConfigError, match="api_version"):
        hn.Gemini("m", api_key=KEY, api_version="../v1")


# ----------------------------------------------------------- the rule, as a table


@dataclasses.dataclass(frozen=True)
class Reading:
    error: dict[str, Any]
    kind: hn.ProviderErrorKind
    retry_after_s: float | None = None
    should_retry: bool | None = None


READINGS = [
    Reading(google_error(429, retry_delay="30s")["error"], K.RATE_LIMITED, 30.0),
    Reading(google_error(429, retry_delay="soon")["error"], K.RATE_LIMITED),
    Reading(google_error(429, retry_delay="0.250s")["error"], K.RATE_LIMITED, 0.25),
    Reading(google_error(429, quota_id=DAILY)["error"], K.RATE_LIMITED, None, False),
    Reading(
        google_error(429, quota_id="GenerateContentInputTokensPerModelPerMonth")["error"],
        K.RATE_LIMITED,
        None,
        False,
    ),
    Reading(google_error(429, quota_id="PerMinutePerProject")["error"], K.RATE_LIMITED),
    Reading(google_error(400, reason="API_KEY_INVALID")["error"], K.AUTH),
    Reading(google_error(400)["error"], K.REQUEST),
    Reading(google_error(400, message=OVERFLOW)["error"], K.CONTEXT_OVERFLOW),
    Reading(google_error(403)["error"], K.AUTH),
    Reading(google_error(401)["error"], K.AUTH),
    Reading(google_error(500)["error"], K.SERVER),
    Reading(google_error(503)["error"], K.SERVER),
    Reading(google_error(504)["error"], K.TIMEOUT),
    Reading(google_error(402)["error"], K.AUTH),  # no known word: the code decides
    Reading(google_error(408)["error"], K.TIMEOUT),
]


@pytest.mark.parametrize("reading", READINGS, ids=lambda r: repr(r.error)[:60])
def test_google_error_table(reading: Reading) -> None:
    got = read_google_error(reading.error, reading.error["code"])
    assert (got.kind, got.retry_after_s, got.should_retry) == (
        reading.kind,
        reading.retry_after_s,
        reading.should_retry,
    )


# ------------------------------------------------------------------ both faces


def test_the_faces_name_gemini_by_word_or_by_its_key() -> None:
    provider, note = choose_provider("gemini", env={"GOOGLE_API_KEY": KEY})
    assert isinstance(provider, hn.Gemini) and provider.model == hn.Gemini.DEFAULT_MODEL
    assert provider._headers["x-goog-api-key"] == KEY and note == ""
    env = {"GEMINI_API_KEY": KEY, "GEMINI_MODEL": "gemini-2.5-pro"}
    provider, note = choose_provider(env=env)
    assert provider.name == "gemini" and provider.model == "gemini-2.5-pro"
    assert note == "provider gemini: GEMINI_API_KEY is set"
    # Every other key wins over Gemini's, as before it came.
    assert choose_provider(env={**env, "OPENAI_API_KEY": "k"})[0].name == "openai"
    with pytest.raises(hn.ConfigError, match="GEMINI_API_KEY or GOOGLE_API_KEY is not set"):
        choose_provider("gemini", env={})


def test_a_run_with_provider_gemini_on_the_chaos_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The demo model behind the Gemini dialect: it reads the functionCall/functionResponse
    # turns as it reads the other protocols' and finishes the quickstart's task.
    ws = make_demo_workspace(tmp_path / "ws")
    store = str(tmp_path / "s.duckdb")
    with ChaosServer(responder=DemoModel()) as server:
        code = cli.main(["run", "Summarise README.md into NOTES.md", "--provider",
                         "gemini", "--base-url", server.gemini_url, "--workspace", str(ws),
                         "--store", store, "--allow-write", "NOTES.md",
                         "--verify", "NOTES.md contains #"])  # fmt: skip
        paths = {r.path for r in server.requests}
    out = capsys.readouterr().out
    assert code == 0, out
    assert paths == {"/v1/models/gemini-2.5-flash:streamGenerateContent"}
    with hn.Store(store) as s:
        runs = s.runs()
    assert list(runs["provider"]) == ["gemini"] and list(runs["outcome"]) == ["success"]


def test_a_gemini_answer_is_priced_by_the_catalogue() -> None:
    # Priced as Google's model (genai-prices), not left unknown: cost is part of the row.
    cost = hn.Prices().cost(
        "gemini", "gemini-2.5-flash", 1_000_000, 1_000_000, hn.Gemini.DEFAULT_BASE_URL
    )
    assert cost is not None and cost > 0


async def test_a_server_that_cannot_stream_is_asked_at_the_whole_answer_route(
    srv: ChaosServer,
) -> None:
    # Gemini's streamed and whole answers have different URLs: the retry without
    # streaming must go to generateContent, and the object must not stream again.
    srv.push(Fault.rejects_streaming())
    provider = make(srv)
    done = await provider.complete(HI)
    assert done.text == "hi" and len(done.attempts) == 2
    assert [r.path.rsplit(":", 1)[1] for r in srv.requests] == [
        "streamGenerateContent", "generateContent",
    ]  # fmt: skip
    assert not provider.stream


def test_a_gemini_run_resumes_with_gemini_at_its_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, ws = str(tmp_path / "s.duckdb"), make_demo_workspace(tmp_path / "ws")
    with hn.set_testing(True), ChaosServer(responder=DemoModel()) as server:
        server.set_default(_status(503))
        code = cli.main(["run", "Summarise README.md into NOTES.md", "--provider", "gemini",
                         "--base-url", server.gemini_url, "--workspace", str(ws),
                         "--store", path, "--allow-write", "NOTES.md"])  # fmt: skip
        assert code == 3  # escalated_retryable: resumable
        out = capsys.readouterr().out
        run_id = out.split("started ", 1)[1].split()[0]
        server.set_default(None)
        asked = len(server.requests)
        assert cli.main(["resume", run_id, "--store", path]) == 0  # no --provider, no key
        out = capsys.readouterr().out
        assert len(server.requests) > asked
        assert {r.protocol for r in server.requests} == {"gemini"}
    assert "recorded with: gemini" in out
    with hn.Store(path) as store:
        attempts = store.attempts(run_id)
    assert set(attempts["provider"]) == {"gemini"}
    assert set(attempts["base_url"]) == {server.gemini_url}
    assert set(attempts["kind"].dropna()) == {"server"}  # 503 UNAVAILABLE, then answers


async def test_a_server_silent_after_its_last_chunk_does_not_spoil_the_answer(
    srv: ChaosServer,
) -> None:
    # Every chunk sent, then the stream held open: the last chunk (finish reason and
    # output tokens) completes the answer; the attempt does not wait for the close.
    srv.push(Fault.stall_stream(after_events=100, seconds=3.0))
    started = time.perf_counter()
    done = await make(srv, idle_timeout_s=0.5).complete(HI, stream=True)
    assert done.text == "hi" and not done.usage.estimated
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("fault", [Fault.blocked(), Fault.finish_empty("RECITATION")])
async def test_gemini_only_faults_are_empty_answers_in_the_other_protocols(
    fault: Fault, stream: bool, srv: ChaosServer
) -> None:
    for provider in (
        hn.OpenAI("m", api_key=KEY, base_url=srv.openai_url),
        hn.Anthropic("m", api_key=KEY, base_url=srv.anthropic_url),
    ):
        srv.push(Fault.empty(), fault)
        empty, err = await fail(provider, stream), await fail(provider, stream)
        assert (err.kind, err.message) == (empty.kind, empty.message)
        assert err.kind is K.MALFORMED
