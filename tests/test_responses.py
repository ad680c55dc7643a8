"""``hn.OpenAI(model, api="responses")`` over real loopback HTTP against the chaos server's
Responses dialect: every classification row the other providers run (test_providers.ROWS)
and the Responses-only failures (a 200 whose response failed, a stream's ``response.failed``
and ``error`` events), streamed and not; answers, tool calls, reasoning items handed back
between turns, usage; configuration."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb import cli
from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply
from harnessnb.demo import demo_server, make_demo_workspace, provider_for
from harnessnb.launch._choose import choose_provider
from harnessnb.providers import _http
from tests.test_providers import CONVERSATION, HI, KEY, ROWS, TOOLS, Row

NAME = "openai-responses"


@pytest.fixture(autouse=True)
async def srv(module_srv: ChaosServer) -> AsyncIterator[ChaosServer]:
    module_srv.reset()  # one server for the module, as new for each test
    yield module_srv
    await _http.aclose_client()


def make(srv: ChaosServer, **kw: Any) -> hn.OpenAI:
    kw.setdefault("api_key", KEY)
    return hn.OpenAI("gpt-test", base_url=srv.openai_url, api="responses", **kw)


async def fail(provider: Any, stream: bool) -> tuple[hn.ProviderError, list[hn.AttemptRecord]]:
    with pytest.raises(hn.ProviderError) as info:
        await provider.complete(HI, stream=stream)
    return info.value, list(info.value.attempts)


# ----------------------------------------------------------------- the table

FAILED = {"code": "server_error", "message": "The model failed to generate a response."}

RESPONSES_ROWS = [
    # A 200 whose response failed: the body (or the stream's response.failed) says why.
    Row("response-failed", Fault.error_in_200(FAILED), "server", 200),
    Row(
        "response-failed-rate-limit",
        Fault.error_in_200({"code": "rate_limit_exceeded", "message": "Slow down."}),
        "rate_limited",
        200,
    ),
    Row(
        "response-failed-context",
        Fault.error_in_200({"code": "context_length_exceeded", "message": "Too long."}),
        "context_overflow",
        200,
    ),
    Row(
        "response-failed-invalid-prompt",
        Fault.error_in_200({"code": "invalid_request_error", "message": "Invalid prompt."}),
        "request",
        200,
    ),
    # The stream's error event, after some text or before any.
    Row("error-event", Fault.stream_error(FAILED, after_events=4), "server", 200, modes=(True,)),
    Row(
        "error-event-first",
        Fault.stream_error({"code": "rate_limit_exceeded", "message": "Slow."}, after_events=0),
        "rate_limited",
        200,
        modes=(True,),
    ),
    Row("stream-drop-early", Fault.drop_mid_stream(after_events=1), "transport", 200),
]

CASES = [
    pytest.param(row, stream, id=f"{'stream' if stream else 'json'}-{row.id}")
    for row in (*ROWS, *RESPONSES_ROWS)
    for stream in row.modes
]


@pytest.mark.parametrize(("row", "stream"), CASES)
async def test_classification_row(row: Row, stream: bool, srv: ChaosServer) -> None:
    srv.push(row.fault() if callable(row.fault) else row.fault)
    provider = make(srv, **dict(row.provider_kw))
    err, attempts = await fail(provider, stream)

    assert err.kind.value == row.kind, err.message
    assert err.status == row.status
    if row.retry_after is not None and row.id == "429-http-date":
        assert err.retry_after_s is not None and abs(err.retry_after_s - 120.0) < 5
    else:
        assert err.retry_after_s == row.retry_after
    expected_retryable = row.retryable if row.retryable is not None else err.kind.retryable
    assert err.retryable is expected_retryable
    assert err.provider == NAME and err.model == provider.model
    (request,) = srv.requests
    assert request.protocol == "responses" and request.path == "/v1/responses"
    assert err.request_id == (request.request_id if row.answered else None)
    assert request.stream is stream
    (attempt,) = attempts
    assert (attempt.provider, attempt.kind, attempt.status) == (NAME, row.kind, row.status)
    assert attempt.retry_after_s == err.retry_after_s
    assert attempt.request_id == err.request_id
    assert attempt.error == err.message
    assert KEY not in repr(attempt) and KEY not in str(err)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_failed_response_names_its_error(stream: bool, srv: ChaosServer) -> None:
    srv.push(Fault.error_in_200(FAILED))
    err, _ = await fail(make(srv), stream)
    assert "server_error" in err.message and "failed to generate" in err.message


@pytest.mark.parametrize("stream", [False, True])
async def test_connection_refused_is_transport(stream: bool) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    err, attempts = await fail(hn.OpenAI("m", api_key=KEY, base_url=url, api="responses"), stream)
    assert err.kind is hn.ProviderErrorKind.TRANSPORT and err.retryable
    assert attempts[0].kind == "transport"


async def test_idle_timeout_says_idle_and_deadline_says_deadline(srv: ChaosServer) -> None:
    srv.push(Fault.stall_stream(after_events=3, seconds=3.0))
    idle, _ = await fail(make(srv, timeout_s=5.0, idle_timeout_s=0.2), True)
    assert idle.kind is hn.ProviderErrorKind.TIMEOUT and "idle" in idle.message
    srv.push(Fault.stall_stream(after_events=3, seconds=3.0))
    deadline, _ = await fail(make(srv, timeout_s=0.3, idle_timeout_s=2.0), True)
    assert deadline.kind is hn.ProviderErrorKind.TIMEOUT and "deadline" in deadline.message


async def test_server_silent_after_response_completed_does_not_spoil_the_answer(
    srv: ChaosServer,
) -> None:
    # Every event is sent, then the server holds the stream open: response.completed ends it.
    srv.push(Fault.stall_stream(after_events=100, seconds=3.0))
    started = time.perf_counter()
    done = await make(srv, idle_timeout_s=0.2).complete(HI, stream=True)
    assert done.text == "hi"
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize("stream", [False, True])
async def test_sequential_calls_reuse_one_connection(stream: bool, srv: ChaosServer) -> None:
    provider = make(srv)
    for _ in range(3):
        await provider.complete(HI, stream=stream)
    assert len({r.connection for r in srv.requests}) == 1


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_arguments_that_are_not_json_are_malformed(
    stream: bool, srv: ChaosServer
) -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "grep", "arguments": '{"pat'}
    srv.push(Fault.status(200, body={"id": "r", "status": "completed", "output": [call]}))
    err, _ = await fail(make(srv), stream)
    assert err.kind is hn.ProviderErrorKind.MALFORMED and "grep" in err.message


# ------------------------------------------------------------- healthy answers


def tool_responder(request: ChaosRequest) -> Reply:
    if any(m.get("role") == "tool" for m in request.messages):
        return Reply(text="Both read.", input_tokens=400, output_tokens=5)
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


@pytest.mark.parametrize("stream", [False, True])
async def test_text_answer_has_usage_finish_reason_and_request_id(
    stream: bool, srv: ChaosServer
) -> None:
    pieces: list[str] = []

    async def on_text(piece: str, first: bool) -> None:
        pieces.append(piece)

    c = await make(srv).complete(
        [{"role": "user", "content": "say something long enough to split"}],
        stream=stream,
        on_text=on_text,
    )
    assert c.text == "say something long enough to split"
    assert (c.tool_calls, c.finish_reason, c.provider) == ((), "stop", NAME)
    assert c.usage.input_tokens > 0 and c.usage.output_tokens > 0 and not c.usage.estimated
    (attempt,) = c.attempts
    assert attempt.kind is None and attempt.status == 200
    assert attempt.request_id == c.request_id == srv.requests[-1].request_id
    assert (attempt.input_tokens, attempt.output_tokens) == (
        c.usage.input_tokens,
        c.usage.output_tokens,
    )
    assert (c.ttft_ms is not None) is stream
    if stream:  # the text came as it streamed, in pieces
        assert len(pieces) >= 3 and "".join(pieces) == c.text


async def test_tool_calls_and_reasoning_read_the_same_streamed_or_not(
    tool_srv: ChaosServer,
) -> None:
    seen = []
    for stream in (False, True):
        c = await make(tool_srv).complete(HI, tools=TOOLS, stream=stream)
        rid = tool_srv.requests[-1].request_id
        # The call_id (not the output item's id) names each call.
        assert [t.id for t in c.tool_calls] == [f"call_{rid}_0", f"call_{rid}_1"]
        # An answer that reasoned keeps its output items whole, in order, ids and all.
        assert [(i["type"], i["id"]) for i in c.output_items] == [
            ("reasoning", f"rs_{rid}"),
            ("message", f"msg_{rid}"),
            ("function_call", f"fc_{rid}_0"),
            ("function_call", f"fc_{rid}_1"),
        ]
        assert c.output_items[0] == {"id": f"rs_{rid}", "type": "reasoning", "summary": [],
                                     "encrypted_content": f"enc_{rid}"}  # fmt: skip
        calls = [(t.name, t.arguments) for t in c.tool_calls]
        seen.append((c.text, calls, c.usage, c.finish_reason))
    assert seen[0] == seen[1]
    text, calls, usage, finish = seen[0]
    assert text == "Reading it." and finish == "tool_calls"
    assert calls == [
        ("read_file", {"path": "src/a b.py", "lines": [1, 20]}),
        ("grep", {"pattern": "def \\w+\\(", "path": "."}),
    ]
    assert usage == hn.Usage(321, 45)


@pytest.mark.parametrize("stream", [False, True])
async def test_an_answer_that_reasoned_is_handed_back_as_its_items(
    stream: bool, tool_srv: ChaosServer
) -> None:
    provider = make(tool_srv)
    first = await provider.complete(HI, tools=TOOLS, stream=stream)
    conversation = [
        *HI,
        first.to_message(),
        *[
            {"role": "tool", "tool_call_id": c.id, "name": c.name, "content": f"out {c.name}"}
            for c in first.tool_calls
        ],
    ]
    second = await provider.complete(conversation, tools=TOOLS, stream=stream)
    assert second.text == "Both read."
    sent = tool_srv.requests[-1].json["input"]
    kinds = [item.get("type") or item["role"] for item in sent]
    assert kinds == [
        "user",
        "reasoning",
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]
    # As the server sent them: the API pairs each reasoning item with the next by id.
    assert sent[1:5] == [dict(item) for item in first.output_items]
    calls = [i for i in sent if i.get("type") == "function_call"]
    outputs = [i for i in sent if i.get("type") == "function_call_output"]
    assert [c["call_id"] for c in calls] == [c.id for c in first.tool_calls]
    assert [o["call_id"] for o in outputs] == [c.id for c in first.tool_calls]
    assert outputs[0]["output"] == "out read_file"


@pytest.mark.parametrize(
    ("handed_back", "says"),
    [
        # The reasoning item alone before a rebuilt message: its following item is gone.
        (lambda items: [items[0], {"role": "assistant", "content": "Reading it."}],
         "of type 'reasoning' was provided without its required following item"),
        # The calls with their ids, their reasoning item left out.
        (lambda items: items[2:], "of type 'function_call' was provided without its "
         "required 'reasoning' item"),
    ],
)  # fmt: skip
async def test_the_chaos_server_refuses_a_reasoning_item_torn_from_its_pair(
    handed_back: Any, says: str, tool_srv: ChaosServer
) -> None:
    # As OpenAI does: so a client that breaks the pairing fails here, not in production.
    first = await make(tool_srv).complete(HI, tools=TOOLS, stream=False)
    broken = {**first.to_message(), "output_items": handed_back(list(first.output_items))}
    with pytest.raises(hn.ProviderError) as info:
        await make(tool_srv).complete([*HI, broken], tools=TOOLS, stream=False)
    assert (info.value.kind, info.value.status) == (hn.ProviderErrorKind.REQUEST, 400)
    assert says in info.value.message


async def test_reasoning_survives_a_checkpoint_round_trip(tool_srv: ChaosServer) -> None:
    c = await make(tool_srv).complete(HI, tools=TOOLS)
    again = hn.Completion.from_dict(c.to_dict())
    assert again.output_items == c.output_items and again.to_message() == c.to_message()
    assert "output_items" not in hn.Completion("plain").to_message()


async def test_an_answer_that_did_not_reason_is_handed_back_from_the_message(
    srv: ChaosServer,
) -> None:
    # No reasoning item (another server, a model that does not reason): nothing to pair,
    # so the answer is not kept twice; its text and calls make the input as ever.
    srv.push(Fault.status(200, body=_response()))
    c = await make(srv).complete(HI, stream=False)
    assert c.text == "partial" and c.output_items == ()
    await make(srv).complete([*HI, c.to_message(), *HI])
    assert srv.requests[-1].json["input"][1] == {"role": "assistant", "content": "partial"}


async def test_wire_has_input_items_function_tools_and_max_output_tokens(
    srv: ChaosServer,
) -> None:
    await make(srv).complete(CONVERSATION, tools=TOOLS, max_tokens=77)
    body = srv.requests[-1].json
    assert "messages" not in body and body["max_output_tokens"] == 77
    assert body["input"][0] == {"role": "system", "content": "You are terse."}
    assert body["input"][2] == {
        "type": "function_call",
        "call_id": "t1",
        "name": "read_file",
        "arguments": '{"path": "a"}',
    }
    assert body["input"][4] == {"type": "function_call_output", "call_id": "t1", "output": "A"}
    assert body["input"][-1] == {"role": "user", "content": "Now summarise."}
    tool = body["tools"][0]
    assert (tool["type"], tool["name"], tool["strict"]) == ("function", "read_file", False)
    assert tool["parameters"] == TOOLS[0]["parameters"]


def _response(**fields: Any) -> dict[str, Any]:
    message = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "partial"}],
    }
    return {"id": "r", "object": "response", "status": "completed", "output": [message], **fields}


async def test_an_incomplete_response_at_the_token_cap_is_finish_length(srv: ChaosServer) -> None:
    srv.push(
        Fault.status(
            200,
            body=_response(status="incomplete", incomplete_details={"reason": "max_output_tokens"}),
        )
    )
    c = await make(srv).complete(HI, stream=False)
    assert (c.text, c.finish_reason) == ("partial", "length")


async def test_cached_input_tokens_are_read(srv: ChaosServer) -> None:
    usage = {"input_tokens": 100, "output_tokens": 7, "input_tokens_details": {"cached_tokens": 60}}
    srv.push(Fault.status(200, body=_response(usage=usage)))
    c = await make(srv).complete(HI, stream=False)
    assert c.usage == hn.Usage(100, 7, cached_input_tokens=60)


async def test_a_refusal_is_read_as_its_text(srv: ChaosServer) -> None:
    refusal = {"type": "message", "role": "assistant", "content": [
        {"type": "refusal", "refusal": "I can't help with that."}]}  # fmt: skip
    srv.push(Fault.status(200, body=_response(output=[refusal])))
    c = await make(srv).complete(HI, stream=False)
    assert c.text == "I can't help with that."


# ------------------------------------------------------------- configuration


def test_chat_stays_the_default_and_responses_is_named_apart(srv: ChaosServer) -> None:
    chat = hn.OpenAI("m", api_key=KEY, base_url=srv.openai_url)
    responses = make(srv)
    assert (chat.api, chat.name) == ("chat", "openai")
    assert (responses.api, responses.name) == ("responses", NAME)
    assert make(srv, name="mine").name == "mine"


def test_an_unknown_api_is_a_config_error() -> None:
    with pytest.raises(hn.ConfigError, match="api must be"):
        hn.OpenAI("m", api_key=KEY, api="completions")  # type: ignore[arg-type]


async def test_a_run_hands_every_answer_s_reasoning_back_on_later_turns(tmp_path: Path) -> None:
    # The whole loop: each answer's reasoning item rides on its assistant message in the
    # run's conversation, so every later request hands back all earlier ones, in order.
    ws = make_demo_workspace(tmp_path / "project")
    policy = hn.Policy.default().layer("demo").allow_write("NOTES.md")
    contract = hn.TaskContract("summarise README.md into NOTES.md", ws)
    with demo_server() as demo:
        provider = provider_for(demo, protocol="responses")
        result = await hn.run(contract, provider, store=hn.Store(":memory:"), policy=policy)
        requests = demo.requests
    assert result.outcome is hn.RunOutcome.FINISHED and len(requests) >= 3
    for i, request in enumerate(requests):
        sent = [item["id"] for item in request.json["input"] if item.get("type") == "reasoning"]
        assert sent == [f"rs_{earlier.request_id}" for earlier in requests[:i]]


# ------------------------------------------------------------- the faces

ENV = {"OPENAI_API_KEY": KEY}


def test_the_faces_name_the_responses_api_two_ways(srv: ChaosServer) -> None:
    named, _ = choose_provider("openai-responses", env=ENV)
    flagged, _ = choose_provider("openai", api="responses", env=ENV)
    for provider in (named, flagged):
        assert isinstance(provider, hn.OpenAI)
        assert (provider.api, provider.name) == ("responses", NAME)
    chat, _ = choose_provider("openai", env=ENV)
    assert isinstance(chat, hn.OpenAI) and (chat.api, chat.name) == ("chat", "openai")
    local, _ = choose_provider("local", base_url=srv.openai_url, api="responses", env={})
    assert isinstance(local, hn.OpenAI) and (local.api, local.name) == ("responses", "local")


async def test_the_demo_model_answers_over_responses_when_asked(srv: ChaosServer) -> None:
    demo, _ = choose_provider("demo", api="responses", env={})
    await demo.complete([{"role": "user", "content": "hi"}])
    assert isinstance(demo, hn.OpenAI) and demo.api == "responses"


@pytest.mark.parametrize(
    ("name", "api", "says"),
    [
        ("anthropic", "responses", "does not speak it"),
        ("openrouter", "responses", "does not speak it"),
        ("openai-responses", "chat", "speaks the Responses API"),
        ("openai", "completions", "unknown API"),
    ],
)
def test_an_api_a_provider_does_not_speak_is_a_config_error(name: str, api: str, says: str) -> None:
    env = {**ENV, "ANTHROPIC_API_KEY": KEY, "OPENROUTER_API_KEY": KEY}
    with pytest.raises(hn.ConfigError, match=says):
        choose_provider(name, api=api, env=env)


def test_the_command_runs_over_the_responses_api(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, ws = str(tmp_path / "s.duckdb"), make_demo_workspace(tmp_path / "ws")
    with ChaosServer() as server:
        code = cli.main(["run", "say hi", "--provider", "local", "--base-url",
                         server.openai_url, "--api", "responses", "--workspace", str(ws),
                         "--store", path])  # fmt: skip
        protocols = {r.protocol for r in server.requests}
    assert code == 0, capsys.readouterr().out
    assert protocols == {"responses"}
    with hn.Store(path) as store:
        assert set(store.attempts(None)["provider"]) == {"local"}


def test_the_command_refuses_responses_for_anthropic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = str(tmp_path / "s.duckdb")
    code = cli.main(["run", "say hi", "--provider", "anthropic", "--api", "responses",
                     "--workspace", str(tmp_path), "--store", store])  # fmt: skip
    out = capsys.readouterr()
    assert code != 0 and "does not speak it" in out.out + out.err


def test_an_answer_from_openai_s_responses_api_is_priced_as_openai_s() -> None:
    # The attempts are named openai-responses; the catalogue still finds OpenAI's price.
    official = hn.OpenAI("gpt-4o-mini", api_key=KEY, api="responses")
    prices = hn.Prices()
    cost = prices.cost(official.name, official.model, 10**6, 10**6, official.base_url)
    assert cost is not None and cost > 0
    assert cost == prices.cost("openai", "gpt-4o-mini", 10**6, 10**6, official.base_url)


# ------------------------------------------------------------- raw streams

TEXT_ITEM = {"type": "message", "id": "m1", "role": "assistant", "content": []}
CALL_ITEM = {"type": "function_call", "id": "fc1", "call_id": "call_1", "name": "grep",
             "arguments": ""}  # fmt: skip


def _event(etype: str, **fields: Any) -> bytes:
    import json

    return f"event: {etype}\ndata: {json.dumps({'type': etype, **fields})}\n\n".encode()


async def _serve_stream(events: list[bytes]) -> tuple[asyncio.Server, str]:
    """A raw loopback server answering every request with ``events`` as an SSE body,
    then closing the connection cleanly."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
            + b"".join(events)
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}/v1"


