"""Providers over real loopback HTTP against the chaos server: every classification row,
for OpenAI, OpenRouter and Anthropic, streamed and not; tool calls; configuration."""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import inspect
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

import harnessnb as hn
from harnessnb import AttemptRecord
from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply
from harnessnb.providers import _http
from harnessnb.providers._completion import Provider

KEY = "sk-SECRET-canary-12345"
PROVIDERS = ["openai", "openrouter", "anthropic"]
HI = [{"role": "user", "content": "hi"}]
CONTEXT_MSG = "This model's maximum context length is 8192 tokens. Please reduce the length."


@pytest.fixture(autouse=True)
async def srv(module_srv: ChaosServer) -> AsyncIterator[ChaosServer]:
    module_srv.reset()  # one server for the module, as new for each test
    yield module_srv
    await _http.aclose_client()


def make(name: str, srv: ChaosServer, **kw: Any) -> _http.HTTPProvider:
    kw.setdefault("api_key", KEY)
    if name == "anthropic":
        return hn.Anthropic("claude-test", base_url=srv.anthropic_url, **kw)
    cls = hn.OpenRouter if name == "openrouter" else hn.OpenAI
    return cls("gpt-test", base_url=srv.openai_url, **kw)


async def fail(provider: Any, stream: bool) -> tuple[hn.ProviderError, list[AttemptRecord]]:
    with pytest.raises(hn.ProviderError) as info:
        await provider.complete(HI, stream=stream)
    return info.value, list(info.value.attempts)


# ----------------------------------------------------------------- the table


@dataclasses.dataclass(frozen=True)
class Row:
    id: str
    fault: Fault | Callable[[], Fault]
    kind: str
    status: int | None
    retry_after: float | None = None
    retryable: bool | None = None  # None: the kind's own answer
    modes: tuple[bool, ...] = (False, True)  # stream values the row applies to
    answered: bool = True  # the server sent response headers (so a request id)
    provider_kw: tuple[tuple[str, Any], ...] = ()


def _in_two_minutes() -> Fault:
    return Fault.status(429, retry_after=email.utils.formatdate(time.time() + 120, usegmt=True))


