"""Progress state and views, the WidgetApprover (buttons driven from another thread),
environment detection, cards and plot_failures."""

from __future__ import annotations

import asyncio
import builtins
import datetime as dt
import io
import threading
import time
from pathlib import Path
from typing import Any, TypeVar

import pytest

import harnessnb as hn
from harnessnb.chaos import ChaosServer
from harnessnb.events import (
    FellBackEvent,
    FinishedEvent,
    ReplanEvent,
    RetryEvent,
    RunEvent,
    StartedEvent,
    StepEvent,
    ToolCallEvent,
)
from harnessnb.loop._result import ToolCallSummary
from harnessnb.notebook import WidgetApprover, plot_failures
from harnessnb.notebook._env import widget_frontend
from harnessnb.notebook._progress import ProgressState, TextProgress, WidgetProgress
from harnessnb.store._writer import store_writer
from tests.chaos_helpers import NOTES, writes_notes
from tests.store_helpers import attempt, run_row

E = TypeVar("E", bound=RunEvent)


def ev(kind: type[E], step: int = 0, /, **fields: Any) -> E:
    return kind(run_id="run_x", step=step, at=0.0, **fields)


def request(**kw: Any) -> hn.ApprovalRequest:
    base: dict[str, Any] = dict(act="write", target="NOTES.md", preview="+# Notes <b>",
                                rule="write:*", layer="default", tool="write_file")
    return hn.ApprovalRequest(**{**base, **kw})


# ------------------------------------------------------------------ progress


def test_retry_line_counts_down_the_wait() -> None:
    state = ProgressState()
    state.fold(ev(StartedEvent, max_steps=5, provider="openai", model="m"), now=100.0)
    line = state.fold(ev(RetryEvent, error_kind="rate_limited", status=429, attempt=2,
                         max_attempts=3, delay_s=7.0, retry_after_s=7.0), now=100.0)
    assert line == "rate_limited (HTTP 429) - retrying in 7 s, attempt 2/3"
    assert state.retry_line(now=103.2) == "rate_limited (HTTP 429) - retrying in 4 s, attempt 2/3"
    assert state.text(now=103.2).startswith("run_x: step 0/5, 0 tokens, 3 s - rate_limited")
    state.fold(ev(StepEvent, 1, tokens=40, tool_calls=0, provider="openai"), now=104.0)
    assert state.retry is None and (state.step, state.tokens) == (1, 40)


def test_fallback_replan_and_step_served_elsewhere_become_notes() -> None:
    state = ProgressState()
    state.fold(ev(StartedEvent, max_steps=3, provider="fallback", model=None), now=0.0)
    state.fold(ev(FellBackEvent, from_provider="openai", model="m", error_kind="server",
                  status=503), now=1.0)
    state.fold(ev(StepEvent, 1, tokens=5, tool_calls=0, provider="anthropic"), now=1.0)
    state.fold(ev(ReplanEvent, 2, signal="window", detail="same calls"), now=2.0)
    assert state.notes == [
        "fell back from openai after server (HTTP 503)",
        "step 1 served by anthropic",
        "stall (window): same calls; told the model to change approach",
    ]
    assert "<li>stall (window): same calls; told the model to change approach</li>" in state.html(
        now=2.0
    )


def test_progress_html_escapes_tool_arguments() -> None:
    state = ProgressState()
    state.fold(ev(ToolCallEvent, 1, tool="read_file", args={"path": "<img src=x>"},
                  status="ok"),
               now=0.0)
    assert "<img" not in state.html(now=0.0)
    assert "&lt;img src=x&gt;" in state.html(now=0.0)


def test_text_progress_prints_one_line_per_event_worth_it() -> None:
    out = io.StringIO()
    progress = TextProgress(stream=out, clock=lambda: 0.0)
    progress(ev(StartedEvent, max_steps=2, provider="openai", model="m"))
    progress(ev(RetryEvent, error_kind="server", status=503, attempt=2, max_attempts=3,
                delay_s=1.0))
    progress(ev(FinishedEvent, outcome="finished", steps=1, tokens=0))
    assert out.getvalue().splitlines() == [
        "[harnessnb] started run_x with openai (m)",
        "[harnessnb] server (HTTP 503) - retrying in 1 s, attempt 2/3",
    ]


