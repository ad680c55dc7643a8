"""Typed run events: one class per kind, delivered by real runs with their fields; the
deprecated ``.data`` dict with the old key names."""

from __future__ import annotations

import dataclasses
import typing
import warnings
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply
from harnessnb.events import (
    AnyEvent,
    ApprovalDecidedEvent,
    ApprovalRequestedEvent,
    DeltaEvent,
    EventKind,
    FellBackEvent,
    FinishedEvent,
    RefusedEvent,
    ReplanEvent,
    RetryEvent,
    RunEvent,
    ShrunkEvent,
    StalledEvent,
    StartedEvent,
    StepEvent,
    ToolCallEvent,
)
from harnessnb.rules import _events

K = hn.ProviderErrorKind


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    return root


def contract(ws: Path, **kw: Any) -> hn.TaskContract:
    return hn.TaskContract("read a.txt", ws, **kw)


def of(events: list[AnyEvent], kind: type[Any]) -> list[Any]:
    return [e for e in events if isinstance(e, kind)]


def read_then_answer(request: ChaosRequest) -> Reply:
    """A tool call first; once its result is in the conversation, the answer."""
    if any(m.get("role") in ("tool", "user") and _has_result(m) for m in request.messages):
        return Reply(text="alpha is what a.txt says")
    return Reply(tool_calls=[{"name": "read_file", "arguments": {"path": "a.txt"}}])


def _has_result(message: dict[str, Any]) -> bool:
    content = message.get("content")
    if message.get("role") == "tool":
        return True
    return isinstance(content, list) and any(
        isinstance(part, dict) and part.get("type") == "tool_result" for part in content
    )


# ------------------------------------------------------------------ the classes


