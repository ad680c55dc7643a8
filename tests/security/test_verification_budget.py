"""A verification command is cut to the run's time budget, its whole tree with it
(issue 25, item 10): a check that ignores SIGTERM and leaves a ``setsid`` child must not
hold a run past ``max_time_s`` for its own 60 s timeout."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

import harnessnb as hn


@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid")
def test_a_slow_verification_ends_with_the_runs_time_budget(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    marker = ws / "child-alive"
    # The check ignores SIGTERM and starts a setsid child that would write a file later.
    script = (f"trap '' TERM; setsid sh -c 'sleep 4; touch {marker}' & "
              "sleep 50")  # fmt: skip
    check = hn.Command(["sh", "-c", script], timeout_s=60.0)
    contract = hn.TaskContract("check it", ws, verification=check, max_time_s=2.0)
    policy = hn.Policy.default().layer("app").allow_exec("sh")
    started = time.monotonic()
    with hn.Store(":memory:") as store:
        result = hn.run_sync(contract, hn.ScriptedProvider(["done"]), store=store, policy=policy)
    took = time.monotonic() - started
    assert took < 2.0 + 1.5, took  # the budget, not the check's own 60 s
    assert result.outcome in (hn.RunOutcome.TIME_BUDGET, hn.RunOutcome.UNVERIFIED), result
    time.sleep(4.5)  # the child's time to write, had it survived
    assert not marker.exists()
