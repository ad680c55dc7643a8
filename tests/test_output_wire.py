"""Typed answers on the wire, over real loopback HTTP against the chaos server: each wire
asks natively for an answer in a JSON Schema (the request body it sends, streamed and
not), reads a refusal and a truncation; the chaos server's output faults (``refusal``,
``truncated``, ``schema_violation``, ``schema_rejected``) on every wire; the echo
responder and the demo model answer a schema with JSON that validates."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Literal

import pydantic
import pytest

import harnessnb as hn
from harnessnb.chaos import RATE_FAULTS, ChaosRequest, ChaosServer, Fault, Reply
from harnessnb.demo import DemoModel
from harnessnb.demo._chaos_output import FINAL_ANSWER, instance, violating
from harnessnb.demo._model import provider_for
from harnessnb.providers import _http
from harnessnb.providers._base import offers_native_output
from harnessnb.providers._completion import CAP_REASONS, OutputSchema, Provider
from harnessnb.tools._schema import validate_args

K = hn.ProviderErrorKind
HI: Any = [{"role": "user", "content": "hi"}]
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "kind": {"type": "string", "enum": ["cat", "dog"]},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["name", "age", "tags", "kind", "note"],
    "additionalProperties": False,
}
PERSON = OutputSchema("Person", SCHEMA)
WIRES = ("openai", "responses", "anthropic", "gemini")


@pytest.fixture(autouse=True)
async def srv(module_srv: ChaosServer) -> AsyncIterator[ChaosServer]:
    module_srv.reset()
    yield module_srv
    await _http.aclose_client()


def make(srv: ChaosServer, wire: str) -> Any:
    return provider_for(srv, protocol=wire, name=wire)  # type: ignore[arg-type]


def asked(srv: ChaosServer, wire: str) -> Any:
    """The part of the last request body that asks for the schema, as the wire spells it."""
    body = srv.requests[-1].json
    if wire == "openai":
        return body["response_format"]
    if wire == "responses":
        return body["text"]
    if wire == "anthropic":
        return body["output_config"]
    return {k: v for k, v in body["generationConfig"].items() if k.startswith("response")}


NAMED = {"name": "Person", "schema": SCHEMA, "strict": True}
EXPECTED = {
    "openai": {"type": "json_schema", "json_schema": NAMED},
    "responses": {"format": {"type": "json_schema", **NAMED}},
    "anthropic": {"format": {"type": "json_schema", "schema": SCHEMA}},
    "gemini": {"responseMimeType": "application/json", "responseJsonSchema": SCHEMA},
}  # fmt: skip


# ---------------------------------------------------------------- 1. asking natively


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("wire", WIRES)
async def test_each_wire_asks_for_the_schema_its_own_way(
    srv: ChaosServer, wire: str, stream: bool
) -> None:
    provider = make(srv, wire)
    assert provider.native_output and offers_native_output(provider)
    c = await provider.complete(HI, stream=stream, max_tokens=300, output=PERSON)
    assert asked(srv, wire) == EXPECTED[wire]
    req = srv.requests[-1]
    assert req.stream is stream and req.output_schema == SCHEMA and req.max_tokens == 300
    if wire == "gemini":  # the cap stays beside the schema in generationConfig
        assert req.json["generationConfig"]["maxOutputTokens"] == 300
    # The echo responder answers the schema: JSON that validates.
    assert validate_args(SCHEMA, json.loads(c.text)) == []
    assert c.refusal is None and not c.truncated


@pytest.mark.parametrize("wire", WIRES)
async def test_a_call_without_output_asks_for_no_schema(srv: ChaosServer, wire: str) -> None:
    c = await make(srv, wire).complete(HI, stream=False)
    assert srv.requests[-1].output_schema is None and c.text == "hi"
    body = srv.requests[-1].json
    assert not {"response_format", "text", "output_config"} & set(body)
    assert "responseJsonSchema" not in (body.get("generationConfig") or {})


async def test_a_schema_name_openai_would_refuse_is_sent_as_one_it_takes(
    srv: ChaosServer,
) -> None:
    await make(srv, "openai").complete(HI, stream=False, output=OutputSchema("my answer!", SCHEMA))
    assert srv.requests[-1].json["response_format"]["json_schema"]["name"] == "my_answer"
    loose = OutputSchema("x" * 80, SCHEMA, strict=False)
    await make(srv, "responses").complete(HI, stream=False, output=loose)
    fmt = srv.requests[-1].json["text"]["format"]
    assert fmt["name"] == "x" * 64 and fmt["strict"] is False


def test_a_fallback_of_native_wires_is_native(srv: ChaosServer) -> None:
    chain = hn.Fallback(make(srv, "openai"), make(srv, "gemini"))
    assert offers_native_output(chain)


def test_a_local_server_is_asked_natively_too() -> None:
    local = hn.OpenAI("llama", base_url="http://127.0.0.1:9/v1", name="local")
    assert offers_native_output(local)


# ---------------------------------------------------------------- 2. refusals


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("wire", ["openai", "responses", "anthropic"])
async def test_a_refusal_is_read_as_the_wire_says_it(
    srv: ChaosServer, wire: str, stream: bool
) -> None:
    srv.push(Fault.refusal("I can't help with that."))
    c = await make(srv, wire).complete(HI, stream=stream, output=PERSON)
    assert c.refusal == "I can't help with that."
    assert c.text == "I can't help with that."  # an untyped run still reads why
    assert not c.truncated and not c.tool_calls
    body = srv.requests[-1].json
    assert body.get("output_config") or body.get("text") or body.get("response_format")
    if wire == "anthropic":
        assert c.finish_reason == "content_filter"
    assert hn.Completion.from_dict(c.to_dict()).refusal == c.refusal


@pytest.mark.parametrize("stream", [False, True])
async def test_an_anthropic_refusal_with_no_text_still_says_it_refused(
    srv: ChaosServer, stream: bool
) -> None:
    from harnessnb.providers._anthropic import REFUSED

    def silent(request: ChaosRequest) -> Reply:
        return Reply(refusal="")

    with ChaosServer(responder=silent) as server:
        c = await make(server, "anthropic").complete(HI, stream=stream)
    assert c.refusal == REFUSED and c.text == ""


@pytest.mark.parametrize("stream", [False, True])
async def test_gemini_has_no_refusal_a_refusal_fault_is_a_safety_stop(
    srv: ChaosServer, stream: bool
) -> None:
    srv.push(Fault.refusal())
    with pytest.raises(hn.ProviderError) as info:
        await make(srv, "gemini").complete(HI, stream=stream, output=PERSON)
    assert info.value.kind is K.REQUEST and "SAFETY" in str(info.value)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("wire", WIRES)
async def test_an_answer_with_no_refusal_has_none(
    srv: ChaosServer, wire: str, stream: bool
) -> None:
    c = await make(srv, wire).complete(HI, stream=stream)
    assert c.refusal is None and "refusal" not in c.to_dict()


# ---------------------------------------------------------------- 2. truncation


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("wire", WIRES)
async def test_an_answer_cut_at_the_cap_mid_json_is_truncated(
    srv: ChaosServer, wire: str, stream: bool
) -> None:
    srv.push(Fault.truncated())
    c = await make(srv, wire).complete(HI, stream=stream, max_tokens=40, output=PERSON)
    assert c.truncated and c.finish_reason in CAP_REASONS and c.refusal is None
    assert c.text.startswith('{"name": ')
    with pytest.raises(ValueError):
        json.loads(c.text)
    assert c.usage is not None and c.usage.output_tokens == 40  # the cap, spent


async def test_the_responses_cap_is_an_incomplete_response(srv: ChaosServer) -> None:
    from harnessnb.providers._responses import parse_response

    srv.push(Fault.truncated())
    raw = await _raw_post(srv, "/v1/responses", {"model": "m", "input": "hi"})
    assert raw["status"] == "incomplete"
    assert raw["incomplete_details"] == {"reason": "max_output_tokens"}
    assert parse_response(raw).finish_reason == "length"


async def _raw_post(srv: ChaosServer, path: str, body: dict[str, Any]) -> Any:
    import httpx2

    async with httpx2.AsyncClient() as client:
        answer = await client.post(srv.url + path, json=body)
    return answer.json()


@pytest.mark.parametrize(
    ("path", "body", "field", "cap"),
    [
        ("/v1/chat/completions", {"model": "m", "messages": HI}, "finish_reason", "length"),
        ("/v1/messages", {"model": "m", "messages": HI}, "stop_reason", "max_tokens"),
        ("/v1/models/m:generateContent", {"contents": []}, "finishReason", "MAX_TOKENS"),
    ],
)
async def test_the_server_says_the_cap_in_each_wire_s_own_word(
    srv: ChaosServer, path: str, body: dict[str, Any], field: str, cap: str
) -> None:
    srv.push(Fault.truncated())
    raw = await _raw_post(srv, path, body)
    said = raw.get("choices", raw.get("candidates", [raw]))[0]
    assert said[field] == cap


# ---------------------------------------------------------------- 3. schema faults


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("wire", WIRES)
async def test_a_schema_violation_is_valid_json_that_breaks_the_schema(
    srv: ChaosServer, wire: str, stream: bool
) -> None:
    srv.push(Fault.schema_violation())
    c = await make(srv, wire).complete(HI, stream=stream, output=PERSON)
    answer = json.loads(c.text)
    assert "name" not in answer
    assert any("name" in problem for problem in validate_args(SCHEMA, answer))
    assert not c.truncated and c.refusal is None


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("wire", WIRES)
async def test_a_schema_strict_mode_refuses_is_a_400_in_the_wire_s_shape(
    srv: ChaosServer, wire: str, stream: bool
) -> None:
    srv.push(Fault.schema_rejected())
    with pytest.raises(hn.ProviderError) as info:
        await make(srv, wire).complete(HI, stream=stream, output=PERSON)
    err = info.value
    assert err.kind is K.REQUEST and err.status == 400 and not err.retryable
    if wire in ("openai", "responses"):
        assert "Invalid schema for response_format 'Person'" in str(err)
    elif wire == "gemini":
        assert "response_json_schema" in str(err)
    assert len(srv.requests) == 1  # not retried, not asked again without streaming


async def test_gemini_rejects_a_schema_as_invalid_argument(srv: ChaosServer) -> None:
    srv.push(Fault.schema_rejected())
    config = {"responseMimeType": "application/json", "responseJsonSchema": SCHEMA}
    raw = await _raw_post(srv, "/v1/models/m:generateContent", {"generationConfig": config})
    assert raw["error"]["code"] == 400 and raw["error"]["status"] == "INVALID_ARGUMENT"


async def test_a_rejection_fault_spares_a_request_that_asks_no_schema(srv: ChaosServer) -> None:
    srv.set_default(Fault.schema_rejected("'format' is not permitted"))
    provider = make(srv, "openai")
    with pytest.raises(hn.ProviderError, match="'format' is not permitted"):
        await provider.complete(HI, stream=False, output=PERSON)
    c = await provider.complete(HI, stream=False)  # the next mode asks no schema natively
    assert c.text == "hi"


def test_the_output_faults_are_rate_names() -> None:
    for name in ("refusal", "truncated", "schema_violation", "schema_rejected"):
        assert RATE_FAULTS[name].kind == name
    with ChaosServer(rates={"schema_violation": 1.0}):
        pass


# ---------------------------------------------------------------- the final-answer tool

FINAL_TOOLS = [{"name": FINAL_ANSWER, "description": "the answer", "parameters": SCHEMA}]


@pytest.mark.parametrize("wire", WIRES)
async def test_offered_a_final_answer_tool_the_echo_responder_calls_it(
    srv: ChaosServer, wire: str
) -> None:
    provider = make(srv, wire)
    c = await provider.complete(HI, FINAL_TOOLS, stream=True)
    assert srv.requests[-1].tool_schemas[FINAL_ANSWER] == SCHEMA
    (call,) = c.tool_calls
    assert call.name == FINAL_ANSWER and validate_args(SCHEMA, call.arguments) == []
    srv.push(Fault.schema_violation())
    (bad,) = (await provider.complete(HI, FINAL_TOOLS, stream=False)).tool_calls
    assert bad.name == FINAL_ANSWER and "name" not in bad.arguments
    srv.push(Fault.truncated())
    cut = await provider.complete(HI, FINAL_TOOLS, stream=False)
    assert cut.truncated and not cut.tool_calls and cut.text.startswith('{"name"')


# ---------------------------------------------------------------- a schema in the prompt

def instruction(schema: dict[str, Any]) -> dict[str, Any]:
    """A typed run's prompted-mode message: the schema in the conversation."""
    return {
        "role": "user",
        "content": "When you give your final answer, give only a JSON value that matches "
        f"this JSON Schema, in a ```json block:\n{json.dumps(schema)}",
    }


