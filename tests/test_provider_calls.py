"""What a provider call hands back and takes, against real HTTP on loopback: its attempts
ride on the answer (``Completion.attempts``), on the failure (``ProviderError.attempts``)
and on the cancel that cut it off; streamed text goes to the ``on_text`` it is given and
the run it is made for is its ``run_id``: no ambient channel carries them. A provider
written with ``complete(messages, tools)`` alone still works, alone or in a Fallback."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb.chaos import ChaosServer, Fault, Reply
from harnessnb.events import DeltaEvent
from harnessnb.providers._completion import Attempted

ROOT = Path(__file__).resolve().parents[1]
HI = [{"role": "user", "content": "hi"}]


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


class Plain:
    """A provider written against the protocol's first form: (messages, tools) only."""

    name = "plain"
    model = "plain-1"

    def __init__(self, reply: str | hn.ProviderError) -> None:
        self.reply = reply
        self.calls = 0

    def hosts(self) -> list[str]:
        return []

    async def complete(self, messages: Any, tools: Any = None) -> hn.Completion:
        self.calls += 1
        if isinstance(self.reply, hn.ProviderError):
            raise self.reply
        return hn.Completion(text=self.reply, provider=self.name, model=self.model)


class Listening(Plain):
    """A provider that streams to the sink it is given and notes the run it serves."""

    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.run_ids: list[str | None] = []

    async def complete(  # type: ignore[override]
        self,
        messages: Any,
        tools: Any = None,
        *,
        on_text: Callable[[str, bool], Awaitable[None]] | None = None,
        run_id: str | None = None,
    ) -> hn.Completion:
        self.run_ids.append(run_id)
        assert on_text is not None
        await on_text("streamed ", True)
        await on_text("words", False)
        return await super().complete(messages, tools)


async def test_an_answer_carries_both_attempts_of_a_refused_stream() -> None:
    with ChaosServer() as srv:
        srv.set_default(Fault.rejects_streaming())
        done = await hn.OpenAI("m", base_url=srv.openai_url).complete(HI)
    assert [(a.kind, a.status) for a in done.attempts] == [("request", 400), (None, 200)]
    assert len(srv.requests) == 2


async def test_a_failure_carries_the_attempts_of_every_leg() -> None:
    with ChaosServer() as a, ChaosServer() as b:
        a.set_default(Fault.status(503))
        b.set_default(Fault.status(401))
        left, right = hn.OpenAI("m", base_url=a.openai_url), hn.OpenAI("m", base_url=b.openai_url)
        with pytest.raises(hn.ProviderError) as info:
            await hn.Fallback(left, right).complete(HI)
    # The second leg's 401 is raised as itself, carrying the first leg's attempt too.
    assert info.value.kind is hn.ProviderErrorKind.AUTH
    assert [(a.status, a.fell_back) for a in info.value.attempts] == [(503, True), (401, False)]


async def test_streamed_text_goes_to_the_sink_passed_to_complete() -> None:
    pieces: list[tuple[str, bool]] = []

    async def sink(piece: str, first: bool) -> None:
        pieces.append((piece, first))

    with ChaosServer(responder=lambda r: Reply(text="a streamed answer")) as srv:
        done = await hn.OpenAI("m", base_url=srv.openai_url).complete(HI, on_text=sink)
        again = await hn.OpenAI("m", base_url=srv.openai_url).complete(HI)  # no sink: fine
    assert "".join(p for p, _ in pieces) == done.text == again.text == "a streamed answer"
    assert pieces[0][1] is True and not any(first for _, first in pieces[1:])


async def test_a_plain_provider_answers_alone_and_inside_a_fallback(tmp_path: Path) -> None:
    refused = hn.ProviderError("busy", kind=hn.ProviderErrorKind.SERVER, provider="plain")
    done = await hn.Fallback(Plain(refused), Plain("from the second")).complete(HI)
    assert done.text == "from the second"
    with hn.Store(tmp_path / "s.duckdb") as store:
        contract = hn.TaskContract("hi", workspace(tmp_path))
        result = await hn.run(contract, Plain("hello"), store=store)
        rows = store.attempts(result.run_id)
    assert result.outcome is hn.RunOutcome.FINISHED and result.text == "hello"
    # It reports no attempt itself: the loop writes the one its call was.
    assert rows[["provider", "model"]].values.tolist() == [["plain", "plain-1"]]


async def test_a_run_passes_its_text_sink_and_its_id_as_arguments(tmp_path: Path) -> None:
    provider = Listening("streamed words")
    deltas: list[str] = []

    def seen(event: hn.RunEvent) -> None:
        if isinstance(event, DeltaEvent):
            deltas.append(event.text)

    contract = hn.TaskContract("hi", workspace(tmp_path))
    result = await hn.run(contract, provider, store=hn.Store(":memory:"), on_event=seen)
    assert result.outcome is hn.RunOutcome.FINISHED
    assert provider.run_ids == [result.run_id]
    assert "".join(deltas).endswith("streamed words")


