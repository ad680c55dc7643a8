"""Typed answers (``TaskContract(output=T)``): the spec, the modes, every way an answer
cannot be used, over the four wires on the chaos server and over a raw HTTP server."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pydantic
import pytest
from typing_extensions import TypedDict

import harnessnb as hn
from harnessnb import Completion, Usage
from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply
from harnessnb.loop._output import OutputSpec, parse_json, strict_schema
from harnessnb.providers import _http
from harnessnb.providers._base import Call
from harnessnb.providers._completion import OutputSchema


class City(pydantic.BaseModel):
    name: str
    population: int


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Pair(TypedDict):
    left: str
    right: str


SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "integer", "minimum": 0}},
    "required": ["answer"],
}
KEY = "sk-test-typed-0123456789abcdef"


@pytest.fixture(autouse=True)
async def _clients() -> AsyncIterator[None]:
    yield
    await _http.aclose_client()


def rows(store: hn.Store, run_id: str) -> list[dict[str, Any]]:
    frame = store.sql(
        "SELECT kind, status, error FROM attempts WHERE run_id = ? ORDER BY attempt", [run_id]
    )
    return [
        {k: (None if v is None or v != v else v) for k, v in r.items()}
        for r in frame.astype(object).to_dict("records")
    ]


# -------------------------------------------------------------------- the spec (pure)


def test_each_kind_of_type_gives_a_schema_and_validates() -> None:
    cases: list[tuple[Any, Any, Any]] = [
        (City, {"name": "Oslo", "population": 700000}, City(name="Oslo", population=700000)),
        (Point, {"x": 1, "y": 2}, Point(1, 2)),
        (Pair, {"left": "a", "right": "b"}, {"left": "a", "right": "b"}),
        (SCHEMA, {"answer": 3}, {"answer": 3}),
    ]
    for target, raw, value in cases:
        spec = OutputSpec.of(target)
        assert spec.schema["type"] == "object"
        checked = spec.validate(raw)
        assert not isinstance(checked, list) and checked.value == value
        assert type(checked.value) is type(value)
    bad = OutputSpec.of(City).validate({"name": "Oslo", "population": "many"})
    assert bad == [
        "population: Input should be a valid integer, unable to parse string as an integer"
    ]
    assert OutputSpec.of(SCHEMA).validate({"answer": -1}) != []
    assert isinstance(OutputSpec.of(Point).validate({"x": 1}), list)


def test_the_strict_form_closes_objects_or_says_there_is_none() -> None:
    class Loose(pydantic.BaseModel):
        name: str
        nickname: str | None = None

    strict = OutputSpec.of(Loose).strict
    assert strict is not None
    assert strict["additionalProperties"] is False
    assert strict["required"] == ["name", "nickname"]
    assert "default" not in strict["properties"]["nickname"]

    class Defaulted(pydantic.BaseModel):
        count: int = 3  # optional and not nullable: no strict form

    assert OutputSpec.of(Defaulted).strict is None
    assert strict_schema({"type": "object", "additionalProperties": {"type": "integer"}}) is None
    assert strict_schema({"type": "array", "items": {"type": "integer"}}) is None
    assert strict_schema({"type": "object", "properties": {}, "allOf": []}) is None


def test_a_bad_type_or_mode_is_a_config_error_when_the_contract_is_built(tmp_path: Path) -> None:
    for bad in (int, "a string", [1, 2], {"type": "no-such-type"}):
        with pytest.raises(hn.ConfigError):
            hn.TaskContract("t", tmp_path, output=bad)
    with pytest.raises(hn.ConfigError, match="output_mode"):
        hn.TaskContract("t", tmp_path, output=City, output_mode="json")  # type: ignore[arg-type]
    with pytest.raises(hn.ConfigError, match="output_retries"):
        hn.TaskContract("t", tmp_path, output=City, output_retries=-1)
    with pytest.raises(hn.ConfigError, match="without output"):
        hn.TaskContract("t", tmp_path, output_mode="tool")


def test_the_json_is_read_from_a_fence_the_whole_text_or_the_last_object() -> None:
    assert parse_json('Here:\n```json\n{"a": 1}\n```\n') == parse_json('{"a": 1}')
    found = parse_json('I think {"a": 0} or rather {"a": 2}. Done.')
    assert not isinstance(found, list) and found.value == {"a": 2}
    assert parse_json("no json here") == ["the answer is not JSON: 'no json here'"]
    assert parse_json("  ") == ["the answer is empty: no JSON in it"]


def test_a_stored_contract_keeps_the_schema_and_reads_it_back_as_a_dict(tmp_path: Path) -> None:
    contract = hn.TaskContract("t", tmp_path, output=City, output_mode="tool", output_retries=4)
    back = hn.TaskContract.from_dict(json.loads(json.dumps(contract.to_dict())))
    assert back.output_mode == "tool" and back.output_retries == 4
    assert back.output == {**City.model_json_schema(), "title": "City"}
    assert hn.TaskContract.from_dict(hn.TaskContract("t", tmp_path).to_dict()).output is None


# ------------------------------------------------------- the loop (scripted providers)


class NativeScripted(hn.ScriptedProvider):
    """A scripted provider that answers natively: what it was asked is kept."""

    asked: list[OutputSchema | None]

    @property
    def native_output(self) -> bool:
        return True

    async def _reply(self, call: Call) -> Completion:
        self.__dict__.setdefault("asked", []).append(call.output)
        return await super()._reply(call)


def answer(text: str = "", **kw: Any) -> Completion:
    return Completion(text=text, usage=Usage(10, 5), provider="scripted", model="m", **kw)


async def test_a_refusal_ends_the_run_and_is_not_asked_again(ws: Path, store: hn.Store) -> None:
    provider = hn.ScriptedProvider([answer(refusal="I can't help with that"), answer("{}")])
    contract = hn.TaskContract("t", ws, output=City, output_mode="tool")
    result = await hn.run(contract, provider, store=store)
    assert result.outcome is hn.RunOutcome.ESCALATED_TERMINAL
    assert isinstance(result.error, hn.OutputError)
    assert result.error.kind.value == "refusal" and result.error.mode == "tool"
    assert "I can't help with that" in str(result.error)
    assert len(provider.calls) == 1 and result.output is None
    assert [r["kind"] for r in rows(store, result.run_id)] == ["refusal"]


async def test_violations_are_fed_back_until_the_retries_run_out(ws: Path, store: hn.Store) -> None:
    bad = [
        {"tool": "final_answer", "args": {"name": "Oslo", "population": f"n{i}"}} for i in range(3)
    ]
    provider = hn.ScriptedProvider(bad)
    contract = hn.TaskContract("t", ws, output=City, output_mode="tool", output_retries=2)
    result = await hn.run(contract, provider, store=store)
    assert isinstance(result.error, hn.OutputError)
    assert result.outcome is hn.RunOutcome.ESCALATED_TERMINAL
    assert result.error.kind.value == "schema_violation"
    assert len(result.error.reasons) == 3 and str(result.error).count("population:") == 3
    got = rows(store, result.run_id)
    assert [r["kind"] for r in got] == ["schema_violation"] * 3
    assert all(r["status"] is None and "population" in r["error"] for r in got)
    feedback = provider.calls[1][-1]
    assert feedback["role"] == "user" and '"population": "n0"' in feedback["content"]
    assert "Input should be a valid integer" in feedback["content"]
    html = result.error._repr_mimebundle_()["text/html"]
    assert "attempt 3: population" in html


async def test_a_truncated_answer_is_asked_once_more_then_fails(ws: Path, store: hn.Store) -> None:
    cut = answer('{"name": "Os', finish_reason="length")
    provider = hn.ScriptedProvider([cut, cut])
    contract = hn.TaskContract("t", ws, output=City, output_mode="prompted")
    result = await hn.run(contract, provider, store=store)
    assert isinstance(result.error, hn.OutputError) and result.error.kind.value == "truncated"
    assert len(provider.calls) == 2
    assert [r["kind"] for r in rows(store, result.run_id)] == ["truncated", "truncated"]


async def test_a_truncation_is_not_asked_again_past_the_token_budget(
    ws: Path, store: hn.Store
) -> None:
    cut = answer('{"name": "Os', finish_reason="length")
    provider = hn.ScriptedProvider([cut, answer('{"name": "Oslo", "population": 1}')])
    contract = hn.TaskContract("t", ws, output=City, max_total_tokens=20)
    result = await hn.run(contract, provider, store=store)
    assert isinstance(result.error, hn.OutputError) and len(provider.calls) == 1


async def test_auto_is_native_for_a_strict_schema_and_tool_otherwise(
    ws: Path, store: hn.Store
) -> None:
    native = NativeScripted(['{"name": "Oslo", "population": 700000}'])
    result = await hn.run(hn.TaskContract("t", ws, output=City), native, store=store)
    assert result.output == City(name="Oslo", population=700000)
    assert result.output_mode == "native"
    asked = native.asked[0]
    assert asked is not None and asked.name == "City" and asked.strict
    assert asked.schema["additionalProperties"] is False

    class Defaulted(pydantic.BaseModel):
        count: int = 3

    tooled = NativeScripted([{"tool": "final_answer", "args": {"count": 4}}])
    result = await hn.run(hn.TaskContract("t", ws, output=Defaulted), tooled, store=store)
    assert result.output == Defaulted(count=4) and result.output_mode == "tool"
    assert tooled.asked == [None]


async def test_native_asked_for_a_schema_with_no_strict_form_is_not_strict(
    ws: Path, store: hn.Store
) -> None:
    class Defaulted(pydantic.BaseModel):
        count: int = 3

    native = NativeScripted(['{"count": 5}'])
    contract = hn.TaskContract("t", ws, output=Defaulted, output_mode="native")
    result = await hn.run(contract, native, store=store)
    assert result.output == Defaulted(count=5) and result.output_mode == "native"
    asked = native.asked[0]
    assert asked is not None and asked.strict is False
    assert asked.schema == Defaulted.model_json_schema()


async def test_a_typed_run_resumed_answers_in_the_stored_schema_as_a_dict(
    ws: Path, store: hn.Store
) -> None:
    down = hn.ProviderError("down", kind=hn.ProviderErrorKind.SERVER, status=503)
    first = hn.ScriptedProvider([{"tool": "list_dir", "args": {"path": "."}}, down])
    contract = hn.TaskContract("t", ws, output=City, output_mode="auto", max_retries=0)
    paused = await hn.run(contract, first, store=store)
    assert paused.outcome is hn.RunOutcome.ESCALATED_RETRYABLE
    stored = store.get_run(paused.run_id)["contract"]
    assert stored["output_mode"] == "tool"  # auto as resolved for this provider
    assert stored["output"]["name"] == "City"
    then = hn.ScriptedProvider(
        [{"tool": "final_answer", "args": {"name": "Oslo", "population": 2}}]
    )
    result = await hn.resume(paused.run_id, then, store=store)
    assert result.outcome is hn.RunOutcome.FINISHED
    assert result.output == {"name": "Oslo", "population": 2} and result.output_mode == "tool"


async def paused_typed_run(ws: Path, store: hn.Store) -> str:
    """A typed run (``City``, tool mode) paused by a provider failure after one step."""
    down = hn.ProviderError("down", kind=hn.ProviderErrorKind.SERVER, status=503)
    first = hn.ScriptedProvider([{"tool": "list_dir", "args": {"path": "."}}, down])
    contract = hn.TaskContract("t", ws, output=City, output_mode="tool", max_retries=0)
    paused = await hn.run(contract, first, store=store)
    assert paused.outcome is hn.RunOutcome.ESCALATED_RETRYABLE
    return paused.run_id


async def test_a_typed_run_resumed_with_its_type_answers_a_t(ws: Path, store: hn.Store) -> None:
    run_id = await paused_typed_run(ws, store)
    then = hn.ScriptedProvider(
        [{"tool": "final_answer", "args": {"name": "Oslo", "population": 2}}]
    )
    result = await hn.resume(run_id, then, store=store, output=City)
    assert result.outcome is hn.RunOutcome.FINISHED
    assert result.output == City(name="Oslo", population=2) and result.output_mode == "tool"
    assert cells(store.runs(run_id), "output") == [('{"name": "Oslo", "population": 2}',)]
    again = await hn.resume(run_id, then, store=store, output=City)  # ended: read back
    assert again.output == City(name="Oslo", population=2) and again.output_mode == "tool"
    stored = await hn.resume(run_id, then, store=store)
    assert stored.output == {"name": "Oslo", "population": 2} and len(then.calls) == 1


async def test_a_resume_given_another_schema_is_refused_naming_the_difference(
    ws: Path, store: hn.Store
) -> None:
    class City(pydantic.BaseModel):  # the same name, another field type, one more field
        name: str
        population: str
        country: str

    run_id = await paused_typed_run(ws, store)
    then = hn.ScriptedProvider(["never asked"])
    with pytest.raises(hn.ConfigError) as info:
        await hn.resume(run_id, then, store=store, output=City)
    said = str(info.value)
    assert 'properties.population.type: stored "integer", given "string"' in said
    assert "properties.country: only in the given type's" in said
    assert then.calls == [] and store.get_run(run_id)["outcome"] == "escalated_retryable"
    untyped = await hn.run(hn.TaskContract("t", ws), hn.ScriptedProvider(["hi"]), store=store)
    with pytest.raises(hn.ConfigError, match="asked for no typed answer"):
        await hn.resume(untyped.run_id, then, store=store, output=City)


class NoTools:
    """A user's provider of the protocol's first form that calls no tools: its second
    parameter is not named ``tools``."""

    name = "mine"
    model = "m"

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.seen: list[list[dict[str, Any]]] = []

    def hosts(self) -> list[str]:
        return []

    async def complete(self, messages: list[dict[str, Any]], _unused: Any = ()) -> Completion:
        self.seen.append(list(messages))
        return answer(self.replies.pop(0))


async def test_a_provider_that_takes_no_tools_is_asked_in_prompted_mode(
    ws: Path, store: hn.Store
) -> None:
    provider = NoTools(['Sure! ```json\n{"x": 1, "y": 2}\n```'])
    result = await hn.run(hn.TaskContract("t", ws, output=Point), provider, store=store)  # type: ignore[arg-type]
    assert result.output == Point(1, 2) and result.output_mode == "prompted"
    instruction = provider.seen[0][-1]["content"]
    assert "JSON Schema" in instruction and '"x"' in instruction
    with pytest.raises(hn.ConfigError, match="native"):
        await hn.run(hn.TaskContract("t", ws, output=Point, output_mode="native"), provider)  # type: ignore[arg-type]


async def test_a_valid_answer_is_checked_like_any_answer(ws: Path, store: hn.Store) -> None:
    (ws / "OUT.md").write_text("done\n")
    contract = hn.TaskContract(
        "t", ws, output=SCHEMA, verification=hn.FileContains("OUT.md", "done")
    )
    provider = hn.ScriptedProvider([{"tool": "final_answer", "args": {"answer": 7}}])
    result = await hn.run(contract, provider, store=store)
    assert result.outcome is hn.RunOutcome.SUCCESS and result.output == {"answer": 7}
    assert result.text == '{"answer": 7}'


# -------------------------------------------------------- the wires (chaos server)


def script(*replies: Reply) -> tuple[Callable[[ChaosRequest], Reply], list[ChaosRequest]]:
    """A responder answering ``replies`` in order; the requests it saw."""
    seen: list[ChaosRequest] = []
    queue = list(replies)

    def respond(request: ChaosRequest) -> Reply:
        seen.append(request)
        return queue.pop(0)

    return respond, seen


WIRES: dict[str, Callable[[ChaosServer], Any]] = {
    "openai-chat": lambda s: hn.OpenAI("gpt-test", api_key=KEY, base_url=s.openai_url),
    "openai-responses": lambda s: hn.OpenAI(
        "gpt-test", api_key=KEY, base_url=s.openai_url, api="responses"
    ),
    "anthropic": lambda s: hn.Anthropic("claude-test", api_key=KEY, base_url=s.anthropic_url),
    "gemini": lambda s: hn.Gemini("gemini-test", api_key=KEY, base_url=s.gemini_url),
    "local": lambda s: hn.OpenAI("llama", name="local", api_key="none", base_url=s.openai_url),
}
TYPES: list[tuple[Any, dict[str, Any], Any]] = [
    (City, {"name": "Oslo", "population": 700000}, City(name="Oslo", population=700000)),
    (Point, {"x": 3, "y": 4}, Point(3, 4)),
    (Pair, {"left": "l", "right": "r"}, {"left": "l", "right": "r"}),
    (SCHEMA, {"answer": 42}, {"answer": 42}),
]


def final(args: dict[str, Any]) -> Reply:
    return Reply(tool_calls=[{"name": "final_answer", "arguments": args}])


@pytest.fixture
def server() -> Iterator[Callable[..., ChaosServer]]:
    started: list[ChaosServer] = []

    def start(responder: Callable[[ChaosRequest], Reply]) -> ChaosServer:
        srv = ChaosServer(responder=responder).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.mark.parametrize("wire", list(WIRES))
@pytest.mark.parametrize(
    "kind", range(len(TYPES)), ids=["pydantic", "dataclass", "typeddict", "dict"]
)
async def test_ask_in_tool_mode_on_every_wire(
    wire: str, kind: int, server: Callable[..., ChaosServer], store: hn.Store
) -> None:
    target, raw, value = TYPES[kind]
    respond, seen = script(final(raw))
    srv = server(respond)
    got = await hn.ask(WIRES[wire](srv), "What?", output=target, output_mode="tool", store=store)
    assert got == value and type(got) is type(value)
    assert "final_answer" in seen[0].tools and seen[0].output_schema is None
    (run,) = store.runs()["run_id"]
    assert [r["kind"] for r in rows(store, run)] == [None]


def native_format(wire: str, request: ChaosRequest) -> Any:
    """The part of ``request`` that asks natively for a JSON Schema, as the wire spells it."""
    body = request.json
    if wire in ("openai-chat", "local"):
        return body["response_format"]
    if wire == "openai-responses":
        return body["text"]["format"]
    if wire == "anthropic":
        return body["output_config"]
    config = body["generationConfig"]
    return {k: config[k] for k in ("responseMimeType", "responseJsonSchema")}


def expected_format(wire: str, spec: OutputSpec) -> Any:
    """What each wire's documented native format holds for ``spec`` (its strict form)."""
    schema = spec.strict
    if wire in ("openai-chat", "local"):
        inner = {"name": spec.name, "schema": schema, "strict": True}
        return {"type": "json_schema", "json_schema": inner}
    if wire == "openai-responses":
        return {"type": "json_schema", "name": spec.name, "schema": schema, "strict": True}
    if wire == "anthropic":
        return {"format": {"type": "json_schema", "schema": schema}}
    return {"responseMimeType": "application/json", "responseJsonSchema": schema}