ROWS = [
    Row("429-ms", Fault.status(429, retry_after_ms="1500"), "rate_limited", 429, 1.5),
    Row("429-seconds", Fault.status(429, retry_after="7"), "rate_limited", 429, 7.0),
    Row("429-float-seconds", Fault.status(429, retry_after="2.5"), "rate_limited", 429, 2.5),
    Row("429-http-date", _in_two_minutes, "rate_limited", 429, 120.0),
    Row(
        "429-past-date",
        Fault.status(429, retry_after="Wed, 21 Oct 2015 07:28:00 GMT"),
        "rate_limited",
        429,
        0.0,
    ),
    Row("429-garbage", Fault.status(429, retry_after="soon-ish"), "rate_limited", 429, None),
    Row(
        "429-ms-before-seconds",
        Fault.status(429, retry_after="30", retry_after_ms="250"),
        "rate_limited",
        429,
        0.25,
    ),
    Row("401", Fault.status(401), "auth", 401),
    Row("402", Fault.status(402), "auth", 402),
    Row("403", Fault.status(403), "auth", 403),
    Row("408", Fault.status(408), "timeout", 408),
    Row("500", Fault.status(500), "server", 500),
    Row("502", Fault.status(502), "server", 502),
    Row("503", Fault.status(503, retry_after="3"), "server", 503, 3.0),
    Row("529", Fault.status(529), "server", 529),
    Row("400-context", Fault.status(400, body=CONTEXT_MSG), "context_overflow", 400),
    Row(
        "413-context",
        Fault.status(413, body="prompt is too long: 210000 tokens > 200000 maximum"),
        "context_overflow",
        413,
    ),
    Row("400-plain", Fault.status(400), "request", 400),
    Row("404", Fault.status(404), "request", 404),
    Row("301-not-followed", Fault.status(301), "request", 301),
    Row("302-not-followed", Fault.status(302), "request", 302),
    Row("503-says-no-retry", Fault.status(503, should_retry=False), "server", 503, None, False),
    Row("400-says-retry", Fault.status(400, should_retry=True), "request", 400, None, True),
    Row("malformed-200", Fault.malformed(), "malformed", 200),
    Row("empty-200", Fault.empty(), "malformed", 200),
    Row(
        "openrouter-429-in-200",
        Fault.error_in_200({"code": 429, "message": "Rate limit exceeded upstream"}),
        "rate_limited",
        200,
    ),
    Row(
        "openrouter-402-in-200",
        Fault.error_in_200({"code": 402, "message": "Insufficient credits"}),
        "auth",
        200,
    ),
    Row(
        "overloaded-in-200",
        Fault.error_in_200({"type": "overloaded_error", "message": "Overloaded"}),
        "server",
        200,
    ),
    Row(
        "anthropic-overloaded-mid-stream",
        Fault.stream_error({"type": "overloaded_error", "message": "Overloaded"}, after_events=2),
        "server",
        200,
        modes=(True,),
    ),
    Row(
        "openrouter-429-mid-stream",
        Fault.stream_error({"code": 429, "message": "Rate limited"}, after_events=1),
        "rate_limited",
        200,
        modes=(True,),
    ),
    Row(
        "rate-limit-type-mid-stream",
        Fault.stream_error({"type": "rate_limit_error", "message": "slow down"}, after_events=0),
        "rate_limited",
        200,
        modes=(True,),
    ),
    Row("drop-mid-body", Fault.drop_mid_body(), "transport", 200),
    Row("drop-mid-stream", Fault.drop_mid_stream(after_events=2), "transport", 200),
    Row(
        "client-deadline",
        Fault.hang(3.0),
        "timeout",
        None,
        answered=False,
        provider_kw=(("timeout_s", 0.2),),
    ),
    Row(
        "slow-past-deadline",
        Fault.slow(3.0),
        "timeout",
        None,
        answered=False,
        provider_kw=(("timeout_s", 0.2),),
    ),
    Row(
        "stream-idle",
        Fault.stall_stream(after_events=2, seconds=3.0),
        "timeout",
        200,
        modes=(True,),
        provider_kw=(("timeout_s", 5.0), ("idle_timeout_s", 0.2)),
    ),
]

CASES = [
    pytest.param(name, row, stream, id=f"{name}-{'stream' if stream else 'json'}-{row.id}")
    for row in ROWS
    for name in PROVIDERS
    for stream in row.modes
]


@pytest.mark.parametrize(("name", "row", "stream"), CASES)
async def test_classification_row(name: str, row: Row, stream: bool, srv: ChaosServer) -> None:
    srv.push(row.fault() if callable(row.fault) else row.fault)
    provider = make(name, srv, **dict(row.provider_kw))
    err, attempts = await fail(provider, stream)

    assert err.kind.value == row.kind, err.message
    assert err.status == row.status
    if row.retry_after is not None and row.id == "429-http-date":
        assert err.retry_after_s is not None and abs(err.retry_after_s - 120.0) < 5
    else:
        assert err.retry_after_s == row.retry_after
    expected_retryable = row.retryable if row.retryable is not None else err.kind.retryable
    assert err.retryable is expected_retryable
    assert err.provider == name and err.model == provider.model
    (request,) = srv.requests
    assert err.request_id == (request.request_id if row.answered else None)
    assert request.stream is stream
    # Exactly one attempt reported, carrying the same facts.
    (attempt,) = attempts
    assert (attempt.provider, attempt.kind, attempt.status) == (name, row.kind, row.status)
    assert attempt.retry_after_s == err.retry_after_s
    assert attempt.request_id == err.request_id
    assert attempt.error == err.message
    assert KEY not in repr(attempt) and KEY not in str(err)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("name", PROVIDERS)
