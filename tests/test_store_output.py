"""The store's side of typed answers (schema 13): the mode each attempt asked in and an
unusable answer's raw text (``attempts.output_mode``, ``answer``), the mode a run ended
in and its validated answer (``runs.output_mode``, ``output``), and failure rates by
output mode, against real DuckDB files."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import harnessnb as hn
from harnessnb.rules._secrets import scrub
from harnessnb.store._row_types import AttemptRow
from harnessnb.store._rows import MAX_ANSWER_CHARS, MAX_OUTPUT_BYTES
from harnessnb.store._schema import COLUMNS, MIGRATIONS, SCHEMA_VERSION
from harnessnb.store._writer import store_writer
from tests.store_helpers import (
    AT,
    altered,
    attempt,
    harnessnb_before,
    old_store,
    run_row,
    step_kwargs,
)

KEY = "sk-proj-TYPEDSECRET0123456789abcdef"
HIDDEN = scrub(KEY)  # what the one scrubber leaves of it


def _typed(step: int, n: int, mode: str | None, kind: str | None = None, **extra: Any) -> Any:
    """An attempt row of a typed call: an answer that came (HTTP 200), usable or not."""
    row = attempt(step, n)
    row.update(output_mode=mode, kind=kind, status=200, retry_after_s=None)
    if kind is not None:
        row.update(answer='{"city": 3}', error="city: Input should be a valid string")
    return {**row, **extra}


def _plain(frame: pd.DataFrame) -> list[list[Any]]:
    """A frame's rows with every missing value as None (``pd.NA``, ``NaN``, ``NaT``)."""
    return frame.astype(object).where(frame.notna(), None).values.tolist()


# ------------------------------------------------------------------ schema


def test_a_version_12_store_gains_the_typed_answer_columns_keeping_its_rows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v12.duckdb"
    con = old_store(path, 12)  # as the code before typed answers made it
    con.execute("INSERT INTO run_rows (run_id, task, outcome) VALUES ('old', 'before', 'success')")
    con.execute("INSERT INTO attempts (run_id, step, attempt, provider, kind, status) "
                "VALUES ('old', 1, 0, 'openai', 'server', 503)")  # fmt: skip
    con.close()

    with hn.Store(path) as s:
        versions = s.sql("SELECT version FROM schema_version ORDER BY 1")["version"].tolist()
        assert versions == list(range(1, SCHEMA_VERSION + 1)) and SCHEMA_VERSION == 14
        runs = s.runs()
        assert list(runs.columns) == list(COLUMNS["runs"])
        assert list(runs.columns)[-2:] == ["output_mode", "output"]
        assert _plain(runs[["run_id", "outcome", "output_mode", "output"]]) == [
            ["old", "success", None, None]  # the old row kept, NULL in the new columns
        ]
        old = s.get_run("old")
        assert old is not None and old["output_mode"] is None and old["output"] is None

        writer = store_writer(s)
        writer.create_run(run_row("new", output_mode="native"))
        writer.add_attempts("new", [_typed(1, 0, "native", "schema_violation"),
                                    _typed(1, 1, "native")])  # fmt: skip
        writer.finish_run("new", outcome="finished", finished_at=AT + 9,
                          output_mode="native", output='{"city": "Paris"}')  # fmt: skip
        attempts = s.attempts()[["run_id", "kind", "output_mode", "answer"]]
        assert _plain(attempts) == [
            ["new", "schema_violation", "native", '{"city": 3}'],
            ["new", None, "native", None],
            ["old", "server", None, None],
        ]
        new = s.get_run("new")
        assert new is not None
        assert new["output_mode"] == "native" and new["output"] == {"city": "Paris"}