@pytest.mark.parametrize("wire", list(WIRES))
@pytest.mark.parametrize(
    "kind", range(len(TYPES)), ids=["pydantic", "dataclass", "typeddict", "dict"]
)
async def test_auto_is_native_on_every_wire(
    wire: str, kind: int, server: Callable[..., ChaosServer], ws: Path, store: hn.Store
) -> None:
    target, raw, value = TYPES[kind]
    respond, seen = script(Reply(text=json.dumps(raw)))
    srv = server(respond)
    contract = hn.TaskContract("What?", ws, output=target)
    result = await hn.run(contract, WIRES[wire](srv), store=store)
    assert result.output == value and type(result.output) is type(value)
    assert result.output_mode == "native"
    (request,) = seen
    assert native_format(wire, request) == expected_format(wire, OutputSpec.of(target))
    assert "final_answer" not in request.tools
    assert [r["kind"] for r in rows(store, result.run_id)] == [None]


@pytest.mark.parametrize("wire", list(WIRES))
async def test_prompted_answers_on_every_wire(
    wire: str, server: Callable[..., ChaosServer], store: hn.Store
) -> None:
    respond, seen = script(Reply(text='Here it is:\n```json\n{"x": 5, "y": 6}\n```'))
    srv = server(respond)
    got = await hn.ask(
        WIRES[wire](srv), "Where?", output=Point, output_mode="prompted", store=store
    )
    assert got == Point(5, 6)
    assert seen[0].tools == []
    assert "JSON Schema" in json.dumps(seen[0].messages[-1])


