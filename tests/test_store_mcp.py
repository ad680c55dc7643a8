"""The store's side of MCP tool servers (schema 12): which server served a tool call
and how it failed (``tool_calls.server``, ``error_kind``), and what each server offered
a run (``mcp_servers``), against real DuckDB files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn
from harnessnb.store._row_types import MCPServerRow
from harnessnb.store._schema import SCHEMA_VERSION
from harnessnb.store._writer import store_writer
from tests.store_helpers import AT, altered, old_store, run_row, step_kwargs, tool

KEY = "sk-proj-MCPSECRET0123456789"


def _tools(*names: str, description: str = "reads a file") -> list[dict[str, Any]]:
    return [
        {"name": n, "offered_as": f"git__{n}", "description": description,
         "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
         "annotations": {"readOnlyHint": True, "destructiveHint": None},
         "effect": "read"}
        for n in names
    ]  # fmt: skip


def _server(name: str = "git", *names: str, **extra: Any) -> MCPServerRow:
    found: MCPServerRow = {
        "server": name,
        "transport": "stdio",
        "target": f"python -m mcp_server_{name} --repository /repo",
        "sandbox": "bubblewrap",
        "tools": _tools(*(names or ("git_status", "git_log"))),
        "at": AT,
    }
    found.update(extra)  # type: ignore[typeddict-item]
    return found


def _mcp_step(store: hn.Store, run_id: str, step: int, calls: list[dict[str, Any]]) -> None:
    row, kwargs = step_kwargs(step)
    kwargs["tool_calls"] = [tool(step, seq, **call) for seq, call in enumerate(calls)]
    store_writer(store).commit_step(run_id, row, **kwargs)


# ------------------------------------------------------------------ schema


def test_a_version_11_store_gains_the_mcp_columns_and_table_keeping_its_rows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v11.duckdb"
    con = old_store(path, 11)  # as the code before MCP made it
    con.execute("INSERT INTO run_rows (run_id, task) VALUES ('old', 'before mcp')")
    con.execute("INSERT INTO tool_calls (run_id, step, seq, tool, effect, status, sandbox) "
                "VALUES ('old', 1, 0, 'run_command', 'write', 'ok', 'bubblewrap')")  # fmt: skip
    con.close()

    with hn.Store(path) as s:
        versions = s.sql("SELECT version FROM schema_version ORDER BY 1")["version"].tolist()
        assert versions == list(range(1, SCHEMA_VERSION + 1)) and SCHEMA_VERSION == 14
        _mcp_step(s, "old", 2, [{"tool": "git_status", "server": "git"},
                                {"tool": "git_log", "server": "git", "status": "error",
                                 "error_kind": "timeout"}])  # fmt: skip
        store_writer(s).record_mcp_servers("old", [_server()])
        calls = s.sql("SELECT step, tool, sandbox, server, error_kind FROM tool_calls "
                      "ORDER BY step, seq")  # fmt: skip
        servers = s.sql("SELECT run_id, server, transport FROM mcp_servers")
    rows = calls.astype(object).where(calls.notna(), None).values.tolist()
    assert rows == [
        [1, "run_command", "bubblewrap", None, None],  # the old row kept, NULL in the new
        [2, "git_status", None, "git", None],
        [2, "git_log", None, "git", "timeout"],
    ]
    assert servers.values.tolist() == [["old", "git", "stdio"]]


def test_a_store_whose_mcp_servers_table_is_not_harnessnbs_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    hn.Store(path).close()
    altered(path, "DROP TABLE mcp_servers",
            "CREATE TABLE mcp_servers (run_id VARCHAR, server VARCHAR, transport VARCHAR, "
            'target VARCHAR, sandbox VARCHAR, tools JSON, tools_hash VARCHAR, "at" TIMESTAMP, '
            "PRIMARY KEY (run_id, server))")  # fmt: skip
    with pytest.raises(hn.StoreError, match=r"main\.mcp_servers") as raised:
        hn.Store(path)
    assert raised.value.kind == "foreign"


# ------------------------------------------------------------------ writes


def test_record_mcp_servers_keeps_one_snapshot_per_tool_list_and_reads_them_back(
    tmp_path: Path,
) -> None:
    with hn.Store(tmp_path / "runs.duckdb") as s:
        writer = store_writer(s)
        writer.create_run(run_row("r1"))
        http: MCPServerRow = {"server": "everything", "transport": "http",
                              "target": "http://127.0.0.1:3001/mcp", "tools": _tools("echo"),
                              "at": AT}  # fmt: skip
        writer.record_mcp_servers("r1", [_server(), http])
        first = writer.mcp_servers_of("r1")
        # The same snapshot again (a resume that found the same tools): nothing changes,
        # queued through group commit or now.
        writer.record_mcp_servers("r1", [_server(at=AT + 60)])
        writer.submit(_server_op("r1", [_server(at=AT + 90), http])).result()
        assert writer.mcp_servers_of("r1") == first
        # A changed list is a new snapshot beside the first.
        writer.record_mcp_servers("r1", [_server("git", "git_status", at=AT + 120)])
        after = writer.mcp_servers_of("r1")

    assert [(r["server"], r["transport"], r["at"]) for r in first] == [
        ("everything", "http", AT), ("git", "stdio", AT)]  # fmt: skip
    git = first[1]
    assert git["tools"] == _tools("git_status", "git_log")  # parsed back, exactly
    assert git["target"] == "python -m mcp_server_git --repository /repo"
    assert git["sandbox"] == "bubblewrap" and first[0]["sandbox"] is None
    assert len(git["tools_hash"]) == 64 and git["tools_hash"] != first[0]["tools_hash"]
    assert [(r["server"], r["at"], [t["name"] for t in r["tools"]]) for r in after] == [
        ("everything", AT, ["echo"]),
        ("git", AT, ["git_status", "git_log"]),
        ("git", AT + 120, ["git_status"]),
    ]


def _server_op(run_id: str, rows: list[MCPServerRow]) -> Any:
    from harnessnb.store import _writes

    return _writes.record_mcp_servers(run_id, rows)


def test_mcp_server_rows_are_scrubbed(tmp_path: Path) -> None:
    leaky = _server(target=f"mcp-server-x --token {KEY}",
                    tools=_tools("t", description=f"use Bearer {KEY} to call"))  # fmt: skip
    with hn.Store(tmp_path / "runs.duckdb") as s:
        store_writer(s).create_run(run_row("r1"))
        store_writer(s).record_mcp_servers("r1", [leaky])
        raw = s.sql("SELECT target, tools::VARCHAR AS tools FROM mcp_servers")
        (row,) = store_writer(s).mcp_servers_of("r1")
    assert KEY not in str(raw.values.tolist()) and "MCPSECRET" not in str(raw.values.tolist())
    assert row["target"].startswith("mcp-server-x --token sk-proj-")
    assert "[redacted]" in row["target"] and "[redacted]" in row["tools"][0]["description"]


@pytest.mark.parametrize(
    ("bad", "said"),
    [({"transport": "sse"}, "transport is one of stdio, http, not 'sse'"),
     ({"server": None, "serverr": "git"}, "no column 'serverr'")],
)  # fmt: skip
def test_a_bad_mcp_server_row_is_refused_and_nothing_is_written(
    tmp_path: Path, bad: dict[str, Any], said: str
) -> None:
    row: dict[str, Any] = {**_server(), **bad}
    if row.get("server") is None:
        del row["server"]
    with hn.Store(tmp_path / "runs.duckdb") as s:
        with pytest.raises(hn.StoreError, match=said) as raised:
            store_writer(s).record_mcp_servers("r1", [_server("time"), row])  # type: ignore[list-item]
        assert raised.value.kind == "query"
        assert s.sql("SELECT count(*) AS n FROM mcp_servers")["n"].tolist() == [0]


def test_combine_and_merge_carry_the_mcp_servers_of_every_shard(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    shards.mkdir()
    for i, name in enumerate(("git", "time")):
        with hn.Store(shards / f"w{i}.duckdb") as s:
            store_writer(s).create_run(run_row(f"r{i}"))
            _mcp_step(s, f"r{i}", 1, [{"tool": "x", "server": name, "status": "error",
                                       "error_kind": "exited"}])  # fmt: skip
            store_writer(s).record_mcp_servers(f"r{i}", [_server(name)])
    combined = hn.Store.combine(shards)
    query = "SELECT run_id, server, tools_hash, tools::VARCHAR AS tools FROM mcp_servers ORDER BY 1"
    seen = combined.sql(query)
    assert seen[["run_id", "server"]].values.tolist() == [["r0", "git"], ["r1", "time"]]
    calls = combined.sql("SELECT server, error_kind FROM tool_calls ORDER BY run_id")
    assert calls.values.tolist() == [["git", "exited"], ["time", "exited"]]
    with combined.merge(into=tmp_path / "merged.duckdb") as merged:
        assert merged.sql(query).equals(seen)
        assert store_writer(merged).mcp_servers_of("r1")[0]["tools"] == _tools(
            "git_status", "git_log")  # fmt: skip


# ----------------------------------------------------------------- readers


def test_mcp_servers_reads_one_row_per_run_and_server_with_its_tools(tmp_path: Path) -> None:
    with hn.Store(tmp_path / "runs.duckdb") as s:
        for run_id in ("r1", "r2"):
            store_writer(s).create_run(run_row(run_id))
        store_writer(s).record_mcp_servers("r1", [_server(), _server("time", "get_current_time")])
        store_writer(s).record_mcp_servers("r2", [_server("time", "get_current_time")])
        every = s.mcp_servers()
        one = s.mcp_servers("r2")
    assert list(every.columns) == ["run_id", "server", "transport", "target", "sandbox",
                                   "tools", "tool_count", "tools_hash", "at"]  # fmt: skip
    assert every[["run_id", "server"]].values.tolist() == [
        ["r1", "git"], ["r1", "time"], ["r2", "time"]]  # fmt: skip
    assert every["tool_count"].tolist() == [2, 1, 1] and str(every["tool_count"].dtype) == "Int64"
    assert every["tools"].tolist()[0] == _tools("git_status", "git_log")  # a Python list
    assert str(every["at"].dtype) == "datetime64[us, UTC]"
    assert every["at"].tolist()[0].timestamp() == AT
    assert one["run_id"].tolist() == ["r2"] and one["tools"].tolist()[0][0]["name"] == (
        "get_current_time")  # fmt: skip
    empty = hn.Store(tmp_path / "empty.duckdb")
    try:
        none = empty.mcp_servers()
        assert none.empty and list(none.columns) == list(every.columns)
    finally:
        empty.close()


def _tool_calls_store(path: Path) -> hn.Store:
    """A store of two runs whose tool rows are written as the loop writes them: MCP
    calls with their server and failure kind, built-in calls without, and calls with no
    outcome yet."""
    s = hn.Store(path)
    writer = store_writer(s)
    writer.create_run(run_row("r1", sweep_id="sw"))
    writer.create_run(run_row("r2"))
    git = {"server": "git", "tool": "git_log"}
    _mcp_step(s, "r1", 1, [
        git, git, git,
        {**git, "status": "error", "error_kind": "timeout"},
        {**git, "status": "error", "error_kind": "timeout"},
        {**git, "status": "error", "error_kind": "tool_error"},
        {"server": "time", "tool": "get_current_time"},
        {"server": "time", "tool": "get_current_time", "status": "error",
         "error_kind": "exited"},
        {"tool": "read_file"},
        {"tool": "write_file", "effect": "write", "status": "refused"},
        {"tool": "run_command", "effect": "write", "status": "error"},
    ])  # fmt: skip
    _mcp_step(s, "r2", 1, [
        git,
        {**git, "status": "error", "error_kind": "connection_closed"},
        {**git, "effect": "write", "status": "needs_reconciliation"},  # no outcome: left out
    ])  # fmt: skip
    writer.record_intent("r2", {**tool(2, 0, status="intent"), **git, "effect": "write"})  # type: ignore[typeddict-item]
    return s


def test_tool_call_failure_rates_by_server_and_kind(tmp_path: Path) -> None:
    with _tool_calls_store(tmp_path / "runs.duckdb") as s:
        rates = s.failure_rates(of="tool_calls")  # by server and kind
        whole = s.failure_rates("server", of="tool_calls")
        swept = s.failure_rates("server", of="tool_calls", sweep="sw")
        by_tool = s.failure_rates(("tool",), of="tool_calls")
        attempts = s.failure_rates()
    got = rates.astype(object).where(rates.notna(), None)
    assert got[["server", "kind", "calls", "failures"]].values.tolist() == [
        ["git", "timeout", 8, 2],  # r1's 6 and r2's 2 (its unsettled ones left out)
        ["git", "connection_closed", 8, 1],
        ["git", "tool_error", 8, 1],
        ["time", "exited", 2, 1],
        [None, "error", 3, 1],  # built-in tools: their status for a kind
        [None, "refused", 3, 1],
    ]
    assert got["failure_rate"].tolist()[0] == pytest.approx(2 / 8)
    # The Wilson interval of 2 of 8, as for attempts (statsmodels' proportion_confint
    # with method="wilson" gives 0.0715 to 0.5907).
    assert got["failure_rate_low"].tolist()[0] == pytest.approx(0.0715, abs=1e-4)
    assert got["failure_rate_high"].tolist()[0] == pytest.approx(0.5907, abs=1e-4)
    assert "cost_usd" not in rates.columns and "attempts" not in rates.columns
    assert whole.astype(object).where(whole.notna(), None)[
        ["server", "calls", "failures"]].values.tolist() == [
        ["git", 8, 4], ["time", 2, 1], [None, 3, 2]]  # fmt: skip
    assert swept[["calls", "failures"]].sum().tolist() == [11, 6]  # r1 only
    assert dict(zip(by_tool["tool"], by_tool["calls"], strict=True)) == {
        "get_current_time": 2, "git_log": 8, "read_file": 1, "run_command": 1,
        "write_file": 1}  # fmt: skip
    assert attempts["attempts"].sum() == 6  # of="attempts" is the default, unchanged


def test_tool_call_failure_rates_refuse_what_they_cannot_count(tmp_path: Path) -> None:
    with _tool_calls_store(tmp_path / "runs.duckdb") as s:
        with pytest.raises(hn.ConfigError, match="'attempts', 'tool_calls'"):
            s.failure_rates(of="steps")
        with pytest.raises(hn.StoreError, match=r"among \('run_id', 'step', 'tool', 'server'"):
            s.failure_rates(("provider", "kind"), of="tool_calls")
        with pytest.raises(hn.StoreError, match="among"):
            s.failure_rates(("server",), of="attempts")
        buckets = s.failure_rates("server", of="tool_calls", every="1h")
    assert list(buckets.columns[:3]) == ["period", "server", "calls"]
    assert buckets["calls"].sum() == 13


def test_many_servers_queued_together_are_written_once_each(tmp_path: Path) -> None:
    # Past two rows a group commit appends through DuckDB's appender (the JSON column
    # included); the same snapshots queued in the same batch fall back to keeping one.
    rows = [_server(f"s{i}", "t") for i in range(5)]
    with hn.Store(tmp_path / "runs.duckdb") as s:
        writer = store_writer(s)
        writer.create_run(run_row("r1"))
        done = [writer.submit(_server_op("r1", rows)), writer.submit(_server_op("r1", rows[:3]))]
        for future in done:
            future.result()
        found = s.mcp_servers("r1")
    assert found["server"].tolist() == [f"s{i}" for i in range(5)]
    assert found["tools"].tolist() == [_tools("t")] * 5