def test_every_kind_has_one_class_and_the_union_holds_them_all() -> None:
    classes = typing.get_args(AnyEvent)
    assert sorted(c.kind for c in classes) == sorted(typing.get_args(EventKind))
    for cls in classes:
        assert issubclass(cls, RunEvent)
        assert dataclasses.fields(cls)[:3] == dataclasses.fields(RunEvent)  # run_id, step, at
    step = StepEvent(tokens=1, tool_calls=0, provider=None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        step.tokens = 2  # type: ignore[misc]


def test_seconds_and_dollars_are_named_by_their_unit() -> None:
    names = {f.name for cls in typing.get_args(AnyEvent) for f in dataclasses.fields(cls)}
    assert {"delay_s", "retry_after_s", "cost_usd"} <= names
    assert not {"delay", "retry_after", "cost", "kind"} & names  # kind is the class's


# ------------------------------------------------------------------ runs deliver them


async def test_a_run_over_http_delivers_started_delta_tool_call_step_and_finished(
    ws: Path, store: hn.Store
) -> None:
    events: list[AnyEvent] = []
    with ChaosServer(responder=read_then_answer) as srv:
        provider = hn.OpenAI("m-1", api_key="k", base_url=srv.openai_url)
        result = await hn.run(contract(ws, max_steps=5), provider, store=store,
                              on_event=events.append)  # fmt: skip
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    assert {e.run_id for e in events} == {result.run_id}
    assert [type(e) for e in events if not isinstance(e, DeltaEvent)] == [
        StartedEvent, ToolCallEvent, StepEvent, StepEvent, FinishedEvent]  # fmt: skip
    (started,) = of(events, StartedEvent)
    assert (started.provider, started.model, started.max_steps, started.task, started.resumed) == (
        "openai", "m-1", 5, "read a.txt", False)  # fmt: skip
    (call,) = of(events, ToolCallEvent)
    assert (call.tool, call.args, call.status, call.ok, call.executions, call.step) == (
        "read_file", {"path": "a.txt"}, "ok", True, 1, 1)  # fmt: skip
    assert call.call_id and call.error is None and call.changed_workspace is False
    first, second = of(events, StepEvent)
    assert (first.step, first.tool_calls, second.step, second.tool_calls) == (1, 1, 2, 0)
    assert first.provider == "openai" and 0 < first.tokens < second.tokens == result.tokens
    deltas = of(events, DeltaEvent)
    assert "".join(d.text for d in deltas) == "alpha is what a.txt says"
    assert deltas[0].restart is True
    (finished,) = of(events, FinishedEvent)
    assert (finished.outcome, finished.steps, finished.tokens, finished.error) == (
        "finished", 2, result.tokens, None)  # fmt: skip


async def test_a_rate_limited_answer_is_a_retry_event_with_its_wait_in_seconds(
    ws: Path, store: hn.Store
) -> None:
    events: list[AnyEvent] = []
    with ChaosServer(responder=lambda _: Reply(text="done")) as srv:
        srv.push(Fault.status(429, retry_after=3))
        provider = hn.OpenAI("m-1", api_key="k", base_url=srv.openai_url)
        result = await hn.run(contract(ws, max_retries=2), provider, store=store,
                              on_event=events.append)  # fmt: skip
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    (retry,) = of(events, RetryEvent)
    assert (retry.error_kind, retry.status, retry.attempt, retry.max_attempts) == (
        "rate_limited", 429, 2, 3)  # fmt: skip
    assert (retry.delay_s, retry.retry_after_s, retry.provider) == (3.0, 3.0, "openai")


async def test_a_fallback_is_a_fell_back_event(ws: Path, store: hn.Store) -> None:
    events: list[AnyEvent] = []
    with ChaosServer() as bad, ChaosServer(responder=lambda _: Reply(text="done")) as good:
        bad.set_default(Fault.status(503))
        provider = hn.Fallback(
            hn.OpenAI("bad-model", api_key="k", base_url=bad.openai_url),
            hn.Anthropic("good-model", api_key="k", base_url=good.anthropic_url),
        )
        await hn.run(contract(ws, max_retries=0), provider, store=store, on_event=events.append)
    (fell,) = of(events, FellBackEvent)
    assert (fell.from_provider, fell.model, fell.error_kind, fell.status) == (
        "openai", "bad-model", "server", 503)  # fmt: skip


async def test_a_context_overflow_is_a_shrunk_event_in_characters(
    ws: Path, store: hn.Store
) -> None:
    overflow = hn.ProviderError("prompt is too long", kind=K.CONTEXT_OVERFLOW, status=400)
    (ws / "big.txt").write_text("many words\n" * 500)
    read = {"tool": "read_file", "args": {"path": "big.txt"}}
    script: list[Any] = [read, {"tool": "list_dir", "args": {"path": "."}}, read, overflow, "ok"]
    events: list[AnyEvent] = []
    await hn.run(contract(ws), hn.ScriptedProvider(script), store=store, on_event=events.append)
    (shrunk,) = of(events, ShrunkEvent)
    assert 0 < shrunk.after_chars < shrunk.before_chars


async def test_a_repeated_call_is_a_replan_then_a_stalled_event(
    ws: Path, store: hn.Store
) -> None:
    script = [{"tool": "read_file", "args": {"path": "a.txt"}}] * 12
    events: list[AnyEvent] = []
    result = await hn.run(contract(ws), hn.ScriptedProvider(script), store=store,
                          on_event=events.append)  # fmt: skip
    assert result.outcome is hn.RunOutcome.STALLED
    stalls = [e for e in events if isinstance(e, ReplanEvent | StalledEvent)]
    assert [(type(e), e.step, e.signal) for e in stalls] == [
        (ReplanEvent, 3, "repetition"), (StalledEvent, 6, "repetition")]  # fmt: skip
    assert all(e.detail for e in stalls)


async def test_a_write_a_deny_rule_refuses_is_a_refused_event(
    ws: Path, store: hn.Store
) -> None:
    script: list[Any] = [{"tool": "write_file", "args": {"path": "N.md", "content": "x"}}, "ok"]
    events: list[AnyEvent] = []
    await hn.run(contract(ws), hn.ScriptedProvider(script), store=store,
                 policy=hn.Policy.default().layer("t").deny_write("N.md"),
                 on_event=events.append)  # fmt: skip
    (refused,) = of(events, RefusedEvent)
    assert (refused.act, refused.target, refused.tool, refused.layer, refused.source) == (
        "write", "N.md", "write_file", "t", "policy")  # fmt: skip
    assert refused.call_id and refused.message and refused.message.startswith("refused:")
    (call,) = of(events, ToolCallEvent)
    assert (call.status, call.ok) == ("refused", False)


async def test_an_asked_write_is_an_approval_requested_then_decided_event(
    ws: Path, store: hn.Store
) -> None:
    script: list[Any] = [{"tool": "write_file", "args": {"path": "N.md", "content": "x"}}, "ok"]
    events: list[AnyEvent] = []
    await hn.run(contract(ws), hn.ScriptedProvider(script), store=store, approver=hn.ApproveAll(),
                 policy=hn.Policy.default().layer("t").ask_write("N.md"),
                 on_event=events.append)  # fmt: skip
    (asked,) = of(events, ApprovalRequestedEvent)
    assert (asked.act, asked.target, asked.tool, asked.args, asked.layer) == (
        "write", "N.md", "write_file", {"path": "N.md", "content": "x"}, "t")  # fmt: skip
    assert "x" in asked.preview and asked.call_id
    (decided,) = of(events, ApprovalDecidedEvent)
    assert (decided.decision, decided.tool, decided.call_id) == ("approve", "write_file",
                                                                 asked.call_id)  # fmt: skip
    assert (ws / "N.md").read_text() == "x"


async def test_a_resume_is_a_started_event_that_says_resumed(ws: Path, store: hn.Store) -> None:
    script: list[Any] = [{"tool": "write_file", "args": {"path": "N.md", "content": "x"}}]
    policy = hn.Policy.default().layer("t").ask_write("N.md")
    first = await hn.run(contract(ws), hn.ScriptedProvider(script), store=store, policy=policy,
                         approver=lambda _: hn.Decision.defer("later"))  # fmt: skip
    assert first.outcome is hn.RunOutcome.AWAITING_APPROVAL
    events: list[AnyEvent] = []
    await hn.resume(first.run_id, hn.ScriptedProvider(["ok"]), store=store, policy=policy,
                    approver=hn.ApproveAll(), on_event=events.append)  # fmt: skip
    started = of(events, StartedEvent)
    assert [(e.run_id, e.resumed, e.task) for e in started] == [(first.run_id, True, "read a.txt")]
    assert isinstance(events[-1], FinishedEvent) and events[-1].outcome == "finished"


# ------------------------------------------------------------------ the deprecated dict


def test_data_answers_with_the_old_key_names_and_warns_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_events, "_warned", [False])
    retry = RetryEvent(run_id="r", step=2, at=1.0, error_kind="rate_limited", status=429,
                       attempt=2, max_attempts=3, delay_s=7.0, retry_after_s=6.5)  # fmt: skip
    with pytest.warns(DeprecationWarning, match=r"RunEvent\.data is deprecated"):
        data = retry.data
    assert data == {"kind": "rate_limited", "status": 429, "attempt": 2, "max_attempts": 3,
                    "delay": 7.0, "retry_after": 6.5, "provider": None, "detail": None}  # fmt: skip
    assert retry.kind == "retry"  # the kind is still the kind's name
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: a second read warns no more
        fell = FellBackEvent(from_provider="openai", model="m", error_kind="server", status=503)
        assert fell.data == {"from_provider": "openai", "model": "m", "kind": "server",
                             "status": 503}  # fmt: skip
        assert ShrunkEvent(before_chars=9, after_chars=4).data == {"before": 9, "after": 4}
        step = StepEvent(tokens=5, tool_calls=1, provider="p", cost_usd=0.5)
        assert step.data["tokens"] == 5 and step.data["cost_usd"] == 0.5