@pytest.mark.parametrize("wire", list(WIRES))
async def test_a_violation_is_fixed_on_retry_on_every_wire(
    wire: str, server: Callable[..., ChaosServer], ws: Path, store: hn.Store
) -> None:
    respond, seen = script(
        final({"name": "Oslo", "population": "lots"}), final({"name": "Oslo", "population": 9})
    )
    srv = server(respond)
    events: list[hn.RunEvent] = []
    contract = hn.TaskContract("Which city?", ws, output=City, output_mode="tool")
    result = await hn.run(contract, WIRES[wire](srv), store=store, on_event=events.append)
    assert result.outcome is hn.RunOutcome.FINISHED
    assert result.output == City(name="Oslo", population=9) and result.output_mode == "tool"
    got = rows(store, result.run_id)
    assert [r["kind"] for r in got] == ["schema_violation", None]
    assert [r["status"] for r in got] == [200, 200]
    assert "population: Input should be a valid integer" in got[0]["error"]
    assert "Input should be a valid integer" in json.dumps(seen[1].messages[-1])
    retries = [e for e in events if e.kind == "retry"]
    assert [e.error_kind for e in retries] == ["schema_violation"]  # type: ignore[attr-defined]


@pytest.mark.parametrize("wire", list(WIRES))
async def test_a_native_violation_is_fixed_on_retry_on_every_wire(
    wire: str, server: Callable[..., ChaosServer], ws: Path, store: hn.Store
) -> None:
    respond, seen = script(
        Reply(text='{"name": "Oslo", "population": "lots"}'),
        Reply(text='{"name": "Oslo", "population": 9}'),
    )
    srv = server(respond)
    contract = hn.TaskContract("Which city?", ws, output=City)
    result = await hn.run(contract, WIRES[wire](srv), store=store)
    assert result.outcome is hn.RunOutcome.FINISHED
    assert result.output == City(name="Oslo", population=9) and result.output_mode == "native"
    got = rows(store, result.run_id)
    assert [(r["kind"], r["status"]) for r in got] == [("schema_violation", 200), (None, 200)]
    assert "population: Input should be a valid integer" in got[0]["error"]
    assert "Input should be a valid integer" in json.dumps(seen[1].messages[-1])
    spec = OutputSpec.of(City)
    assert [native_format(wire, r) for r in seen] == [expected_format(wire, spec)] * 2