async def test_connection_refused_is_transport(name: str, stream: bool, srv: ChaosServer) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Nothing listens on the port now: the connect is refused.
    url = f"http://127.0.0.1:{port}" + ("" if name == "anthropic" else "/v1")
    cls = {"openai": hn.OpenAI, "openrouter": hn.OpenRouter, "anthropic": hn.Anthropic}[name]
    err, attempts = await fail(cls("m", api_key=KEY, base_url=url), stream)
    assert err.kind is hn.ProviderErrorKind.TRANSPORT
    assert (err.status, err.retry_after_s, err.request_id) == (None, None, None)
    assert err.retryable
    assert attempts[0].kind == "transport"


@pytest.mark.parametrize("name", PROVIDERS)
async def test_idle_timeout_says_idle_and_deadline_says_deadline(
    name: str, srv: ChaosServer
) -> None:
    srv.push(Fault.stall_stream(after_events=1, seconds=3.0))
    idle, _ = await fail(make(name, srv, timeout_s=5.0, idle_timeout_s=0.2), True)
    assert "idle" in idle.message
    srv.push(Fault.stall_stream(after_events=1, seconds=3.0))
    deadline, _ = await fail(make(name, srv, timeout_s=0.3, idle_timeout_s=2.0), True)
    assert deadline.kind is hn.ProviderErrorKind.TIMEOUT and "deadline" in deadline.message


@pytest.mark.parametrize("name", PROVIDERS)
async def test_the_wait_for_the_first_chunk_is_bounded_by_the_deadline_not_the_idle_timeout(
    name: str, srv: ChaosServer
) -> None:
    # A reasoning model behind chat completions sends the headers, then nothing until it
    # has thought (minutes): that is no stream gone silent between chunks.
    srv.push(Fault.stall_stream(after_events=0, seconds=0.8))
    done = await make(name, srv, timeout_s=5.0, idle_timeout_s=0.2).complete(HI, stream=True)
    assert done.text == "hi"
    srv.push(Fault.stall_stream(after_events=0, seconds=3.0))
    late, _ = await fail(make(name, srv, timeout_s=0.4, idle_timeout_s=0.2), True)
    assert late.kind is hn.ProviderErrorKind.TIMEOUT and "deadline" in late.message


@pytest.mark.parametrize("name", PROVIDERS)
async def test_short_stall_within_idle_timeout_completes(name: str, srv: ChaosServer) -> None:
    srv.push(Fault.stall_stream(after_events=1, seconds=0.1))
    done = await make(name, srv, idle_timeout_s=2.0).complete(HI, stream=True)
    assert done.text == "hi"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("name", PROVIDERS)
async def test_sequential_calls_reuse_one_connection(
    name: str, stream: bool, srv: ChaosServer
) -> None:
    provider = make(name, srv)
    for _ in range(5):
        await provider.complete(HI, stream=stream)
    assert len({r.connection for r in srv.requests}) == 1


@pytest.mark.parametrize("name", PROVIDERS)
async def test_server_silent_after_last_event_does_not_spoil_the_answer(
    name: str, srv: ChaosServer
) -> None:
    # Every event is sent, then the server holds the stream open without ending it.
    srv.push(Fault.stall_stream(after_events=100, seconds=3.0))
    started = time.perf_counter()
    done = await make(name, srv, idle_timeout_s=0.2).complete(HI, stream=True)
    assert done.text == "hi"
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("name", ["openai", "openrouter"])
async def test_tool_arguments_that_are_not_json_are_malformed(
    name: str, stream: bool, srv: ChaosServer
) -> None:
    bad = {
        "id": "x",
        "object": "chat.completion",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "grep", "arguments": '{"pattern": '},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    srv.push(Fault.status(200, body=bad))
    err, _ = await fail(make(name, srv), stream)
    assert err.kind is hn.ProviderErrorKind.MALFORMED
    assert "grep" in err.message


# ------------------------------------------------------------- healthy answers


