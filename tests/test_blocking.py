"""Blocking tool work runs on daemon threads kept for the next call: a stuck call holds
up neither the next call nor the process's exit, idle threads end, errors and context
reach the caller, and a forked child gets threads of its own."""

from __future__ import annotations

import asyncio
import contextvars
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harnessnb.tools import _blocking
from harnessnb.tools._blocking import run_blocking

ROOT = Path(__file__).resolve().parent.parent


def workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "harnessnb-blocking"]


async def test_a_stuck_call_holds_up_no_other_call() -> None:
    release = threading.Event()
    stuck = asyncio.ensure_future(run_blocking(release.wait))
    await asyncio.sleep(0.05)
    try:
        assert await asyncio.wait_for(run_blocking(lambda: "next"), 5) == "next"
        results = await asyncio.wait_for(
            asyncio.gather(*(run_blocking(time.sleep, 0.05) for _ in range(10))), 5
        )
        assert results == [None] * 10
    finally:
        release.set()
        await stuck


async def test_threads_are_reused_daemons_and_end_when_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_blocking, "IDLE_KEPT_S", 0.2)
    await asyncio.sleep(0.3)  # threads of earlier tests, kept longer, are not ours
    names = [await run_blocking(lambda: threading.current_thread().ident) for _ in range(20)]
    assert len(set(names)) == 1  # one after another: the same thread each time
    assert all(t.daemon for t in workers())
    deadline = time.monotonic() + 10
    while any(t.ident in names for t in workers()):
        assert time.monotonic() < deadline, "an idle worker did not end"
        await asyncio.sleep(0.05)


async def test_errors_and_context_reach_the_caller() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var")
    var.set("from the caller")
    assert await run_blocking(var.get) == "from the caller"

    def boom() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        await run_blocking(boom)
    assert await run_blocking(lambda: 2) == 2  # the thread lived on


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
async def test_a_forked_child_runs_calls_on_threads_of_its_own() -> None:
    await run_blocking(lambda: None)  # a parent worker, idle now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's idle worker does not exist here
        try:
            got = asyncio.run(asyncio.wait_for(run_blocking(lambda: b"ok"), 5))
            os.write(write, got)
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert os.read(read, 16) == b"ok" and status == 0
    os.close(read)


def test_a_stuck_call_does_not_hold_the_process_open() -> None:
    code = (
        "import asyncio, threading\n"
        "from harnessnb.tools._blocking import run_blocking\n"
        "async def main():\n"
        "    try:\n"
        "        await asyncio.wait_for(run_blocking(threading.Event().wait), 0.2)\n"
        "    except TimeoutError:\n"
        "        print('abandoned', flush=True)\n"
        "asyncio.run(main())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=30)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "abandoned", done.stderr
