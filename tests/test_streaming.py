"""Streaming in the run loop, against real HTTP on loopback: the idle timeout cuts a
silent stream and the loop retries it, time-to-first-token is stored, streamed text
shows live in the progress views, a server that cannot stream is asked again without
it (once), ``stream=False`` opts out, and Record/Replay and Fallback keep working."""

from __future__ import annotations

import os
import pty
import select
import shutil
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import harnessnb as hn
from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply
from harnessnb.cli import LineProgress
from harnessnb.events import AnyEvent, DeltaEvent
from harnessnb.loop._events import DELTA_INTERVAL, DELTA_TAIL, EventSink, TextDeltas
from harnessnb.notebook._progress import TextProgress, WidgetProgress

ROOT = Path(__file__).resolve().parents[1]
IDLE = 0.3  # the idle timeout of these tests' providers, in seconds
ANSWER = "Streaming works: the first words arrive before the last ones are written."


@pytest.fixture
def store() -> hn.Store:
    return hn.Store(":memory:")


def contract(ws: Path, **kw: Any) -> hn.TaskContract:
    return hn.TaskContract("say something", ws, **kw)


def answer(_: ChaosRequest) -> Reply:
    return Reply(text=ANSWER)


def make(protocol: str, srv: ChaosServer, **kw: Any) -> hn.OpenAI | hn.Anthropic:
    kw.setdefault("idle_timeout_s", IDLE)
    if protocol == "anthropic":
        return hn.Anthropic("claude-test", api_key="sk-test", base_url=srv.anthropic_url, **kw)
    return hn.OpenAI("gpt-test", api_key="sk-test", base_url=srv.openai_url, **kw)


def attempts_of(store: hn.Store, run_id: str) -> list[dict[str, Any]]:
    df = store.attempts(run_id).sort_values("attempt")
    return [{k: (None if pd.isna(v) else v) for k, v in r.items()} for r in df.to_dict("records")]


PROTOCOLS = pytest.mark.parametrize("protocol", ["openai", "anthropic"])


# ------------------------------------------------------------------ idle timeout and ttft


@PROTOCOLS
async def test_a_stream_that_goes_silent_fails_within_the_idle_timeout_and_is_retried(
    protocol: str, ws: Path, store: hn.Store
) -> None:
    with ChaosServer(responder=answer) as srv:
        srv.push(Fault.stall_stream(after_events=1, seconds=30.0))
        started = time.monotonic()
        result = await hn.run(contract(ws), make(protocol, srv), store=store)
        took = time.monotonic() - started
        assert [r.stream for r in srv.requests] == [True, True]
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    assert result.text == ANSWER
    rows = attempts_of(store, result.run_id)
    assert [r["kind"] for r in rows] == ["timeout", None]
    assert "idle timeout" in rows[0]["error"]
    assert IDLE * 1000 <= rows[0]["latency_ms"] < IDLE * 1000 + 1000
    assert took < 5.0  # nowhere near the 30 s stall, nor the 600 s deadline
    assert result.retries == 1


async def test_a_stalled_stream_rate_is_cut_by_the_idle_timeout(ws: Path, store: hn.Store) -> None:
    with ChaosServer(responder=answer, rates={"stalled_stream": 1.0}) as srv:
        started = time.monotonic()
        result = await hn.run(contract(ws, max_retries=1), make("openai", srv), store=store)
        took = time.monotonic() - started
    assert result.outcome is hn.RunOutcome.ESCALATED_RETRYABLE
    assert [r["kind"] for r in attempts_of(store, result.run_id)] == ["timeout", "timeout"]
    assert took < 2 * IDLE + 3.0