@pytest.mark.parametrize("wire", ["openai-chat", "anthropic", "gemini"])
def test_ask_sync_raises_output_error_listing_every_reason(
    wire: str, server: Callable[..., ChaosServer], store: hn.Store
) -> None:
    respond, _ = script(*(final({"answer": -i}) for i in range(1, 3)), Reply(text="no idea"))
    srv = server(respond)
    with pytest.raises(hn.OutputError) as info:
        hn.ask_sync(
            WIRES[wire](srv),
            "How many?",
            output=SCHEMA,
            output_mode="tool",
            store=store,
            output_retries=2,
        )
    err = info.value
    assert err.kind.value == "schema_violation" and len(err.reasons) == 3
    assert "answer" in err.reasons[0] and "no final_answer call" in err.reasons[2]
    (run,) = store.runs()["run_id"]
    assert [r["kind"] for r in rows(store, run)] == ["schema_violation"] * 3


@pytest.mark.parametrize("sync", [False, True])
async def test_a_native_schema_refused_with_400_falls_back_to_tool_once(
    sync: bool, server: Callable[..., ChaosServer], store: hn.Store
) -> None:
    respond, seen = script(final({"name": "Oslo", "population": 1}))
    srv = server(respond)
    srv.push(Fault.schema_rejected())
    provider = hn.OpenAI("gpt-test", api_key=KEY, base_url=srv.openai_url, stream=False)
    if sync:
        got = await asyncio.to_thread(hn.ask_sync, provider, "Which?", output=City, store=store)
    else:
        got = await hn.ask(provider, "Which?", output=City, store=store)
    assert got == City(name="Oslo", population=1)
    first, second = srv.requests
    assert first.json["response_format"]["json_schema"]["strict"] is True
    assert "final_answer" not in first.tools and "response_format" not in second.json
    assert second.tools == ["final_answer"] and len(seen) == 1
    (run,) = store.runs()["run_id"]
    assert [(r["kind"], r["status"]) for r in rows(store, run)] == [("request", 400), (None, 200)]


