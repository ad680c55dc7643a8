"""Size caps on what a server sends, and a Retry-After beyond ``max_wait``, as real runs
against the chaos server (no real sleeping: a FakeClock records every wait)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb.chaos import ChaosServer, Fault, Reply
from harnessnb.events import ToolCallEvent
from harnessnb.providers import _attempt as _http
from harnessnb.rules._retry import retry_decision
from tests.files_helpers import folder

K = hn.ProviderErrorKind


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return folder(tmp_path / "ws")


def _openai(srv: ChaosServer, *, stream: bool = False) -> hn.OpenAI:
    return hn.OpenAI("m", api_key="sk-test", base_url=srv.openai_url, stream=stream)


def _contract(ws: Path, **kw: Any) -> hn.TaskContract:
    return hn.TaskContract("say something", ws, max_steps=1, **kw)


# ------------------------------------------------------------ Retry-After vs max_wait


def test_max_wait_defaults_to_300_seconds_and_takes_a_timedelta() -> None:
    assert hn.RetryPolicy().max_wait_s == 300.0
    assert hn.RetryPolicy(max_wait_s=dt.timedelta(minutes=1)).max_wait_s == 60.0
    with pytest.raises(ValueError):
        hn.RetryPolicy(max_wait_s=-1)


@pytest.mark.parametrize(
    ("retry_after", "max_seconds", "action", "reason"),
    [(300.0, None, "retry", "retry"), (300.5, None, "stop", "beyond_max_wait"),
     (1e8, None, "stop", "beyond_max_wait"), (1e8, 1e9, "stop", "beyond_max_wait"),
     (None, None, "retry", "retry")],
)  # fmt: skip
def test_retry_after_beyond_max_wait_is_never_slept(
    retry_after: float | None, max_seconds: float | None, action: str, reason: str
) -> None:
    err = hn.ProviderError("x", kind=K.RATE_LIMITED, status=429, retry_after_s=retry_after)
    decision = retry_decision(
        err, retries_done=0, max_retries=2, policy=hn.RetryPolicy(), elapsed=0.0,
        max_seconds=max_seconds,
    )  # fmt: skip
    assert (decision.action, decision.reason) == (action, reason)


@pytest.mark.parametrize("max_seconds", [None, 10**9], ids=["no-budget", "huge-budget"])
async def test_retry_after_of_a_hundred_million_seconds_ends_the_run_at_once(
    ws: Path, max_seconds: int | None
) -> None:
    clock = hn.FakeClock()
    store = hn.Store(":memory:")
    with ChaosServer() as srv:
        srv.set_default(Fault.status(429, retry_after="100000000"))
        result = await hn.run(
            _contract(ws, max_time_s=max_seconds), _openai(srv), store=store, clock=clock
        )
        assert len(srv.requests) == 1
    assert result.outcome is hn.RunOutcome.ESCALATED_RETRYABLE
    assert clock.sleeps == []
    assert isinstance(result.error, hn.ProviderError)
    assert result.error.retry_after_s == 100000000.0
    attempts = store.attempts(result.run_id)
    assert attempts[["kind", "status", "retry_after_s"]].values.tolist() == [
        ["rate_limited", 429, 100000000.0]
    ]
    assert store.runs(result.run_id)["outcome"].tolist() == ["escalated_retryable"]


async def test_retry_after_within_max_wait_is_waited(ws: Path) -> None:
    clock = hn.FakeClock()
    with ChaosServer() as srv:
        srv.push(Fault.status(429, retry_after="120"))
        contract = _contract(ws, retry=hn.RetryPolicy(max_wait_s=120))
        result = await hn.run(contract, _openai(srv), store=hn.Store(":memory:"), clock=clock)
    assert result.outcome is hn.RunOutcome.FINISHED
    assert clock.sleeps == [120.0]


# ------------------------------------------------------------------ answer size


async def test_an_answer_body_over_the_cap_is_malformed(ws: Path) -> None:
    store = hn.Store(":memory:")
    big = "x" * (_http.MAX_ANSWER_BYTES + 1024)
    with ChaosServer(responder=lambda request: Reply(text=big)) as srv:
        result = await hn.run(
            _contract(ws, max_retries=0), _openai(srv), store=store, clock=hn.FakeClock()
        )
    assert result.outcome is hn.RunOutcome.ESCALATED_RETRYABLE
    assert isinstance(result.error, hn.ProviderError) and result.error.kind is K.MALFORMED
    assert "byte cap" in result.error.message
    assert len(result.error.message) <= _http.MAX_ERROR_TEXT
    assert store.attempts(result.run_id)["kind"].tolist() == ["malformed"]


async def test_a_streamed_answer_over_the_cap_is_malformed(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_http, "MAX_STREAM_BYTES", 64 * 1024)
    store = hn.Store(":memory:")
    words = " ".join(["word"] * 60_000)
    with ChaosServer(responder=lambda request: Reply(text=words)) as srv:
        result = await hn.run(
            _contract(ws, max_retries=0), _openai(srv, stream=True), store=store,
            clock=hn.FakeClock(),
        )  # fmt: skip
        assert srv.requests[0].stream
    assert isinstance(result.error, hn.ProviderError) and result.error.kind is K.MALFORMED
    assert "stream larger than the 65536 byte cap" in result.error.message


async def test_an_answer_under_the_cap_is_read_whole(ws: Path) -> None:
    text = "y" * 200_000
    with ChaosServer(responder=lambda request: Reply(text=text)) as srv:
        for stream in (False, True):
            completion = await _openai(srv, stream=stream).complete(
                [{"role": "user", "content": "hi"}]
            )
            assert completion.text == text


# ------------------------------------------------------------------ error size


FIVE_MB = "E" * (5 * 1024 * 1024)


@pytest.mark.parametrize(
    "fault",
    [Fault.status(500, body=FIVE_MB),
     Fault.status(500, body={"error": {"message": FIVE_MB, "type": "server_error"}}),
     Fault.error_in_200({"message": FIVE_MB, "code": 502}),
     Fault.stream_error({"message": FIVE_MB, "code": 502})],
    ids=["message", "whole-body", "error-in-200", "stream-error"],
)  # fmt: skip
@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
async def test_a_five_megabyte_error_is_kept_to_a_few_kilobytes(
    ws: Path, fault: Fault, stream: bool
) -> None:
    store = hn.Store(":memory:")
    with ChaosServer() as srv:
        srv.set_default(fault)
        result = await hn.run(
            _contract(ws, max_retries=1), _openai(srv, stream=stream), store=store,
            clock=hn.FakeClock(),
        )  # fmt: skip
    err = result.error
    assert isinstance(err, hn.ProviderError)
    assert len(err.message) <= _http.MAX_ERROR_TEXT and "EEEE" in err.message
    assert len(str(err)) < 4096 and len(repr(err)) < 4096
    assert len(str(err.to_dict())) < 8192
    bundle = err._repr_mimebundle_()
    assert all(len(v) < 16384 for v in bundle.values())
    assert all(len(v) < 32768 for v in result._repr_mimebundle_().values())
    errors = store.attempts(result.run_id)["error"].tolist()
    assert len(errors) == 2 and all(len(e) <= _http.MAX_ERROR_TEXT for e in errors)
    (stored,) = store.runs(result.run_id)["error"].tolist()
    assert len(stored) < 8192


# ------------------------------------------------------------ a tool's huge error


FIVE_MB_ERROR = "start " + "E" * 5_000_000 + " end"


@hn.tool
def explode(what: str) -> str:
    """Fail with a five-megabyte message."""
    raise ValueError(FIVE_MB_ERROR)


@hn.tool(effect=hn.Effect.WRITE)
def explode_typed(what: str) -> str:
    """Fail with a five-megabyte ToolError."""
    raise hn.ToolError(FIVE_MB_ERROR, code="BOOM")


def test_a_tool_failing_with_five_megabytes_is_stored_and_shown_capped(ws: Path) -> None:
    seen: list[str] = []

    def model(messages: list[dict[str, Any]]) -> Any:
        tools_said = [str(m.get("content")) for m in messages if m.get("role") == "tool"]
        if len(tools_said) < 2:
            name = "explode" if not tools_said else "explode_typed"
            return {"tool": name, "args": {"what": "x"}}
        seen.extend(tools_said)
        return "done"

    events: list[hn.RunEvent] = []
    store = hn.Store(":memory:")
    result = hn.run_sync(
        hn.TaskContract("fail hugely", ws, max_steps=3), hn.ScriptedProvider(model),
        store=store, tools=[explode, explode_typed], policy=hn.Policy.permissive(),
        on_event=events.append,
    )  # fmt: skip
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    assert len(seen) == 2
    for said in seen:  # the model's view: a few KB, head and tail, the cut counted
        assert len(said) < 4200 and said.endswith(" end")
        assert "chars elided]" in said
    rows = store.tool_calls(result.run_id)
    assert rows["status"].tolist() == ["error", "error"]
    assert all(len(o) < 4200 and "chars elided]" in o for o in rows["output"])
    for table in ("steps", "runs", "tool_calls", "attempts"):
        frame = store.sql(f"select * from {table}")
        assert all(len(str(v)) < 16384 for col in frame for v in frame[col]), table
    failed = [e for e in events if isinstance(e, ToolCallEvent)]
    assert len(failed) == 2 and all(len(str(e)) < 16384 for e in failed)
    error = failed[0].error
    assert error is not None
    assert error["causes"][0].startswith("ValueError: start") and len(error["causes"][0]) < 4200
    assert all(len(v) < 32768 for v in result._repr_mimebundle_().values())