async def test_an_old_style_callback_reading_data_still_works_on_a_real_run(
    ws: Path, store: hn.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_events, "_warned", [False])
    seen: list[tuple[str, Any]] = []

    def old_style(event: hn.RunEvent) -> None:
        if event.kind == "tool_call":
            seen.append((event.kind, event.data["tool"]))
        elif event.kind == "finished":
            seen.append((event.kind, event.data["outcome"]))

    script: list[Any] = [{"tool": "read_file", "args": {"path": "a.txt"}}, "ok"]
    with pytest.warns(DeprecationWarning):
        await hn.run(contract(ws), hn.ScriptedProvider(script), store=store, on_event=old_style)
    assert seen == [("tool_call", "read_file"), ("finished", "finished")]


class _NotingSinks(hn.ScriptedProvider):
    """A scripted provider that notes the text sink each call was handed, and streams
    its answer through it in two pieces when it has one."""

    def __init__(self) -> None:
        super().__init__(lambda messages: "hello there")
        self.sinks: list[object] = []

    async def _answer(self, call: Any) -> Any:
        self.sinks.append(call.on_text)
        if call.on_text is not None:
            await call.on_text("hello ", True)
            await call.on_text("there", False)
        return await super()._answer(call)


async def test_a_run_nobody_listens_to_makes_no_delta_events_and_records_the_same(
    ws: Path, store: hn.Store
) -> None:
    """Streamed text becomes ``delta`` events only for an ``on_event`` listener: a run
    without one hands its provider no text sink (nothing made for nobody), and its
    result and rows are those of a listened-to run."""
    quiet, heard = _NotingSinks(), _NotingSinks()
    events: list[AnyEvent] = []
    alone = await hn.run(contract(ws, max_steps=1), quiet, store=store)
    watched = await hn.run(contract(ws, max_steps=1), heard, store=store, on_event=events.append)
    assert quiet.sinks == [None]
    assert len(heard.sinks) == 1 and heard.sinks[0] is not None
    assert "".join(e.text for e in of(events, DeltaEvent)) == "hello there"
    assert {e.run_id for e in events} == {watched.run_id}  # still stamped for a listener
    for result in (alone, watched):
        assert (result.outcome, result.text, result.steps) == (
            hn.RunOutcome.FINISHED, "hello there", 1)  # fmt: skip
    steps = store.sql(
        "SELECT run_id, decision FROM steps WHERE run_id IN (?, ?) ORDER BY run_id",
        [alone.run_id, watched.run_id],
    )
    assert sorted(steps["run_id"]) == sorted([alone.run_id, watched.run_id])
    assert list(steps["decision"]) == ["answer", "answer"]