async def test_a_400_in_tool_mode_is_not_a_fallback(
    server: Callable[..., ChaosServer], store: hn.Store
) -> None:
    respond, _ = script()
    srv = server(respond)
    srv.push(Fault.status(400))
    provider = hn.OpenAI("gpt-test", api_key=KEY, base_url=srv.openai_url)
    with pytest.raises(hn.ProviderError):
        await hn.ask(provider, "Which?", output=City, output_mode="tool", store=store)
    assert len(srv.requests) == 1


@pytest.mark.parametrize("mode", ["tool", "native"])
async def test_a_recorded_typed_run_replays_with_no_key(
    mode: str, server: Callable[..., ChaosServer], ws: Path, store: hn.Store
) -> None:
    reply = final({"x": 1, "y": 2}) if mode == "tool" else Reply(text='{"x": 1, "y": 2}')
    respond, _ = script(reply)
    srv = server(respond)
    recorded = hn.Record(WIRES["openai-chat"](srv), store)
    contract = hn.TaskContract("Where?", ws, output=Point, output_mode=mode)  # type: ignore[arg-type]
    first = await hn.run(contract, recorded, store=store)
    assert first.output == Point(1, 2) and first.output_mode == mode
    srv.stop()
    again = await hn.replay(first.run_id, store, store=ws.parent / "replayed.duckdb")
    assert again.outcome is hn.RunOutcome.FINISHED
    assert again.output == {"x": 1, "y": 2} and again.output_mode == mode