def tool_responder(request: ChaosRequest) -> Reply:
    return Reply(
        text="Reading it.",
        tool_calls=[
            {"name": "read_file", "arguments": {"path": "src/a b.py", "lines": [1, 20]}},
            {"name": "grep", "arguments": {"pattern": "def \\w+\\(", "path": "."}},
        ],
        input_tokens=321,
        output_tokens=45,
    )


@pytest.fixture
def tool_srv() -> Iterator[ChaosServer]:
    with ChaosServer(seed=1, responder=tool_responder) as server:
        yield server


TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    {"name": "grep", "description": "Search.", "parameters": {"type": "object"}},
]


async def test_tool_calls_parse_to_the_same_completion_for_every_protocol(
    tool_srv: ChaosServer,
) -> None:
    seen = []
    for name in PROVIDERS:
        for stream in (False, True):
            c = await make(name, tool_srv).complete(HI, tools=TOOLS, stream=stream)
            request = tool_srv.requests[-1]
            assert c.request_id == request.request_id
            assert c.provider == name
            assert (c.ttft_ms is not None) is stream
            assert c.latency_ms is not None and c.latency_ms > 0
            if stream:
                assert c.ttft_ms is not None and c.latency_ms is not None
                assert 0 < c.ttft_ms <= c.latency_ms
            assert all(call.id for call in c.tool_calls)
            seen.append(
                (
                    c.text,
                    [(t.name, t.arguments) for t in c.tool_calls],
                    c.usage,
                    c.finish_reason,
                )
            )
    assert all(s == seen[0] for s in seen), seen
    text, calls, usage, finish = seen[0]
    assert text == "Reading it."
    assert calls == [
        ("read_file", {"path": "src/a b.py", "lines": [1, 20]}),
        ("grep", {"pattern": "def \\w+\\(", "path": "."}),
    ]
    assert usage == hn.Usage(321, 45)
    assert finish == "tool_calls"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("name", PROVIDERS)
async def test_text_answer_has_usage_finish_reason_and_request_id(
    name: str, stream: bool, srv: ChaosServer
) -> None:
    c = await make(name, srv).complete(
        [{"role": "user", "content": "say something long enough to split"}], stream=stream
    )
    assert c.text == "say something long enough to split"
    assert c.tool_calls == ()
    assert c.finish_reason == "stop"
    assert c.usage.input_tokens > 0 and c.usage.output_tokens > 0
    assert c.model == make(name, srv).model
    (attempt,) = c.attempts
    assert attempt.kind is None and attempt.status == 200
    assert attempt.request_id == c.request_id == srv.requests[-1].request_id
    assert (attempt.input_tokens, attempt.output_tokens) == (
        c.usage.input_tokens,
        c.usage.output_tokens,
    )
    assert attempt.ttft_ms == c.ttft_ms


CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Read two files."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "t1", "name": "read_file", "arguments": {"path": "a"}},
            {"id": "t2", "name": "read_file", "arguments": {"path": "b"}},
        ],
    },
    {"role": "tool", "tool_call_id": "t1", "name": "read_file", "content": "A"},
    {"role": "tool", "tool_call_id": "t2", "name": "read_file", "content": "B"},
    {"role": "user", "content": "Now summarise."},
]


async def test_anthropic_wire_has_system_apart_and_merged_tool_results(srv: ChaosServer) -> None:
    await make("anthropic", srv).complete(CONVERSATION, tools=TOOLS)
    body = srv.requests[-1].json
    assert body["system"] == "You are terse."
    assert body["max_tokens"] == 4096
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assistant = body["messages"][1]["content"]
    assert [b["type"] for b in assistant] == ["tool_use", "tool_use"]  # no empty text block
    assert assistant[0] == {
        "type": "tool_use",
        "id": "t1",
        "name": "read_file",
        "input": {"path": "a"},
    }
    results = body["messages"][2]["content"]
    assert [b["type"] for b in results] == ["tool_result", "tool_result", "text"]
    assert results[1] == {"type": "tool_result", "tool_use_id": "t2", "content": "B"}
    assert body["tools"][0]["input_schema"] == TOOLS[0]["parameters"]
    headers = srv.requests[-1].headers
    assert headers["anthropic-version"] == "2023-06-01"
    assert headers["x-api-key"] == "REDACTED"


