"""The kernel's interrupt and the approval timeout, in a real kernel driven by jupyter_client.

One kernel serves the module (as JupyterLab's would); each test has its own scripted
model (a chaos server on 127.0.0.1), workspace and store, named on the magic line.
The interrupt is ``KernelManager.interrupt_kernel()``: SIGINT to the kernel, exactly
what the interrupt button sends.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.manager import KernelManager
from notebook_helpers import started_kernel

from harnessnb import Store
from harnessnb.chaos import ChaosRequest, ChaosServer, Fault, Reply

CELL_TIMEOUT_S = 30.0


@dataclasses.dataclass
class Cell:
    """What one executed cell sent: its iopub messages, reply, and when it was interrupted."""

    messages: list[dict[str, Any]]
    reply: dict[str, Any]
    interrupted_at: float | None  # wall clock, as the store's timestamps
    ended_at: float

    def outputs(self, *types: str) -> list[dict[str, Any]]:
        return [m["content"] for m in self.messages if m["msg_type"] in types]

    def text(self) -> str:
        """Everything the cell shows as text: streams, plain text data, tracebacks."""
        parts = []
        for m in self.messages:
            content = m["content"]
            if m["msg_type"] == "stream":
                parts.append(content["text"])
            elif m["msg_type"] == "error":
                parts.extend(content["traceback"])
            elif "data" in content:
                parts.append(str(content["data"].get("text/plain", "")))
        return "\n".join(parts)


class Kernel:
    def __init__(self, km: KernelManager, kc: Any) -> None:
        self.km, self.kc = km, kc

    @classmethod
    def with_harnessnb(cls, km: KernelManager, kc: Any) -> Kernel:
        """The kernel, having imported harnessnb (testing mode) and loaded its magics."""
        kern = cls(km, kc)
        setup = kern.run("import harnessnb as hn\nhn.set_testing(True)\n%load_ext harnessnb")
        assert setup.reply["status"] == "ok", setup.text()
        return kern

    def run(
        self,
        code: str,
        *,
        interrupt_when: Callable[[list[dict[str, Any]]], bool] | None = None,
        each: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> Cell:
        """Execute ``code``; ``each`` sees the messages so far, as the frontend would."""
        msg_id = self.kc.execute(code)
        messages: list[dict[str, Any]] = []
        interrupted_at = None
        deadline = time.monotonic() + CELL_TIMEOUT_S
        while True:
            if each is not None:
                each(messages)
            if interrupt_when is not None and interrupted_at is None and interrupt_when(messages):
                interrupted_at = time.time()
                self.km.interrupt_kernel()
            if time.monotonic() > deadline:
                shown = [m["msg_type"] for m in messages]
                raise AssertionError(f"the cell did not end in {CELL_TIMEOUT_S:g} s: {shown}")
            try:
                msg = self.kc.get_iopub_msg(timeout=0.05)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
            messages.append(msg)
        ended_at = time.time()
        while True:
            reply = self.kc.get_shell_msg(timeout=10)
            if reply["parent_header"].get("msg_id") == msg_id:
                return Cell(messages, reply["content"], interrupted_at, ended_at)


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kernel]:
    home = tmp_path_factory.mktemp("kernel")
    store = str(home / "unused.duckdb")
    with started_kernel(home, OPENAI_API_KEY="sk-test", HARNESSNB_STORE=store) as (km, kc):
        yield Kernel.with_harnessnb(km, kc)


def _tool_results(request: ChaosRequest) -> int:
    return sum(1 for m in request.messages if isinstance(m, dict) and m.get("role") == "tool")


def _call(name: str, **arguments: Any) -> Reply:
    return Reply(tool_calls=[{"name": name, "arguments": arguments}])


def _three_steps(request: ChaosRequest) -> Reply:
    """Step 1 lists, step 2 runs slow.sh, step 3 writes late.txt, then it answers."""
    step = _tool_results(request)
    if step == 0:
        return _call("list_dir", path=".")
    if step == 1:
        return _call("run_command", argv=["sh", "slow.sh"])
    if step == 2:
        return _call("write_file", path="late.txt", content="too late\n")
    return Reply(text="done")


def _writes_notes(request: ChaosRequest) -> Reply:
    if _tool_results(request):
        return Reply(text="done")
    return _call("write_file", path="NOTES.md", content="# Notes\n")


@dataclasses.dataclass
class Setup:
    ws: Path
    store: Path
    srv: ChaosServer

    def line(self, extra: str = "") -> str:
        return (
            f"%%harness run --provider openai --base-url {self.srv.openai_url} "
            f"--workspace {self.ws} --store {self.store} {extra}"
        ).rstrip()

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """Rows from the run's store (waiting its turn while the kernel holds the file)."""
        frame = Store(self.store, linger_s=0).sql(sql)
        return [tuple(r) for r in frame.itertuples(index=False)]


