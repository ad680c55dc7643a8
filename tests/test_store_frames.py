"""The store's DataFrames are ready for analysis: one missing-value convention across
every reader, categoricals in a fixed order, tz-aware UTC timestamps, failure rates with
an interval and over time. Real DuckDB files throughout."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

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