PROMPTED: Any = [{"role": "user", "content": "Who is it?"}, instruction(SCHEMA)]


def fenced(text: str) -> Any:
    assert text.startswith("```json\n") and text.endswith("\n```")
    return json.loads(text.removeprefix("```json\n").removesuffix("\n```"))


@pytest.mark.parametrize("wire", WIRES)
async def test_a_schema_given_in_the_prompt_is_answered_in_a_json_block(
    srv: ChaosServer, wire: str
) -> None:
    provider = make(srv, wire)
    c = await provider.complete(PROMPTED, stream=True)
    req = srv.requests[-1]
    assert req.output_schema is None and req.prompted_schema == SCHEMA
    assert validate_args(SCHEMA, fenced(c.text)) == []
    srv.push(Fault.schema_violation())
    bad = fenced((await provider.complete(PROMPTED, stream=False)).text)
    assert "name" not in bad and validate_args(SCHEMA, bad) != []


def test_a_prompt_without_a_schema_asks_none(srv: ChaosServer) -> None:
    def request(text: str) -> ChaosRequest:
        body = {"messages": [{"role": "user", "content": text}]}
        return ChaosRequest("openai", "/v1/chat/completions", body, {}, "req_1")

    assert request("What is a JSON Schema? {not json}").prompted_schema is None
    assert request('Write a JSON Schema for {"a": 1}').prompted_schema is None
    assert request('JSON Schema: {"type": "integer"}').prompted_schema == {"type": "integer"}
    assert request('{"type": "object"} with no words before').prompted_schema is None


