"""A run's result carries its steps (``hn.StepSummary``), kept by the loop as it commits
each one: the card reads no store. ``hn.RunResult.from_store`` rebuilds the same result
from the rows, for ``%harness show``."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output

import harnessnb as hn
from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply
from harnessnb.loop._result import ToolCallSummary
from harnessnb.notebook import _magics


class CountingStore(hn.Store):
    """A store on a real DuckDB file that counts the queries made through it (every
    read takes its connection with ``_connection``)."""

    queries = 0

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        CountingStore.queries += 1
        with super()._connection() as con:
            yield con


def _writer(request: ChaosRequest) -> Reply:
    """Step 1 writes NOTES.md, step 2 answers."""
    if any(m.get("role") == "tool" for m in request.messages):
        return Reply(text="wrote NOTES.md", input_tokens=20, output_tokens=5)
    return Reply(
        tool_calls=[{"name": "write_file", "arguments": {"path": "NOTES.md", "content": "# N\n"}}],
        input_tokens=10,
        output_tokens=4,
    )


def _policy() -> hn.Policy:
    return hn.Policy.default().layer("test").allow_write("NOTES.md")


def _run(
    ws: Path, store: hn.Store | Path, srv: ChaosServer, check: Any = None, **kw: Any
) -> hn.RunResult:
    contract = hn.TaskContract("write the notes", ws, max_steps=5, verification=check)
    provider = hn.OpenAI("m", base_url=srv.openai_url, api_key="k")
    prices = hn.Prices({"m": (2.0, 8.0)}, local_free=False)
    return hn.run_sync(contract, provider, store=store, policy=_policy(), prices=prices,
                       clock=hn.FakeClock(), **kw)  # fmt: skip


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


def test_the_result_carries_its_steps_and_its_card_reads_no_store(
    ws: Path, tmp_path: Path
) -> None:
    store = CountingStore(tmp_path / "runs.duckdb")
    with ChaosServer(responder=_writer) as srv:
        srv.push(Fault.status(429))  # step 1's first attempt
        result = _run(ws, store, srv)
    assert result.outcome is hn.RunOutcome.FINISHED
    first, second = result.step_summaries
    assert first == hn.StepSummary(
        step=1, decision="tool_calls", tool_calls=(ToolCallSummary("write_file", "ok"),),
        tokens=14, cost_usd=(10 * 2.0 + 4 * 8.0) / 1e6, provider="openai",
        changed_workspace=True, failures=("rate_limited 429",),
    )  # fmt: skip
    assert (second.decision, second.tool_calls, second.failures) == ("answer", (), ())
    CountingStore.queries = 0
    bundle = result._repr_mimebundle_()
    assert CountingStore.queries == 0
    assert "<summary>2 steps</summary>" in bundle["text/html"]
    assert "rate_limited 429" in bundle["text/html"]
    assert "step 1: decision tool_calls, tools write_file" in bundle["text/plain"]
    # The command printed each step as it happened: its summary lists none again.
    assert "step 1:" not in result.summary_text()
    store.close()


def test_a_result_rebuilt_from_the_store_shows_the_same_card(ws: Path, tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    with ChaosServer(responder=_writer) as srv:
        srv.push(Fault.status(429))
        live = _run(ws, path, srv, check=hn.FileContains("NOTES.md", "# N"))
    assert (live.outcome, live.steps) == (hn.RunOutcome.SUCCESS, 1)  # checked after step 1
    rebuilt = hn.RunResult.from_store(live.run_id, store=path)
    assert rebuilt.step_summaries == live.step_summaries
    assert (rebuilt.attempts, rebuilt.retries, rebuilt.providers) == (2, 1, ("openai",))
    assert (rebuilt.verified, rebuilt.verify_detail) == (True, live.verify_detail)
    # The store does not say how commands were contained: the one field it lacks.
    assert rebuilt.commands is None
    shown = dataclasses.replace(live, commands=None)
    assert rebuilt._repr_mimebundle_() == shown._repr_mimebundle_()
    with pytest.raises(hn.StoreError) as missing:
        hn.RunResult.from_store("run_nope", store=path)
    assert missing.value.kind == "missing"


def _down_after_step_one(request: ChaosRequest) -> Reply:
    if any(m.get("role") == "tool" for m in request.messages):
        raise RuntimeError("down")  # the chaos server answers 500
    return _writer(request)


def test_a_resumed_runs_result_has_the_steps_from_before_the_resume(
    ws: Path, tmp_path: Path
) -> None:
    path = tmp_path / "runs.duckdb"
    with ChaosServer(responder=_down_after_step_one) as srv:
        srv.push(Fault.status(429))  # step 1's first attempt
        contract = hn.TaskContract("write the notes", ws, max_steps=5, max_retries=1)
        provider = hn.OpenAI("m", base_url=srv.openai_url, api_key="k")
        first = hn.run_sync(contract, provider, store=path, policy=_policy(), clock=hn.FakeClock())
    assert (first.outcome, first.steps) == (hn.RunOutcome.ESCALATED_RETRYABLE, 1)
    with ChaosServer(responder=_writer) as srv:
        provider = hn.OpenAI("m", base_url=srv.openai_url, api_key="k")
        resumed = hn.resume_sync(first.run_id, provider, store=path, clock=hn.FakeClock())
    assert resumed.outcome is hn.RunOutcome.FINISHED
    # Step 1 was committed before the resume; step 2's failed attempts were made by the
    # first process, its answer by the second: both summaries say so.
    assert [(s.step, s.failures) for s in resumed.step_summaries] == [
        (1, ("rate_limited 429",)),
        (2, ("server 500", "server 500")),
    ]
    rebuilt = hn.RunResult.from_store(resumed.run_id, store=path)
    assert rebuilt.step_summaries == resumed.step_summaries


def test_resuming_an_ended_run_hands_back_its_stored_result(ws: Path, tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    with ChaosServer(responder=_writer) as srv:
        live = _run(ws, path, srv)
        again = hn.resume_sync(live.run_id, hn.OpenAI("m", base_url=srv.openai_url), store=path)
        assert len(srv.requests) == 2  # the model was not asked again
    assert again == hn.RunResult.from_store(live.run_id, store=path)
    assert again.step_summaries == live.step_summaries


def test_step_rows_is_deprecated_and_still_answers() -> None:
    summary = hn.StepSummary(1, "tool_calls", (ToolCallSummary("read_file", "error"),), 3)
    result = hn.RunResult("run_1", hn.RunOutcome.FINISHED, 1, 3, step_summaries=(summary,))
    with pytest.warns(DeprecationWarning, match="step_summaries"):
        rows = result.step_rows
    assert rows == ({"step": 1, "decision": "tool_calls", "tools": ["read_file"], "tokens": 3,
                     "provider": None, "changed": False, "failures": []},)  # fmt: skip
    assert "read_file (error)" in result._repr_mimebundle_()["text/html"]


# ------------------------------------------------------------------ the magics


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[InteractiveShell]:
    monkeypatch.setenv("HARNESSNB_STORE", str(tmp_path / "runs.duckdb"))
    monkeypatch.setenv("HARNESSNB_NO_WIDGETS", "1")
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "harnessnb")
    yield sh
    sh.user_ns.pop("R", None)


def test_the_magic_shows_a_runs_card_with_no_store_query(
    shell: InteractiveShell, ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every query the magic's store makes while the run's card is put up is counted."""
    counted: list[int] = []
    reads: list[str] = []
    close, connection = _magics._RunJob._close, hn.Store._connection

    def counting_connection(store: hn.Store) -> Any:
        reads.append(store.path)
        return connection(store)

    def counting_close(job: Any, progress: Any, handle: Any, result: Any) -> None:
        reads.clear()
        try:
            close(job, progress, handle, result)
        finally:
            counted.append(len(reads))

    monkeypatch.setattr(hn.Store, "_connection", counting_connection)
    monkeypatch.setattr(_magics._RunJob, "_close", counting_close)
    store = tmp_path / "runs.duckdb"
    with ChaosServer(responder=_writer) as srv, capture_output() as cap:
        shell.run_cell_magic(
            "harness",
            f"run --provider openai --base-url {srv.openai_url} --workspace {ws} "
            f"--store {store} --allow-write NOTES.md --out R",
            "write the notes",
        )
    assert counted == [0]  # the card is displayed without reading the store
    (card,) = [o for o in cap.outputs if "text/html" in o.data]
    assert "<summary>2 steps</summary>" in card.data["text/html"]
    assert shell.user_ns["R"].step_summaries[0].tool_calls == (
        ToolCallSummary("write_file", "ok"),
    )