@pytest.mark.parametrize("name", ["openai", "openrouter"])
async def test_openai_wire_has_tool_role_and_string_arguments(name: str, srv: ChaosServer) -> None:
    await make(name, srv).complete(CONVERSATION, tools=TOOLS, max_tokens=77, stream=True)
    body = srv.requests[-1].json
    assert [m["role"] for m in body["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "user",
    ]
    call = body["messages"][2]["tool_calls"][0]
    assert call == {
        "id": "t1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a"}'},
    }
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "t1", "content": "A"}
    assert body["tools"][0]["type"] == "function"
    assert body["max_tokens"] == 77  # a compatible server reads max_tokens
    assert body["stream_options"] == {"include_usage": True}
    assert srv.requests[-1].headers["authorization"] == "REDACTED"


def test_official_openai_host_gets_max_completion_tokens() -> None:
    provider = hn.OpenAI("gpt-test", api_key=KEY)
    body = provider._request_body(HI, None, 50, False)
    assert body["max_completion_tokens"] == 50 and "max_tokens" not in body


async def test_openrouter_sends_its_attribution_headers(srv: ChaosServer) -> None:
    provider = hn.OpenRouter(
        "m", api_key=KEY, base_url=srv.openai_url, app_url="https://x.test", app_name="nb"
    )
    await provider.complete(HI)
    headers = srv.requests[-1].headers
    assert headers["http-referer"] == "https://x.test" and headers["x-title"] == "nb"


