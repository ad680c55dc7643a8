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
        assert versions == list(range(1, SCHEMA_VERSION + 1)) and SCHEMA_VERSION == 12
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