# ------------------------------------------ the chat wire's cap (a raw HTTP server)


@pytest.fixture
async def raw_chat() -> AsyncIterator[tuple[str, list[dict[str, Any]], list[dict[str, Any]]]]:
    """A raw asyncio HTTP server answering chat completions from a list of bodies;
    the requests' JSON bodies it received."""
    bodies: list[dict[str, Any]] = []
    received: list[dict[str, Any]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1]) for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )  # fmt: skip
            received.append(json.loads(await reader.readexactly(length)))
            data = json.dumps(bodies.pop(0)).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                + f"content-length: {len(data)}\r\n\r\n".encode()
                + data
            )
            await writer.drain()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}/v1", bodies, received
    server.close()


def chat_body(content: str, finish: str, out_tokens: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": out_tokens},
    }


async def test_a_truncated_chat_answer_is_asked_again_with_twice_the_cap(
    raw_chat: tuple[str, list[dict[str, Any]], list[dict[str, Any]]], store: hn.Store
) -> None:
    url, bodies, received = raw_chat
    bodies += [
        chat_body('{"name": "Os', "length", 64),
        chat_body('{"name": "Oslo", "population": 5}', "stop", 12),
    ]
    provider = hn.OpenAI("gpt-test", api_key=KEY, base_url=url, stream=False)
    got = await hn.ask(provider, "Which?", output=City, output_mode="prompted", store=store)
    assert got == City(name="Oslo", population=5)
    assert "max_tokens" not in received[0] and received[1]["max_tokens"] == 128
    (run,) = store.runs()["run_id"]
    got_rows = rows(store, run)
    assert [r["kind"] for r in got_rows] == ["truncated", None]
    assert "stopped at its token cap (length)" in got_rows[0]["error"]


# ------------------------------------------- what the store keeps (real store files)


def cells(frame: Any, *columns: str) -> list[tuple[Any, ...]]:
    """``frame``'s ``columns`` as tuples, missing values as None."""
    out = frame[list(columns)].astype(object)
    return [tuple(None if pd.isna(v) else v for v in r) for r in out.to_numpy()]