async def test_openrouter_takes_every_option_of_an_http_provider(srv: ChaosServer) -> None:
    # OpenRouter hands HTTPProvider's keyword options on as HTTPOptions: every one the
    # constructor has is declared there (a new one reaches OpenRouter), and each works.
    init = inspect.signature(_http.HTTPProvider.__init__).parameters.values()
    keywords = {p.name for p in init if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert keywords == set(_http.HTTPOptions.__annotations__)
    provider = hn.OpenRouter(
        "m",
        api_key=KEY,
        base_url=srv.openai_url,
        idle_timeout_s=7,
        headers={"X-Title": "mine", "X-Extra": "1"},
        stream=False,
        name="router",
        app_url="https://x.test",
        app_name="nb",
    )
    assert (provider.idle_timeout_s, provider.stream, provider.name) == (7, False, "router")
    completion = await provider.complete(HI)
    assert completion.provider == "router"
    headers = srv.requests[-1].headers
    assert headers["x-title"] == "mine" and headers["x-extra"] == "1"  # the caller's win
    assert headers["http-referer"] == "https://x.test"


async def test_local_server_needs_no_key(srv: ChaosServer) -> None:
    c = await hn.OpenAI("llama", base_url=srv.openai_url).complete(HI)
    assert c.text == "hi"
    assert "authorization" not in srv.requests[-1].headers


async def test_hundred_concurrent_calls_share_one_client(srv: ChaosServer) -> None:
    provider = make("openai", srv)
    results = await asyncio.gather(
        *(provider.complete([{"role": "user", "content": f"n{i}"}]) for i in range(100))
    )
    assert sorted(r.text for r in results) == sorted(f"n{i}" for i in range(100))
    assert len(srv.requests) == 100


def test_each_event_loop_gets_its_own_client() -> None:
    clients: list[object] = []

    async def grab() -> None:
        clients.append(_http.shared_client())
        clients.append(_http.shared_client())
        await _http.aclose_client()

    threads = [threading.Thread(target=asyncio.run, args=(grab(),)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert clients[0] is clients[1] and clients[2] is clients[3]
    assert clients[0] is not clients[2]


def test_client_is_closed_when_its_loop_shuts_down(srv: ChaosServer) -> None:
    async def call() -> object:
        await make("openai", srv).complete(HI)
        return _http.shared_client()

    client = asyncio.run(call())
    assert client.is_closed  # type: ignore[attr-defined]
    assert asyncio.run(call()) is not client


# --------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("cls", "var"),
    [
        (hn.OpenAI, "OPENAI_API_KEY"),
        (hn.OpenRouter, "OPENROUTER_API_KEY"),
        (hn.Anthropic, "ANTHROPIC_API_KEY"),
    ],
)
def test_from_env_names_the_missing_variable(
    cls: type[_http.HTTPProvider], var: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for v in (var, cls.BASE_URL_ENV, cls.MODEL_ENV):
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(hn.ConfigError) as info:
        cls.from_env()
    assert var in str(info.value)
    with pytest.raises(hn.ConfigError, match=var):
        cls("some-model")  # the official host without a key fails before any request
    monkeypatch.setenv(var, KEY)
    provider = cls.from_env("my-model")
    assert provider.model == "my-model"
    assert provider.base_url == cls.DEFAULT_BASE_URL
    assert KEY not in repr(provider)
    monkeypatch.setenv(cls.MODEL_ENV, "env-model")
    assert cls.from_env().model == "env-model"


def test_from_env_openai_base_url_alone_is_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    provider = hn.OpenAI.from_env("qwen")
    assert provider.hosts() == ["127.0.0.1"]
    assert provider.base_url == "http://127.0.0.1:8000/v1"


def test_names_hosts_and_with_timeout() -> None:
    a = hn.Anthropic("claude", api_key=KEY)
    assert (a.name, a.model, a.hosts()) == ("anthropic", "claude", ["api.anthropic.com"])
    assert hn.OpenRouter("x", api_key=KEY).hosts() == ["openrouter.ai"]
    assert hn.OpenAI("x", api_key=KEY).hosts() == ["api.openai.com"]
    assert a.timeout_s == hn.REQUEST_TIMEOUT_S == 600.0
    b = a.with_timeout(5)
    assert b is not a and b.timeout_s == 5.0 and a.timeout_s == 600.0
    assert b.model == a.model and b.idle_timeout_s == a.idle_timeout_s
    import datetime

    assert a.with_timeout(datetime.timedelta(seconds=90)).timeout_s == 90.0
    with pytest.raises(hn.ConfigError):
        a.with_timeout(0)
    assert isinstance(a, Provider)
    for p in (a, b, hn.OpenAI("x", api_key=KEY), hn.OpenRouter("x", api_key=KEY)):
        assert KEY not in repr(p) and KEY not in str(p) and KEY not in str(vars(p).keys())


def test_bad_base_url_is_a_config_error() -> None:
    with pytest.raises(hn.ConfigError, match="base_url"):
        hn.OpenAI("m", base_url="ftp://example.com/v1")
    # A query or fragment would end up in front of the path harnessnb appends (a 404
    # that looks like the server's fault): refused up front, without showing the query.
    for url in ("http://127.0.0.1:8000/v1?key=qk-secret-123456", "http://h/v1#x"):
        for cls in (hn.OpenAI, hn.Anthropic):
            with pytest.raises(hn.ConfigError, match="query or fragment") as caught:
                cls("m", base_url=url)
            assert "qk-secret" not in str(caught.value)


@pytest.mark.parametrize("cls", [hn.OpenAI, hn.Anthropic])
def test_a_key_carried_in_the_base_url_is_in_no_repr_and_scrubbed(cls: Any) -> None:
    # A proxy's credentials in the URL (user:password@host) are a key too: the repr
    # (shown in a notebook cell, saved in the .ipynb) keeps the server, not them.
    from harnessnb.rules._secrets import scrub

    secret = "pw-Zq93hunter2xyzw"
    p = cls("m", base_url=f"https://bob:{secret}@proxy.example:8443/v1")
    assert secret not in repr(p) and secret not in str(p)
    assert "proxy.example:8443/v1" in repr(p)
    assert secret not in scrub(f"could not reach https://bob:{secret}@proxy.example:8443")