@pytest.fixture
def setup(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Setup]:
    ws = tmp_path / "ws"
    ws.mkdir()
    responder = getattr(request, "param", _three_steps)
    with ChaosServer(responder=responder) as srv:
        yield Setup(ws, tmp_path / "runs.duckdb", srv)


def _one_line(cell: Cell) -> str:
    """The cell ended interrupted, and its error is one line with no frames."""
    assert cell.reply["status"] == "error"
    (error,) = cell.outputs("error")
    assert len(error["traceback"]) == 1, error["traceback"]
    line: str = error["traceback"][0]
    assert "harnessnb/" not in cell.text() and "Traceback" not in cell.text()
    return line


def _running(marker: str) -> list[str]:
    """Command lines of live processes containing ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        try:
            cmd = (Path("/proc") / pid / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if marker.encode() in cmd:
            found.append(cmd.decode(errors="replace"))
    return found


def test_interrupt_during_a_command_cancels_the_run_and_kills_its_processes(
    kernel: Kernel, setup: Setup
) -> None:
    marker = f"4{uuid.uuid4().int % 10**6}.5"  # a unique `sleep` argument to find it by
    (setup.ws / "slow.sh").write_text(f"touch started\nexec sleep {marker}\n")
    started = setup.ws / "started"
    line = setup.line('--verify-cmd "sh slow.sh" --allow-write late.txt')
    cell = kernel.run(f"{line}\nlist, run slow.sh, write late.txt",
                      interrupt_when=lambda _: started.exists())  # fmt: skip

    assert cell.interrupted_at is not None
    assert cell.ended_at - cell.interrupted_at < 5  # the command would sleep for hours
    ((run_id, outcome),) = setup.rows("SELECT run_id, outcome FROM runs")
    assert outcome == "cancelled"
    assert _one_line(cell) == f"cancelled at step 2 — %harness resume {run_id}"
    # Nothing after the interrupt: one step committed, no third model call, no write.
    steps = setup.rows('SELECT step, epoch("at") FROM steps')
    assert [s for s, _ in steps] == [1]
    assert all(at < cell.interrupted_at for _, at in steps)
    calls = setup.rows('SELECT step, tool, epoch("at") FROM tool_calls ORDER BY step, seq')
    assert [(s, t) for s, t, _ in calls] == [(1, "list_dir"), (2, "run_command")]
    assert all(at < cell.interrupted_at for *_, at in calls)
    assert len(setup.srv.requests) == 2
    assert sorted(p.name for p in setup.ws.iterdir()) == ["slow.sh", "started"]
    deadline = time.monotonic() + 2
    while _running(f"sleep {marker}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _running(f"sleep {marker}") == []  # its process group was killed
    after = kernel.run("1 + 1")  # the kernel is still usable
    assert after.outputs("execute_result")[0]["data"]["text/plain"] == "2"


def test_interrupt_during_a_model_call_cancels_the_call(kernel: Kernel, setup: Setup) -> None:
    setup.srv.push(Fault.slow(0), Fault.slow(20))  # the second answer would take 20 s
    cell = kernel.run(f"{setup.line()}\nlist, run slow.sh, write late.txt",
                      interrupt_when=lambda _: len(setup.srv.requests) >= 2)  # fmt: skip

    assert cell.interrupted_at is not None and cell.ended_at - cell.interrupted_at < 5
    ((run_id, outcome),) = setup.rows("SELECT run_id, outcome FROM runs")
    assert outcome == "cancelled"
    assert _one_line(cell) == f"cancelled at step 2 — %harness resume {run_id}"
    assert [s for (s,) in setup.rows("SELECT step FROM steps")] == [1]
    assert len(setup.srv.requests) == 2


def _approval_shown(messages: list[dict[str, Any]]) -> bool:
    for m in messages:
        if m["msg_type"] == "comm_open":
            state = m["content"]["data"].get("state", {})
            if state.get("_model_name") == "ButtonModel" and state.get("description") == "Approve":
                return True
    return False


@pytest.mark.parametrize("setup", [_writes_notes], indirect=True)
def test_interrupt_while_the_approval_panel_waits_frees_the_cell(
    kernel: Kernel, setup: Setup
) -> None:
    cell = kernel.run(f"{setup.line()}\nwrite NOTES.md", interrupt_when=_approval_shown)

    assert cell.interrupted_at is not None
    assert cell.ended_at - cell.interrupted_at < 3  # nobody clicked
    ((run_id, outcome, error),) = setup.rows("SELECT run_id, outcome, error FROM runs")
    assert outcome == "cancelled"
    assert '"code": "APPROVAL_UNANSWERED"' in error and "NOTES.md" in error
    assert _one_line(cell) == f"cancelled at step 1 — %harness resume {run_id}"
    assert not (setup.ws / "NOTES.md").exists()
    assert setup.rows("SELECT count(*) FROM tool_calls") == [(0,)]
    # The panel says so, in place of its buttons.
    updates = [str(m["content"]["data"].get("state", {}).get("value", ""))
               for m in cell.messages if m["msg_type"] == "comm_msg"]  # fmt: skip
    assert any("not answered" in u for u in updates)


@pytest.mark.parametrize("setup", [_writes_notes], indirect=True)
def test_approval_timeout_stops_the_run_awaiting_approval(kernel: Kernel, setup: Setup) -> None:
    t0 = time.time()
    cell = kernel.run(f"{setup.line('--approval-timeout 1 --out R')}\nwrite NOTES.md")

    assert cell.reply["status"] == "ok", cell.text()
    assert 1 <= cell.ended_at - t0 < 6
    ((run_id, outcome),) = setup.rows("SELECT run_id, outcome FROM runs")
    assert outcome == "awaiting_approval"
    assert setup.rows("SELECT tool, status FROM tool_calls") == [("write_file", "deferred")]
    assert not (setup.ws / "NOTES.md").exists()
    check = kernel.run("R.outcome.value, R.run_id")
    assert check.outputs("execute_result")[0]["data"]["text/plain"] == str(
        ("awaiting_approval", run_id)
    )


def _interrupt_a_slow_run(kernel: Kernel, setup: Setup, call: str, ename: str) -> None:
    """Start ``call(contract, provider, store=...)`` against a model that answers in 20 s,
    interrupt the cell once its request is in: the cell ends within 5 s of the
    interrupt, raising ``ename``, and the run is stored ``cancelled``."""
    setup.srv.push(Fault.slow(20))
    code = (
        f"contract = hn.TaskContract('hi', {str(setup.ws)!r})\n"
        f"provider = hn.OpenAI('m', base_url={setup.srv.openai_url!r})\n"
        f"{call}(contract, provider, store={str(setup.store)!r})"
    )
    cell = kernel.run(code, interrupt_when=lambda _: len(setup.srv.requests) >= 1)

    assert cell.interrupted_at is not None and cell.ended_at - cell.interrupted_at < 5
    assert cell.reply["status"] == "error" and cell.reply["ename"] == ename
    assert setup.rows("SELECT outcome FROM runs") == [("cancelled",)]


def test_interrupt_reaches_an_awaited_run_at_once(kernel: Kernel, setup: Setup) -> None:
    # ``await hn.run(...)`` runs on the kernel's own loop; the interrupt used to wait
    # for whatever woke that loop next (a lease renewal, seconds later).
    _interrupt_a_slow_run(kernel, setup, "await hn.run", "CancelledError")


def test_interrupt_reaches_an_awaited_agent_run_at_once(
    kernel: Kernel, setup: Setup, tmp_path: Path
) -> None:
    # ``await hn.agents.run(...)`` on the kernel's loop, its CLI thinking in silence:
    # nothing wakes the loop, so the interrupt waited for the CLI to say something.
    source = (Path(__file__).parent / "agents" / "standin.py").read_text()
    bin_dir, home = tmp_path / "bin", tmp_path / "home"
    bin_dir.mkdir()
    home.mkdir()
    exe = bin_dir / "claude"
    exe.write_text(f"#!{sys.executable}\n{source}")
    exe.chmod(0o755)
    (home / "scenario.json").write_text(json.dumps({"mode": "ok", "sleep": 30}))
    code = (
        "import os\n"
        "_env = dict(os.environ)\n"
        f"os.environ['PATH'] = {str(bin_dir)!r} + os.pathsep + os.environ['PATH']\n"
        f"os.environ['HOME'] = {str(home)!r}\n"
        "try:\n"
        f"    await hn.agents.run(hn.agents.driver('claude'), 'read a.txt', {str(setup.ws)!r},"
        f" store={str(setup.store)!r})\n"
        "finally:\n"
        "    os.environ.clear()\n"
        "    os.environ.update(_env)\n"
    )
    cell = kernel.run(code, interrupt_when=lambda _: (home / "calls.jsonl").exists())

    assert cell.interrupted_at is not None and cell.ended_at - cell.interrupted_at < 5
    assert cell.reply["status"] == "error" and cell.reply["ename"] == "CancelledError"
    assert setup.rows("SELECT outcome FROM runs") == [("cancelled",)]


def _click_approve(kernel: Kernel) -> Callable[[list[dict[str, Any]]], None]:
    """Click Approve as the page does: a comm message on the shell channel, once."""
    clicked: list[str] = []

    def each(messages: list[dict[str, Any]]) -> None:
        for m in messages:
            if not clicked and m["msg_type"] == "comm_open" and _approval_shown([m]):
                clicked.append(m["content"]["comm_id"])
                click = {"method": "custom", "content": {"event": "click"}}
                msg = kernel.kc.session.msg("comm_msg", {"comm_id": clicked[0], "data": click})
                kernel.kc.shell_channel.send(msg)

    return each


def _run_code(setup: Setup, call: str) -> str:
    return (
        f"contract = hn.TaskContract('write notes', {str(setup.ws)!r}, max_steps=3)\n"
        f"provider = hn.OpenAI('m', base_url={setup.srv.openai_url!r})\n"
        "policy = hn.Policy.default().layer('t').ask_write('NOTES.md')\n"
        f"R = {call}(contract, provider, store={str(setup.store)!r}, policy=policy)\n"
        "R.outcome.value"
    )


@pytest.mark.parametrize("setup", [_writes_notes], indirect=True)
def test_a_click_in_the_page_reaches_an_awaited_run(kernel: Kernel, setup: Setup) -> None:
    cell = kernel.run(_run_code(setup, "await hn.run"), each=_click_approve(kernel))

    assert cell.reply["status"] == "ok", cell.text()
    assert cell.outputs("execute_result")[0]["data"]["text/plain"] == "'finished'"
    assert (setup.ws / "NOTES.md").read_text() == "# Notes\n"


@pytest.mark.parametrize("setup", [_writes_notes], indirect=True)
def test_run_sync_in_a_kernel_refuses_the_ask_it_could_never_hear_answered(
    kernel: Kernel, setup: Setup
) -> None:
    # run_sync blocks the kernel's main thread, so a click would never reach the run:
    # it used to show the buttons and wait for ever.
    t0 = time.monotonic()
    cell = kernel.run(_run_code(setup, "hn.run_sync"), each=_click_approve(kernel))

    assert time.monotonic() - t0 < 10
    assert cell.reply["status"] == "ok", cell.text()
    assert not _approval_shown(cell.messages)  # no buttons nobody can click
    assert not (setup.ws / "NOTES.md").exists()
    ((status, error),) = setup.rows("SELECT status, output FROM tool_calls")
    assert status != "ok"
    assert "await hn.run" in error and "allow_write('NOTES.md')" in error


def test_interrupt_cancels_a_run_sync_in_the_kernel(kernel: Kernel, setup: Setup) -> None:
    # run_sync blocks the cell on harnessnb's loop thread; the button's SIGINT reaches it.
    _interrupt_a_slow_run(kernel, setup, "hn.run_sync", "KeyboardInterrupt")
    after = kernel.run("1 + 1")
    assert after.outputs("execute_result")[0]["data"]["text/plain"] == "2"
