"""OpenTelemetry spans of stored runs (``store/_traces.py``): runs made on the chaos
server or a scripted provider into real store files, exported to the SDK's in-memory
exporter: span names, kinds, parents, attributes, ``error.type`` and times equal to the
rows' for a run with retries, a fallback, a tool refusal, a stall, a cancel, a typed
answer, a killed run; content only when asked, scrubbed; metrics; a sweep's runs under
one span; a combined store of shards."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pydantic
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import harnessnb as hn
from harnessnb import FakeClock
from harnessnb.chaos import ChaosServer, Fault
from harnessnb.providers import _http
from harnessnb.rules._secrets import REDACTED, register
from harnessnb.store._traces import export_run, sweep_span
from tests.files_helpers import folder

ROOT = Path(__file__).resolve().parent.parent
READ = {"tool": "read_file", "args": {"path": "a.txt"}}


class City(pydantic.BaseModel):
    name: str
    population: int


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return folder(tmp_path / "ws", {"a.txt": "alpha\n"})


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tp(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


@pytest.fixture(autouse=True)
async def _clients() -> Any:
    yield
    await _http.aclose_client()


def contract(ws: Path, **kw: Any) -> hn.TaskContract:
    return hn.TaskContract("summarise a.txt", ws, **kw)


def openai_at(srv: ChaosServer, model: str = "m") -> hn.OpenAI:
    return hn.OpenAI(model, api_key="sk-test", base_url=srv.openai_url)


def exported(store: hn.Store, run_id: str, tp: TracerProvider, exporter: InMemorySpanExporter,
             **kw: Any) -> tuple[ReadableSpan, list[ReadableSpan], list[ReadableSpan]]:  # fmt: skip
    """Export one run; its agent span, its chat spans and its tool spans (each checked
    to be the agent's child in its trace)."""
    exporter.clear()
    export_run(store, run_id, tp, **kw)
    spans = list(exporter.get_finished_spans())
    (agent,) = [s for s in spans if s.name.startswith("invoke_agent ")]
    for span in spans:
        if span is not agent:
            assert span.parent is not None and span.parent.span_id == agent.context.span_id
            assert span.context.trace_id == agent.context.trace_id
    chats = [s for s in spans if s.name.startswith("chat")]
    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    assert len(chats) + len(tools) + 1 == len(spans)
    return agent, chats, tools


def ns(value: Any) -> int:
    """A frame's timestamp as nanoseconds since the epoch."""
    return int(pd.Timestamp(value).value)


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: (None if not isinstance(v, list) and pd.isna(v) else v) for k, v in r.items()}
            for r in frame.to_dict("records")]  # fmt: skip


def check_times(chats: list[ReadableSpan], store: hn.Store, run_id: str) -> None:
    """Each chat span starts at its attempt's start and lasts its latency, exactly."""
    rows = records(store.attempts(run_id).sort_values(["started_at", "attempt"]))
    assert len(rows) == len(chats)
    for span, row in zip(chats, rows, strict=True):
        assert (span.attributes or {})["harnessnb.attempt"] == row["attempt"]
        assert span.start_time == ns(row["started_at"])
        assert span.end_time == ns(row["started_at"]) + round(row["latency_ms"] * 1e6)


# ------------------------------------------------------------------ retries