async def _streamed(events: list[bytes]) -> hn.Completion:
    server, url = await _serve_stream(events)
    async with server:
        provider = hn.OpenAI("gpt-test", api_key=KEY, base_url=url, api="responses")
        return await provider.complete(HI, tools=TOOLS, stream=True)


async def test_a_final_event_without_its_output_keeps_what_the_deltas_brought() -> None:
    usage = {"input_tokens": 5, "output_tokens": 3}
    c = await _streamed([
        _event("response.output_item.added", output_index=0, item=TEXT_ITEM),
        _event("response.output_text.delta", output_index=0, item_id="m1", delta="Hel"),
        _event("response.output_text.delta", output_index=0, item_id="m1", delta="lo"),
        _event("response.output_item.added", output_index=1, item=CALL_ITEM),
        _event("response.function_call_arguments.delta", output_index=1, delta='{"pat'),
        _event("response.function_call_arguments.delta", output_index=1, delta='tern": "x"}'),
        _event("response.completed", response={"status": "completed", "usage": usage}),
    ])  # fmt: skip
    assert c.text == "Hello"
    assert [(t.id, t.name, t.arguments) for t in c.tool_calls] == [
        ("call_1", "grep", {"pattern": "x"})
    ]
    assert c.usage == hn.Usage(5, 3) and c.finish_reason == "tool_calls"


async def test_a_stream_stopped_at_the_token_cap_is_finish_length() -> None:
    incomplete = {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
                  "usage": {"input_tokens": 5, "output_tokens": 9}}  # fmt: skip
    c = await _streamed([
        _event("response.output_item.added", output_index=0, item=TEXT_ITEM),
        _event("response.output_text.delta", output_index=0, item_id="m1", delta="cut sh"),
        _event("response.incomplete", response=incomplete),
    ])  # fmt: skip
    assert (c.text, c.finish_reason, c.usage) == ("cut sh", "length", hn.Usage(5, 9))


async def test_a_stream_closed_before_response_completed_is_malformed() -> None:
    with pytest.raises(hn.ProviderError) as info:
        await _streamed([
            _event("response.output_item.added", output_index=0, item=TEXT_ITEM),
            _event("response.output_text.delta", output_index=0, item_id="m1", delta="Hi"),
        ])  # fmt: skip
    assert info.value.kind is hn.ProviderErrorKind.MALFORMED
    assert "response.completed" in info.value.message
    (attempt,) = info.value.attempts
    assert attempt.input_tokens is not None  # an answer arrived: billed, by estimate