def busy_then_silent(a: ChaosServer, b: ChaosServer, hang_s: float) -> hn.Fallback:
    """A Fallback whose first leg answers 503 and whose second leg never answers."""
    a.set_default(Fault.status(503))
    b.set_default(Fault.hang(hang_s))
    second = hn.OpenAI("m", base_url=b.openai_url, name="second")
    return hn.Fallback(hn.OpenAI("m", base_url=a.openai_url), second)


async def test_a_cancel_keeps_the_legs_before_it_and_the_one_it_cut_off(tmp_path: Path) -> None:
    with ChaosServer() as a, ChaosServer() as b, hn.Store(tmp_path / "s.duckdb") as store:
        provider = busy_then_silent(a, b, 30)
        task = asyncio.ensure_future(
            hn.run(hn.TaskContract("hi", workspace(tmp_path)), provider, store=store)
        )
        while not b.requests:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        rows = store.attempts()
    assert rows[["provider", "fell_back", "cancelled"]].values.tolist() == [
        ["openai", True, False],
        ["second", False, True],
    ]
    assert rows["status"].iloc[0] == 503 and rows["status"].isna().iloc[1]


async def test_the_time_budget_keeps_the_legs_before_it_as_they_were(tmp_path: Path) -> None:
    with ChaosServer() as a, ChaosServer() as b, hn.Store(tmp_path / "s.duckdb") as store:
        provider = busy_then_silent(a, b, 10)
        contract = hn.TaskContract("hi", workspace(tmp_path), max_time_s=1.0, max_retries=0)
        result = await hn.run(contract, provider, store=store)
        rows = store.attempts()
    assert result.outcome is hn.RunOutcome.TIME_BUDGET
    assert rows[["provider", "kind", "fell_back", "cancelled"]].values.tolist() == [
        ["openai", "server", True, False],
        ["second", "timeout", False, False],
    ]


def test_no_context_variable_carries_attempts_text_or_a_run() -> None:
    found = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "harnessnb").rglob("*.py")
        if re.search(r"ContextVar\[", path.read_text())
    }
    # The one left is a scheduling flag (a run the main thread waits for), no data.
    assert found == {"harnessnb/loop/_bridge.py"}


async def test_record_hands_a_plain_provider_only_what_it_takes(tmp_path: Path) -> None:
    with hn.Store(tmp_path / "s.duckdb") as store:
        recorded = hn.Record(Plain("hello"), store)
        done = await recorded.complete(HI, run_id="run-1")
        replayed = await hn.Replay(store, run_id="run-1").complete(HI)
    assert done.text == replayed.text == "hello"
    # Replay answers without HTTP: its one attempt is on the answer, as recorded.
    assert [(a.provider, a.kind) for a in replayed.attempts] == [("plain", None)]


def test_a_failed_and_a_cut_off_record_name_their_attempt_alike() -> None:
    # Both constructors take one Attempted (who, when, how long, where), kept alike: the
    # server's address without its credentials, the caller's dict left as it was.
    url = "https://user:sk-in-url@llm.test:8443/v1?key=sk-in-query"
    attempted: Attempted = {
        "provider": "p",
        "model": "m",
        "started_at": 1.0,
        "latency_ms": 2500.0,
        "ttft_ms": 40.0,
        "base_url": url,
    }
    err = hn.ProviderError(
        "boom", kind=hn.ProviderErrorKind.RATE_LIMITED, status=429, retry_after_s=3, request_id="r1"
    )
    failed = hn.AttemptRecord.failed(err, **attempted)
    cut = hn.AttemptRecord.cut_off(status=200, request_id="r2", **attempted)
    for rec in (failed, cut):
        assert (rec.provider, rec.model, rec.started_at, rec.latency_ms, rec.ttft_ms) == (
            "p",
            "m",
            1.0,
            2500.0,
            40.0,
        )
        assert rec.base_url == "https://llm.test:8443/v1"
    assert attempted["base_url"] == url
    assert (failed.kind, failed.status, failed.retry_after_s, failed.request_id) == (
        "rate_limited",
        429,
        3,
        "r1",
    )
    assert not failed.cancelled and failed.input_tokens is None
    assert cut.cancelled and cut.kind is None and (cut.status, cut.request_id) == (200, "r2")
    assert cut.error == "cut off by a cancel after 2.5 s"
    bare = hn.AttemptRecord.cut_off(provider="p", model="m", started_at=1.0, latency_ms=9.0)
    assert bare.base_url is None and bare.ttft_ms is None