def test_widget_progress_updates_from_another_thread_and_throttles() -> None:
    now = [0.0]
    progress = WidgetProgress(min_interval=0.5, clock=lambda: now[0])
    progress(ev(StartedEvent, max_steps=4, provider="openai", model="m"))
    step = ev(StepEvent, 1, tokens=10, tool_calls=0, provider=None)
    worker = threading.Thread(target=progress, args=(step,))
    worker.start()
    worker.join()
    assert progress.bar.value == 0  # throttled: within 0.5 s of the last update
    now[0] = 1.0
    progress(ev(StepEvent, 2, tokens=20, tool_calls=0, provider=None))
    assert (progress.bar.value, progress.bar.max) == (2, 4)
    progress(ev(RetryEvent, error_kind="rate_limited", status=429, attempt=2, max_attempts=3,
                delay_s=9))
    assert "rate_limited (HTTP 429) - retrying in 9 s, attempt 2/3" in progress.status.value
    progress.show()
    progress.close()


# ------------------------------------------------------------------ environment


def test_no_widget_frontend_outside_a_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeKernelShell:
        kernel = object()

    monkeypatch.delenv("HARNESSNB_NO_WIDGETS", raising=False)
    assert widget_frontend(object()) is False  # a shell without a kernel (terminal IPython)
    assert widget_frontend(FakeKernelShell()) is True
    monkeypatch.setenv("HARNESSNB_NO_WIDGETS", "1")
    assert widget_frontend(FakeKernelShell()) is False


# ------------------------------------------------------------------ approver


def _click_when_shown(approver: WidgetApprover, action: str, reason: str = "") -> threading.Thread:
    def click() -> None:
        deadline = time.monotonic() + 5
        while not approver.panels and time.monotonic() < deadline:
            time.sleep(0.01)
        panel = approver.panels[-1]
        if reason:
            panel.reason.value = reason
        getattr(panel, f"{action}_button").click()

    thread = threading.Thread(target=click)
    thread.start()
    return thread


async def test_approve_button_clicked_from_another_thread_approves() -> None:
    approver = WidgetApprover(widgets=True)
    clicker = _click_when_shown(approver, "approve")
    decision = await approver(request())
    clicker.join()
    assert decision == hn.Decision.approve()
    panel = approver.panels[0]
    assert panel.approve_button.disabled and "approved" in panel.status.value
    assert "&lt;b&gt;" in panel.summary.value and "write:*" in panel.summary.value


async def test_deny_button_carries_the_typed_reason() -> None:
    approver = WidgetApprover(widgets=True)
    clicker = _click_when_shown(approver, "deny", reason="not that file")
    decision = await approver(request())
    clicker.join()
    assert decision == hn.Decision.deny("not that file")
    approver.panels[0].deny_button.click()  # a second click changes nothing
    assert approver.panels[0].decision == hn.Decision.deny("not that file")


async def test_unanswered_request_defers_after_the_timeout() -> None:
    approver = WidgetApprover(widgets=True, timeout_s=0.05)
    decision = await approver(request())
    assert decision.kind == "defer"


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "soon", [1]])
def test_a_timeout_that_is_no_number_of_seconds_is_a_config_error(timeout: Any) -> None:
    # NaN used to wait for ever (not "S seconds at most"), 0 and -1 to give up at once.
    with pytest.raises(hn.ConfigError, match="seconds above 0"):
        WidgetApprover(timeout_s=timeout)
    assert WidgetApprover(timeout_s=dt.timedelta(seconds=2)).timeout_s == 2.0


async def test_without_frontend_the_default_is_a_refusal_that_says_how_to_allow() -> None:
    decision = await WidgetApprover(widgets=False)(request())
    assert decision.kind == "deny"
    assert "allow_write('NOTES.md')" in str(decision.reason)
    assert "--allow-write" in str(decision.reason)


@pytest.mark.parametrize(("reply", "kind"), [("y", "approve"), ("no way", "deny"), ("", "deny")])
async def test_prompt_fallback_asks_on_stdin(
    monkeypatch: pytest.MonkeyPatch, reply: str, kind: str
) -> None:
    monkeypatch.setattr(builtins, "input", lambda prompt="": reply)
    decision = await WidgetApprover(widgets=False, fallback="prompt")(request())
    assert decision.kind == kind


