"""The typed rows of the store's writes: one TypedDict per written table, held to the
schema, and a key that is no column (or a required one missing) refused at the call,
naming it, with nothing written."""

from __future__ import annotations

import collections.abc
import types
import typing
from pathlib import Path

import pytest

from harnessnb import Store, StoreError
from harnessnb.store._row_types import ROW_TYPES
from harnessnb.store._schema import COLUMNS
from harnessnb.store._writer import store_writer
from tests.store_helpers import AT, run_row, step_kwargs, tool

# What a field's annotation may hold for each DuckDB column type (None aside: every
# column is nullable or filled in by the write). VARCHAR columns hold text or JSON, JSON
# columns (``mcp_servers.tools``) a list.
_ALLOWED: dict[str, set[object]] = {
    "INTEGER": {int},
    "BIGINT": {int},
    "DOUBLE": {float},
    "BOOLEAN": {bool},
    "TIMESTAMP": {float},
    "VARCHAR": {str, collections.abc.Mapping},
    "BLOB": {bytes},
    "JSON": {collections.abc.Sequence},
}


def _members(hint: object) -> list[object]:
    """The types a field's annotation allows, None left out, generics by their origin."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    found = typing.get_args(hint) if union else (hint,)
    return [typing.get_origin(t) or t for t in found if t is not type(None)]


def test_every_written_table_has_a_row_type_field_for_field(tmp_path: Path) -> None:
    written = {"run_rows", "attempts", "steps", "tool_calls", "stalls", "markers", "scores",
               "sweep_runs", "run_files", "mcp_servers"}
    assert set(ROW_TYPES) == written
    for table, row_type in ROW_TYPES.items():
        fields = list(typing.get_type_hints(row_type))
        assert sorted(fields) == sorted(COLUMNS[table]), table
        assert len(set(fields)) == len(fields)


@pytest.mark.parametrize("table", sorted(ROW_TYPES))
def test_row_field_types_match_the_column_types(tmp_path: Path, table: str) -> None:
    store = Store(tmp_path / "runs.duckdb")
    try:
        described = store.sql(f"DESCRIBE {table}")
    finally:
        store.close()
    column_types = dict(zip(described["column_name"], described["column_type"], strict=True))
    hints = typing.get_type_hints(ROW_TYPES[table])
    for column, hint in hints.items():
        allowed = _ALLOWED[column_types[column]]
        members = _members(hint)
        assert members, (table, column)
        assert all(m in allowed for m in members), (table, column, hint, column_types[column])


def test_a_misspelled_step_column_is_refused_naming_it_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "runs.duckdb")
    try:
        store_writer(store).create_run(run_row("r1"))
        with pytest.raises(StoreError, match="tokenz") as raised:
            store_writer(store).commit_step("r1", {"step": 1, "tokenz": 50}, **step_kwargs(1)[1])  # type: ignore[typeddict-unknown-key]
        assert raised.value.kind == "query"
        assert len(store.steps("r1")) == 0
    finally:
        store.close()


async def test_an_unknown_column_is_refused_from_asyncio_too(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs.duckdb")
    try:
        await store_writer(store).queued.create_run(run_row("r1"))
        bad = {**tool(1, 1), "outptu": "x"}
        with pytest.raises(StoreError, match="outptu"):
            await store_writer(store).queued.commit_step(
                "r1", {"step": 1}, **{**step_kwargs(1)[1], "tool_calls": [bad]}
            )
        assert len(store.tool_calls("r1")) == 0
    finally:
        store.close()


def test_a_missing_required_column_is_refused_naming_it(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs.duckdb")
    try:
        store_writer(store).create_run(run_row("r1"))
        without_seq = {k: v for k, v in tool(1, 1).items() if k != "seq"}
        with pytest.raises(StoreError, match="'seq'"):
            store_writer(store).record_intent("r1", without_seq)  # type: ignore[arg-type]
        with pytest.raises(StoreError, match="'run_id'"):
            store_writer(store).create_run({"task": "no id"})  # type: ignore[typeddict-item]
        assert len(store.tool_calls("r1")) == 0
        assert len(store.runs()) == 1
    finally:
        store.close()


def test_a_run_keeps_what_is_no_column_in_its_extras(tmp_path: Path) -> None:
    store = Store(tmp_path / "runs.duckdb")
    try:
        store_writer(store).create_run({**run_row("r1"), "extras": {"agent": "codex"}})
        run = store.get_run("r1")
        assert run is not None
        assert run["agent"] == "codex"
        assert run["started_at"] == AT
    finally:
        store.close()


@pytest.mark.parametrize("dtype", ["object", "string"])
def test_attempts_from_a_dataframe_store_its_missing_values_as_null(
    tmp_path: Path, dtype: str
) -> None:
    # #31: a DataFrame's missing text (NaN, or pd.NA in a string column) was stored as
    # the text 'nan' / '<NA>', and failure_rates reported a failure kind 'nan'.
    import pandas as pd

    frame = pd.DataFrame(
        [{"step": 1, "attempt": n, "provider": "p", "kind": None if n % 2 else "server",
          "status": None if n % 2 else 503, "latency_ms": None if n % 2 else 12.5,
          "started_at": AT + n} for n in range(70)]  # past the small-batch size too
    ).astype({"kind": dtype})  # fmt: skip
    store = Store(tmp_path / "runs.duckdb")
    try:
        store_writer(store).create_run(run_row("r1"))
        store_writer(store).add_attempts("r1", frame.to_dict("records"))
        found = store.sql(
            "SELECT count(*) FILTER (WHERE kind IS NULL) AS no_kind, "
            "count(*) FILTER (WHERE status IS NULL) AS no_status, "
            "count(*) FILTER (WHERE latency_ms IS NULL) AS no_latency, "
            "count(*) FILTER (WHERE kind IN ('nan', '<NA>', 'None')) AS as_text FROM attempts"
        )
        rates = store.failure_rates(by=("provider", "kind"))
    finally:
        store.close()
    assert found.values.tolist() == [[35, 35, 35, 0]]
    assert rates["kind"].astype(object).tolist() == ["server"]
    assert rates[["attempts", "failures"]].values.tolist() == [[70, 35]]