@PROTOCOLS
async def test_the_timers_a_stream_arms_do_not_grow_with_its_events(
    protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The idle timeout is one lazy timer: an event only notes the time (moving the
    attempt's timer on each one scheduled a timer handle per event). A stream of ~80
    events arms as many timer handles as one of ~5."""
    import asyncio

    loop = asyncio.get_running_loop()
    armed: list[float] = []
    call_at = loop.call_at

    def counting(when: float, *args: Any, **kw: Any) -> asyncio.TimerHandle:
        armed.append(when)
        return call_at(when, *args, **kw)

    def calls(n: int) -> Reply:
        return Reply(
            tool_calls=[{"name": "read_file", "arguments": {"path": f"{i}"}} for i in range(n)]
        )

    handles: dict[int, int] = {}
    asked = [1]
    with ChaosServer(responder=lambda _: calls(asked[0])) as srv:
        # An idle limit no stream here comes near, so a slow machine re-arms nothing.
        provider = make(protocol, srv, idle_timeout_s=30.0)
        for n in (1, 20, 1):  # the first warms the connection
            asked[0] = n
            monkeypatch.setattr(loop, "call_at", counting)
            armed.clear()
            completion = await provider.complete([{"role": "user", "content": "go"}])
            monkeypatch.setattr(loop, "call_at", call_at)
            assert len(completion.tool_calls) == n
            handles[n] = len(armed)
    assert handles[20] == handles[1], handles


@PROTOCOLS
async def test_every_streamed_attempt_stores_its_time_to_first_token(
    protocol: str, ws: Path, store: hn.Store
) -> None:
    with ChaosServer(responder=answer) as srv:
        srv.push(Fault.status(503))  # a failed attempt first: no token, no ttft
        result = await hn.run(contract(ws), make(protocol, srv), store=store)
        assert [r.stream for r in srv.requests] == [True, True]
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    rows = attempts_of(store, result.run_id)
    assert [(r["kind"], r["ttft_ms"] is None) for r in rows] == [("server", True), (None, False)]
    ok = rows[1]
    assert 0 < ok["ttft_ms"] <= ok["latency_ms"]


async def test_stream_false_asks_for_whole_answers(ws: Path, store: hn.Store) -> None:
    with ChaosServer(responder=answer) as srv:
        provider = make("openai", srv, stream=False)
        assert provider.stream is False and "stream=False" in repr(provider)
        result = await hn.run(contract(ws), provider, store=store)
        direct = await provider.complete([{"role": "user", "content": "hi"}])
        bodies = [r.json for r in srv.requests]
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    assert direct.text == ANSWER and direct.ttft_ms is None
    assert [("stream" in b, "stream_options" in b) for b in bodies] == [(False, False)] * 2
    assert attempts_of(store, result.run_id)[0]["ttft_ms"] is None


def test_stream_false_is_taken_by_every_constructor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-test")
    for cls in (hn.OpenAI, hn.Anthropic, hn.OpenRouter):
        assert cls.from_env().stream is True
        assert cls.from_env(stream=False).stream is False
        assert cls("m", stream=False).with_timeout(5).stream is False
    assert hn.OpenRouter("m", stream=False, app_name="x").stream is False


# ------------------------------------------------------------------ a server that cannot stream


@PROTOCOLS
async def test_a_server_that_rejects_streaming_is_asked_again_without_it_and_remembered(
    protocol: str, ws: Path, store: hn.Store
) -> None:
    with ChaosServer(responder=answer) as srv:
        srv.set_default(Fault.rejects_streaming())
        provider = make(protocol, srv)
        first = await hn.run(contract(ws), provider, store=store)
        assert [r.stream for r in srv.requests] == [True, False]
        assert provider.stream is False
        second = await hn.run(contract(ws), provider, store=store)
        assert [r.stream for r in srv.requests] == [True, False, False]
        # A new provider instance asks to stream again (the memory is per instance).
        await make(protocol, srv).complete([{"role": "user", "content": "hi"}])
        assert [r.stream for r in srv.requests][3:] == [True, False]
    assert first.outcome is second.outcome is hn.RunOutcome.FINISHED
    assert first.text == second.text == ANSWER
    rows = attempts_of(store, first.run_id)
    assert [(r["kind"], r["status"]) for r in rows] == [("request", 400), (None, 200)]
    assert "streaming is not supported" in rows[0]["error"]
    assert first.retries == 0  # the second ask is the provider's, not a loop retry
    assert [r["kind"] for r in attempts_of(store, second.run_id)] == [None]


async def test_a_400_that_does_not_name_streaming_is_not_asked_again(
    ws: Path, store: hn.Store
) -> None:
    with ChaosServer(responder=answer) as srv:
        srv.set_default(Fault.status(400, body="messages: field required"))
        provider = make("openai", srv)
        result = await hn.run(contract(ws), provider, store=store)
        assert [r.stream for r in srv.requests] == [True]
    assert result.outcome is hn.RunOutcome.ESCALATED_TERMINAL
    assert provider.stream is True


# ------------------------------------------------------------------ live text


class Watcher:
    """Feeds each event of a real run to the widget and the text view, and keeps what
    the widget showed after each ``delta``."""

    def __init__(self) -> None:
        self.widget = WidgetProgress(min_interval=0.0)
        self.text = TextProgress(stream=open(os.devnull, "w"))  # noqa: SIM115
        self.kinds: list[str] = []
        self.shown: list[str] = []
        self.at: list[float] = []

    def __call__(self, event: hn.RunEvent) -> None:
        self.kinds.append(event.kind)
        self.widget(event)
        self.text(event)
        if event.kind == "delta":
            self.shown.append(self.widget.status.value)
            self.at.append(time.monotonic())


async def test_the_progress_widget_shows_the_answer_while_it_streams(
    ws: Path, store: hn.Store
) -> None:
    watch = Watcher()
    with ChaosServer(responder=answer) as srv:
        srv.set_default(Fault.trickle(0.15))
        result = await hn.run(contract(ws), make("openai", srv), store=store, on_event=watch)
    watch.widget.close()
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    deltas = watch.kinds.count("delta")
    assert deltas >= 2  # the answer came in pieces, each shown as it came
    assert watch.kinds.index("delta") < watch.kinds.index("step") < watch.kinds.index("finished")
    assert "Streaming works" in watch.shown[0] and "written." not in watch.shown[0]
    assert "written." in watch.shown[-1]
    assert "the model is answering" in watch.shown[-1]
    # Throttled: ten a second at most (the last one, the answer's held end, comes at once).
    gaps = [b - a for a, b in zip(watch.at, watch.at[1:], strict=False)]
    assert all(gap >= DELTA_INTERVAL * 0.9 for gap in gaps[:-1])
    # The final card is the result's; the live text is gone with the step that ended it.
    assert watch.widget.state.streamed == "" and watch.text.state.streamed == ""
    assert "Streaming works" not in watch.widget.status.value


@PROTOCOLS
async def test_the_delta_events_of_a_fast_stream_carry_the_whole_answer(
    protocol: str, ws: Path, store: hn.Store
) -> None:
    """Pieces held by the throttle are sent when the answer is complete."""
    events: list[hn.RunEvent] = []
    with ChaosServer(responder=answer) as srv:  # every event at once: most are held
        await hn.run(contract(ws), make(protocol, srv), store=store, on_event=events.append)
    deltas = [e for e in events if isinstance(e, DeltaEvent)]
    assert "".join(d.text for d in deltas) == ANSWER
    assert [d.restart for d in deltas] == [True] + [False] * (len(deltas) - 1)


async def test_streamed_text_is_escaped_in_the_widget(ws: Path, store: hn.Store) -> None:
    watch = Watcher()
    hostile = "<img src=x onerror=alert(1)> and more words to stream"
    with ChaosServer(responder=lambda _: Reply(text=hostile)) as srv:
        srv.set_default(Fault.trickle(0.12))
        await hn.run(contract(ws), make("openai", srv), store=store, on_event=watch)
    watch.widget.close()
    assert watch.shown and all("<img" not in html for html in watch.shown)
    assert any("&lt;img" in html for html in watch.shown)


async def test_delta_events_are_throttled_and_a_retry_starts_the_text_over() -> None:
    sent: list[dict[str, Any]] = []
    now = [0.0]

    async def emit(event: AnyEvent) -> None:
        assert isinstance(event, DeltaEvent)
        sent.append({"kind": event.kind, "text": event.text, "restart": event.restart})

    deltas = TextDeltas(emit, clock=lambda: now[0])
    await deltas("He", True)  # a word still arriving: held until whitespace ends it
    for piece in ("l", "l", "o"):
        now[0] += DELTA_INTERVAL / 10
        await deltas(piece, False)
    now[0] += DELTA_INTERVAL
    await deltas(" wor", False)
    await deltas("ld", False)  # within the interval: held
    await deltas("Again ", True)  # a new attempt: what was held is void
    now[0] += DELTA_INTERVAL
    await deltas("!", False)
    await deltas.flush()  # the answer is complete: its last word goes too
    assert sent == [
        {"kind": "delta", "text": "Hello ", "restart": True},
        {"kind": "delta", "text": "Again ", "restart": True},
        {"kind": "delta", "text": "!", "restart": False},
    ]


async def test_only_the_tail_of_a_long_delta_reaches_a_callback() -> None:
    seen: list[hn.RunEvent] = []
    sink = EventSink(seen.append)

    deltas = TextDeltas(sink.emit, clock=lambda: 0.0)
    await deltas("x" * 5000, False)  # a word longer than any key is not held
    await deltas.flush()
    assert [len(e.text) for e in seen if isinstance(e, DeltaEvent)] == [DELTA_TAIL]


async def test_the_command_shows_streamed_text_on_a_terminal_and_not_in_a_pipe(
    ws: Path, store: hn.Store, tmp_path: Path
) -> None:
    master, slave = pty.openpty()
    try:
        with open(slave, "w", closefd=False) as tty, open(tmp_path / "pipe.txt", "w") as piped:
            on_tty, on_pipe = LineProgress(tty), LineProgress(piped)

            def both(event: hn.RunEvent) -> None:
                on_tty(event)
                on_pipe(event)

            with ChaosServer(responder=answer) as srv:
                srv.set_default(Fault.trickle(0.12))
                await hn.run(contract(ws), make("openai", srv), store=store, on_event=both)
        seen = _read_all(master)
    finally:
        os.close(master)
        os.close(slave)
    assert "  > Streaming works" in seen and "\x1b[K" in seen
    assert "step 1/12: answered" in seen
    text = (tmp_path / "pipe.txt").read_text()
    assert "Streaming works" not in text and "\x1b" not in text
    assert "step 1/12: answered" in text


def _read_all(fd: int) -> str:
    """Everything written to a pty so far (one read may return only part of it)."""
    out = b""
    while select.select([fd], [], [], 0.2)[0]:
        out += os.read(fd, 65536)
    return out.decode()


# ------------------------------------------------------------------ fallback, record, replay


async def test_fallback_streams_every_leg(ws: Path, store: hn.Store) -> None:
    watch = Watcher()
    with ChaosServer(responder=answer) as a, ChaosServer(responder=answer) as b:
        a.set_default(Fault.stall_stream(after_events=2, seconds=30.0))
        b.set_default(Fault.trickle(0.12))
        provider = hn.Fallback(make("openai", a), make("anthropic", b))
        result = await hn.run(contract(ws, max_retries=0), provider, store=store,
                              on_event=watch)  # fmt: skip
        assert [r.stream for r in a.requests + b.requests] == [True, True]
    watch.widget.close()
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    rows = attempts_of(store, result.run_id)
    assert [(r["provider"], r["kind"], r["fell_back"]) for r in rows] == [
        ("openai", "timeout", True), ("anthropic", None, False)]  # fmt: skip
    assert rows[1]["ttft_ms"] > 0
    assert "written." in watch.shown[-1]


async def test_a_streamed_run_records_and_replays(ws: Path, tmp_path: Path) -> None:
    with hn.Store(tmp_path / "rec.duckdb") as source:
        with ChaosServer(responder=answer) as srv:
            recorder = hn.Record(make("anthropic", srv), source)
            original = await hn.run(contract(ws), recorder, store=source, run_id="run_s")
            assert [r.stream for r in srv.requests] == [True]
        replayed_store = hn.Store(":memory:")
        again = await hn.replay("run_s", source, store=replayed_store)
    assert original.outcome is again.outcome is hn.RunOutcome.FINISHED
    assert again.text == original.text == ANSWER
    assert [r["kind"] for r in attempts_of(replayed_store, again.run_id)] == [None]


async def test_the_shipped_recording_still_replays(tmp_path: Path) -> None:
    from harnessnb.demo import make_demo_workspace

    copy = shutil.copy(ROOT / "notebooks" / "data" / "recorded-run.duckdb", tmp_path / "r.duckdb")
    with hn.Store(copy) as source:
        run_id = str(source.runs()["run_id"].iloc[0])
        result = await hn.replay(
            run_id, source, store=hn.Store(":memory:"),
            workspace=make_demo_workspace(tmp_path / "project"),
            policy=hn.Policy.default().layer("replay").allow_write("NOTES.md"),
        )  # fmt: skip
        assert hn.Replay(source).hosts() == []
    assert result.outcome is hn.RunOutcome.SUCCESS, result.error
