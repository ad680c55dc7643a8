"""The store's DataFrames are ready for analysis: one missing-value convention across
every reader, categoricals in a fixed order, tz-aware UTC timestamps, failure rates with
an interval and over time. Real DuckDB files throughout."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import harnessnb as hn
from harnessnb import Store
from harnessnb.rules._classify import OutputFailureKind
from harnessnb.store._writer import store_writer
from tests.store_helpers import AT, attempt, run_row

KINDS = [k.value for k in hn.ProviderErrorKind] + [k.value for k in OutputFailureKind]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "runs.duckdb")
    store_writer(s).create_run(run_row("r1"))
    store_writer(s).add_attempts("r1", [
        attempt(1, 0), attempt(1, 1, kind="server"),
        attempt(2, 0, kind="rate_limited", started_at=AT + 3600),
        attempt(2, 1, kind="not_installed", started_at=AT + 3601),  # an agent CLI's own kind
        attempt(3, 0, provider="anthropic", started_at=AT + 7300),
    ])  # fmt: skip
    return s


def test_kind_is_the_same_categorical_in_every_reader(store: Store) -> None:
    frames = {
        "attempts": store.attempts(),
        "sql": store.sql("SELECT provider, kind FROM attempts"),
        "failure_rates": store.failure_rates(),
    }
    for name, frame in frames.items():
        kind = frame["kind"]
        assert isinstance(kind.dtype, pd.CategoricalDtype), name
        assert list(kind.cat.categories[: len(KINDS)]) == KINDS, name
        # "no failure" is missing, never the text "None" or a float NaN in an object column
        assert "None" not in set(kind.astype(object).dropna()), name
        assert kind.isna().any(), name
    # a kind outside the known order is kept, after the known ones
    assert list(frames["attempts"]["kind"].cat.categories[len(KINDS) :]) == ["not_installed"]


def test_missing_values_are_pd_na_whatever_the_column_type(store: Store) -> None:
    attempts = store.attempts()
    ok = attempts[attempts["kind"].isna()].iloc[0]
    assert ok["error"] is pd.NA and ok["retry_after_s"] is pd.NA
    # a text column that is NULL in every row is still text, with pd.NA
    nulls = store.sql("SELECT NULL::VARCHAR AS note, NULL::DOUBLE AS x, NULL::BIGINT AS n")
    assert [str(t) for t in nulls.dtypes] == ["string", "Float64", "Int64"]
    assert all(v is pd.NA for v in nulls.iloc[0])


def test_timestamps_are_tz_aware_utc(store: Store) -> None:
    attempts = store.attempts()
    assert str(attempts["started_at"].dtype) == "datetime64[us, UTC]"
    first = attempts["started_at"].min()  # attempt(1, n) starts at AT + 1
    assert first == pd.Timestamp(dt.datetime.fromtimestamp(AT + 1, dt.UTC))
    assert str(store.runs()["started_at"].dtype) == "datetime64[us, UTC]"


def test_outcome_is_a_categorical_in_run_outcome_order(store: Store) -> None:
    store_writer(store).finish_run("r1", outcome="finished", finished_at=AT + 10)
    outcome = store.runs()["outcome"]
    assert isinstance(outcome.dtype, pd.CategoricalDtype)
    assert list(outcome.cat.categories) == [o.value for o in hn.RunOutcome]
    assert list(outcome) == ["finished"]


def test_failure_rates_over_time_buckets_by_attempt_start(store: Store) -> None:
    hourly = store.failure_rates(by="provider", every="1h")
    assert list(hourly.columns[:2]) == ["period", "provider"]
    assert str(hourly["period"].dtype).endswith("UTC]")
    got = [
        (p.isoformat(), prov, n, f)
        for p, prov, n, f in hourly[["period", "provider", "attempts", "failures"]].itertuples(
            index=False
        )
    ]
    start = pd.Timestamp(dt.datetime.fromtimestamp(AT, dt.UTC)).floor("1h")
    hour = pd.Timedelta("1h")
    assert got == [
        (start.isoformat(), "openai", 2, 1),
        ((start + hour).isoformat(), "openai", 2, 2),
        ((start + 2 * hour).isoformat(), "anthropic", 1, 0),
    ]  # fmt: skip
    # the same buckets from a timedelta, and with kind in the groups
    assert store.failure_rates(by="provider", every=dt.timedelta(hours=1)).equals(hourly)
    by_kind = store.failure_rates(every="1D")
    days = {start.floor("1D"), (start + 2 * hour).floor("1D")}  # AT + 2 h is past midnight
    assert set(by_kind["period"]) == days and len(days) == 2


@pytest.mark.parametrize("every", ["soon", "0s", "-1h", 5, "NaT"])
def test_failure_rates_refuses_a_bucket_that_is_not_a_duration(store: Store, every: object) -> None:
    with pytest.raises(hn.StoreError) as info:
        store.failure_rates(every=every)
    assert info.value.kind == "query"


def test_the_interval_of_zero_failures_is_not_zero_width(store: Store) -> None:
    rates = store.failure_rates(by="provider")
    anthropic = rates[rates["provider"] == "anthropic"].iloc[0]
    assert anthropic["failure_rate"] == 0.0
    assert anthropic["failure_rate_low"] == 0.0
    assert 0.79 < anthropic["failure_rate_high"] < 0.8  # 0 of 1: 0 to 0.793


def test_a_run_does_not_import_pandas(tmp_path: Path) -> None:
    # Only the readers need DataFrames: a run (which only writes) never pays pandas'
    # import (about 0.3 s), in a script or the command.
    import subprocess
    import sys

    (tmp_path / "ws").mkdir()  # the store beside it, never inside
    code = (
        "import sys, harnessnb as hn\n"
        f"ws, path = {str(tmp_path / 'ws')!r}, {str(tmp_path / 's.duckdb')!r}\n"
        "c = hn.TaskContract('say hi', ws)\n"
        "r = hn.run_sync(c, hn.ScriptedProvider(['hi']), store=hn.Store(path))\n"
        "assert r.outcome == 'finished', r\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_a_frame_made_from_arrays_is_the_frame_made_from_df(tmp_path: Path) -> None:
    # #31: ``frame`` builds each column from DuckDB's arrays at once (the readers'
    # types) rather than converting ``result.df()`` column by column; the frame must be
    # the same, dtype for dtype and missing value for missing value, in every column
    # type it handles, NULLs and a NaN included, and for an empty result.
    import duckdb

    from harnessnb.store import _frames

    query = (
        "SELECT * FROM (VALUES "
        "(1::BIGINT, 2::INTEGER, 3::UINTEGER, 1.5::DOUBLE, true, 'a', 'server', 'finished', "
        "TIMESTAMP '2024-01-01 00:00:01.5', 'x'), "
        "(NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'y'), "
        "(-4, 5, 6, 'nan'::DOUBLE, false, '', 'not_installed', 'cancelled', "
        "TIMESTAMP '1970-01-01', NULL)"
        ") t(big, i, u, f, b, s, kind, outcome, ts, a) "
    )
    con = duckdb.connect()
    try:
        for where in ("", "WHERE false"):
            made = _frames.frame(con.execute(query + where))
            result = con.execute(query + where)
            types = [str(d[1]) for d in result.description or []]
            converted = _frames._converted(result.df(), types)
            pd.testing.assert_frame_equal(made, converted)
            assert [str(t) for t in made.dtypes] == [
                "Int64", "Int64", "Int64", "Float64", "boolean", "string", "category",
                "category", "datetime64[us, UTC]", "string",
            ]  # fmt: skip
        made = _frames.frame(con.execute(query))
        assert made["f"].isna().tolist() == [False, True, True]  # NaN is missing, as before
        assert made["kind"].isna().tolist() == [False, True, False]
    finally:
        con.close()


@pytest.mark.parametrize(
    ("of", "by"),
    [("attempts", ("provider", "kind")), ("attempts", "provider"), ("attempts", ()),
     ("tool_calls", ("tool", "kind")), ("tool_calls", "tool")],
)  # fmt: skip
def test_the_interval_computed_in_sql_is_the_wilson_interval_of_the_frame(
    store: Store, of: str, by: tuple[str, ...] | str
) -> None:
    # #31: the 95% interval is computed in the query; it must be what ``with_intervals``
    # (the pandas computation, still used for frames made by hand) gives on the rates.
    from harnessnb.store._frames import with_intervals

    writer = store_writer(store)
    for seq, status in enumerate(["ok", "error", "refused", "ok", "intent"]):
        writer.record_intent("r1", {"step": 1, "seq": seq, "tool": "read_file", "effect": "read",
                                    "args": {}, "at": AT})  # fmt: skip
        if status != "intent":
            writer.settle_tool_call("r1", 1, seq, status=status)
    rates = store.failure_rates(by, of=of)
    assert len(rates) > 0
    total = "attempts" if of == "attempts" else "calls"
    names = list(rates.columns)
    at = names.index("failure_rate")
    assert names[at + 1 : at + 3] == ["failure_rate_low", "failure_rate_high"]
    again = with_intervals(rates.drop(columns=["failure_rate_low", "failure_rate_high"]), total)
    assert list(again.columns) == names
    for column in ("failure_rate_low", "failure_rate_high"):
        assert str(rates[column].dtype) == "Float64"
        assert rates[column].tolist() == pytest.approx(again[column].tolist(), abs=1e-12)


def test_readers_run_on_every_core_and_writes_on_one_thread_in_any_order(
    tmp_path: Path,
) -> None:
    # #31: a reader no longer sets threads back to 1 after itself (two SETs a read);
    # the write that follows a reader sets it, so a write still runs on one thread.
    import os

    from harnessnb.store._batch import WriteOp

    def threads_now(con: Any, batch: Any) -> int:
        return int(con.execute("SELECT current_setting('threads')").fetchone()[0])

    def read_threads(s: Store) -> int:
        return int(s.sql("SELECT current_setting('threads') AS t")["t"].iloc[0])

    cores = os.cpu_count() or 1
    with Store(tmp_path / "threads.duckdb") as s:
        writes = [s._write(WriteOp("threads", threads_now))]
        reads = [read_threads(s)]
        s.failure_rates()
        reads.append(read_threads(s))
        writes.append(s._write(WriteOp("threads", threads_now)))
        writes.append(s._submit(WriteOp("threads", threads_now)).result(timeout=30))
        reads.append(read_threads(s))
        s._shared().close()  # a reopened connection starts on one thread again
        writes.append(s._write(WriteOp("threads", threads_now)))
        reads.append(read_threads(s))
    assert writes == [1, 1, 1, 1]
    assert reads == [cores] * 4