def test_bad_fallback_is_refused() -> None:
    with pytest.raises(ValueError, match="fallback"):
        WidgetApprover(fallback="maybe")  # type: ignore[arg-type]


def test_a_run_waits_for_the_click_on_the_harness_loop(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    approver = WidgetApprover(widgets=True)
    with ChaosServer(responder=writes_notes) as srv:
        clicker = _click_when_shown(approver, "approve")
        result = hn.run_sync(
            hn.TaskContract("write notes", tmp_path / "ws", max_steps=3),
            hn.OpenAI("m", base_url=srv.openai_url),
            store=hn.Store(":memory:"),
            approver=approver,
        )
        clicker.join()
    assert result.outcome is hn.RunOutcome.FINISHED
    assert (tmp_path / "ws" / "NOTES.md").read_text() == NOTES
    assert approver.panels[0].request.target == "NOTES.md"


async def test_cancelled_wait_marks_the_panel() -> None:
    approver = WidgetApprover(widgets=True)
    task = asyncio.ensure_future(approver(request()))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert "cancelled" in approver.panels[0].status.value


# ------------------------------------------------------------------ cards


def test_run_card_has_an_escaped_collapsible_step_table() -> None:
    result = hn.RunResult(
        run_id="run_1", outcome=hn.RunOutcome.FINISHED, steps=1, tokens=3,
        text="<script>x()</script>",
        step_summaries=(hn.StepSummary(1, "tool_calls", (ToolCallSummary("read_file", "ok"),), 3,
                                       provider="<b>p</b>", failures=("server 503",)),),
    )
    bundle = result._repr_mimebundle_()
    html = bundle["text/html"]
    assert "<details" in html and "<summary>1 step</summary>" in html
    assert "<script>" not in html and "&lt;b&gt;p&lt;/b&gt;" in html
    assert "server 503" in html
    assert "step 1: decision tool_calls, tools read_file, tokens 3" in bundle["text/plain"]


# ------------------------------------------------------------------ plot


def test_plot_failures_draws_bars_by_provider_and_kind_with_intervals() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    frame = pd.DataFrame({
        "provider": ["a", "a", "b"], "kind": ["server", "rate_limited", None],
        "attempts": [10, 10, 4], "failures": [2, 1, 0], "failure_rate": [0.2, 0.1, 0.0],
    })
    import matplotlib.pyplot as plt

    assert plot_failures(frame) is None  # a cell ending in it echoes no <Axes ...> line
    axes = plt.gca()
    # a provider with no failure is shown, at zero, not dropped
    assert [t.get_text() for t in axes.get_xticklabels()] == ["a", "b"]
    assert sorted(t.get_text() for t in axes.get_legend().get_texts()) == [
        "rate_limited", "server"
    ]
    heights = sorted(round(p.get_height(), 3) for p in axes.patches)
    assert heights == [0.0, 0.0, 0.1, 0.2]
    assert axes.get_ylim()[0] == 0.0  # never a negative axis
    # one error bar per bar, from the 95% interval: 2 of 10 is 0.057 to 0.510
    tops = sorted(round(max(seg[:, 1]), 3) for c in axes.containers
                  if hasattr(c, "lines") and c.lines[2] for seg in c.lines[2][0].get_segments())
    assert 0.51 in tops and len(tops) == 4


def test_plot_failures_says_when_there_is_nothing_to_draw(tmp_path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, (empty, calm) = plt.subplots(1, 2)
    plot_failures(hn.Store(tmp_path / "empty.duckdb"), ax=empty)
    assert "no attempts recorded yet" in empty.get_title()
    assert empty.get_ylim() == (0.0, 1.0)
    store = hn.Store(tmp_path / "calm.duckdb")
    store_writer(store).create_run(run_row("r1"))
    store_writer(store).add_attempts("r1", [attempt(1, 0), attempt(1, 1, provider="anthropic")])
    plot_failures(store, ax=calm)
    assert "no failures in 2 attempts" in calm.get_title()
    assert [t.get_text() for t in calm.get_xticklabels()] == ["anthropic", "openai"]
    assert calm.get_ylim()[0] == 0.0


def test_plot_failures_without_matplotlib_says_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    with pytest.raises(hn.ConfigError, match="pip install matplotlib"):
        plot_failures(hn.Store(":memory:"))
