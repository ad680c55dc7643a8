"""``hn.ask`` / ``hn.ask_sync``: one typed answer, no agent loop, on both faces' providers
(OpenAI chat and responses, Anthropic, Gemini, a local OpenAI-compatible server) over the
chaos server, recorded like a run."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pydantic
import pytest

import harnessnb as hn
from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply
from harnessnb.providers import _http

KEY = "sk-test-ask-0123456789abcdef"

PROVIDERS: dict[str, Callable[[ChaosServer], Any]] = {
    "openai-chat": lambda s: hn.OpenAI("gpt-test", api_key=KEY, base_url=s.openai_url),
    "openai-responses": lambda s: hn.OpenAI(
        "gpt-test", api_key=KEY, base_url=s.openai_url, api="responses"
    ),
    "anthropic": lambda s: hn.Anthropic("claude-test", api_key=KEY, base_url=s.anthropic_url),
    "gemini": lambda s: hn.Gemini("gemini-test", api_key=KEY, base_url=s.gemini_url),
    "local": lambda s: hn.OpenAI("llama", name="local", api_key="none", base_url=s.openai_url),
}


class Weather(pydantic.BaseModel):
    city: str
    celsius: float


@dataclasses.dataclass
class Count:
    n: int


def answers(request: ChaosRequest) -> Reply:
    """A model that answers as each mode's request asks: through final_answer when
    offered it, the bare JSON as the message's text when asked natively (what every
    wire's structured output returns), a fenced block when the schema is in the prompt;
    a first answer with a wrong type, a right one once told so."""
    told = "does not match the schema" in str(request.messages[-1])
    args = {"city": "Oslo", "celsius": 3.5 if told else "cold"}
    if "final_answer" in request.tools:
        return Reply(tool_calls=[{"name": "final_answer", "arguments": args}])
    if request.output_schema is not None:
        return Reply(text=json.dumps(args))
    return Reply(text=f"```json\n{json.dumps(args)}\n```")


@pytest.fixture
def srv() -> Iterator[ChaosServer]:
    with ChaosServer(responder=answers) as server:
        yield server


@pytest.fixture(autouse=True)
async def _clients() -> AsyncIterator[None]:
    yield
    await _http.aclose_client()


def kinds(store: hn.Store) -> list[Any]:
    frame = store.sql("SELECT kind FROM attempts ORDER BY attempt")
    return [None if k != k else k for k in frame["kind"].astype(object)]


@pytest.mark.parametrize("mode", ["auto", "tool"])
@pytest.mark.parametrize("face", ["async", "sync"])
@pytest.mark.parametrize("name", list(PROVIDERS))
async def test_ask_returns_the_typed_answer_after_one_fix(
    name: str, face: str, mode: str, srv: ChaosServer, store: hn.Store
) -> None:
    provider = PROVIDERS[name](srv)
    kw: dict[str, Any] = {"output": Weather, "output_mode": mode, "store": store}
    if face == "async":
        got = await hn.ask(provider, "Weather in Oslo?", **kw)
    else:
        got = await asyncio.to_thread(hn.ask_sync, provider, "Weather in Oslo?", **kw)
    assert got == Weather(city="Oslo", celsius=3.5)
    first, second = srv.requests
    if mode == "tool":
        assert first.tools == ["final_answer"]  # no workspace tools: the answer's alone
        assert first.output_schema is None
    else:  # auto: every wire here answers natively, and no tool is offered
        assert first.tools == [] and second.tools == []
        assert first.output_schema is not None and second.output_schema is not None
    assert "Weather in Oslo?" in str(first.messages)
    assert "celsius: Input should be a valid number" in str(second.messages[-1])
    assert kinds(store) == ["schema_violation", None]
    runs = store.runs()
    assert list(runs["outcome"]) == ["finished"] and list(runs["task"]) == ["Weather in Oslo?"]


async def test_ask_needs_no_workspace_and_leaves_none(
    srv: ChaosServer, store: hn.Store, tmp_path: Path
) -> None:
    await hn.ask(PROVIDERS["openai-chat"](srv), "Weather?", output=Weather, store=store)
    (folder,) = store.runs()["workspace"]
    assert "harnessnb-ask-" in folder and not Path(folder).exists()


async def test_ask_raises_the_provider_error_past_its_retries(
    srv: ChaosServer, store: hn.Store
) -> None:
    srv.set_default(Fault.status(401))
    with pytest.raises(hn.ProviderError) as info:
        await hn.ask(PROVIDERS["anthropic"](srv), "Weather?", output=Weather, store=store)
    assert info.value.kind is hn.ProviderErrorKind.AUTH
    assert list(store.runs()["outcome"]) == ["escalated_terminal"]


def test_ask_sync_with_a_dict_schema_returns_the_json(srv: ChaosServer, store: hn.Store) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "celsius": {"type": "number"}},
        "required": ["city", "celsius"],
    }
    got = hn.ask_sync(PROVIDERS["gemini"](srv), "Weather?", output=schema, store=store)
    assert got == {"city": "Oslo", "celsius": 3.5}


def test_ask_refuses_a_native_mode_the_provider_lacks() -> None:
    provider = hn.ScriptedProvider(['{"n": 1}'])  # answers in no JSON Schema natively
    with pytest.raises(hn.ConfigError, match="native"):
        hn.ask_sync(provider, "x", output=Count, output_mode="native")
    assert provider.calls == []