async def test_the_store_keeps_each_attempt_s_mode_and_answer_and_the_run_s(
    server: Callable[..., ChaosServer], ws: Path, tmp_path: Path
) -> None:
    respond, _ = script(
        Reply(text='{"name": "Oslo", "population": "lots"}'),
        Reply(text='{"name": "Oslo", "population": 9}'),
    )
    srv = server(respond)
    path = tmp_path / "kept.duckdb"
    with hn.Store(path) as store:
        contract = hn.TaskContract("Which city?", ws, output=City)
        result = await hn.run(contract, WIRES["anthropic"](srv), store=store)
        untyped = await hn.run(hn.TaskContract("t", ws), hn.ScriptedProvider(["hi"]), store=store)
    with hn.Store(path) as store:  # read back from the file
        run = store.runs(result.run_id)
        assert cells(run, "output_mode", "output") == [
            ("native", '{"name": "Oslo", "population": 9}')
        ]
        assert cells(store.runs(untyped.run_id), "output_mode", "output") == [(None, None)]
        attempts = store.attempts(result.run_id)
        assert cells(attempts, "kind", "output_mode", "answer") == [
            ("schema_violation", "native", '{"name": "Oslo", "population": "lots"}'),
            (None, "native", None),
        ]
        assert "population: Input should be a valid integer" in attempts["error"].iloc[0]
        assert cells(store.attempts(untyped.run_id), "output_mode") == [(None,)]


async def test_the_run_row_says_the_resolved_mode_from_its_start(ws: Path, store: hn.Store) -> None:
    seen: list[Any] = []

    def reply(messages: Any) -> Any:  # asked while the run is under way
        seen.append(cells(store.runs(), "outcome", "output_mode"))
        return {"tool": "final_answer", "args": {"name": "Oslo", "population": 1}}

    contract = hn.TaskContract("t", ws, output=City)  # auto: tool on a scripted provider
    result = await hn.run(contract, hn.ScriptedProvider(reply), store=store)
    assert seen == [[(None, "tool")]] and result.output_mode == "tool"


async def test_a_run_that_fell_back_ends_in_tool_its_first_row_native(
    server: Callable[..., ChaosServer], ws: Path, store: hn.Store
) -> None:
    respond, _ = script(final({"name": "Oslo", "population": 1}))
    srv = server(respond)
    srv.push(Fault.schema_rejected())
    contract = hn.TaskContract("Which?", ws, output=City)
    result = await hn.run(contract, WIRES["openai-responses"](srv), store=store)
    assert result.output_mode == "tool"
    assert cells(store.runs(result.run_id), "output_mode", "output") == [
        ("tool", '{"name": "Oslo", "population": 1}')
    ]
    assert cells(store.attempts(result.run_id), "kind", "status", "output_mode") == [
        ("request", 400, "native"),
        (None, 200, "tool"),
    ]


async def test_an_unusable_end_keeps_the_mode_and_no_output(
    server: Callable[..., ChaosServer], ws: Path, store: hn.Store
) -> None:
    srv = server(lambda r: Reply(text="{}"))
    srv.push(Fault.refusal())
    contract = hn.TaskContract("Which?", ws, output=City)
    result = await hn.run(contract, WIRES["openai-chat"](srv), store=store)
    assert isinstance(result.error, hn.OutputError)
    assert cells(store.runs(result.run_id), "output_mode", "output") == [("native", None)]


async def test_failure_rates_by_provider_and_mode_say_who_follows_the_schema(
    server: Callable[..., ChaosServer], store: hn.Store
) -> None:
    clean = server(hn.chaos.echo_responder)
    sloppy = server(hn.chaos.echo_responder)
    for _ in range(2):
        sloppy.push(Fault.schema_violation())
    good, bad = WIRES["openai-chat"](clean), WIRES["gemini"](sloppy)
    for _ in range(3):
        await hn.ask(good, "Which city?", output=City, store=store)
    for _ in range(2):
        await hn.ask(bad, "Which city?", output=City, store=store)
    rates = store.failure_rates(by=("provider", "output_mode", "kind"))
    got = cells(rates, "provider", "output_mode", "kind", "attempts", "failures")
    assert got == [
        ("gemini", "native", "schema_violation", 4, 2),
        ("openai", "native", None, 3, 0),
    ]


# ------------------------- every unusable answer over real HTTP, per wire, streamed or not

NATIVE_WIRES = ["openai-chat", "openai-responses", "anthropic", "gemini"]
STREAMED = [pytest.param(True, id="stream"), pytest.param(False, id="whole")]


def wire_provider(wire: str, srv: ChaosServer, stream: bool) -> Any:
    base = {
        "openai-chat": hn.OpenAI("gpt-test", api_key=KEY, base_url=srv.openai_url, stream=stream),
        "openai-responses": hn.OpenAI(
            "gpt-test", api_key=KEY, base_url=srv.openai_url, api="responses", stream=stream
        ),
        "anthropic": hn.Anthropic(
            "claude-test", api_key=KEY, base_url=srv.anthropic_url, stream=stream
        ),
        "gemini": hn.Gemini("gemini-test", api_key=KEY, base_url=srv.gemini_url, stream=stream),
    }
    return base[wire]


def kinds_modes(store: hn.Store, run_id: str) -> list[tuple[Any, ...]]:
    return cells(store.attempts(run_id), "kind", "status", "output_mode")