# ---------------------------------------------------------------- 4. answers that validate

NESTED: dict[str, Any] = {
    "$defs": {
        "Item": {
            "type": "object",
            "properties": {"qty": {"type": "integer", "minimum": 1}, "sku": {"type": "string"}},
            "required": ["qty", "sku"],
        }
    },
    "type": "object",
    "properties": {
        "result": {"type": "number"},
        "ok": {"type": "boolean"},
        "items": {"type": "array", "items": {"$ref": "#/$defs/Item"}, "minItems": 2},
        "when": {"type": "string", "format": "date"},
        "code": {"type": "string", "minLength": 8, "maxLength": 8},
        "level": {"type": ["integer", "null"], "maximum": 5},
        "fixed": {"const": "v1"},
        "extra": {"allOf": [{"$ref": "#/$defs/Item"}]},
    },
    "required": ["result", "ok", "items", "when", "code", "level", "fixed", "extra"],
}


@pytest.mark.parametrize(
    "schema", [SCHEMA, NESTED, {"type": "array", "items": {"type": "integer"}}]
)
def test_the_generator_makes_values_that_validate(schema: dict[str, Any]) -> None:
    for number in (None, 42, -3):
        value = instance(schema, number=number, text="a long answer")
        assert validate_args(schema, value) == [], value
        assert validate_args(schema, violating(schema)) != []


