"""Scoring inside a sweep: every run scored as it ends, infrastructure kept apart from
wrong answers, scoring errors as rows, the scores in the store (``scores`` table)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import harnessnb as hn
from harnessnb.demo import demo_server
from harnessnb.demo._model import provider_for
from harnessnb.rules._secrets import register
from harnessnb.store import _writes
from harnessnb.store._schema import SCHEMA_VERSION
from harnessnb.store._writer import store_writer
from harnessnb.sweeps._stats import SCORE_COLUMNS
from tests.files_helpers import folder
from tests.store_helpers import altered, old_store

STORED = ["sweep_id", "run_id", "sample_id", "scorer", "scorer_version", "value",
          "explanation", "error", "infra_failure", "infra_kind", "scored_at"]  # fmt: skip


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return folder(tmp_path / "template", {"README.md": "# Template\n"})


def notes_mention_target(run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
    """Pass when the run's NOTES.md (in its own workspace copy) holds the sample's target."""
    notes = workspace / "NOTES.md"
    text = notes.read_text() if notes.exists() else ""
    found = sample.target is not None and sample.target in text
    return hn.Score(found, f"NOTES.md {'holds' if found else 'lacks'} {sample.target!r}")


def samples() -> list[hn.Sample]:
    # Each sample's file is the one its task names: only its files make the task doable.
    return [
        hn.Sample(f"summarise data{i}.md into NOTES.md", target=f"Topic {i}" if i < 2 else "absent",
               id=f"s{i}", files={f"data{i}.md": f"# Topic {i}\n\nSome text.\n"})
        for i in range(3)
    ]  # fmt: skip


async def test_a_503_provider_has_infra_failures_and_a_good_one_the_scorers_values(
    ws: Path, tmp_path: Path
) -> None:
    path = tmp_path / "runs.duckdb"
    policy = hn.Policy.default().layer("sweep").allow_write("NOTES.md")
    with demo_server() as good, demo_server(rates={"server": 1.0}) as down:
        providers = {"good": provider_for(good, name="good"),
                     "down": provider_for(down, name="down")}  # fmt: skip
        result = await hn.sweep(samples(), providers, workspace=ws, repeats=2, store=path,
                                policy=policy, scorers=[notes_mention_target])  # fmt: skip
    scores = result.scores
    assert list(scores.columns) == list(SCORE_COLUMNS) and len(scores) == 12
    assert str(scores["value"].dtype) == "Float64" and str(scores["passed"].dtype) == "boolean"
    assert set(scores["sweep_id"]) == {result.sweep_id}
    assert set(scores["run_id"]) == set(result.runs["run_id"])
    down_rows = scores[scores["provider"] == "down"]
    assert len(down_rows) == 6 and down_rows["infra_failure"].all()
    assert set(down_rows["infra_kind"]) == {"server"}  # the 503s, after their retries
    assert down_rows["value"].isna().all() and down_rows["passed"].isna().all()
    good_rows = scores[scores["provider"] == "good"].set_index(["sample_id", "repeat"])
    assert not good_rows["infra_failure"].any() and good_rows["error"].isna().all()
    # The sample's file was in the copy the run worked in and the scorer read.
    expected = {"s0": 1.0, "s1": 1.0, "s2": 0.0}  # s2's target is in no file
    assert good_rows["value"].to_dict() == {(s, r): v for s, v in expected.items() for r in (0, 1)}
    assert good_rows.loc[("s2", 0), "explanation"] == "NOTES.md lacks 'absent'"
    assert set(good_rows["scorer"]) == {"notes_mention_target"}
    assert set(good_rows["scorer_version"]) == {"1"}
    runs = result.runs.set_index("run_id")
    for row in scores.itertuples():
        assert row.cost_usd == runs.loc[row.run_id, "cost_usd"]
        assert row.elapsed_s == runs.loc[row.run_id, "elapsed_s"]
        assert row.outcome == runs.loc[row.run_id, "outcome"]
    # A fresh Store on the file reads the same scores back.
    result.store.close()
    with hn.Store(path) as fresh:
        stored = fresh.scores(sweep_id=result.sweep_id)
        one = fresh.scores(run_id=str(scores["run_id"].iloc[0]))
    assert list(stored.columns) == STORED and len(stored) == 12
    assert str(stored["scored_at"].dtype) == "datetime64[us, UTC]"
    assert len(one) == 1
    mine = scores.set_index("run_id")
    for row in stored.itertuples():
        assert row.sample_id == mine.loc[row.run_id, "sample_id"]
        assert row.infra_failure == mine.loc[row.run_id, "infra_failure"]
        assert row.infra_kind is pd.NA or row.infra_kind == mine.loc[row.run_id, "infra_kind"]
        if pd.isna(row.value):
            assert pd.isna(mine.loc[row.run_id, "value"])
        else:
            assert row.value == mine.loc[row.run_id, "value"]


async def test_a_scorer_that_raises_gives_error_rows_and_the_sweep_ends_normally(
    ws: Path, store: hn.Store
) -> None:
    key = "sk-scorer-secret-0123456789abcdefghij"
    register(key)

    def broken(run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
        raise RuntimeError(f"cannot judge with {key}")

    def fine(run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
        return hn.Score(0.5, f"half, key {key}")

    provider = hn.ScriptedProvider(lambda m: "done", name="fine")
    result = await hn.sweep(["a", "b"], [provider], workspace=ws, store=store,
                            scorers=[broken, fine])  # fmt: skip
    assert set(result.runs["outcome"]) == {"finished"}
    scores = result.scores.set_index("scorer")
    assert len(result.scores) == 4
    errors = scores.loc["broken", "error"]
    assert all(e.startswith("RuntimeError: cannot judge with ") for e in errors)
    assert not any(key in e for e in errors)
    assert scores.loc["broken", "value"].isna().all()
    assert not scores.loc["broken", "infra_failure"].any()
    assert scores.loc["fine", "value"].tolist() == [0.5, 0.5]
    assert scores.loc["fine", "passed"].tolist() == [False, False]
    stored = store.scores(sweep_id=result.sweep_id)
    assert not any(key in str(v) for v in [*stored["error"], *stored["explanation"]])
    assert stored["error"].notna().sum() == 2


async def test_async_and_class_scorers_are_named_versioned_and_sync_ones_run_off_the_loop(
    ws: Path, store: hn.Store
) -> None:
    seen: dict[str, int] = {}

    async def judged(run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
        await asyncio.sleep(0)
        return hn.Score(True, "async")

    class Rubric:
        name = "rubric"
        version = 3

        def __call__(self, run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
            seen["thread"] = threading.get_ident()
            return hn.Score(run.text == sample.target)

    class Unnamed:
        async def __call__(self, run: hn.RunResult, sample: hn.Sample, workspace: Path) -> bool:
            return True

    loop_thread = threading.get_ident()
    provider = hn.ScriptedProvider(lambda m: "42", name="p")
    tasks = [hn.Sample("answer", "42", id="a"), hn.Sample("other", "7", id="o")]
    result = await hn.sweep(tasks, [provider], workspace=ws, store=store,
                            scorers=[judged, Rubric(), Unnamed()])  # fmt: skip
    scores = result.scores
    assert seen["thread"] != loop_thread  # the sync scorer ran in a thread
    tags = set(zip(scores["scorer"], scores["scorer_version"], strict=True))
    assert tags == {("judged", "1"), ("rubric", "3"), ("Unnamed", "1")}
    by = scores.set_index(["scorer", "sample_id"])["value"]
    assert by[("rubric", "a")] == 1.0 and by[("rubric", "o")] == 0.0
    assert set(by[("judged", slice(None))]) == {1.0} and set(by[("Unnamed", slice(None))]) == {1.0}
    assert result.scorers == (("judged", "1"), ("rubric", "3"), ("Unnamed", "1"))


async def test_a_sweep_without_scorers_has_no_score_rows(ws: Path, store: hn.Store) -> None:
    provider = hn.ScriptedProvider(lambda m: "done", name="p")
    result = await hn.sweep(["a"], [provider], workspace=ws, store=store)
    assert result.scores.empty and list(result.scores.columns) == list(SCORE_COLUMNS)
    assert store.scores().empty and result.records[0].sample_id == hn.Sample("a").id


@pytest.mark.parametrize(
    ("scorers", "tasks", "message"),
    [
        (["not callable"], ["a"], "a scorer must be callable"),
        (lambda r, s, w: True, ["a"], "must be a list of scorers"),
        ([notes_mention_target, notes_mention_target], ["a"], "two scorers are named"),
        (None, [hn.Sample("a", id="x"), hn.Sample("b", id="x")], "two samples have the id 'x'"),
    ],
)
async def test_bad_scorers_and_samples_are_refused_before_any_run(
    ws: Path, store: hn.Store, scorers: Any, tasks: list[Any], message: str
) -> None:
    provider = hn.ScriptedProvider(lambda m: "done", name="p")
    with pytest.raises(hn.ConfigError, match=message):
        await hn.sweep(tasks, [provider], workspace=ws, store=store, scorers=scorers)
    assert store.runs().empty


async def test_a_sample_file_through_a_template_symlink_out_is_refused_as_the_runs_error(
    tmp_path: Path, store: hn.Store
) -> None:
    outside = folder(tmp_path / "outside")
    template = folder(tmp_path / "template")
    (template / "data").symlink_to(outside)
    provider = hn.ScriptedProvider(lambda m: "done", name="p")
    sample = hn.Sample("task", files={"data/x.txt": "escaped?"})
    result = await hn.sweep([sample], [provider], workspace=template, store=store,
                            scorers=[notes_mention_target])  # fmt: skip
    assert not (outside / "x.txt").exists()
    assert result.records[0].outcome == "escalated_terminal"
    assert result.scores["infra_failure"].tolist() == [True]


def test_a_version_9_store_gains_the_scores_table_keeping_its_runs(tmp_path: Path) -> None:
    old_store(tmp_path / "v9.duckdb", 9).close()  # as the code before scores made it
    path = altered(tmp_path / "v9.duckdb", "INSERT INTO run_rows (run_id, task, sweep_id) "
                   "VALUES ('old', 'before', 'sw')")  # fmt: skip
    with hn.Store(path) as s:
        assert s.scores().empty and list(s.scores().columns) == STORED
        store_writer(s).add_scores([{"sweep_id": "sw", "run_id": "old", "scorer": "exact",
                                     "scorer_version": "1", "value": 1.0,
                                     "infra_failure": False}])  # fmt: skip
        versions = s.sql("SELECT version FROM schema_version ORDER BY 1")["version"].tolist()
        assert versions == list(range(1, SCHEMA_VERSION + 1)) and SCHEMA_VERSION == 14
        assert s.get_run("old") is not None
        assert s.scores(sweep_id="sw")["value"].tolist() == [1.0]


def test_a_score_written_again_replaces_its_row_and_shards_combine_their_scores(
    tmp_path: Path,
) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    long = "why " * 10_000
    for i in range(2):
        with hn.Store(shards / f"w{i}.duckdb") as s:
            for value in (0.0, 0.5, 1.0):  # scored again: the last row wins, queued or not
                op = _writes.add_scores([{"sweep_id": "sw", "run_id": f"r{i}", "sample_id": "q",
                                          "scorer": "exact", "scorer_version": "1",
                                          "value": value, "explanation": long,
                                          "infra_failure": False}])  # fmt: skip
                if value == 0.5:
                    store_writer(s).write(op)
                else:  # group commit: the append clashes and the op replaces
                    store_writer(s).submit(op).result()
    combined = hn.Store.combine(shards)
    both = combined.scores(sweep_id="sw")
    assert both["run_id"].tolist() == ["r0", "r1"] and both["value"].tolist() == [1.0, 1.0]
    assert all(len(e) < len(long) and "chars elided" in e for e in both["explanation"])
    merged = combined.merge(into=tmp_path / "all.duckdb")
    assert merged.scores()["run_id"].tolist() == ["r0", "r1"]
    merged.close()


async def test_built_in_scorers_score_in_the_run_copy_and_the_summary_reads_the_scores(
    ws: Path, store: hn.Store
) -> None:
    policy = hn.Policy.default().layer("sweep").allow_write("NOTES.md")
    with demo_server() as good, demo_server(rates={"server": 1.0}) as down:
        providers = {"good": provider_for(good, name="good"),
                     "down": provider_for(down, name="down")}  # fmt: skip
        scorers = [hn.scorers.file_contains("NOTES.md"), hn.scorers.includes("NOTES.md")]
        result = await hn.sweep(samples(), providers, workspace=ws, repeats=2, store=store,
                                policy=policy, scorers=scorers)  # fmt: skip
    table = result.summary().set_index(["provider", "scorer"])
    names = [s.name for s in scorers]
    assert set(result.scores["scorer"]) == set(names)
    for name in names:
        assert table.loc[("down", name), "infra_failure_rate"] == 1.0
        assert pd.isna(table.loc[("down", name), "mean"])  # no wrong answers: none scored
        assert table.loc[("good", name), "infra_failures"] == 0
    # file_contains read NOTES.md in each run's own copy: the target is there for s0, s1.
    assert table.loc[("good", names[0]), "mean"] == pytest.approx(4 / 6)


async def test_compare_leaves_infra_failures_out_and_a_sweep_without_scorers_says_so(
    ws: Path, store: hn.Store
) -> None:
    policy = hn.Policy.default().layer("sweep").allow_write("NOTES.md")
    with demo_server() as one, demo_server() as two, demo_server(rates={"server": 1.0}) as down:
        providers = {"one": provider_for(one, name="one"), "two": provider_for(two, name="two"),
                     "down": provider_for(down, name="down")}  # fmt: skip
        result = await hn.sweep(samples(), providers, workspace=ws, store=store, policy=policy,
                                scorers=[notes_mention_target])  # fmt: skip
        plain = await hn.sweep(["write NOTES.md"], {"one": provider_for(one, name="one")},
                               workspace=ws, store=store, policy=policy)  # fmt: skip
    pairs = result.compare().set_index(["a", "b"])
    assert set(pairs.index) == {("one", "two"), ("one", "down"), ("two", "down")}
    same = pairs.loc[("one", "two")]
    # The same demo model on both sides: the same answers on all three samples.
    assert (same["samples"], same["mean_a"], same["mean_b"], same["diff"]) == (3, 2 / 3, 2 / 3, 0)
    down = pairs.loc[("one", "down")]
    assert down["samples"] == 0 and pd.isna(down["p_value"])  # its runs are not wrong answers
    with pytest.raises(hn.ConfigError, match="two"):  # it names the providers there are
        result.compare("one", "nobody")
    for method in (plain.summary, plain.compare):
        with pytest.raises(hn.ConfigError, match="had no scorers"):
            method()
