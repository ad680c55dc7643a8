"""An ended run is freed by reference counting, not left to the cyclic GC.

The driver and its recorder hand their collaborators bound methods of theirs, which tie
a run's parts in reference cycles; with many runs at once the cyclic GC promotes them
and walks the whole heap more often (bench/loop.py part 2). ``hn.run`` lets them go
when the run ends: with the collector off throughout, a collection finds none of them."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

import harnessnb as hn
from harnessnb.loop._driver import Driver
from harnessnb.loop._recorder import RunRecorder
from harnessnb.tools._executor import ToolExecutor
from tests.files_helpers import folder


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()  # what earlier tests left in cycles
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def left_of_runs() -> list[object]:
    """The run parts only the cyclic GC would free (garbage in reference cycles), once
    the loop has turned: the run's lease renewer, cancelled as it ended, finishes then."""
    await asyncio.sleep(0)
    gc.set_debug(gc.DEBUG_SAVEALL)  # what a collection finds unreachable, kept to look at
    try:
        gc.collect()
        kinds = (Driver, RunRecorder, ToolExecutor)
        return [o for o in gc.garbage if isinstance(o, kinds)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


@pytest.mark.usefixtures("collector_off")
async def test_a_run_of_a_tool_step_and_an_answer_leaves_nothing(tmp_path: Path) -> None:
    ws = folder(tmp_path / "ws", {"a.txt": "a\n"})
    script = [{"tool": "list_dir", "args": {"path": "."}}, "done"]
    with hn.Store(tmp_path / "runs.duckdb") as store:
        result = await hn.run(
            hn.TaskContract("list", ws, max_steps=3), hn.ScriptedProvider(script), store=store
        )
        assert result.outcome is hn.RunOutcome.FINISHED
        assert result.steps == 2
        assert await left_of_runs() == []  # a Driver, its RunRecorder and ToolExecutor before
        # What the run recorded is all there: letting go of it lost nothing.
        assert store.steps()["step"].tolist() == [1, 2]
        assert store.tool_calls()["tool"].astype(object).tolist() == ["list_dir"]