async def test_a_429_then_success_is_two_chat_spans_the_first_failed_with_a_retry_event(
    ws: Path, tmp_path: Path, tp: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    store = hn.Store(tmp_path / "runs.duckdb")
    with ChaosServer() as srv:
        srv.push(Fault.status(429, retry_after="1"))
        result = await hn.run(contract(ws), openai_at(srv), store=store, clock=FakeClock())
        port = int(srv.url.rsplit(":", 1)[1])
    agent, chats, tools = exported(store, result.run_id, tp, exporter)
    assert (agent.name, agent.kind, agent.parent) == ("invoke_agent harnessnb", SpanKind.INTERNAL,
                                                       None)  # fmt: skip
    assert [(s.name, s.kind) for s in chats] == [("chat m", SpanKind.CLIENT)] * 2 and tools == []
    failed, ok = (dict(s.attributes or {}) for s in chats)
    assert failed["error.type"] == "rate_limited" and failed["http.response.status_code"] == 429
    assert failed["harnessnb.retry_after_s"] == 1.0 and failed["harnessnb.attempt"] == 1
    assert "gen_ai.response.model" not in failed
    assert chats[0].status.status_code is StatusCode.ERROR
    (retry,) = chats[0].events
    assert retry.name == "harnessnb.retry" and retry.timestamp == chats[0].end_time
    assert retry.attributes is not None and retry.attributes["harnessnb.retry_after_s"] == 1.0
    assert retry.attributes["error.type"] == "rate_limited"
    assert "error.type" not in ok and chats[1].status.status_code is StatusCode.UNSET
    row = records(store.attempts(result.run_id))[-1]
    assert ok["gen_ai.operation.name"] == "chat" and ok["gen_ai.provider.name"] == "openai"
    assert (ok["gen_ai.request.model"], ok["gen_ai.response.model"]) == ("m", "m")
    assert ok["gen_ai.usage.input_tokens"] == row["input_tokens"]
    assert ok["gen_ai.usage.output_tokens"] == row["output_tokens"]
    if row["ttft_ms"] is not None:
        assert ok["gen_ai.response.time_to_first_chunk"] == row["ttft_ms"] / 1000
    assert (ok["server.address"], ok["server.port"]) == ("127.0.0.1", port)
    assert ok["http.response.status_code"] == 200 and ok["harnessnb.attempt"] == 2
    check_times(chats, store, result.run_id)
    run = store.runs(result.run_id).iloc[0]
    attrs = dict(agent.attributes or {})
    assert attrs["gen_ai.conversation.id"] == result.run_id
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["harnessnb.outcome"] == "finished" and "error.type" not in attrs
    assert attrs["harnessnb.budget.max_steps"] == 12
    assert (agent.start_time, agent.end_time) == (ns(run["started_at"]), ns(run["finished_at"]))
    assert ("operation.cost" in attrs) == (not pd.isna(run["cost_usd"]))
    store.close()


async def test_a_fallback_is_a_chat_span_per_provider_and_a_fallback_event(
    ws: Path, tmp_path: Path, tp: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    store = hn.Store(tmp_path / "runs.duckdb")
    with ChaosServer() as bad, ChaosServer() as good:
        bad.set_default(Fault.status(503))
        provider = hn.Fallback(
            hn.OpenAI("bad-model", api_key="sk-test", base_url=bad.openai_url),
            hn.Anthropic("good-model", api_key="k", base_url=good.anthropic_url),
        )
        result = await hn.run(contract(ws), provider, store=store)
    assert result.outcome is hn.RunOutcome.FINISHED
    agent, chats, _ = exported(store, result.run_id, tp, exporter)
    assert "gen_ai.provider.name" not in (agent.attributes or {})  # a Fallback is none
    assert str((agent.attributes or {})["harnessnb.provider"]).startswith("fallback(")
    assert [s.name for s in chats] == ["chat bad-model", "chat good-model"]
    first, second = (dict(s.attributes or {}) for s in chats)
    assert (first["gen_ai.provider.name"], first["error.type"]) == ("openai", "server")
    assert first["harnessnb.fell_back"] is True and first["http.response.status_code"] == 503
    assert second["gen_ai.provider.name"] == "anthropic" and "error.type" not in second
    (event,) = chats[0].events
    assert event.name == "harnessnb.fallback"
    assert (event.attributes or {})["harnessnb.next_provider"] == "anthropic"
    check_times(chats, store, result.run_id)
    store.close()


# ------------------------------------------------------------ tools, stalls


async def test_a_refused_tool_call_is_a_failed_execute_tool_span_with_its_times(
    ws: Path, tmp_path: Path, tp: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    store = hn.Store(tmp_path / "runs.duckdb")
    write = {"tool": "write_file", "args": {"path": "OUT.md", "content": "x"}}
    # The default policy asks before a write; with no approver it is refused.
    result = await hn.run(contract(ws), hn.ScriptedProvider([write, "done"]), store=store)
    _, chats, tools = exported(store, result.run_id, tp, exporter)
    (tool,) = tools
    attrs = dict(tool.attributes or {})
    assert (tool.name, tool.kind) == ("execute_tool write_file", SpanKind.INTERNAL)
    assert attrs["gen_ai.tool.name"] == "write_file" and attrs["gen_ai.tool.type"] == "function"
    assert attrs["error.type"] == "refused" and attrs["harnessnb.tool.status"] == "refused"
    assert attrs["harnessnb.tool.effect"] == "write" and tool.status.status_code is StatusCode.ERROR
    assert [e.name for e in tool.events] == ["harnessnb.refused"]
    # The model's own id of the call, as the step's checkpoint holds it.
    state = store.checkpoints(result.run_id)[0]["state"]
    (asked,) = [m for m in state["messages"] if m.get("tool_calls")]
    assert attrs["gen_ai.tool.call.id"] == asked["tool_calls"][0]["id"]
    # It began when its step's answer came and ended at its row's time.
    row = records(store.tool_calls(result.run_id))[0]
    assert (tool.start_time, tool.end_time) == (chats[0].end_time, ns(row["at"]))
    assert "gen_ai.tool.call.arguments" not in attrs  # content only when asked
    store.close()


async def test_an_approval_deferred_is_an_event_and_the_waiting_run_no_error(
    ws: Path, tmp_path: Path, tp: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    store = hn.Store(tmp_path / "runs.duckdb")
    write = {"tool": "write_file", "args": {"path": "OUT.md", "content": "x"}}
    result = await hn.run(contract(ws), hn.ScriptedProvider([write, "done"]), store=store,
                          approver=lambda request: hn.Decision.defer("later"))  # fmt: skip
    assert result.outcome is hn.RunOutcome.AWAITING_APPROVAL
    agent, _, tools = exported(store, result.run_id, tp, exporter)
    assert (agent.attributes or {})["harnessnb.outcome"] == "awaiting_approval"
    assert "error.type" not in (agent.attributes or {})
    assert agent.status.status_code is StatusCode.UNSET
    (tool,) = tools
    assert (tool.attributes or {})["harnessnb.tool.status"] == "deferred"
    assert "error.type" not in (tool.attributes or {})
    assert [e.name for e in tool.events] == ["harnessnb.approval_deferred"]
    store.close()


async def test_an_approval_granted_or_denied_is_a_marker_and_an_event_of_the_run(
    ws: Path, tmp_path: Path, tp: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A granted call's row reads as one the policy allowed: the approver's answer is a
    marker (``approval_granted``/``approval_denied``), an event on the run's span; its
    detail (the tool, the person's reason) only with content."""
    store = hn.Store(tmp_path / "runs.duckdb")
    first = {"tool": "write_file", "args": {"path": "A.md", "content": "x"}}
    second = {"tool": "write_file", "args": {"path": "B.md", "content": "y"}}
    answers = iter([hn.Decision.approve(), hn.Decision.deny("not B")])
    result = await hn.run(contract(ws), hn.ScriptedProvider([first, second, "done"]),
                          store=store, approver=lambda request: next(answers))  # fmt: skip
    assert (ws / "A.md").exists() and not (ws / "B.md").exists()
    marks = records(store.markers(result.run_id))
    assert [(m["kind"], m["detail"]) for m in marks] == [
        ("approval_granted", "write_file"), ("approval_denied", "write_file: not B")]  # fmt: skip
    agent, _, _ = exported(store, result.run_id, tp, exporter)
    events = [(e.name, dict(e.attributes or {})) for e in agent.events]
    assert events == [("harnessnb.approval_granted", {}), ("harnessnb.approval_denied", {})]
    assert [e.timestamp for e in agent.events] == sorted(e.timestamp for e in agent.events)
    exporter.clear()
    agent, _, _ = exported(store, result.run_id, tp, exporter, include_content=True)
    assert [dict(e.attributes or {}).get("harnessnb.detail") for e in agent.events] == [
        "write_file", "write_file: not B"]  # fmt: skip
    store.close()


async def test_a_stall_is_an_event_of_the_run_and_its_outcome_the_error_type(
    ws: Path, tmp_path: Path, tp: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    store = hn.Store(tmp_path / "runs.duckdb")
    result = await hn.run(contract(ws), hn.ScriptedProvider([READ] * 12), store=store)
    assert result.outcome is hn.RunOutcome.STALLED
    agent, chats, tools = exported(store, result.run_id, tp, exporter)
    attrs = dict(agent.attributes or {})
    assert attrs["harnessnb.outcome"] == "stalled" and attrs["error.type"] == "stalled"
    assert agent.status.status_code is StatusCode.ERROR
    stalls = records(store.stalls(result.run_id).sort_values("at"))
    events = [e for e in agent.events if e.name == "harnessnb.stall"]
    assert [(e.attributes or {}).get("harnessnb.stall.action") for e in events] == [
        "replan", "stalled"]  # fmt: skip
    assert [e.timestamp for e in events] == [ns(s["at"]) for s in stalls]
    assert all("harnessnb.stall.detail" not in (e.attributes or {}) for e in events)
    assert len(chats) == 6 and len(tools) == 6
    # Calls run in turn: each begins when its step's answer came.
    assert [t.start_time for t in tools] == [c.end_time for c in chats]
    store.close()


async def test_an_mcp_tool_call_names_its_server_and_its_failure_kind(
    ws: Path, tmp_path: Path, tp: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    store = hn.Store(tmp_path / "runs.duckdb")
    hostile = str(ROOT / "tests" / "mcp" / "hostile_server.py")
    server = hn.MCPServer.stdio(sys.executable, args=[hostile, "ok"], name="hostile",
                                timeout_s=20.0)  # fmt: skip
    calls = [{"tool": "echo", "args": {"text": "hi"}}, {"tool": "fail", "args": {"why": "no"}}]
    result = await hn.run(contract(ws), hn.ScriptedProvider([*calls, "done"]), store=store,
                          approver=hn.ApproveAll(), mcp=[server])  # fmt: skip
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    _, _, tools = exported(store, result.run_id, tp, exporter)
    echo, fail = (dict(t.attributes or {}) for t in tools)
    assert [t.name for t in tools] == ["execute_tool echo", "execute_tool fail"]
    assert (echo["gen_ai.tool.type"], echo["harnessnb.mcp.server"]) == ("extension", "hostile")
    assert "error.type" not in echo and tools[0].status.status_code is StatusCode.UNSET
    assert (fail["error.type"], fail["harnessnb.tool.status"]) == ("tool_error", "error")
    assert tools[1].status.status_code is StatusCode.ERROR
    store.close()


# ------------------------------------------------------------------ cancel


async def test_a_cancelled_run_and_the_attempt_it_cut_off(
    ws: Path, tmp_path: Path, tp: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    store = hn.Store(tmp_path / "runs.duckdb")
    with ChaosServer() as srv:
        srv.set_default(Fault.hang(seconds=10))
        task = asyncio.ensure_future(hn.run(contract(ws), openai_at(srv), store=store))
        deadline = time.monotonic() + 30
        while not srv.requests:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    (run_id,) = store.runs()["run_id"].tolist()
    agent, chats, _ = exported(store, run_id, tp, exporter)
    attrs = dict(agent.attributes or {})
    assert attrs["harnessnb.outcome"] == "cancelled" and attrs["error.type"] == "cancelled"
    (cut,) = chats
    cut_attrs = dict(cut.attributes or {})
    assert cut_attrs["harnessnb.cancelled"] is True and cut_attrs["error.type"] == "cancelled"
    assert "gen_ai.response.model" not in cut_attrs
    assert agent.end_time == ns(store.runs(run_id)["finished_at"].iloc[0])
    store.close()


# ------------------------------------------------------------- typed answers


async def test_a_typed_run_names_its_mode_and_a_violation_is_a_failed_chat_span(
    ws: Path, tmp_path: Path, tp: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    store = hn.Store(tmp_path / "runs.duckdb")
    bad = {"tool": "final_answer", "args": {"name": "Oslo", "population": "many"}}
    good = {"tool": "final_answer", "args": {"name": "Oslo", "population": 700000}}
    c = contract(ws, output=City, output_mode="tool")
    result = await hn.run(c, hn.ScriptedProvider([bad, good]), store=store)
    assert result.output == City(name="Oslo", population=700000)
    # Without content, no word of the model's answer: the violation's reasons quote it.
    _, chats, _ = exported(store, result.run_id, tp, exporter)
    assert chats[0].status.description == "schema_violation"
    assert "many" not in repr([(dict(s.attributes or {}), s.events) for s in chats])
    agent, chats, _ = exported(store, result.run_id, tp, exporter, include_content=True)
    assert chats[0].status.description is not None and "population" in chats[0].status.description
    attrs = dict(agent.attributes or {})
    assert attrs["harnessnb.output_mode"] == "tool" and attrs["gen_ai.output.type"] == "json"
    assert json.loads(str(attrs["gen_ai.output.messages"]))[0]["parts"][0]["content"] == (
        store.runs(result.run_id)["output"].iloc[0])  # fmt: skip
    first, second = (dict(s.attributes or {}) for s in chats)
    assert first["error.type"] == "schema_violation" and first["harnessnb.output_mode"] == "tool"
    assert first["gen_ai.response.model"] == "scripted"  # an answer came, unusable
    assert "many" in str(first["gen_ai.output.messages"])
    assert [e.name for e in chats[0].events] == ["harnessnb.retry"]
    assert "error.type" not in second and second["harnessnb.output_mode"] == "tool"
    store.close()


# ------------------------------------------------------------------ content


async def test_content_only_when_asked_and_scrubbed_of_a_key_known_later(
    ws: Path, tmp_path: Path, tp: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    key = "sk-traces-late-" + "k" * 24  # known to this process only after the run
    store = hn.Store(tmp_path / "runs.duckdb")
    task = f"read a.txt; the token is {key}"
    result = await hn.run(hn.TaskContract(task, ws), hn.ScriptedProvider([READ, "done"]),
                          store=store)  # fmt: skip
    _, chats, tools = exported(store, result.run_id, tp, exporter)
    for span in [*chats, *tools]:
        assert not {"gen_ai.input.messages", "gen_ai.output.messages",
                    "gen_ai.system_instructions", "gen_ai.tool.call.result"} & set(
                        span.attributes or {})  # fmt: skip
    register(key)
    agent, chats, tools = exported(store, result.run_id, tp, exporter, include_content=True)
    sent = json.loads(str((chats[1].attributes or {})["gen_ai.input.messages"]))
    assert [m["role"] for m in sent] == ["user", "assistant", "tool"]
    assert sent[1]["parts"][0]["type"] == "tool_call"
    assert sent[2]["parts"][0]["response"] == "alpha\n"
    answer = json.loads(str((chats[1].attributes or {})["gen_ai.output.messages"]))
    assert answer == [{"role": "assistant", "parts": [{"type": "text", "content": "done"}],
                       "finish_reason": "stop"}]  # fmt: skip
    assert (tools[0].attributes or {})["gen_ai.tool.call.result"] == "alpha\n"
    everything = json.dumps([dict(s.attributes or {}) for s in [agent, *chats, *tools]])
    assert key not in everything and REDACTED in everything
    store.close()


# ------------------------------------------------------------------ metrics


async def test_metrics_of_each_attempt_with_a_meter_provider(
    ws: Path, tmp_path: Path, tp: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    store = hn.Store(tmp_path / "runs.duckdb")
    with ChaosServer() as srv:
        srv.push(Fault.status(503))
        result = await hn.run(contract(ws), openai_at(srv), store=store, clock=FakeClock())
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    export_run(store, result.run_id, tp, meter_provider=meters)
    data = reader.get_metrics_data()
    assert data is not None
    metrics = {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics
               for m in sm.metrics}  # fmt: skip
    duration = metrics["gen_ai.client.operation.duration"]
    by_error = {(p.attributes or {}).get("error.type"): p.count for p in duration.data.data_points}
    assert by_error == {"server": 1, None: 1} and duration.unit == "s"
    usage = metrics["gen_ai.client.token.usage"].data.data_points
    rows = records(store.attempts(result.run_id))
    assert {(p.attributes or {})["gen_ai.token.type"]: p.sum for p in usage} == {
        "input": rows[-1]["input_tokens"], "output": rows[-1]["output_tokens"]}  # fmt: skip
    meters.shutdown()
    store.close()


# ------------------------------------------------------ store, sweeps, shards


async def test_export_traces_nests_a_sweeps_runs_under_one_workflow_span(
    tmp_path: Path, tp: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    store = hn.Store(tmp_path / "runs.duckdb")
    ws = folder(tmp_path / "sweep-ws", {"a.txt": "alpha\n"})
    swept = await hn.sweep(["one", "two"], {"s": hn.ScriptedProvider(["done"] * 4)},
                           workspace=ws, store=store, sweep_id="sw1")  # fmt: skip
    alone = await hn.run(contract(ws), hn.ScriptedProvider(["ok"]), store=store)
    assert store.export_traces(tp, sweep="sw1") == 2
    spans = exporter.get_finished_spans()
    (workflow,) = [s for s in spans if s.name == "invoke_workflow sweep sw1"]
    agents = [s for s in spans if s.name.startswith("invoke_agent")]
    assert len(agents) == 2 and all(
        a.parent is not None and a.parent.span_id == workflow.context.span_id for a in agents)
    assert {(a.attributes or {})["harnessnb.sweep_id"] for a in agents} == {swept.sweep_id}
    assert (workflow.attributes or {})["gen_ai.operation.name"] == "invoke_workflow"
    assert workflow.start_time == min(a.start_time or 0 for a in agents)
    assert workflow.end_time == max(a.end_time or 0 for a in agents)
    exporter.clear()
    assert store.export_traces(tp, run_ids=[alone.run_id]) == 1
    assert [s.name for s in exporter.get_finished_spans()][-1] == "invoke_agent harnessnb"
    exporter.clear()
    assert store.export_traces(tp) == 3
    with pytest.raises(hn.StoreError) as missing:
        export_run(store, "run_nope", tp)
    assert missing.value.kind == "missing"
    with pytest.raises(hn.StoreError, match="run_nope") as lacking:
        store.export_traces(tp, run_ids=[alone.run_id, "run_nope"])
    assert lacking.value.kind == "missing"
    store.close()


def shape(spans: Any) -> list[tuple[Any, ...]]:
    """Spans without their ids: name, kind, times, attributes, events, status."""
    return sorted(
        (s.name, s.kind, s.start_time, s.end_time, sorted((s.attributes or {}).items()),
         [(e.name, e.timestamp, sorted((e.attributes or {}).items())) for e in s.events],
         s.status.status_code, s.parent is None)
        for s in spans
    )  # fmt: skip


async def test_a_combined_store_of_shards_exports_what_each_shard_does(
    ws: Path, tmp_path: Path, tp: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    for name in ("a", "b"):
        with hn.Store(shards / f"{name}.duckdb") as shard:
            await hn.run(contract(ws), hn.ScriptedProvider([READ, "done"]), store=shard)
    alone: list[Any] = []
    for name in ("a", "b"):
        with hn.Store(shards / f"{name}.duckdb") as shard:
            exporter.clear()
            assert shard.export_traces(tp) == 1
            alone += exporter.get_finished_spans()
    exporter.clear()
    assert hn.Store.combine(shards).export_traces(tp) == 2
    assert shape(exporter.get_finished_spans()) == shape(alone)


def test_sweep_span_is_the_parent_given_to_export_run(
    ws: Path, tmp_path: Path, tp: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    with hn.Store(tmp_path / "runs.duckdb") as store:
        result = hn.run_sync(contract(ws), hn.ScriptedProvider(["ok"]), store=store)
        with sweep_span(tp, "live", started_at=1_700_000_000.0) as ctx:
            export_run(store, result.run_id, tp, parent=ctx)
            assert len(exporter.get_finished_spans()) == 2  # flushed at the run's end
    _, agent, workflow = exporter.get_finished_spans()  # ended in turn: chat, run, sweep
    assert workflow.name == "invoke_workflow sweep live"
    assert workflow.start_time == 1_700_000_000 * 10**9
    assert agent.parent is not None and agent.parent.span_id == workflow.context.span_id


def test_a_sweep_that_raises_ends_its_span_as_an_error_and_flushed(
    tp: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    with pytest.raises(KeyboardInterrupt), sweep_span(tp, "broken"):
        raise KeyboardInterrupt
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "KeyboardInterrupt"


# -------------------------------------------------- a killed run, no otel


def test_a_run_killed_mid_way_is_exported_later_from_its_file(
    tmp_path: Path, tp: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    ws = folder(tmp_path / "ws", {"a.txt": "a\n"})
    path = tmp_path / "runs.duckdb"
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    env.update(PYTHONPATH=str(ROOT), HARNESSNB_PROVIDER="")
    with ChaosServer() as srv:
        srv.set_default(Fault.status(503, retry_after="30"))
        proc = subprocess.Popen(
            [sys.executable, "-m", "harnessnb", "run", "list the files", "--workspace", str(ws),
             "--store", str(path), "--provider", "local", "--base-url", srv.openai_url,
             "--model", "m"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while not srv.requests:
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.02)
            time.sleep(0.5)  # the attempt's row is written before the 30 s wait
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
    with hn.Store(path) as store:
        (run_id,) = store.runs()["run_id"].tolist()
        agent, chats, _ = exported(store, run_id, tp, exporter)
        attrs = dict(agent.attributes or {})
        assert "harnessnb.outcome" not in attrs and "error.type" not in attrs
        (chat,) = chats
        assert (chat.attributes or {})["error.type"] == "server"
        assert chat.events == ()  # no attempt followed it
        assert agent.end_time is not None and chat.end_time is not None
        assert agent.end_time >= chat.end_time


def test_rows_without_a_time_are_placed_at_the_runs_start_not_lost(
    ws: Path, tmp_path: Path, tp: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    path = tmp_path / "runs.duckdb"
    with hn.Store(path) as store:
        result = hn.run_sync(contract(ws), hn.ScriptedProvider([READ, "done"]), store=store)
    con = duckdb.connect(str(path))  # an old or hand-made file: times missing
    con.execute("UPDATE attempts SET started_at = NULL, latency_ms = NULL WHERE step = 1")
    con.execute('UPDATE tool_calls SET "at" = NULL')
    con.close()
    with hn.Store(path) as store:
        agent, chats, tools = exported(store, result.run_id, tp, exporter)
    assert len(chats) == 2 and len(tools) == 1
    assert chats[0].start_time == chats[0].end_time == agent.start_time
    assert tools[0].start_time == tools[0].end_time == agent.start_time


def test_import_harnessnb_loads_no_opentelemetry_and_without_it_export_says_how() -> None:
    code = (
        "import sys\n"
        "import harnessnb, harnessnb.store._traces\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')]\n"
        "sys.modules['opentelemetry'] = None\n"
        "from harnessnb.store._traces import export_run\n"
        "try:\n"
        "    export_run(harnessnb.Store(':memory:'), 'r', object())\n"
        "except harnessnb.ConfigError as e:\n"
        "    print(e)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "pip install 'harnessnb[otel]'" in done.stdout


async def test_a_runs_sums_read_for_its_spans_are_the_runs_views(ws: Path, tmp_path: Path) -> None:
    """read_run takes a run's own row and makes the ``runs`` view's sums (steps, tokens,
    updated_at, cost_usd) from the rows it reads anyway: they equal the view's, for a run
    with no attempt, one priced, one with an unpriced attempt that used tokens, and one
    whose tokens were not reported (no price needed)."""
    from harnessnb.store._trace_rows import read_run
    from harnessnb.store._writer import store_writer
    from harnessnb.store._writes import add_attempts

    store = hn.Store(tmp_path / "runs.duckdb")
    contract = hn.TaskContract("read a.txt", ws, max_steps=3, stall=hn.StallPolicy(window=0))
    runs = [
        (await hn.run(contract, hn.ScriptedProvider([READ] * 3), store=store)).run_id
        for _ in range(4)
    ]
    writer = store_writer(store)
    now = time.time()
    priced = {"input_tokens": 10, "output_tokens": 5, "cost_usd": 0.25, "started_at": now}
    unpriced = {"input_tokens": 10, "output_tokens": 5, "cost_usd": None, "started_at": now}
    silent = {"input_tokens": None, "output_tokens": None, "cost_usd": None, "started_at": now}
    writer.write(add_attempts(runs[1], [{**priced, "step": 1, "attempt": 9}]))
    writer.write(add_attempts(runs[2], [{**priced, "step": 1, "attempt": 9}]))
    writer.write(add_attempts(runs[2], [{**unpriced, "step": 2, "attempt": 9}]))
    writer.write(add_attempts(runs[3], [{**silent, "step": 1, "attempt": 9}]))
    columns = ("steps", "tokens", "updated_at", "cost_usd")
    with store._connection() as con:
        view = {
            row[0]: dict(zip(columns, row[1:], strict=True))
            for row in con.execute(f"SELECT run_id, {', '.join(columns)} FROM runs").fetchall()
        }
    for run_id in runs:
        read = read_run(store, run_id).run
        expected = view[run_id]
        assert {c: read[c] for c in columns[:3]} == {c: expected[c] for c in columns[:3]}
        assert read["cost_usd"] == pytest.approx(expected["cost_usd"]), run_id
    assert view[runs[2]]["cost_usd"] is None and view[runs[1]]["cost_usd"] is not None
    store.close()
