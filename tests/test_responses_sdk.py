"""Wire fidelity for the Responses API: the official ``openai`` SDK's
``client.responses.create`` and harnessnb's ``OpenAI(api="responses")`` read the same
chaos server, healthy and failing, streamed and not, and agree on what they read."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest

import harnessnb as hn
from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply
from harnessnb.providers import _http

TOOL_ARGS = {"path": "notes/ü b.md", "limit": 20, "flags": ["a", "b"]}
TEXT = "Hello from chaos, in several fragments."
MSG: Any = [{"role": "user", "content": "hi"}]
SDK_TOOLS: Any = [
    {
        "type": "function",
        "name": "read_file",
        "parameters": {"type": "object", "properties": {}},
        "strict": False,
    }
]
HN_TOOLS = [{"name": "read_file", "parameters": {"type": "object", "properties": {}}}]


def responder(request: ChaosRequest) -> Reply:
    if request.tools:
        return Reply(text="", tool_calls=[{"name": request.tools[0], "arguments": TOOL_ARGS}])
    return Reply(text=TEXT, input_tokens=11, output_tokens=9)


@pytest.fixture(scope="module")
def module_srv() -> Iterator[ChaosServer]:
    with ChaosServer(seed=0, responder=responder) as server:
        yield server


@pytest.fixture(autouse=True)
async def srv(module_srv: ChaosServer) -> AsyncIterator[ChaosServer]:
    module_srv.reset()
    yield module_srv
    await _http.aclose_client()


@pytest.fixture
def oai(srv: ChaosServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key="sk-test", base_url=srv.openai_url, max_retries=0) as client:
        yield client


def ours(srv: ChaosServer) -> hn.OpenAI:
    return hn.OpenAI("gpt-test", api_key="sk-test", base_url=srv.openai_url, api="responses")


def sdk_stream(oai: openai.OpenAI, **kw: Any) -> list[Any]:
    return list(oai.responses.create(model="gpt-test", input=MSG, stream=True, **kw))


async def test_sdk_and_harnessnb_read_the_same_answer(oai: openai.OpenAI, srv: ChaosServer) -> None:
    r = oai.responses.create(model="gpt-test", input=MSG)
    assert r.status == "completed" and r.output_text == TEXT
    assert r.usage is not None and (r.usage.input_tokens, r.usage.output_tokens) == (11, 9)
    assert r.model == "gpt-test" and r._request_id == srv.requests[-1].request_id
    assert [item.type for item in r.output] == ["reasoning", "message"]
    for stream in (False, True):
        c = await ours(srv).complete(MSG, stream=stream)
        assert c.text == r.output_text
        assert (c.usage.input_tokens, c.usage.output_tokens) == (11, 9)
        assert [item["type"] for item in c.output_items] == ["reasoning", "message"]


async def test_sdk_stream_events_assemble_to_what_harnessnb_reads(
    oai: openai.OpenAI, srv: ChaosServer
) -> None:
    events = sdk_stream(oai)
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) >= 3 and "".join(deltas) == TEXT
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1]
    assert final.type == "response.completed" and final.response.output_text == TEXT
    assert final.response.usage.output_tokens == 9
    c = await ours(srv).complete(MSG, stream=True)
    assert c.text == final.response.output_text


async def test_sdk_stream_helper_gets_the_final_response(
    oai: openai.OpenAI, srv: ChaosServer
) -> None:
    with oai.responses.stream(model="gpt-test", input=MSG, tools=SDK_TOOLS) as s:
        final = s.get_final_response()
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert call.name == "read_file" and json.loads(call.arguments) == TOOL_ARGS
    c = await ours(srv).complete(MSG, tools=HN_TOOLS, stream=True)
    (ours_call,) = c.tool_calls
    assert (ours_call.id, ours_call.name, ours_call.arguments) == (
        call.call_id.replace(srv.requests[-2].request_id, srv.requests[-1].request_id),
        call.name,
        json.loads(call.arguments),
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_sdk_and_harnessnb_read_the_same_tool_call(
    stream: bool, oai: openai.OpenAI, srv: ChaosServer
) -> None:
    if stream:
        events = sdk_stream(oai, tools=SDK_TOOLS)
        args = "".join(
            e.delta for e in events if e.type == "response.function_call_arguments.delta"
        )
        final = events[-1].response
        assert json.loads(args) == TOOL_ARGS
    else:
        final = oai.responses.create(model="gpt-test", input=MSG, tools=SDK_TOOLS)
    (call,) = [item for item in final.output if item.type == "function_call"]
    assert json.loads(call.arguments) == TOOL_ARGS
    c = await ours(srv).complete(MSG, tools=HN_TOOLS, stream=stream)
    assert [(t.name, t.arguments) for t in c.tool_calls] == [(call.name, TOOL_ARGS)]
    assert c.finish_reason == "tool_calls"


async def test_the_sdk_sends_back_what_harnessnb_sends_back(
    oai: openai.OpenAI, srv: ChaosServer
) -> None:
    # The documented turn: the last response's output items, then each call's output.
    first = oai.responses.create(model="gpt-test", input=MSG, tools=SDK_TOOLS)
    (call,) = [item for item in first.output if item.type == "function_call"]
    sdk_input = [
        *MSG,
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": "done"},
    ]
    oai.responses.create(model="gpt-test", input=sdk_input)
    sdk_sent = srv.requests[-1].json["input"]

    srv.reset()
    provider = ours(srv)
    ours_first = await provider.complete(MSG, tools=HN_TOOLS, stream=False)
    conversation = [
        *MSG,
        ours_first.to_message(),
        {"role": "tool", "tool_call_id": ours_first.tool_calls[0].id, "content": "done"},
    ]
    await provider.complete(conversation, stream=False)
    ours_sent = srv.requests[-1].json["input"]
    # The same items, field for field; only the server's request numbers differ.
    assert _numbered(ours_sent) == _numbered(sdk_sent)


def _numbered(items: Any) -> str:
    return re.sub(r"req_\d+", "req_N", json.dumps(items, sort_keys=True))


@pytest.mark.parametrize(
    ("fault", "sdk_error", "kind"),
    [
        (Fault.status(429, retry_after="2"), openai.RateLimitError, "rate_limited"),
        (Fault.status(401), openai.AuthenticationError, "auth"),
        (Fault.status(400), openai.BadRequestError, "request"),
        (Fault.status(503), openai.InternalServerError, "server"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_sdk_and_harnessnb_see_the_same_status(
    stream: bool,
    fault: Fault,
    sdk_error: type[openai.APIStatusError],
    kind: str,
    oai: openai.OpenAI,
    srv: ChaosServer,
) -> None:
    srv.push(fault)
    with pytest.raises(sdk_error) as info:
        if stream:
            sdk_stream(oai)
        else:
            oai.responses.create(model="gpt-test", input=MSG)
    assert info.value.request_id == srv.requests[-1].request_id
    srv.push(fault)
    with pytest.raises(hn.ProviderError) as ours_info:
        await ours(srv).complete(MSG, stream=stream)
    err = ours_info.value
    assert (err.kind.value, err.status) == (kind, info.value.status_code)
    assert err.request_id == srv.requests[-1].request_id
    if fault.retry_after is not None:
        assert info.value.response.headers["retry-after"] == fault.retry_after
        assert err.retry_after_s == float(fault.retry_after)


async def test_sdk_reads_the_error_event_harnessnb_fails_on(
    oai: openai.OpenAI, srv: ChaosServer
) -> None:
    error = {"code": "server_error", "message": "The server had an error."}
    srv.push(Fault.stream_error(error, after_events=3))
    events = sdk_stream(oai)  # the SDK yields the error event (ResponseErrorEvent)
    assert [e.type for e in events[:3]] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
    ]
    (last,) = events[3:]
    assert (last.type, last.code, last.message) == ("error", "server_error", error["message"])
    srv.push(Fault.stream_error(error, after_events=3))
    with pytest.raises(hn.ProviderError) as ours_info:
        await ours(srv).complete(MSG, stream=True)
    assert ours_info.value.kind is hn.ProviderErrorKind.SERVER
    assert "The server had an error." in ours_info.value.message


@pytest.mark.parametrize("stream", [False, True])
async def test_sdk_reads_a_failed_response_as_harnessnb_fails(
    stream: bool, oai: openai.OpenAI, srv: ChaosServer
) -> None:
    error = {"code": "rate_limit_exceeded", "message": "Too many tokens."}
    srv.push(Fault.error_in_200(error))
    if stream:
        events = sdk_stream(oai)
        assert events[-1].type == "response.failed"
        failed = events[-1].response
    else:
        failed = oai.responses.create(model="gpt-test", input=MSG)
    assert failed.status == "failed" and failed.error is not None
    assert (failed.error.code, failed.error.message) == ("rate_limit_exceeded", "Too many tokens.")
    srv.push(Fault.error_in_200(error))
    with pytest.raises(hn.ProviderError) as ours_info:
        await ours(srv).complete(MSG, stream=stream)
    assert ours_info.value.kind is hn.ProviderErrorKind.RATE_LIMITED
    assert "Too many tokens." in ours_info.value.message


async def test_an_empty_answer_has_no_output_for_either(
    oai: openai.OpenAI, srv: ChaosServer
) -> None:
    srv.push(Fault.empty())
    r = oai.responses.create(model="gpt-test", input=MSG)
    assert r.output == [] and r.output_text == ""
    srv.push(Fault.empty())
    with pytest.raises(hn.ProviderError) as info:
        await ours(srv).complete(MSG, stream=False)
    assert info.value.kind is hn.ProviderErrorKind.MALFORMED
