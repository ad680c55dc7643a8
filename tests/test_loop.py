"""The run loop: outcomes, budgets, retries against real HTTP, fallback, stalls, events."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import harnessnb as hn
from harnessnb import FakeClock
from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply
from harnessnb.events import FellBackEvent, ToolCallEvent
from harnessnb.store._writer import store_writer
from tests.files_helpers import folder

K = hn.ProviderErrorKind


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return folder(tmp_path / "ws", {
        "README.md": "# Title\n\nSome text.\n\n## Usage\n\nRun it.\n",
        "a.txt": "alpha\n",
    })


@pytest.fixture
def store() -> hn.Store:
    return hn.Store(":memory:")


def allow_all() -> hn.Policy:
    return hn.Policy.default().layer("test").allow_write("**").allow_exec("**")


def contract(ws: Path, **kw: Any) -> hn.TaskContract:
    return hn.TaskContract("summarise README.md into NOTES.md", ws, **kw)


def attempts_of(store: hn.Store, run_id: str) -> list[dict[str, Any]]:
    """Attempt rows in order, missing values as None (pandas gives NaN/NA)."""
    df = store.attempts(run_id).sort_values("attempt")
    return [
        {k: (None if not isinstance(v, list) and pd.isna(v) else v) for k, v in row.items()}
        for row in df.to_dict("records")
    ]


# ------------------------------------------------------------------ scripted runs


async def test_scripted_run_finishes_and_commits_every_step(ws: Path, store: hn.Store) -> None:
    provider = hn.ScriptedProvider(
        [
            {"tool": "read_file", "args": {"path": "README.md"}},
            {"tool": "write_file", "args": {"path": "NOTES.md", "content": "# Title\n"}},
            "Wrote NOTES.md.",
        ]
    )
    result = await hn.run(contract(ws), provider, store=store, policy=allow_all())
    assert result.outcome is hn.RunOutcome.FINISHED
    assert (result.steps, result.tokens, result.text) == (3, 45, "Wrote NOTES.md.")
    assert (ws / "NOTES.md").read_text() == "# Title\n"
    steps = store.steps(result.run_id).sort_values("step")
    assert steps["decision"].tolist() == ["tool_calls", "tool_calls", "answer"]
    assert steps["changed_workspace"].tolist() == [False, True, False]
    tools = store.tool_calls(result.run_id).sort_values("step")
    assert tools["tool"].tolist() == ["read_file", "write_file"]
    assert tools["status"].tolist() == ["ok", "ok"]
    assert tools["effect"].tolist() == ["read", "write"]
    run = store.runs(result.run_id).iloc[0]
    assert (run["outcome"], run["steps"], run["tokens"]) == ("finished", 3, 45)
    assert len(store.attempts(result.run_id)) == 3


async def test_verification_success_ends_the_run_when_the_check_passes(
    ws: Path, store: hn.Store
) -> None:
    provider = hn.ScriptedProvider(
        [
            {"tool": "write_file", "args": {"path": "NOTES.md", "content": "# Notes\n"}},
            "never asked",
        ]
    )
    c = contract(ws, verification=hn.FileContains("NOTES.md", "# Notes"))
    result = await hn.run(c, provider, store=store, policy=allow_all())
    assert (result.outcome, result.verified, result.steps) == (hn.RunOutcome.SUCCESS, True, 1)


async def test_failed_check_nudges_once_then_finishes_unverified(ws: Path, store: hn.Store) -> None:
    provider = hn.ScriptedProvider(["done", "really done"])
    c = contract(ws, verification=hn.FileContains("NOTES.md", "#"))
    result = await hn.run(c, provider, store=store, policy=allow_all())
    assert (result.outcome, result.verified, result.steps) == (hn.RunOutcome.UNVERIFIED, False, 2)
    assert not result.ok
    assert "check failed" in provider.calls[1][-1]["content"]


async def test_command_verification_distinguishes_could_not_run(ws: Path, store: hn.Store) -> None:
    provider = hn.ScriptedProvider(["done", "done"])
    c = contract(ws, verification=hn.Command(["definitely-not-a-program-xyz"]))
    result = await hn.run(c, provider, store=store, policy=allow_all())
    assert result.verified is None
    assert result.verify_detail is not None and "could not run" in result.verify_detail
    c = contract(ws, verification=hn.Command(["false"]))
    result = await hn.run(c, hn.ScriptedProvider(["x", "x"]), store=store, policy=allow_all())
    assert result.verified is False
    c = contract(ws, verification=hn.Command(["true"]))
    result = await hn.run(c, hn.ScriptedProvider(["x"]), store=store, policy=allow_all())
    assert (result.outcome, result.verified) == (hn.RunOutcome.SUCCESS, True)


async def test_command_verification_goes_through_the_exec_policy(ws: Path, store: hn.Store) -> None:
    policy = hn.Policy.default().layer("test").deny_exec("true")
    c = contract(ws, verification=hn.Command(["true"]))
    result = await hn.run(c, hn.ScriptedProvider(["x", "x"]), store=store, policy=policy)
    assert result.verified is None
    assert "refused" in (result.verify_detail or "")


async def test_step_cap(ws: Path, store: hn.Store) -> None:
    replies = [{"tool": "read_file", "args": {"path": f"f{i}"}} for i in range(10)]
    result = await hn.run(contract(ws, max_steps=4), hn.ScriptedProvider(replies), store=store)
    assert (result.outcome, result.steps) == (hn.RunOutcome.STEP_CAP, 4)


async def test_token_budget_checked_after_the_step(ws: Path, store: hn.Store) -> None:
    replies = [{"tool": "read_file", "args": {"path": f"f{i}"}} for i in range(10)]
    provider = hn.ScriptedProvider(replies, tokens_per_reply=(40, 10))
    result = await hn.run(contract(ws, max_total_tokens=120), provider, store=store)
    assert (result.outcome, result.steps, result.tokens) == (hn.RunOutcome.TOKEN_BUDGET, 3, 150)


async def test_time_budget_checked_before_each_step(ws: Path, store: hn.Store) -> None:
    clock = FakeClock()

    def slow(messages: Any) -> dict[str, Any]:
        clock.advance(4.0)
        return {"tool": "list_dir", "args": {"path": "."}}

    c = contract(ws, max_time_s=10)
    result = await hn.run(c, hn.ScriptedProvider(slow), store=store, clock=clock)
    assert (result.outcome, result.steps) == (hn.RunOutcome.TIME_BUDGET, 3)
    assert clock.monotonic() <= 12.0


async def test_time_budget_bounds_a_hanging_provider_call(ws: Path, store: hn.Store) -> None:
    with ChaosServer() as srv:
        srv.set_default(Fault.hang(seconds=10))
        provider = hn.OpenAI("m", base_url=srv.openai_url)
        result = await hn.run(contract(ws, max_time_s=0.3), provider, store=store)
    assert result.outcome is hn.RunOutcome.TIME_BUDGET
    assert result.elapsed_s < 5


async def test_event_callback_that_raises_does_not_kill_the_run(ws: Path, store: hn.Store) -> None:
    seen: list[str] = []

    def listener(event: Any) -> None:
        seen.append(event.kind)
        raise RuntimeError("listener bug")

    result = await hn.run(contract(ws), hn.ScriptedProvider(["ok"]), store=store, on_event=listener)
    assert result.outcome is hn.RunOutcome.FINISHED
    assert seen == ["started", "step", "finished"]


async def test_async_event_callback_sees_tool_calls(ws: Path, store: hn.Store) -> None:
    events: list[Any] = []

    async def listener(event: Any) -> None:
        events.append(event)

    provider = hn.ScriptedProvider([{"tool": "read_file", "args": {"path": "a.txt"}}, "ok"])
    await hn.run(contract(ws), provider, store=store, on_event=listener)
    kinds = [e.kind for e in events]
    assert kinds == ["started", "tool_call", "step", "step", "finished"]
    assert isinstance(events[1], ToolCallEvent) and events[1].tool == "read_file"


async def test_context_overflow_shrinks_once_then_is_terminal(ws: Path, store: hn.Store) -> None:
    overflow = hn.ProviderError("prompt is too long", kind=K.CONTEXT_OVERFLOW, status=400)
    replies: list[Any] = [
        {"tool": "read_file", "args": {"path": "README.md"}},
        {"tool": "read_file", "args": {"path": "a.txt"}},
        {"tool": "list_dir", "args": {"path": "."}},
        overflow,
        "summary",
    ]
    provider = hn.ScriptedProvider(replies)
    result = await hn.run(contract(ws), provider, store=store)
    assert result.outcome is hn.RunOutcome.FINISHED
    retried = provider.calls[-1]
    assert any("removed to fit" in str(m.get("content")) for m in retried)
    assert retried[1]["content"] == "summarise README.md into NOTES.md"  # task kept

    provider = hn.ScriptedProvider(
        [
            {"tool": "read_file", "args": {"path": "a.txt"}},
            {"tool": "list_dir", "args": {"path": "."}},
            {"tool": "list_dir", "args": {"path": "."}},
            overflow,
            overflow,
        ]
    )
    result = await hn.run(contract(ws), provider, store=store)
    assert result.outcome is hn.RunOutcome.ESCALATED_TERMINAL
    assert isinstance(result.error, hn.ProviderError)
    assert result.error.kind is K.CONTEXT_OVERFLOW


async def test_missing_workspace_is_a_config_error(tmp_path: Path, store: hn.Store) -> None:
    with pytest.raises(hn.ConfigError, match="not a folder"):
        await hn.run(contract(tmp_path / "nope"), hn.ScriptedProvider(["x"]), store=store)


# ------------------------------------------------------------------ stalls


async def test_same_read_repeated_replans_at_third_and_stalls_at_sixth(
    ws: Path, store: hn.Store
) -> None:
    provider = hn.ScriptedProvider([{"tool": "read_file", "args": {"path": "a.txt"}}] * 12)
    result = await hn.run(contract(ws), provider, store=store)
    assert (result.outcome, result.steps, result.replans) == (hn.RunOutcome.STALLED, 6, 1)
    stalls = store.stalls(result.run_id).sort_values("step")
    assert stalls[["step", "signal", "action"]].values.tolist() == [
        [3, "repetition", "replan"],
        [6, "repetition", "stalled"],
    ]
    directive = provider.calls[3][-1]
    assert directive["role"] == "user" and "end the run" in directive["content"]


async def test_four_different_reads_are_never_a_stall(ws: Path, store: hn.Store) -> None:
    for name in ("b", "c", "d"):
        (ws / f"{name}.txt").write_text(name)
    replies: list[Any] = [{"tool": "read_file", "args": {"path": f"{n}.txt"}} for n in "abcd"] + [
        "done"
    ]
    result = await hn.run(contract(ws), hn.ScriptedProvider(replies), store=store)
    assert result.outcome is hn.RunOutcome.FINISHED
    assert len(store.stalls(result.run_id)) == 0


async def test_writing_the_same_bytes_each_step_is_caught(ws: Path, store: hn.Store) -> None:
    write = {"tool": "write_file", "args": {"path": "NOTES.md", "content": "same"}}
    result = await hn.run(
        contract(ws), hn.ScriptedProvider([write] * 10), store=store, policy=allow_all()
    )
    assert result.outcome is hn.RunOutcome.STALLED
    assert store.stalls(result.run_id)["signal"].tolist() == ["repetition", "repetition"]


# ------------------------------------------------------------------ real HTTP: retries


def openai_at(srv: ChaosServer, model: str = "m") -> hn.OpenAI:
    return hn.OpenAI(model, api_key="sk-test", base_url=srv.openai_url)


async def test_503_every_time_makes_three_attempts_then_escalates(
    ws: Path, store: hn.Store
) -> None:
    with ChaosServer() as srv:
        srv.set_default(Fault.status(503))
        result = await hn.run(contract(ws), openai_at(srv), store=store)
        assert len(srv.requests) == 3
    assert result.outcome is hn.RunOutcome.ESCALATED_RETRYABLE
    rows = attempts_of(store, result.run_id)
    assert [(r["attempt"], r["kind"], r["status"]) for r in rows] == [
        (1, "server", 503),
        (2, "server", 503),
        (3, "server", 503),
    ]
    assert result.steps == 0 and len(store.steps(result.run_id)) == 0


async def test_401_is_one_attempt_and_terminal(ws: Path, store: hn.Store) -> None:
    with ChaosServer() as srv:
        srv.set_default(Fault.status(401))
        result = await hn.run(contract(ws), openai_at(srv), store=store)
    assert result.outcome is hn.RunOutcome.ESCALATED_TERMINAL
    assert [(r["kind"], r["status"]) for r in attempts_of(store, result.run_id)] == [("auth", 401)]
    assert isinstance(result.error, hn.ProviderError) and result.error.status == 401


async def test_429_retry_after_is_waited_on_the_injected_clock(ws: Path, store: hn.Store) -> None:
    clock = FakeClock()
    with ChaosServer() as srv:
        srv.push(Fault.status(429, retry_after="1"))
        result = await hn.run(contract(ws), openai_at(srv), store=store, clock=clock)
    assert result.outcome is hn.RunOutcome.FINISHED
    rows = attempts_of(store, result.run_id)
    assert [r["kind"] for r in rows] == ["rate_limited", None]
    assert rows[0]["retry_after_s"] == 1.0
    gap = (rows[1]["started_at"] - rows[0]["started_at"]).total_seconds()
    assert gap >= 1.0
    assert clock.sleeps == [1.0]


async def test_retry_after_past_the_budget_ends_at_once(ws: Path, store: hn.Store) -> None:
    clock = FakeClock()
    with ChaosServer() as srv:
        srv.set_default(Fault.status(429, retry_after="100"))
        result = await hn.run(contract(ws, max_time_s=5), openai_at(srv), store=store, clock=clock)
        assert len(srv.requests) == 1
    assert result.outcome is hn.RunOutcome.ESCALATED_RETRYABLE
    assert isinstance(result.error, hn.ProviderError)
    assert result.error.retry_after_s == 100.0
    assert clock.sleeps == []


async def test_backoff_without_retry_after_doubles(ws: Path, store: hn.Store) -> None:
    clock = FakeClock()
    with ChaosServer() as srv:
        srv.push(Fault.status(500), Fault.status(502))
        result = await hn.run(contract(ws), openai_at(srv), store=store, clock=clock)
    assert result.outcome is hn.RunOutcome.FINISHED
    assert clock.sleeps == [0.5, 1.0]


async def test_fallback_from_always_503_to_healthy_records_the_leaf(
    ws: Path, store: hn.Store
) -> None:
    events: list[Any] = []
    with ChaosServer() as bad, ChaosServer() as good:
        bad.set_default(Fault.status(503))
        provider = hn.Fallback(
            hn.OpenAI("bad-model", base_url=bad.openai_url),
            hn.Anthropic("good-model", api_key="k", base_url=good.anthropic_url),
        )
        result = await hn.run(contract(ws), provider, store=store, on_event=events.append)
    fell = [e for e in events if isinstance(e, FellBackEvent)]
    assert [(e.from_provider, e.model, e.error_kind, e.status) for e in fell] == [
        ("openai", "bad-model", "server", 503)
    ]
    assert result.outcome is hn.RunOutcome.FINISHED
    assert result.providers == ("anthropic",)
    rows = attempts_of(store, result.run_id)
    assert [(r["provider"], r["kind"], r["fell_back"]) for r in rows] == [
        ("openai", "server", True),
        ("anthropic", None, False),
    ]
    assert store.steps(result.run_id)["provider"].tolist() == ["anthropic"]


async def test_nested_fallback_of_three(ws: Path, store: hn.Store) -> None:
    with ChaosServer() as a, ChaosServer() as b, ChaosServer() as c:
        a.set_default(Fault.status(503))
        b.set_default(Fault.status(429))
        provider = hn.Fallback(
            hn.OpenAI("a", base_url=a.openai_url),
            hn.Fallback(
                hn.OpenRouter("b", api_key="k", base_url=b.openai_url),
                hn.OpenAI("c", base_url=c.openai_url),
            ),
        )
        result = await hn.run(contract(ws), provider, store=store)
        assert len(c.requests) == 1
    rows = attempts_of(store, result.run_id)
    assert [(r["provider"], r["fell_back"]) for r in rows] == [
        ("openai", True),
        ("openrouter", True),
        ("openai", False),
    ]
    assert rows[-1]["model"] == "c"


async def test_chaos_tool_calls_drive_real_tools(ws: Path, store: hn.Store) -> None:
    def responder(req: ChaosRequest) -> Reply:
        tool_msgs = [m for m in req.messages if m.get("role") == "tool"]
        if not tool_msgs:
            return Reply(tool_calls=[{"name": "read_file", "arguments": {"path": "a.txt"}}])
        return Reply(text="alpha seen")

    with ChaosServer(responder=responder) as srv:
        result = await hn.run(contract(ws), openai_at(srv), store=store)
    assert (result.outcome, result.steps, result.text) == (hn.RunOutcome.FINISHED, 2, "alpha seen")


# ------------------------------------------------------------------ egress


async def test_denied_provider_host_stops_before_the_first_request(
    ws: Path, store: hn.Store
) -> None:
    with ChaosServer() as srv:
        policy = hn.Policy.default().layer("ops").deny_net("127.0.0.1")
        result = await hn.run(contract(ws), openai_at(srv), store=store, policy=policy)
        assert srv.requests == []
    assert result.outcome is hn.RunOutcome.DENIED
    assert isinstance(result.error, hn.RefusedError) and result.error.act == "net"


# ------------------------------------------------------------------ sync bridge


def test_run_sync_from_a_plain_script(ws: Path, store: hn.Store) -> None:
    result = hn.run_sync(contract(ws), hn.ScriptedProvider(["ok"]), store=store)
    assert result.outcome is hn.RunOutcome.FINISHED


async def test_run_sync_inside_a_running_event_loop(ws: Path, store: hn.Store) -> None:
    # as in a Jupyter kernel: the caller's thread already runs a loop
    asyncio.get_running_loop()
    result = hn.run_sync(contract(ws), hn.ScriptedProvider(["ok"]), store=store)
    assert result.outcome is hn.RunOutcome.FINISHED


def test_keyboard_interrupt_cancels_the_run_and_records_it(ws: Path, tmp_path: Path) -> None:
    import _thread

    store = hn.Store(tmp_path / "runs.duckdb")
    with ChaosServer() as srv:
        srv.set_default(Fault.hang(seconds=10))
        timer = threading.Timer(0.3, _thread.interrupt_main)
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            hn.run_sync(contract(ws), openai_at(srv), store=store)
    runs = store.runs()
    assert runs["outcome"].tolist() == ["cancelled"]


def test_checkpoints_store_deltas_and_rebuild_the_conversation() -> None:
    from harnessnb.loop._conversation import replay_conversation

    a, b, c, d = ({"role": "user", "content": x} for x in "abcd")
    states = [
        {"messages": [a, b]},  # first commit: a full copy
        {"messages_from": 2, "messages_delta": [c]},
        {"messages": [a, {"role": "tool", "content": "[elided]"}, c]},  # after a shrink
        {"messages_from": 3, "messages_delta": [d]},
    ]
    assert replay_conversation(states) == [a, {"role": "tool", "content": "[elided]"}, c, d]
    with pytest.raises(ValueError):
        replay_conversation([{"messages_from": 5, "messages_delta": []}])


async def test_step_checkpoints_hold_only_the_new_messages(ws: Path, store: hn.Store) -> None:
    provider = hn.ScriptedProvider([{"tool": "read_file", "args": {"path": "a.txt"}}, "done"])
    result = await hn.run(contract(ws), provider, store=store)
    first, second = (c["state"] for c in store.checkpoints(result.run_id))
    assert [m["role"] for m in first["messages"]] == ["system", "user", "assistant", "tool"]
    assert first.get("messages_from") is None
    assert second["messages_from"] == 4
    assert [m["role"] for m in second["messages_delta"]] == ["assistant"]


async def test_a_command_cannot_outlive_the_time_budget(ws: Path, store: hn.Store) -> None:
    import time

    provider = hn.ScriptedProvider(
        [{"tool": "run_command", "args": {"argv": ["sleep", "20"]}}, "unreachable"]
    )
    policy = hn.Policy.default().layer("t").allow_exec("sleep")
    started = time.monotonic()
    result = await hn.run(contract(ws, max_time_s=1.0), provider, store=store, policy=policy)
    assert time.monotonic() - started < 10
    assert result.outcome is hn.RunOutcome.TIME_BUDGET
    assert store.tool_calls(result.run_id)["error_code"].tolist() == ["SANDBOX_TIMEOUT"]


async def test_store_may_be_given_as_a_path_and_a_bad_file_is_a_store_error(
    ws: Path, tmp_path: Path
) -> None:
    path = tmp_path / "runs.duckdb"
    result = await hn.run(contract(ws), hn.ScriptedProvider(["ok"]), store=str(path))
    assert result.outcome is hn.RunOutcome.FINISHED
    with hn.Store(path) as store:
        assert store.runs()["run_id"].tolist() == [result.run_id]
    bad = tmp_path / "notes.txt"
    bad.write_text("not a database\n")
    with pytest.raises(hn.StoreError) as info:
        await hn.run(contract(ws), hn.ScriptedProvider(["ok"]), store=bad)
    assert info.value.kind == "corrupt" and bad.read_text() == "not a database\n"


async def test_concurrent_runs_share_one_waker_and_leave_none(tmp_path: Path) -> None:
    """Runs driven on the main thread keep its loop waking (so Ctrl-C lands); many at
    once share one waker, and none is left behind when they end."""
    ws = tmp_path / "ws"
    ws.mkdir()
    seen: list[int] = []

    def wakers() -> int:
        return sum(t.get_coro().__name__ == "keep_awake" for t in asyncio.all_tasks())  # type: ignore[union-attr]

    def reply(messages: object) -> dict[str, object]:
        seen.append(wakers())
        return {"text": "done"}

    with hn.Store(tmp_path / "s.duckdb") as store:
        contract = hn.TaskContract("hi", ws, max_steps=1)
        await asyncio.gather(
            *(hn.run(contract, hn.ScriptedProvider(reply), store=store) for _ in range(5))
        )
    assert seen and set(seen) == {1}
    await asyncio.sleep(0)  # let the cancelled waker finish
    assert wakers() == 0


async def test_a_run_cancelled_before_its_start_is_written_is_cancelled_not_a_store_error(
    ws: Path, tmp_path: Path
) -> None:
    # Ctrl-C right after `harnessnb run` starts: the run row's write is still queued
    # behind another write. The cancellation must stay a cancellation (not a "no run
    # in the store" StoreError nobody reads), and the start is let commit, so the run
    # whose id a face may show is in the store, cancelled (issue #24).
    from harnessnb.store._batch import WriteOp

    store = hn.Store(tmp_path / "runs.duckdb")
    gate = threading.Event()
    store_writer(store).submit(WriteOp("hold", lambda con, batch: gate.wait(10)))
    task = asyncio.ensure_future(hn.run(contract(ws), hn.ScriptedProvider(["ok"]), store=store))
    await asyncio.sleep(0.2)  # the run waits for its start commit, queued behind "hold"
    threading.Timer(0.2, gate.set).start()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert store.runs()["outcome"].tolist() == ["cancelled"]
