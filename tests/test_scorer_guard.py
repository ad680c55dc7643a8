"""A scorer cannot hang a sweep, and hostile input to the sweep's new surfaces (samples
files, scorer specs, schemas, the tests scorer's output) is refused or held."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import harnessnb as hn
from harnessnb.sweeps._sweep_run import SCORER_GRACE_S
from tests.files_helpers import folder


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return folder(tmp_path / "template", {"README.md": "# Template\n"})


class HangsSync:
    """A sync scorer that blocks until released (the test releases it at its end)."""

    name = "hangs_sync"
    timeout_s = 0.2

    def __init__(self) -> None:
        self.release = threading.Event()

    def __call__(self, run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
        self.release.wait()
        return hn.Score(True)


class HangsAsync:
    """A coroutine scorer that never returns."""

    name = "hangs_async"
    timeout_s = 0.2

    async def __call__(self, run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
        await asyncio.Event().wait()
        return hn.Score(True)


def answered(run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
    return hn.Score(run.text == "done", "read the answer")


async def test_a_scorer_that_never_returns_is_a_scoring_error_and_the_sweep_goes_on(
    ws: Path, tmp_path: Path
) -> None:
    sync = HangsSync()
    try:
        swept = hn.sweep(["a", "b"], [hn.ScriptedProvider(lambda m: "done", name="p")],
                         workspace=ws, store=tmp_path / "s.duckdb",
                         scorers=[sync, HangsAsync(), answered])  # fmt: skip
        # Today's code hangs: the wait fails the test rather than stalling the suite.
        result = await asyncio.wait_for(swept, timeout=60)
    finally:
        sync.release.set()
    assert set(result.runs["outcome"]) == {"finished"}  # never a failed run
    scores = result.scores.set_index(["sample_id", "scorer"])
    late = f"TimeoutError: the scorer did not finish in {0.2 + SCORER_GRACE_S:g} s"
    for sample in {s for s, _ in scores.index}:
        for name in ("hangs_sync", "hangs_async"):
            row = scores.loc[(sample, name)]
            assert row["error"] == late and pd_na(row["value"])
        assert scores.loc[(sample, "answered"), "value"] == 1.0  # the next scorer ran


def pd_na(value: object) -> bool:
    import pandas as pd

    return bool(pd.isna(value))


async def test_a_scorers_own_timeout_error_keeps_its_message(ws: Path) -> None:
    async def raises(run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
        raise TimeoutError("the grader's server timed out")

    result = await hn.sweep(["a"], [hn.ScriptedProvider(lambda m: "done")], workspace=ws,
                            scorers=[raises])  # fmt: skip
    assert result.scores["error"].tolist() == ["TimeoutError: the grader's server timed out"]


_STUCK_THREAD = """
import sys, threading
import harnessnb as hn

class Stuck:
    timeout_s = 0.2
    def __call__(self, run, sample, workspace):
        threading.Event().wait()  # never released: only a daemon thread lets us exit

result = hn.sweep_sync(["a"], [hn.ScriptedProvider(lambda m: "done")], workspace=sys.argv[1],
                       store=sys.argv[2], scorers=[Stuck()])
print(result.scores["error"].tolist()[0], flush=True)
"""


def test_a_stuck_sync_scorer_does_not_hold_interpreter_exit(ws: Path, tmp_path: Path) -> None:
    script = tmp_path / "stuck.py"
    script.write_text(_STUCK_THREAD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen([sys.executable, str(script), str(ws), str(tmp_path / "s.duckdb")],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)  # fmt: skip
    try:
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err
    assert "did not finish in" in out
