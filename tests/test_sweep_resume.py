"""``hn.sweep(..., sweep_id=ID)`` again runs only what that sweep has not finished: a
finished slot (sample, provider name, repeat) is taken back from the store with its
scores, a cancelled or never-started one is run afresh, and a bigger plan under the
same id runs its new slots only."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb.demo import demo_server
from harnessnb.demo._model import provider_for
from harnessnb.sweeps._sweep_result import SweepRun
from tests.files_helpers import folder
from tests.test_sweep import Waiting
from tests.test_sweep_scores import notes_mention_target
from tests.test_sweep_scores import samples as scored_samples

POLICY = hn.Policy.default().layer("sweep").allow_write("NOTES.md")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return folder(tmp_path / "template", {"README.md": "# Template\n"})


def samples() -> list[hn.Sample]:
    return scored_samples()[:2]  # both with a target the agent's NOTES.md holds


def _slots(result: hn.SweepResult) -> dict[tuple[str | None, str, int], str | None]:
    return {(r.sample_id, r.provider, r.repeat): r.run_id for r in result.records}


async def test_a_bigger_plan_under_the_same_id_runs_only_its_new_slots(
    ws: Path, tmp_path: Path
) -> None:
    path = tmp_path / "runs.duckdb"
    common: dict[str, Any] = {"workspace": ws, "store": path, "policy": POLICY,
                              "scorers": [notes_mention_target],
                              "sweep_id": "sweep_grow"}  # fmt: skip
    with demo_server() as good, demo_server(seed=1) as other:
        first = await hn.sweep(samples(), {"good": provider_for(good, name="good")}, **common)
        first.store.close()
        asked = len(good.requests)
        providers = {"good": provider_for(good, name="good"),
                     "other": provider_for(other, name="other")}  # fmt: skip
        second = await hn.sweep(samples(), providers, repeats=2, **common)
    before, after = _slots(first), _slots(second)
    assert len(before) == 2 and len(after) == 8
    for slot, run_id in before.items():  # taken back, not run again
        assert after[slot] == run_id
    assert len(set(after.values())) == 8
    with hn.Store(path) as store:
        assert len(store.runs(sweep="sweep_grow")) == 8  # 2 + the 6 new slots
        assert len(store.scores(sweep_id="sweep_grow")) == 8
    # The good provider was asked again only for its new slots (repeat 1).
    assert len(good.requests) > asked
    again = second.scores.set_index("run_id")
    old = first.scores.set_index("run_id")
    for run_id in before.values():
        assert again.loc[run_id, "value"] == old.loc[run_id, "value"] == 1.0
        assert again.loc[run_id, "explanation"] == old.loc[run_id, "explanation"]
    assert second.scores["value"].tolist() == [1.0] * 8


class Half(Waiting):
    """Answers a task about ``a`` at once and waits for ever on any other."""

    name = "p"
    model = "half"

    async def complete(self, messages: Any, tools: Any = None, max_tokens: Any = None,
                       stream: Any = None) -> hn.Completion:  # fmt: skip
        if "task a" in str(messages):
            return hn.Completion("done", provider="p", model="half")
        return await super().complete(messages, tools, max_tokens, stream)


async def test_a_cancelled_run_is_run_again_and_a_finished_one_is_not(
    ws: Path, store: hn.Store
) -> None:
    started: list[str] = []
    ended: list[str] = []
    both = asyncio.Event()

    def seen(event: hn.RunEvent) -> None:
        if event.kind == "started":
            started.append(event.run_id)
        if len(started) == 2 and ended:
            both.set()

    def done(row: SweepRun) -> None:  # called once the run's row, files and scores are kept
        ended.append(row.task)
        if len(started) == 2 and ended:
            both.set()

    tasks = ["task a", "task b"]
    sweep = asyncio.create_task(hn.sweep(
        tasks, {"p": Half()}, workspace=ws, store=store, on_event=seen, on_run=done,
        sweep_id="sweep_cut",
    ))  # fmt: skip
    await asyncio.wait_for(both.wait(), 30)
    assert ended == ["task a"]
    sweep.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sweep
    cut = store.runs(sweep="sweep_cut").set_index("task")
    assert cut.loc["task a", "outcome"] == "finished"
    assert cut.loc["task b", "outcome"] == "cancelled"
    calls: list[str] = []

    def reply(messages: Any) -> str:
        calls.append(str(messages))
        return "done"

    fine = hn.ScriptedProvider(reply, name="p")
    resumed = await hn.sweep(tasks, {"p": fine}, workspace=ws, store=store, sweep_id="sweep_cut")
    rows = {r.task: r for r in resumed.records}
    assert rows["task a"].run_id == cut.loc["task a", "run_id"]  # taken back
    assert rows["task b"].run_id != cut.loc["task b", "run_id"]  # a new run of the sweep
    assert rows["task a"].outcome == rows["task b"].outcome == "finished"
    assert len(calls) == 1 and "task b" in calls[0]  # no model asked for task a
    assert len(store.runs(sweep="sweep_cut")) == 3  # the cancelled run stays, in no result


async def test_a_run_taken_back_is_scored_from_its_kept_files_by_a_scorer_it_lacks(
    ws: Path, tmp_path: Path
) -> None:
    path = tmp_path / "runs.duckdb"
    common: dict[str, Any] = {"workspace": ws, "store": path, "policy": POLICY,
                              "sweep_id": "sweep_later"}  # fmt: skip
    with demo_server() as good:
        providers = {"good": provider_for(good, name="good")}
        first = await hn.sweep(samples(), providers, **common)  # no scorers
        first.store.close()
        asked = len(good.requests)
        second = await hn.sweep(samples(), providers, scorers=[notes_mention_target], **common)
        assert len(good.requests) == asked  # nothing run again
    assert _slots(second) == _slots(first)
    assert second.scores["value"].tolist() == [1.0, 1.0]  # NOTES.md read from the store
    with hn.Store(path) as store:
        assert len(store.scores(sweep_id="sweep_later")) == 2
