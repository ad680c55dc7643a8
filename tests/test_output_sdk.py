"""Typed answers, SDK parity: the official ``openai`` SDK (``chat.completions.parse``,
``responses.parse`` and their streams) and ``google-genai`` (``response_json_schema``)
against the same chaos server as harnessnb's wires: the request bodies agree on how the
schema is asked, and what each reads back agrees (the text and its parsed value, the
refusal, the finish reason), healthy, refused and cut at the cap, streamed and not."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any, Literal

import pydantic
import pytest

openai = pytest.importorskip("openai")
genai = pytest.importorskip("google.genai")
from google.genai import types  # noqa: E402
from openai.lib._pydantic import to_strict_json_schema  # noqa: E402

import harnessnb as hn  # noqa: E402
from harnessnb.chaos import ChaosServer, Fault  # noqa: E402
from harnessnb.providers import _http  # noqa: E402
from harnessnb.providers._completion import OutputSchema  # noqa: E402

KEY = "AIzaSyD-sdk-parity-0123456789abcdefghij"
REFUSAL = "I'm sorry, I can't help with that."
HI: Any = [{"role": "user", "content": "hi"}]


class Person(pydantic.BaseModel):
    name: str
    age: int
    tags: list[str]
    kind: Literal["cat", "dog"]
    note: str | None


STRICT = to_strict_json_schema(Person)
PERSON = OutputSchema("Person", STRICT)


@pytest.fixture(scope="module")
def module_srv() -> Iterator[ChaosServer]:
    with ChaosServer(seed=0) as server:  # the echo responder: answers a schema
        yield server


@pytest.fixture(autouse=True)
async def srv(module_srv: ChaosServer) -> AsyncIterator[ChaosServer]:
    module_srv.reset()
    yield module_srv
    await _http.aclose_client()


@pytest.fixture
def oai(srv: ChaosServer) -> Iterator[Any]:
    with openai.OpenAI(api_key="sk-test", base_url=srv.openai_url, max_retries=0) as client:
        yield client


@pytest.fixture
def gsdk(srv: ChaosServer) -> Iterator[Any]:
    options = types.HttpOptions(
        base_url=srv.gemini_url, retry_options=types.HttpRetryOptions(attempts=1)
    )
    with genai.Client(api_key=KEY, http_options=options) as client:
        yield client


def chat(srv: ChaosServer) -> hn.OpenAI:
    return hn.OpenAI("gpt-test", api_key="sk-test", base_url=srv.openai_url)


def responses(srv: ChaosServer) -> hn.OpenAI:
    return hn.OpenAI("gpt-test", api_key="sk-test", base_url=srv.openai_url, api="responses")


def gemini(srv: ChaosServer) -> hn.Gemini:
    return hn.Gemini("gemini-test", api_key=KEY, base_url=srv.gemini_url)


def last_body(srv: ChaosServer) -> Any:
    return srv.requests[-1].json


# ---------------------------------------------------------------- chat completions


def sdk_chat_parse(oai: Any, stream: bool) -> Any:
    """The SDK's parsed message (``chat.completions.parse`` or its stream's final one)."""
    kw: dict[str, Any] = {"model": "gpt-test", "messages": HI, "response_format": Person}
    if stream:
        with oai.chat.completions.stream(**kw) as events:
            return events.get_final_completion().choices[0]
    return oai.chat.completions.parse(**kw).choices[0]


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_parse_and_ours_ask_alike_and_read_the_same_answer(
    oai: Any, srv: ChaosServer, stream: bool
) -> None:
    choice = sdk_chat_parse(oai, stream)
    sdk_asked = last_body(srv)["response_format"]
    c = await chat(srv).complete(HI, stream=stream, output=PERSON)
    assert last_body(srv)["response_format"] == sdk_asked
    assert sdk_asked["json_schema"]["name"] == "Person" and sdk_asked["json_schema"]["strict"]
    parsed = choice.message.parsed
    assert isinstance(parsed, Person)
    assert c.text == choice.message.content
    assert Person.model_validate_json(c.text) == parsed
    assert c.finish_reason == choice.finish_reason == "stop"
    assert c.refusal is None and choice.message.refusal is None


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_refusal_reads_the_same(oai: Any, srv: ChaosServer, stream: bool) -> None:
    srv.push(Fault.refusal(REFUSAL))
    choice = sdk_chat_parse(oai, stream)
    srv.push(Fault.refusal(REFUSAL))
    c = await chat(srv).complete(HI, stream=stream, output=PERSON)
    assert choice.message.parsed is None
    assert c.refusal == choice.message.refusal == REFUSAL
    assert c.finish_reason == choice.finish_reason


@pytest.mark.parametrize("stream", [False, True])
async def test_chat_cut_at_the_cap_reads_the_same(oai: Any, srv: ChaosServer, stream: bool) -> None:
    srv.push(Fault.truncated())
    with pytest.raises(openai.LengthFinishReasonError):
        sdk_chat_parse(oai, stream)  # the SDK refuses to parse it
    fmt = {"type": "json_schema", "json_schema": {"name": "Person", "schema": STRICT}}
    srv.push(Fault.truncated())
    kw: dict[str, Any] = {"model": "gpt-test", "messages": HI, "response_format": fmt}
    if stream:
        text, finish = "", None
        for chunk in oai.chat.completions.create(stream=True, **kw):
            for choice in chunk.choices:
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
    else:
        raw = oai.chat.completions.create(**kw).choices[0]
        text, finish = raw.message.content, raw.finish_reason
    srv.push(Fault.truncated())
    c = await chat(srv).complete(HI, stream=stream, output=PERSON)
    assert c.truncated and c.text == text and c.finish_reason == finish == "length"


# ---------------------------------------------------------------- the Responses API


def sdk_responses_parse(oai: Any, stream: bool) -> Any:
    kw: dict[str, Any] = {"model": "gpt-test", "input": HI, "text_format": Person}
    if stream:
        with oai.responses.stream(**kw) as events:
            return events.get_final_response()
    return oai.responses.parse(**kw)


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_parse_and_ours_ask_alike_and_read_the_same_answer(
    oai: Any, srv: ChaosServer, stream: bool
) -> None:
    r = sdk_responses_parse(oai, stream)
    sdk_asked = last_body(srv)["text"]
    c = await responses(srv).complete(HI, stream=stream, output=PERSON)
    assert last_body(srv)["text"] == sdk_asked
    assert sdk_asked["format"]["type"] == "json_schema" and sdk_asked["format"]["name"] == "Person"
    assert isinstance(r.output_parsed, Person)
    assert c.text == r.output_text and Person.model_validate_json(c.text) == r.output_parsed
    assert r.status == "completed" and c.finish_reason == "stop" and c.refusal is None


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_refusal_reads_the_same(oai: Any, srv: ChaosServer, stream: bool) -> None:
    srv.push(Fault.refusal(REFUSAL))
    r = sdk_responses_parse(oai, stream)
    srv.push(Fault.refusal(REFUSAL))
    c = await responses(srv).complete(HI, stream=stream, output=PERSON)
    parts = [p for item in r.output if item.type == "message" for p in item.content]
    assert [p.type for p in parts] == ["refusal"]
    assert c.refusal == parts[0].refusal == REFUSAL and r.output_parsed is None


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_cut_at_the_cap_reads_the_same(
    oai: Any, srv: ChaosServer, stream: bool
) -> None:
    fmt = {"format": {"type": "json_schema", "name": "Person", "schema": STRICT, "strict": True}}
    srv.push(Fault.truncated())
    kw: dict[str, Any] = {"model": "gpt-test", "input": HI, "text": fmt}
    if stream:
        events = list(oai.responses.create(stream=True, **kw))
        assert events[-1].type == "response.incomplete"
        r = events[-1].response
    else:
        r = oai.responses.create(**kw)
    srv.push(Fault.truncated())
    c = await responses(srv).complete(HI, stream=stream, output=PERSON)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert c.truncated and c.text == r.output_text and c.finish_reason == "length"


# ---------------------------------------------------------------- Gemini


def sdk_gemini(gsdk: Any, stream: bool) -> tuple[str, Any, Any]:
    """The SDK's text, parsed value (the last chunk's) and finish reason."""
    config = types.GenerateContentConfig(
        response_mime_type="application/json", response_json_schema=STRICT
    )
    kw: dict[str, Any] = {"model": "gemini-test", "contents": "hi", "config": config}
    chunks = (
        list(gsdk.models.generate_content_stream(**kw))
        if stream
        else [gsdk.models.generate_content(**kw)]
    )
    last = chunks[-1]
    text = "".join(c.text or "" for c in chunks)
    return text, last.parsed, last.candidates[0].finish_reason


@pytest.mark.parametrize("stream", [False, True])
async def test_gemini_sdk_and_ours_ask_alike_and_read_the_same_answer(
    gsdk: Any, srv: ChaosServer, stream: bool
) -> None:
    text, parsed, finish = sdk_gemini(gsdk, stream)
    sdk_config = last_body(srv)["generationConfig"]
    c = await gemini(srv).complete(HI, stream=stream, output=PERSON)
    assert last_body(srv)["generationConfig"] == sdk_config
    assert sdk_config == {"responseMimeType": "application/json", "responseJsonSchema": STRICT}
    assert c.text == text and json.loads(c.text) == json.loads(text)
    if not stream:  # the SDK parses a whole answer against the schema it sent
        assert parsed == json.loads(text)
    assert finish == types.FinishReason.STOP and c.finish_reason == "stop"


@pytest.mark.parametrize("stream", [False, True])
async def test_gemini_cut_at_the_cap_reads_the_same(
    gsdk: Any, srv: ChaosServer, stream: bool
) -> None:
    srv.push(Fault.truncated())
    text, _, finish = sdk_gemini(gsdk, stream)
    srv.push(Fault.truncated())
    c = await gemini(srv).complete(HI, stream=stream, output=PERSON)
    assert finish == types.FinishReason.MAX_TOKENS
    assert c.truncated and c.text == text


@pytest.mark.parametrize("stream", [False, True])
async def test_a_rejected_schema_is_a_400_both_read(
    oai: Any, gsdk: Any, srv: ChaosServer, stream: bool
) -> None:
    srv.push(Fault.schema_rejected())
    with pytest.raises(openai.BadRequestError) as sdk_err:
        sdk_chat_parse(oai, stream)
    srv.push(Fault.schema_rejected())
    with pytest.raises(hn.ProviderError) as ours:
        await chat(srv).complete(HI, stream=stream, output=PERSON)
    assert sdk_err.value.status_code == ours.value.status == 400
    assert "Invalid schema for response_format 'Person'" in sdk_err.value.message
    assert "Invalid schema for response_format 'Person'" in str(ours.value)
    srv.push(Fault.schema_rejected())
    with pytest.raises(genai.errors.ClientError) as g_err:
        sdk_gemini(gsdk, stream)
    assert g_err.value.code == 400 and g_err.value.status == "INVALID_ARGUMENT"


# ---------------------------------------------------------------- Anthropic


def sdk_anthropic(srv: ChaosServer, stream: bool, *, parse: bool = True) -> Any:
    """The anthropic SDK's message: ``messages.parse`` (or its stream's final one), or
    ``messages.create`` with the schema as ``output_config`` when not ``parse`` (its
    parse reads any text as JSON, a refusal's and a cut answer's too, and raises)."""
    anthropic = pytest.importorskip("anthropic")
    kw: dict[str, Any] = {"model": "claude-test", "max_tokens": 300, "messages": HI}
    if parse:
        kw["output_format"] = Person
    else:
        kw["output_config"] = {"format": {"type": "json_schema", "schema": STRICT}}
    with anthropic.Anthropic(api_key="sk-ant", base_url=srv.anthropic_url, max_retries=0) as c:
        if stream:
            with c.messages.stream(**kw) as events:
                return events.get_final_message()
        return c.messages.parse(**kw) if parse else c.messages.create(**kw)


def claude(srv: ChaosServer) -> hn.Anthropic:
    return hn.Anthropic("claude-test", api_key="sk-ant", base_url=srv.anthropic_url)


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_parse_and_ours_ask_alike_and_read_the_same_answer(
    srv: ChaosServer, stream: bool
) -> None:
    message = sdk_anthropic(srv, stream)
    sdk_asked = last_body(srv)["output_config"]
    theirs = OutputSchema("Person", sdk_asked["format"]["schema"])
    c = await claude(srv).complete(HI, max_tokens=300, stream=stream, output=theirs)
    assert last_body(srv)["output_config"] == sdk_asked
    assert sdk_asked["format"]["type"] == "json_schema"
    assert isinstance(message.parsed_output, Person)
    assert c.text == message.content[0].text
    assert Person.model_validate_json(c.text) == message.parsed_output
    assert message.stop_reason == "end_turn" and c.finish_reason == "stop"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("fault", "stop"), [("refusal", "refusal"), ("truncated", "max_tokens")])
async def test_anthropic_refusal_and_cap_read_the_same(
    srv: ChaosServer, stream: bool, fault: str, stop: str
) -> None:
    made = Fault.refusal(REFUSAL) if fault == "refusal" else Fault.truncated()
    srv.push(made)
    message = sdk_anthropic(srv, stream, parse=False)
    srv.push(made)
    c = await claude(srv).complete(HI, max_tokens=300, stream=stream, output=PERSON)
    assert message.stop_reason == stop and message.content[0].text == c.text
    assert message.usage.output_tokens == c.usage.output_tokens
    if fault == "refusal":
        assert c.refusal == REFUSAL == c.text and c.finish_reason == "content_filter"
    else:
        assert c.truncated and c.refusal is None and c.usage.output_tokens == 300