def test_a_harnessnb_from_before_schema_13_refuses_a_schema_13_store(tmp_path: Path) -> None:
    old = harnessnb_before(13, tmp_path / "old")
    path = tmp_path / "runs.duckdb"
    with hn.Store(path) as s:
        store_writer(s).create_run(run_row("r1", output_mode="native"))
    code = (
        "import sys, harnessnb as hn\n"
        "assert hn.Store.schema_version == 12, hn.__file__\n"
        "for open_it in (lambda p: hn.Store(p), lambda p: hn.Store.combine([p]).runs()):\n"
        "    try:\n"
        "        open_it(sys.argv[1])\n"
        "    except hn.StoreError as e:\n"
        "        print(e.kind, e.message)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(old)}
    done = subprocess.run([sys.executable, "-c", code, str(path)], env=env, cwd=tmp_path,
                          capture_output=True, text=True, check=False, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("newer ") for line in lines), lines
    assert f"schema version {SCHEMA_VERSION}, newer than the 12" in lines[0]
    with hn.Store(path) as s:  # refused, and left as it was
        assert s.runs()["output_mode"].tolist() == ["native"]


def test_a_store_whose_runs_view_lacks_the_typed_answer_is_refused(tmp_path: Path) -> None:
    # The v12 view over a v13 table: a file changed by hand is no store of ours.
    path = tmp_path / "runs.duckdb"
    hn.Store(path).close()
    altered(path, "DROP VIEW runs", MIGRATIONS[7][-1])  # version 7's view: no output columns
    with pytest.raises(hn.StoreError, match=r"main\.runs") as raised:
        hn.Store(path)
    assert raised.value.kind == "foreign"


# ------------------------------------------------------------------ attempts


@pytest.mark.parametrize("rows", [1, 70])  # one VALUES insert; a batch built column-wise
def test_an_unusable_answer_is_kept_scrubbed_and_clipped(tmp_path: Path, rows: int) -> None:
    answer = f"Sure! my key is {KEY} " + "x" * 9_000 + " and the end is here"
    with hn.Store(tmp_path / "runs.duckdb") as s:
        writer = store_writer(s)
        writer.create_run(run_row("r1"))
        batch: list[AttemptRow] = [
            _typed(1, n, "prompted", "schema_violation", answer=answer) for n in range(rows)
        ]
        writer.add_attempts("r1", batch)
        kept = s.attempts("r1")
    assert len(kept) == rows
    for text in kept["answer"]:
        assert KEY not in text and "[redacted]" in HIDDEN
        assert text.startswith(f"Sure! my key is {HIDDEN} xxx")
        assert text.endswith("xxx and the end is here")  # head and tail, the cut counted
        assert "chars elided" in text and len(text) <= MAX_ANSWER_CHARS + 60
    assert kept["output_mode"].tolist() == ["prompted"] * rows
    assert kept["kind"].astype(str).tolist() == ["schema_violation"] * rows


def test_a_short_answer_is_kept_as_it_came(tmp_path: Path) -> None:
    answer = 'I cannot help with that.\n```json\n{"a": 1,\n "b": [2]}\n```'
    with hn.Store(tmp_path / "runs.duckdb") as s:
        store_writer(s).create_run(run_row("r1"))
        store_writer(s).add_attempts("r1", [_typed(1, 0, "native", "refusal", answer=answer)])
        assert s.attempts("r1")["answer"].tolist() == [answer]


# ---------------------------------------------------------------------- runs


def test_finish_run_sets_the_mode_it_ended_in_and_the_answer(tmp_path: Path) -> None:
    with hn.Store(tmp_path / "runs.duckdb") as s:
        writer = store_writer(s)
        writer.create_run(run_row("typed", output_mode="native"))  # the mode chosen
        writer.create_run(run_row("plain"))
        started = s.runs()
        assert _plain(started[["run_id", "output_mode", "output"]]) == [
            ["plain", None, None], ["typed", "native", None]
        ]  # fmt: skip
        text = '{"city":"Paris","temps":[1.5,2],"ok":true}'
        # native refused with a 400, the run fell back to tool mode and ended there
        writer.finish_run("typed", outcome="finished", finished_at=AT + 5,
                          output_mode="tool", output=text)  # fmt: skip
        writer.finish_run("plain", outcome="finished", finished_at=AT + 5)
        runs = s.runs()
        typed = s.get_run("typed")
    assert _plain(runs[["run_id", "outcome", "output_mode", "output"]]) == [
        ["plain", "finished", None, None],
        ["typed", "finished", "tool", text],  # the caller's JSON text, byte for byte
    ]
    assert pd.isna(runs["output_mode"].iloc[0])  # missing, never the text "None"
    assert typed is not None
    assert typed["output"] == {"city": "Paris", "temps": [1.5, 2], "ok": True}


def test_a_finish_without_a_mode_keeps_the_one_chosen_at_the_start(tmp_path: Path) -> None:
    # A typed run that ended before any answer (a budget, a refusal): the row still
    # says the mode it ran in, and has no output.
    with hn.Store(tmp_path / "runs.duckdb") as s:
        store_writer(s).create_run(run_row("r1", output_mode="prompted"))
        store_writer(s).finish_run("r1", outcome="escalated_terminal", finished_at=AT + 1)
        assert _plain(s.runs()[["outcome", "output_mode", "output"]]) == [
            ["escalated_terminal", "prompted", None]
        ]


async def test_a_last_step_ends_a_typed_run_with_its_answer_in_one_commit(
    tmp_path: Path,
) -> None:
    with hn.Store(tmp_path / "runs.duckdb") as s:
        queued = store_writer(s).queued
        lease = await queued.start_run(run_row("r1"), "me")
        row, kwargs = step_kwargs(1)
        finish = {"outcome": "finished", "finished_at": AT + 3, "error": None,
                  "output_mode": "native", "output": '{"n": 1}'}  # fmt: skip
        await queued.commit_step("r1", row, **kwargs, lease=lease, finish=finish)
        got = s.get_run("r1")
        assert got is not None and got["steps"] == 1
        assert (got["outcome"], got["output_mode"], got["output"]) == ("finished", "native",
                                                                       {"n": 1})  # fmt: skip


async def test_runs_ended_together_in_one_group_commit_keep_each_its_answer(
    tmp_path: Path,
) -> None:
    # Ends queued together are merged into one UPDATE of many run rows.
    with hn.Store(tmp_path / "runs.duckdb") as s:
        queued = store_writer(s).queued
        modes = ["native", "tool", "prompted", None]
        leases = [await queued.start_run(run_row(f"r{i:02}", output_mode="native"), "me")
                  for i in range(24)]  # fmt: skip
        await asyncio.gather(*(
            queued.finish_run(f"r{i:02}", outcome="finished", finished_at=AT + i,
                              lease=lease, release=True, output_mode=modes[i % 4],
                              output=None if i % 4 == 3 else json.dumps({"i": i}))
            for i, lease in enumerate(leases)
        ))  # fmt: skip
        got = _plain(s.runs()[["run_id", "outcome", "output_mode", "output"]])
    assert got == [
        [f"r{i:02}", "finished", modes[i % 4] or "native",
         None if i % 4 == 3 else json.dumps({"i": i})]
        for i in range(24)
    ]  # fmt: skip


def test_a_stale_lease_writes_neither_the_end_nor_the_answer(tmp_path: Path) -> None:
    with hn.Store(tmp_path / "runs.duckdb") as s:
        writer = store_writer(s)
        old = writer.start_run(run_row("r1"), "me")
        writer.acquire_lease("r1", "other", owner_alive=lambda owner: False)  # taken over
        with pytest.raises(hn.ConflictError):
            writer.finish_run("r1", outcome="finished", finished_at=AT + 2, lease=old,
                              release=True, output_mode="tool", output='{"a": 1}')  # fmt: skip
        assert _plain(s.runs()[["outcome", "output_mode", "output"]]) == [[None, None, None]]


def test_the_answer_is_scrubbed_and_stays_json(tmp_path: Path) -> None:
    answer = {"note": f"use {KEY} to log in", KEY: "a key as a key", "n": [1, {"k": KEY}]}
    with hn.Store(tmp_path / "runs.duckdb") as s:
        store_writer(s).create_run(run_row("r1"))
        store_writer(s).finish_run("r1", outcome="finished", finished_at=AT,
                                   output_mode="native", output=json.dumps(answer))  # fmt: skip
        stored = s.runs()["output"].iloc[0]
        got = s.get_run("r1")
    assert KEY not in stored
    assert got is not None
    assert got["output"] == {"note": f"use {HIDDEN} to log in", HIDDEN: "a key as a key",
                             "n": [1, {"k": HIDDEN}]}  # fmt: skip


@pytest.mark.parametrize("bad", ['{"city": "Par', "Paris", "", "{'a': 1}"])
def test_an_output_that_is_not_json_is_refused_and_the_run_is_left_as_it_was(
    tmp_path: Path, bad: str
) -> None:
    with hn.Store(tmp_path / "runs.duckdb") as s:
        store_writer(s).create_run(run_row("r1", output_mode="native"))
        with pytest.raises(hn.StoreError, match="not JSON") as raised:
            store_writer(s).finish_run("r1", outcome="finished", finished_at=AT,
                                       output_mode="native", output=bad)  # fmt: skip
        assert raised.value.kind == "query"
        assert _plain(s.runs()[["outcome", "output"]]) == [[None, None]]


def test_an_answer_over_the_cap_is_not_stored_and_a_marker_says_so(tmp_path: Path) -> None:
    at_cap = json.dumps({"text": "y" * (MAX_OUTPUT_BYTES - 12)})  # exactly the cap
    assert len(at_cap.encode()) == MAX_OUTPUT_BYTES
    over = json.dumps({"text": "é" * MAX_OUTPUT_BYTES})  # 2 bytes a character in UTF-8
    with hn.Store(tmp_path / "runs.duckdb") as s:
        writer = store_writer(s)
        for run_id, output in (("fits", at_cap), ("big", over)):
            writer.create_run(run_row(run_id))
            writer.finish_run(run_id, outcome="finished", finished_at=AT + 1,
                              output_mode="native", output=output)  # fmt: skip
        runs = s.runs().set_index("run_id")
        markers = s.markers()
    assert runs.loc["fits", "output"] == at_cap
    assert pd.isna(runs.loc["big", "output"])  # a cut JSON text would be no JSON at all
    assert runs.loc["big", "outcome"] == "finished"  # the run's end is written all the same
    assert runs.loc["big", "output_mode"] == "native"
    assert markers["run_id"].tolist() == ["big"] and markers["kind"].tolist() == ["output_cut"]
    size = len(over.encode())
    assert f"{size:,} bytes" in markers["detail"].iloc[0]


# ------------------------------------------------------------- failure rates


def _mixed(s: hn.Store) -> None:
    """Attempts of two providers: untyped ones, and typed ones in each mode."""
    writer = store_writer(s)
    writer.create_run(run_row("r1"))
    a: list[AttemptRow] = [
        _typed(1, 0, None),  # untyped
        _typed(1, 1, None),
        _typed(2, 0, "native", "schema_violation"),
        _typed(2, 1, "native", "refusal"),
        _typed(2, 2, "native"),
        {**attempt(3, 0, kind="server"), "output_mode": "native"},  # HTTP failed, typed call
    ]
    b: list[AttemptRow] = [
        _typed(1, 0, "tool", "truncated", provider="gemini"),
        _typed(1, 1, "tool", provider="gemini"),
        _typed(2, 0, "prompted", provider="gemini"),
    ]
    writer.add_attempts("r1", [*a, *b])


def test_failure_rates_by_provider_output_mode_and_kind(tmp_path: Path) -> None:
    with hn.Store(tmp_path / "runs.duckdb") as s:
        _mixed(s)
        rates = s.failure_rates(by=("provider", "output_mode", "kind"))
    assert list(rates.columns[:6]) == ["provider", "output_mode", "kind", "attempts", "failures",
                                       "failure_rate"]  # fmt: skip
    got = _plain(rates[["provider", "output_mode", "kind", "attempts", "failures"]])
    assert got == [
        ["gemini", "prompted", None, 1, 0],
        ["gemini", "tool", "truncated", 2, 1],
        ["openai", "native", "refusal", 4, 1],  # the group's total, most failures first
        ["openai", "native", "schema_violation", 4, 1],
        ["openai", "native", "server", 4, 1],
        ["openai", None, None, 2, 0],  # untyped: a missing mode, not the text "None"
    ]
    assert rates["output_mode"].dtype == "string"
    untyped = rates[rates["provider"].eq("openai") & rates["output_mode"].isna()]
    assert len(untyped) == 1 and "None" not in rates["output_mode"].dropna().tolist()
    native = rates[rates["output_mode"].eq("native").fillna(False)]
    assert native["failure_rate"].sum() == pytest.approx(0.75)  # 3 of the 4 failed
    # the kinds keep the fixed order: provider kinds first, then the answers' kinds
    order = list(rates["kind"].cat.categories)
    assert order.index("server") < order.index("refusal") < order.index("truncated")
    assert order.index("truncated") < order.index("schema_violation")


def test_failure_rates_by_provider_and_kind_count_the_unusable_answers(tmp_path: Path) -> None:
    with hn.Store(tmp_path / "runs.duckdb") as s:
        _mixed(s)
        by_kind = s.failure_rates(by=("provider", "kind"))
        by_mode = s.failure_rates(by="output_mode")
        tools = s.failure_rates(of="tool_calls")
    assert _plain(by_kind[["provider", "kind", "attempts", "failures"]]) == [
        ["gemini", "truncated", 3, 1],
        ["openai", "refusal", 6, 1],
        ["openai", "schema_violation", 6, 1],
        ["openai", "server", 6, 1],
    ]
    assert "output_mode" not in by_kind.columns  # grouped only when asked for
    assert _plain(by_mode[["output_mode", "attempts", "failures"]]) == [
        ["native", 4, 3], ["prompted", 1, 0], ["tool", 2, 1], [None, 2, 0]
    ]  # fmt: skip
    assert tools.empty and "calls" in tools.columns  # of="tool_calls" works as before


def test_output_mode_is_a_group_failure_rates_names_when_refusing(tmp_path: Path) -> None:
    with (
        hn.Store(tmp_path / "runs.duckdb") as s,
        pytest.raises(hn.StoreError, match="output_mode") as raised,
    ):
        s.failure_rates(by=("provider", "mode"))
    assert raised.value.kind == "query"


# --------------------------------------------------------- shards combined


def test_combine_and_merge_carry_the_typed_answers_of_every_shard(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    for i, mode in enumerate(("native", "tool")):
        with hn.Store(shards / f"w{i}.duckdb") as s:
            writer = store_writer(s)
            writer.create_run(run_row(f"r{i}", output_mode=mode))
            writer.add_attempts(f"r{i}", [_typed(1, 0, mode, "schema_violation"),
                                          _typed(1, 1, mode)])  # fmt: skip
            writer.finish_run(f"r{i}", outcome="finished", finished_at=AT,
                              output_mode=mode, output=json.dumps({"i": i}))  # fmt: skip
    combined = hn.Store.combine(shards)
    runs = combined.runs()[["run_id", "output_mode", "output"]]
    assert _plain(runs) == [["r0", "native", '{"i": 0}'], ["r1", "tool", '{"i": 1}']]
    got = combined.get_run("r1")
    assert got is not None and got["output"] == {"i": 1}
    answers = combined.attempts()[["run_id", "output_mode", "answer"]]
    assert _plain(answers) == [["r0", "native", '{"city": 3}'], ["r0", "native", None],
                               ["r1", "tool", '{"city": 3}'], ["r1", "tool", None]]  # fmt: skip
    rates = combined.failure_rates(by=("output_mode", "kind"))
    assert _plain(rates[["output_mode", "kind", "attempts", "failures"]]) == [
        ["native", "schema_violation", 2, 1], ["tool", "schema_violation", 2, 1]
    ]  # fmt: skip
    with combined.merge(into=tmp_path / "merged.duckdb") as merged:
        assert _plain(merged.runs()[["run_id", "output_mode", "output"]]) == _plain(runs)
        assert _plain(merged.attempts()[["run_id", "output_mode", "answer"]]) == _plain(answers)
