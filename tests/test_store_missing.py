"""A missing value from a DataFrame is NULL in the store, whatever the column and however
the rows were taken from the frame (#31: ``to_dict("records")`` gives NaN for a missing
string, which was stored as the text ``'nan'``, and ``failure_rates`` reported a failure
kind ``nan``). Real DuckDB files, through the public (deprecated) ``Store`` writes."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from harnessnb import Store
from tests.store_helpers import AT, run_row

ROWS = 70  # past the small-batch size: both conversions (value by value, in bulk)


def _frame(kinds: str) -> pd.DataFrame:
    """Attempts, every other one missing its kind, status, latency and start: the kind
    as text (``object`` with NaN, ``string`` with pd.NA) or all missing (``float64``,
    what a frame of successes holds), the status ``Int64`` (pd.NA) or ``float64`` (NaN),
    the start a timestamp (NaT) or Unix seconds (NaN)."""
    odd = [n % 2 == 1 for n in range(ROWS)]
    kind: Any = [np.nan if o else "server" for o in odd]
    if kinds == "string":
        kind = pd.array([None if o else "server" for o in odd], dtype="string")
    elif kinds == "float64":
        kind = [np.nan] * ROWS
    frame = pd.DataFrame({
        "step": range(ROWS),
        "attempt": 0,
        "provider": "p",
        "kind": kind,
        "status": pd.array([None if o else 503 for o in odd], dtype="Int64"),
        "latency_ms": [np.nan if o else 12.5 for o in odd],
        "started_at": pd.to_datetime([None if o else AT + n for n, o in enumerate(odd)],
                                     unit="s"),
    })  # fmt: skip
    if kinds == "float64":  # a frame of numbers only: to_numpy gives numpy scalars
        frame["status"] = frame["status"].astype("float64")
        frame["started_at"] = [np.nan if o else AT + n for n, o in enumerate(odd)]
        frame["provider"] = np.nan
    return frame


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return frame.to_dict("records")  # type: ignore[return-value]


def _tuples(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [row._asdict() for row in frame.itertuples(index=False)]


def _numpy(frame: pd.DataFrame) -> list[dict[str, Any]]:
    # Column by column as numpy arrays: numpy scalars (np.float64 NaN, np.datetime64 NaT).
    columns = {c: frame[c].to_numpy() for c in frame.columns}
    return [{c: values[i] for c, values in columns.items()} for i in range(len(frame))]


TAKEN: dict[str, Callable[[pd.DataFrame], list[dict[str, Any]]]] = {
    "records": _records,
    "itertuples": _tuples,
    "to_numpy": _numpy,
}


def _write(store: Store, path: str, rows: list[dict[str, Any]]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the old public writes
        store.create_run(run_row("r1"))
        if path == "add_attempts":
            store.add_attempts("r1", rows)
            return
        for n, attempt in enumerate(rows):  # one step per attempt, its rows beside it
            step = {"step": n + 1, "decision": attempt["kind"], "tool_calls": 0,
                    "tokens": attempt["status"], "provider": attempt["provider"],
                    "at": attempt["started_at"]}  # fmt: skip
            store.commit_step("r1", step, attempts=[{**attempt, "step": n + 1}],
                              tool_calls=[], stalls=[], checkpoint={})  # fmt: skip


# Every extraction through add_attempts; the step path (the same row conversion) with one.
WAYS = [*(("add_attempts", taken) for taken in TAKEN), ("commit_step", "records")]


@pytest.mark.parametrize(("path", "taken"), WAYS)
@pytest.mark.parametrize("kinds", ["object", "string", "float64"])
def test_a_missing_value_from_a_dataframe_is_null_in_every_column(
    tmp_path: Path, path: str, taken: str, kinds: str
) -> None:
    rows = TAKEN[taken](_frame(kinds))
    with Store(tmp_path / "runs.duckdb") as store:
        _write(store, path, rows)
        found = store.sql(
            "SELECT count(*) FILTER (WHERE kind IS NULL) AS kind, "
            "count(*) FILTER (WHERE status IS NULL) AS status, "
            "count(*) FILTER (WHERE latency_ms IS NULL) AS latency, "
            "count(*) FILTER (WHERE started_at IS NULL) AS started, "
            "count(*) FILTER (WHERE provider IS NULL) AS provider, "
            "count(*) FILTER (WHERE kind IN ('nan', 'NaN', '<NA>', 'None', 'NaT')) AS as_text "
            "FROM attempts"
        )
        rates = store.failure_rates(by=("provider", "kind"))
        steps = store.sql(
            "SELECT count(*) FILTER (WHERE decision IS NULL) AS decision, "
            "count(*) FILTER (WHERE decision = 'nan') AS as_text FROM steps"
        )
    half = ROWS // 2
    all_kinds = kinds == "float64"
    expected = {"kind": ROWS if all_kinds else half, "status": half, "latency": half,
                "started": half, "provider": ROWS if all_kinds else 0, "as_text": 0}  # fmt: skip
    assert found.iloc[0].to_dict() == expected
    assert "nan" not in rates["kind"].astype(str).tolist()
    assert int(rates["failures"].sum()) == (0 if all_kinds else half)
    if path == "commit_step":
        assert steps.iloc[0].to_dict() == {"decision": ROWS if all_kinds else half, "as_text": 0}


def test_numpy_missing_scalars_are_null(tmp_path: Path) -> None:
    # np.float64 NaN in a text or an integer column, np.datetime64 NaT in a timestamp.
    missing = {"kind": np.float64("nan"), "status": np.float64("nan"),
               "latency_ms": np.float32("nan"), "started_at": np.datetime64("NaT")}  # fmt: skip
    with Store(tmp_path / "runs.duckdb") as store:
        _write(store, "add_attempts", [{"step": 1, "attempt": 0, **missing}])
        found = store.sql("SELECT kind, status, latency_ms, started_at FROM attempts")
    assert found.isna().all(axis=None), found
