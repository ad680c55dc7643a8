"""Every attempt is a row when it happens: a real ``harnessnb run`` process stopped by
SIGINT or SIGKILL after failed attempts leaves one row per request the server saw; a
local server is recorded as ``local`` with its URL; its run resumes with no API key
and numbers its attempts on from the last one; no attempt row is written twice; the
request a cancel cuts off is a row marked ``cancelled``, in no failure rate."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply
from tests.files_helpers import folder
from tests.store_helpers import old_store

ROOT = Path(__file__).resolve().parent.parent
KEYS = (
    "HARNESSNB_PROVIDER", "OPENROUTER_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_API_KEY",
    "OPENROUTER_BASE_URL", "ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "HARNESSNB_STORE",
)  # fmt: skip
RETRY_AFTER_S = 3  # the wait a 503 asks for: the signal lands inside it


def answer(request: ChaosRequest) -> Reply:
    """A tool call first; once a tool result is in the conversation, a final answer."""
    if any(m.get("role") == "tool" for m in request.json.get("messages", [])):
        return Reply(text="done")
    return Reply(tool_calls=[{"name": "list_dir", "arguments": {"path": "."}}])


def env() -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in KEYS}
    out["PYTHONPATH"] = str(ROOT)
    return out


def harnessnb(*args: str) -> list[str]:
    return [sys.executable, "-m", "harnessnb", *args]


def wait_for_requests(srv: ChaosServer, n: int, proc: subprocess.Popen[Any]) -> None:
    deadline = time.monotonic() + 60
    while len(srv.requests) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"the server saw {len(srv.requests)} requests"
        time.sleep(0.02)


def stopped_run(tmp_path: Path, srv: ChaosServer, sig: signal.Signals) -> Path:
    """A real ``harnessnb run --provider local`` whose 2nd step fails twice with 503 (the
    1st step also failed twice before it was answered), stopped by ``sig`` while it
    waits to retry. Returns the store's path."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    store = tmp_path / "runs.duckdb"
    busy = Fault.status(503, retry_after=str(RETRY_AFTER_S))
    srv.push(busy, busy, Fault.slow(0.0), busy, busy)
    srv.set_default(busy)
    proc = subprocess.Popen(
        harnessnb("run", "list the files", "--workspace", str(ws), "--store", str(store),
                  "--provider", "local", "--base-url", srv.openai_url, "--model", "m"),
        env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for_requests(srv, 5, proc)
        time.sleep(1.0)  # the 5th attempt has ended; its retry waits RETRY_AFTER_S
        proc.send_signal(sig)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    srv.set_default(None)
    return store


def kinds(rows: Any) -> list[str | None]:
    return [k if isinstance(k, str) else None for k in rows["kind"]]


def check_rows(store_path: Path, srv: ChaosServer) -> tuple[str, Any]:
    with hn.Store(store_path) as store:
        runs = store.runs()
        assert len(runs) == 1
        run_id = str(runs["run_id"].iloc[0])
        rows = store.attempts(run_id)
    seen = srv.requests
    # One row per request the server saw, each once, numbered 1..n.
    assert len(rows) == len(seen) == 5
    assert rows["attempt"].tolist() == [1, 2, 3, 4, 5]
    assert kinds(rows) == ["server", "server", None, "server", "server"]
    assert rows["status"].tolist() == [503, 503, 200, 503, 503]
    # A local server says so: its name and its URL, on every row.
    assert set(rows["provider"]) == {"local"}
    assert set(rows["base_url"]) == {srv.openai_url}
    return run_id, rows


def test_sigint_keeps_every_failed_attempt_and_the_run_resumes_without_a_key(
    tmp_path: Path,
) -> None:
    with ChaosServer(responder=answer) as srv:
        store = stopped_run(tmp_path, srv, signal.SIGINT)
        run_id, _ = check_rows(store, srv)
        with hn.Store(store) as s:
            assert s.runs(run_id)["outcome"].iloc[0] == "cancelled"
        # No OPENAI_API_KEY (nor any key) in the environment, no --provider: the
        # recorded local server is asked again.
        done = subprocess.run(
            harnessnb("resume", run_id, "--store", str(store)),
            env=env(), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert "OPENAI_API_KEY" not in done.stdout + done.stderr
        assert done.returncode == 0, done.stdout + done.stderr
        assert len(srv.requests) == 6
    with hn.Store(store) as s:
        rows = s.attempts(run_id)
        run = s.get_run(run_id)
    assert run is not None and run["outcome"] in ("finished", "success")
    assert run["provider"] == "local" and run["base_url"] == srv.openai_url
    # The attempt numbers go on after the resume: 6, not 1.
    assert rows["attempt"].tolist() == [1, 2, 3, 4, 5, 6]
    assert kinds(rows)[-1] is None
    assert set(rows["provider"]) == {"local"}


def test_sigkill_keeps_every_failed_attempt(tmp_path: Path) -> None:
    with ChaosServer(responder=answer) as srv:
        store = stopped_run(tmp_path, srv, signal.SIGKILL)
        run_id, _ = check_rows(store, srv)
    with hn.Store(store) as s:
        assert s.runs(run_id)["outcome"].isna().all()  # killed: no outcome written


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return folder(tmp_path / "ws")


async def test_attempts_that_end_the_run_are_written_once(ws: Path, tmp_path: Path) -> None:
    with hn.set_testing(True), ChaosServer() as srv, hn.Store(tmp_path / "s.duckdb") as store:
        srv.set_default(Fault.status(503))
        provider = hn.OpenAI("m", base_url=srv.openai_url, name="my-vllm")
        result = await hn.run(hn.TaskContract("hi", ws, max_retries=2), provider, store=store)
        assert result.outcome is hn.RunOutcome.ESCALATED_RETRYABLE
        rows = store.attempts(result.run_id)
        assert len(rows) == len(srv.requests) == 3 == result.attempts
        assert rows["attempt"].tolist() == [1, 2, 3]
        assert set(rows["provider"]) == {"my-vllm"}
        assert set(rows["base_url"]) == {srv.openai_url}
        rates = store.failure_rates(by="provider")
        assert rates[["provider", "attempts", "failures"]].values.tolist() == [["my-vllm", 3, 3]]


async def test_a_cancel_during_the_retry_wait_keeps_the_failed_attempts(
    ws: Path, tmp_path: Path
) -> None:
    import asyncio

    # Real waiting on, so the run is inside its 30 s wait when cancelled (not slept out).
    with hn.set_testing(False), ChaosServer() as srv, hn.Store(tmp_path / "s.duckdb") as store:
        srv.set_default(Fault.status(503, retry_after="30"))
        provider = hn.OpenAI("m", base_url=srv.openai_url)
        task = asyncio.ensure_future(hn.run(hn.TaskContract("hi", ws), provider, store=store))
        while not srv.requests:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # in the 30 s wait before the retry
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        rows = store.attempts()
        assert len(rows) == len(srv.requests) == 1
        assert rows[["provider", "kind", "status", "base_url"]].values.tolist() == [
            ["openai", "server", 503, srv.openai_url]
        ]
        assert store.runs()["outcome"].tolist() == ["cancelled"]


async def test_an_attempt_a_cancel_cuts_off_is_a_row_in_no_failure_rate(
    ws: Path, tmp_path: Path
) -> None:
    """The server has (and may bill) the request the cancel cuts off: it is a row,
    marked ``cancelled``, with no kind, and no provider's failure rate counts it."""
    import asyncio

    with ChaosServer(responder=answer) as srv, hn.Store(tmp_path / "s.duckdb") as store:
        # A 503 retried, then the answer (a tool call); the next step's request is held.
        srv.push(Fault.status(503), Fault.slow(0.0), Fault.hang(30))
        provider = hn.OpenAI("m", base_url=srv.openai_url)
        task = asyncio.ensure_future(hn.run(hn.TaskContract("list", ws), provider, store=store))
        while len(srv.requests) < 3:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # the server holds the third request
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        rows = store.attempts()
        assert len(rows) == len(srv.requests) == 3
        assert rows["attempt"].tolist() == [1, 2, 3]
        assert rows["step"].tolist() == [1, 1, 2]
        assert kinds(rows) == ["server", None, None]
        assert rows["cancelled"].tolist() == [False, False, True]
        assert rows["status"].tolist()[:2] == [503, 200] and rows["status"].isna().tolist()[2]
        assert set(rows["base_url"]) == {srv.openai_url}
        assert store.runs()["outcome"].tolist() == ["cancelled"]
        # One failure out of the two attempts the provider answered.
        rates = store.failure_rates(by="provider")
        assert rates[["provider", "attempts", "failures"]].values.tolist() == [["openai", 2, 1]]
        by_kind = store.failure_rates()
        assert by_kind["attempts"].tolist() == [2] and by_kind["failures"].tolist() == [1]


async def test_an_attempt_the_time_budget_cuts_off_is_a_timeout_not_a_cancel(
    ws: Path, tmp_path: Path
) -> None:
    with ChaosServer() as srv, hn.Store(tmp_path / "s.duckdb") as store:
        srv.set_default(Fault.hang(10))
        provider = hn.OpenAI("m", base_url=srv.openai_url)
        contract = hn.TaskContract("hi", ws, max_time_s=0.3)
        result = await hn.run(contract, provider, store=store)
        assert result.outcome is hn.RunOutcome.TIME_BUDGET
        rows = store.attempts()
        assert len(rows) == len(srv.requests) == 1
        assert kinds(rows) == ["timeout"] and rows["cancelled"].tolist() == [False]
        assert rows["provider"].tolist() == ["openai"]


def test_a_store_from_before_cancelled_attempts_keeps_its_rows_counted(tmp_path: Path) -> None:
    path = tmp_path / "v7.duckdb"
    con = old_store(path, 7)
    con.execute("INSERT INTO attempts (run_id, attempt, provider, kind) VALUES "
                "('old', 1, 'openai', 'server'), ('old', 2, 'openai', NULL)")  # fmt: skip
    con.close()
    with hn.Store(path) as store:
        rows = store.attempts("old")
        assert rows["cancelled"].tolist() == [False, False]
        rates = store.failure_rates(by="provider")
        assert rates[["provider", "attempts", "failures"]].values.tolist() == [["openai", 2, 1]]


def test_base_url_rows_keep_no_credentials() -> None:
    provider = hn.OpenAI("m", base_url="http://user:pw@127.0.0.1:9/v1")
    from harnessnb.loop._model_call import provider_url
    from harnessnb.providers._completion import shown_url

    assert provider_url(provider) == "http://127.0.0.1:9/v1"
    # a provider refuses a query (ConfigError); another's URL is still kept without it
    assert shown_url("http://user:pw@127.0.0.1:9/v1?key=sk-x#f") == "http://127.0.0.1:9/v1"
    assert provider.name == "openai"


def test_resume_rebuilds_a_recorded_server_without_a_key() -> None:
    from harnessnb.launch._choose import provider_for_resume

    run = {"provider": "local", "model": "m", "base_url": "http://127.0.0.1:9/v1"}
    provider, note = provider_for_resume(run, env={})
    assert (provider.name, provider.model, getattr(provider, "base_url", None)) == (
        "local", "m", "http://127.0.0.1:9/v1")  # fmt: skip
    assert "local" in note
    # Named on the command line without --base-url: the recorded server again.
    provider, _ = provider_for_resume(run, "local", env={})
    assert getattr(provider, "base_url", None) == "http://127.0.0.1:9/v1"
    # An OpenAI run at the official host still needs the key, and says so.
    official = {"provider": "openai", "model": "m", "base_url": "https://api.openai.com/v1"}
    with pytest.raises(hn.ConfigError, match="OPENAI_API_KEY"):
        provider_for_resume(official, env={})


SLOW_TOOL_RUN = """
import sys, time
import harnessnb as hn

@hn.tool
def wait_here(seconds: float) -> str:
    '''Wait.'''
    print("tool started", flush=True)
    time.sleep(seconds)
    return "waited"

hn.run_sync(
    hn.TaskContract("wait", sys.argv[1], max_steps=2),
    hn.OpenAI("m", base_url=sys.argv[2], api_key="none"),
    store=sys.argv[3], tools=[wait_here], policy=hn.Policy.permissive(),
)
"""


def test_sigkill_during_a_long_tool_keeps_the_successful_attempt(tmp_path: Path) -> None:
    """A successful call's row may wait a moment for its step's commit, to share it;
    never longer: killed while the step's tool still runs, the row is there."""

    def slow_tool(request: ChaosRequest) -> Reply:
        return Reply(tool_calls=[{"name": "wait_here", "arguments": {"seconds": 60}}])

    ws = tmp_path / "ws"
    ws.mkdir()
    store = tmp_path / "runs.duckdb"
    with ChaosServer(responder=slow_tool) as srv:
        proc = subprocess.Popen(
            [sys.executable, "-c", SLOW_TOOL_RUN, str(ws), srv.openai_url, str(store)],
            env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()  # blocks until the tool runs (or the run dies)
            assert line.strip() == "tool started", proc.communicate()
            # 40 times the rows' linger (ATTEMPT_LINGER_S, 0.05 s), well inside the tool's
            # 60 s wait: 0.5 s was too short for the writer's commit on a machine at load 7.
            time.sleep(2.0)
            proc.kill()
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        assert len(srv.requests) == 1
    with hn.Store(store) as s:
        rows = s.attempts()
        steps = s.steps()
    assert len(steps) == 0  # the step never committed: its tool was still running
    assert len(rows) == 1 and rows["status"].tolist() == [200]
