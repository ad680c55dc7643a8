"""The first run in a fresh kernel: its start is never lost to the interrupt.

A new user's first ``%%harness run`` sat at "starting" for seconds (the tool-schema
check imported jsonschema, whose format checkers build grammars when JupyterLab is
installed), and an interrupt in that window left nothing in the store: the id the
cell printed answered "no run" to ``%harness resume``. These tests drive a fresh
kernel each, through jupyter_client, with a real SIGINT (the interrupt button).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from notebook_helpers import started_kernel

import harnessnb as hn
from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply
from harnessnb.notebook._magics import _RunJob
from tests.test_notebook_interrupt import Kernel, _one_line


@pytest.fixture
def fresh_kernel(tmp_path: Path) -> Iterator[Kernel]:
    """A kernel that has run nothing of harnessnb's but ``%load_ext`` (as a new user's)."""
    store = str(tmp_path / "unused.duckdb")
    with started_kernel(tmp_path, OPENAI_API_KEY="sk-test", HARNESSNB_STORE=store) as (km, kc):
        yield Kernel.with_harnessnb(km, kc)


def _answers_done(request: ChaosRequest) -> Reply:
    return Reply(text="done")


def _panel_shown(messages: list[dict[str, Any]]) -> bool:
    """The run's live panel is on the page: the first moment a user can interrupt it."""
    return any(
        m["msg_type"] == "display_data"
        and "application/vnd.jupyter.widget-view+json" in m["content"]["data"]
        for m in messages
    )


def test_an_interrupt_during_the_first_runs_start_leaves_a_run_resume_finishes(
    fresh_kernel: Kernel, tmp_path: Path
) -> None:
    ws, store = tmp_path / "ws", tmp_path / "runs.duckdb"
    ws.mkdir()
    with ChaosServer(responder=_answers_done) as srv:
        # Should the interrupt come after the start, the model call is still going.
        srv.set_default(Fault.slow(20))
        line = (f"%%harness run --provider openai --base-url {srv.openai_url} "
                f"--workspace {ws} --store {store}")  # fmt: skip
        cell = fresh_kernel.run(f"{line}\nsay done", interrupt_when=_panel_shown)

        assert cell.interrupted_at is not None
        shown = _one_line(cell)
        match = re.fullmatch(r"cancelled at step 1 — %harness resume (run_[0-9a-f]+)", shown)
        assert match, shown
        run_id = match.group(1)
        srv.set_default(None)
        resumed = fresh_kernel.run(f"%harness resume {run_id} --store {store} --out R")
        assert resumed.reply["status"] == "ok", resumed.text()
        check = fresh_kernel.run("R.run_id, R.outcome.value")
        assert check.outputs("execute_result")[0]["data"]["text/plain"] == str((run_id, "finished"))


async def test_a_run_cancelled_before_its_store_is_open_is_recorded_cancelled(
    tmp_path: Path,
) -> None:
    # Cancelled at its first await, while the store file is being opened on a thread:
    # the start still ends, and the run is in the store, cancelled, resumable.
    store = tmp_path / "runs.duckdb"
    (tmp_path / "ws").mkdir()  # the store beside it: never inside its workspace
    contract = hn.TaskContract("say done", str(tmp_path / "ws"))
    task = asyncio.ensure_future(
        hn.run(contract, hn.ScriptedProvider(["done"]), store=store, run_id="run_early")
    )
    await asyncio.sleep(0)  # the run is at its first await: the store's opening
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    rows = hn.Store(store, linger_s=0).sql("SELECT run_id, outcome FROM runs")
    assert [tuple(r) for r in rows.itertuples(index=False)] == [("run_early", "cancelled")]
    resumed = await hn.resume("run_early", hn.ScriptedProvider(["done"]), store=store)
    assert (resumed.run_id, resumed.outcome) == ("run_early", hn.RunOutcome.FINISHED)


def test_a_run_stopped_before_its_row_shows_no_id(tmp_path: Path) -> None:
    # The id is shown only for a run the store has: ``%harness resume`` must find it.
    store = hn.Store(tmp_path / "runs.duckdb", linger_s=0)
    job = _RunJob(shell=None, start=lambda _: None, store=store, run_id="run_unwritten")  # type: ignore[arg-type,return-value]
    line = job._stopped_line()
    assert "run_unwritten" not in line
    assert line == "cancelled before the run was recorded: nothing to resume"


FIRST_RUN = """
import asyncio, json, sys
from typing import Annotated
import harnessnb as hn
from harnessnb.events import ToolCallEvent

@hn.tool
def label(tag: Annotated[str, {"pattern": "^[a-z]+$"}]) -> str:
    '''Label a thing.'''
    return tag

calls = []

def on_event(event):
    if isinstance(event, ToolCallEvent):
        calls.append([event.tool, event.status, event.error])

provider = hn.ScriptedProvider([
    {"tool": "label", "args": {"tag": "Bad Name"}},
    {"tool": "read_file", "args": {"path": "a.txt", "colour": "red"}},
    {"tool": "read_file", "args": {"path": "a.txt"}},
    "done",
])
contract = hn.TaskContract("read a.txt", sys.argv[1])
result = asyncio.run(hn.run(contract, provider, store=sys.argv[2], tools=[label],
                            on_event=on_event))
grammar = ("jsonschema", "lark", "rfc3987_syntax", "rfc3987", "uri_template", "webcolors")
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(grammar))
print(json.dumps({"outcome": result.outcome.value, "calls": calls, "loaded": loaded}))
"""


def test_a_first_run_imports_neither_jsonschema_nor_a_grammar_library(tmp_path: Path) -> None:
    # ``import jsonschema`` loads its format checkers, which import rfc3987-syntax and
    # lark where JupyterLab installed them: seconds before a new kernel's first run.
    # A fresh process's first run, with a user tool, bad arguments and good ones.
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", FIRST_RUN, str(ws), str(tmp_path / "runs.duckdb")],
        capture_output=True, text=True, env=env, check=True,
    ).stdout  # fmt: skip
    seen = json.loads(out)
    assert seen["loaded"] == []
    assert seen["outcome"] == "finished"
    (label, status, error), (read, status2, error2), (_, status3, _) = seen["calls"]
    assert (label, status, error["code"]) == ("label", "error", "TOOL_ARGS")
    assert "tag: 'Bad Name' does not match the pattern '^[a-z]+$'" in error["message"]
    assert (read, status2, error2["code"]) == ("read_file", "error", "TOOL_ARGS")
    assert "unexpected 'colour' (allowed: path" in error2["message"]
    assert status3 == "ok"