class Line(pydantic.BaseModel):
    sku: str
    qty: int = pydantic.Field(ge=1)


class Order(pydantic.BaseModel):
    total: float
    lines: list[Line]
    note: str | None
    status: Literal["open", "shipped"]
    express: bool = False


def test_a_pydantic_model_s_schema_is_answered_with_a_value_it_validates() -> None:
    order = Order.model_validate(instance(Order.model_json_schema(), number=7))
    assert order.total == 7.0 and order.lines[0].qty == 7 and order.status == "open"
    with pytest.raises(pydantic.ValidationError):
        Order.model_validate(violating(Order.model_json_schema()))


@pytest.mark.parametrize("wire", WIRES)
async def test_the_demo_model_answers_a_schema_with_the_arithmetic_answer(wire: str) -> None:
    schema = {
        "type": "object",
        "properties": {"answer": {"type": "integer"}, "working": {"type": "string"}},
        "required": ["answer", "working"],
        "additionalProperties": False,
    }
    question: Any = [{"role": "user", "content": "What is 17 + 25?"}]
    with ChaosServer(responder=DemoModel()) as server:
        provider: Provider = make(server, wire)
        c = await provider.complete(question, output=OutputSchema("Sum", schema))
        answer = json.loads(c.text)
        assert validate_args(schema, answer) == [] and answer["answer"] == 42
        assert "42" in answer["working"]
        tools = [{"name": FINAL_ANSWER, "parameters": schema}]
        (call,) = (await provider.complete(question, tools)).tool_calls
        assert call.name == FINAL_ANSWER and call.arguments["answer"] == 42
        prompted = await provider.complete([*question, instruction(schema)])
        assert fenced(prompted.text)["answer"] == 42
        plain = await provider.complete(question)  # untyped: its words, as before
        assert plain.text.startswith("The answer is 42.")
    await _http.aclose_client()


async def test_the_demo_model_answers_a_task_it_cannot_solve_with_valid_json() -> None:
    with ChaosServer(responder=DemoModel()) as server:
        c = await make(server, "openai").complete(
            [{"role": "user", "content": "Tell me about cats."}], output=PERSON
        )
    assert validate_args(SCHEMA, json.loads(c.text)) == []
    await _http.aclose_client()