@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize("wire", NATIVE_WIRES)
async def test_a_refusal_over_http_ends_the_run_unretried(
    wire: str, stream: bool, server: Callable[..., ChaosServer], ws: Path, store: hn.Store
) -> None:
    srv = server(hn.chaos.echo_responder)
    srv.push(Fault.refusal("I won't name a city."))
    contract = hn.TaskContract("Which city?", ws, output=City, max_retries=2)
    result = await hn.run(contract, wire_provider(wire, srv, stream), store=store)
    assert result.outcome is hn.RunOutcome.ESCALATED_TERMINAL and result.output is None
    assert len(srv.requests) == 1  # not asked again
    if wire == "gemini":  # no refusal on this wire: a SAFETY stop, the request failure
        assert isinstance(result.error, hn.ProviderError)
        assert result.error.kind is hn.ProviderErrorKind.REQUEST
        assert "SAFETY" in str(result.error)
        assert kinds_modes(store, result.run_id) == [("request", 200, "native")]
        return
    assert isinstance(result.error, hn.OutputError) and result.error.kind.value == "refusal"
    assert "I won't name a city." in str(result.error)
    assert kinds_modes(store, result.run_id) == [("refusal", 200, "native")]
    (answer_,) = cells(store.attempts(result.run_id), "answer")
    assert answer_ == ("I won't name a city.",)


def cap_of(wire: str, request: ChaosRequest) -> Any:
    """The token cap ``request`` sets, in its wire's own field."""
    body = request.json
    if wire == "openai-chat":
        return body.get("max_completion_tokens", body.get("max_tokens"))
    if wire == "openai-responses":
        return body.get("max_output_tokens")
    if wire == "anthropic":
        return body.get("max_tokens")
    return body.get("generationConfig", {}).get("maxOutputTokens")


@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize("wire", NATIVE_WIRES)
async def test_a_truncated_answer_over_http_is_asked_again_with_twice_the_cap(
    wire: str, stream: bool, server: Callable[..., ChaosServer], ws: Path, store: hn.Store
) -> None:
    srv = server(hn.chaos.echo_responder)
    srv.push(Fault.truncated())
    contract = hn.TaskContract("Which city?", ws, output=City)
    result = await hn.run(contract, wire_provider(wire, srv, stream), store=store)
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    assert isinstance(result.output, City) and result.output_mode == "native"
    first, second = srv.requests
    used = int(store.attempts(result.run_id)["output_tokens"].iloc[0])
    assert used > 0 and cap_of(wire, second) == 2 * used
    if cap_of(wire, first) is not None:  # a wire that always sends one (Anthropic's)
        assert used == cap_of(wire, first)
    assert kinds_modes(store, result.run_id) == [
        ("truncated", 200, "native"),
        (None, 200, "native"),
    ]
    error, answer_ = cells(store.attempts(result.run_id), "error", "answer")[0]
    assert "token cap" in error and answer_ and not answer_.endswith("}")  # cut mid-JSON


@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize("wire", NATIVE_WIRES)
async def test_a_schema_violation_over_http_is_fixed_on_retry(
    wire: str, stream: bool, server: Callable[..., ChaosServer], ws: Path, store: hn.Store
) -> None:
    srv = server(hn.chaos.echo_responder)
    srv.push(Fault.schema_violation())  # the first required field ("name") left out
    contract = hn.TaskContract("Which city?", ws, output=City)
    result = await hn.run(contract, wire_provider(wire, srv, stream), store=store)
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    assert isinstance(result.output, City) and result.output_mode == "native"
    assert kinds_modes(store, result.run_id) == [
        ("schema_violation", 200, "native"),
        (None, 200, "native"),
    ]
    error, answer_ = cells(store.attempts(result.run_id), "error", "answer")[0]
    assert error == "name: Field required" and json.loads(answer_) == {"population": 0}
    feedback = json.dumps(srv.requests[1].messages[-1])
    assert "name: Field required" in feedback


@pytest.mark.parametrize("stream", STREAMED)
@pytest.mark.parametrize("wire", NATIVE_WIRES)
async def test_a_schema_rejected_natively_falls_back_to_tool_once(
    wire: str, stream: bool, server: Callable[..., ChaosServer], ws: Path, store: hn.Store
) -> None:
    srv = server(hn.chaos.echo_responder)
    srv.push(Fault.schema_rejected())
    events: list[hn.RunEvent] = []
    contract = hn.TaskContract("Which city?", ws, output=City)
    provider = wire_provider(wire, srv, stream)
    result = await hn.run(contract, provider, store=store, on_event=events.append)
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    assert isinstance(result.output, City) and result.output_mode == "tool"
    first, second = srv.requests
    assert first.output_schema is not None and "final_answer" not in first.tools
    assert second.output_schema is None and "final_answer" in second.tools
    assert kinds_modes(store, result.run_id) == [("request", 400, "native"), (None, 200, "tool")]
    assert cells(store.runs(result.run_id), "output_mode") == [("tool",)]
    said = [e for e in events if e.kind == "retry"]
    assert [e.error_kind for e in said] == ["request: output_mode native -> tool"]  # type: ignore[attr-defined]
