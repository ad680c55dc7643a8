"""Wire fidelity: the official openai and anthropic SDKs talk to the chaos server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply

TOOL_ARGS = {"path": "notes/ü b.md", "limit": 20, "flags": ["a", "b"]}


def responder(request: ChaosRequest) -> Reply:
    if request.tools:
        return Reply(text="", tool_calls=[{"name": request.tools[0], "arguments": TOOL_ARGS}])
    return Reply(text="Hello from chaos, in several fragments.", input_tokens=11, output_tokens=9)


@pytest.fixture(scope="module")
def srv() -> Iterator[ChaosServer]:
    with ChaosServer(seed=0, responder=responder) as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(srv: ChaosServer) -> None:
    srv.reset()


@pytest.fixture
def oai(srv: ChaosServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(api_key="sk-test", base_url=srv.openai_url, max_retries=0) as client:
        yield client


@pytest.fixture
def ant(srv: ChaosServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(api_key="sk-test", base_url=srv.anthropic_url, max_retries=0) as c:
        yield c


OAI_TOOLS: Any = [
    {
        "type": "function",
        "function": {"name": "read_file", "parameters": {"type": "object", "properties": {}}},
    }
]
ANT_TOOLS: Any = [{"name": "read_file", "input_schema": {"type": "object", "properties": {}}}]
MSG: Any = [{"role": "user", "content": "hi"}]


def test_openai_sdk_completes(oai: openai.OpenAI, srv: ChaosServer) -> None:
    r = oai.chat.completions.create(model="gpt-test", messages=MSG)
    assert r.choices[0].message.content == "Hello from chaos, in several fragments."
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None and (r.usage.prompt_tokens, r.usage.completion_tokens) == (11, 9)
    assert r.model == "gpt-test"
    assert r._request_id == srv.requests[-1].request_id


def test_openai_sdk_streams(oai: openai.OpenAI) -> None:
    stream = oai.chat.completions.create(
        model="gpt-test", messages=MSG, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello from chaos, in several fragments."
    assert sum(1 for c in chunks if c.choices and c.choices[0].delta.content) >= 3
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 9


def test_openai_sdk_tool_calls(oai: openai.OpenAI) -> None:
    r = oai.chat.completions.create(model="gpt-test", messages=MSG, tools=OAI_TOOLS)
    call = r.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "read_file"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == TOOL_ARGS  # type: ignore[union-attr]
    assert r.choices[0].finish_reason == "tool_calls"


def test_openai_sdk_streamed_tool_calls_assemble(oai: openai.OpenAI) -> None:
    with oai.chat.completions.stream(model="gpt-test", messages=MSG, tools=OAI_TOOLS) as s:
        final = s.get_final_completion()
    call = final.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call.function.name == "read_file"
    assert json.loads(call.function.arguments) == TOOL_ARGS


def test_openai_sdk_sees_a_rate_limit(oai: openai.OpenAI, srv: ChaosServer) -> None:
    srv.push(Fault.status(429, retry_after="2"))
    with pytest.raises(openai.RateLimitError) as info:
        oai.chat.completions.create(model="gpt-test", messages=MSG)
    assert info.value.response.headers["retry-after"] == "2"
    assert info.value.request_id == srv.requests[-1].request_id


def test_anthropic_sdk_completes(ant: anthropic.Anthropic, srv: ChaosServer) -> None:
    r = ant.messages.create(model="claude-test", max_tokens=100, messages=MSG)
    assert r.content[0].type == "text"
    assert r.content[0].text == "Hello from chaos, in several fragments."
    assert r.stop_reason == "end_turn"
    assert (r.usage.input_tokens, r.usage.output_tokens) == (11, 9)
    assert r._request_id == srv.requests[-1].request_id


def test_anthropic_sdk_streams(ant: anthropic.Anthropic) -> None:
    with ant.messages.stream(model="claude-test", max_tokens=100, messages=MSG) as s:
        pieces = list(s.text_stream)
        final = s.get_final_message()
    assert "".join(pieces) == "Hello from chaos, in several fragments."
    assert len(pieces) >= 3
    assert final.usage.output_tokens == 9 and final.stop_reason == "end_turn"


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_sdk_tool_calls(ant: anthropic.Anthropic, stream: bool) -> None:
    final: Any
    if stream:
        with ant.messages.stream(
            model="claude-test", max_tokens=100, messages=MSG, tools=ANT_TOOLS
        ) as s:
            final = s.get_final_message()
    else:
        final = ant.messages.create(
            model="claude-test", max_tokens=100, messages=MSG, tools=ANT_TOOLS
        )
    block = final.content[0]
    assert block.type == "tool_use"
    assert block.name == "read_file" and block.input == TOOL_ARGS
    assert final.stop_reason == "tool_use"


def test_anthropic_sdk_sees_overloaded_mid_stream(
    ant: anthropic.Anthropic, srv: ChaosServer
) -> None:
    srv.push(Fault.stream_error({"type": "overloaded_error", "message": "Overloaded"}))
    with (
        pytest.raises(anthropic.APIStatusError) as info,
        ant.messages.stream(model="claude-test", max_tokens=100, messages=MSG) as s,
    ):
        list(s.text_stream)
    assert "overloaded_error" in str(info.value)
