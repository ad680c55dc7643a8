"""``%%harness sweep`` in a real kernel (jupyter_client): the live table is one display,
updated as runs end, and the final table takes its place."""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

from notebook_helpers import started_kernel

from harnessnb import Store
from harnessnb.demo import demo_server

CELL_TIMEOUT_S = 60.0


def execute(kc: Any, code: str) -> list[dict[str, Any]]:
    """The iopub messages of one cell, until the kernel is idle again."""
    msg_id = kc.execute(code)
    messages: list[dict[str, Any]] = []
    deadline = time.monotonic() + CELL_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            msg = kc.get_iopub_msg(timeout=0.1)
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return messages
        messages.append(msg)
    raise AssertionError(f"the cell did not end in {CELL_TIMEOUT_S:g} s")


def swept(tmp_path: Path, magic: str) -> tuple[list[Any], list[Any], list[Any]]:
    """Run a sweep ``magic`` ({url}: the demo server's, {ws}: a workspace, {store}: the
    store) in a real kernel: (all its messages, its displays, its display updates)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "README.md").write_text("# Title\n")
    with started_kernel(tmp_path) as (_, kc):
        execute(kc, "import harnessnb as hn\nhn.set_testing(True)\n%load_ext harnessnb")
        with demo_server(seed=1) as srv:
            filled = magic.format(url=srv.openai_url, ws=ws, store=tmp_path / "runs.duckdb")
            messages = execute(kc, filled)
    errors = [m["content"] for m in messages if m["msg_type"] == "error"]
    assert not errors, errors
    shown = [m for m in messages if m["msg_type"] == "display_data"]
    updates = [m for m in messages if m["msg_type"] == "update_display_data"]
    return messages, shown, updates


def test_the_live_table_fills_in_and_the_final_table_replaces_it(tmp_path: Path) -> None:
    messages, shown, updates = swept(tmp_path, (
        "%%harness sweep --providers local --base-url {url} --repeats 3 "
        "--concurrency 2 --workspace {ws} --store {store}\nsay hello\nsay bye\n"
    ))  # fmt: skip
    assert len(shown) == 1  # one live table ...
    display_id = shown[0]["content"]["transient"]["display_id"]
    assert "0/6" in shown[0]["content"]["data"]["text/html"]
    assert {u["content"]["transient"]["display_id"] for u in updates} == {display_id}
    assert len(updates) == 7  # ... updated as each of the 6 runs ended, then the final one
    final = updates[-1]["content"]["data"]
    assert "harnessnb-sweep" in final["text/html"] and "6/6 runs" in final["text/plain"]
    assert not [m for m in messages if m["msg_type"] == "execute_result"]  # not shown twice
    with Store(tmp_path / "runs.duckdb") as s:
        assert len(s.runs()) == 6 and s.runs()["sweep_id"].nunique() == 1


def test_the_live_table_of_a_samples_sweep_counts_each_sample_though_two_share_a_text(
    tmp_path: Path,
) -> None:
    csv = tmp_path / "samples.csv"
    csv.write_text("input,target,id\nsay hello,hello,first\nsay hello,bye,second\n")
    _, shown, updates = swept(tmp_path, (
        f"%harness sweep --samples {csv} --providers local --base-url {{url}} "
        "--repeats 2 --workspace {ws} --store {store} --score includes"
    ))  # fmt: skip
    assert len(shown) == 1 and "0/4" in shown[0]["content"]["data"]["text/html"]
    assert len(updates) == 5  # each of the 4 runs, then the final table
    assert "4/4 runs" in updates[-1]["content"]["data"]["text/plain"]
    with Store(tmp_path / "runs.duckdb") as s:
        assert sorted(s.scores()["sample_id"]) == ["first", "first", "second", "second"]
