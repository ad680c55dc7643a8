"""``hn.sweep(..., mcp=[...])``: every run of a sweep gets the servers, each run its own
connections; the servers are values that cross to a Dask worker by pickle."""

from __future__ import annotations

import inspect
import pickle
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import harnessnb as hn

TIME = hn.MCPServer.stdio(sys.executable, args=["-m", "mcp_server_time"], timeout_s=20.0)


def _loop_takes_mcp() -> None:
    if "mcp" not in inspect.signature(hn.run).parameters:
        pytest.skip("hn.run has no mcp= yet (the loop helper's part)")


def test_a_server_pickles_to_an_equal_value_with_its_secrets_registered_there() -> None:
    # A Dask worker gets the sweep's servers by pickle (MappingProxyType fields
    # cannot be pickled as they are); the receiving process must scrub the env value.
    key = "sk-proj-" + "q" * 8 + "PICKLEDsecretVALUE42"
    server = hn.MCPServer.stdio(
        "python", args=["-m", "mcp_server_time"], env={"TOKEN": key}, name="t",
        trusted=True, effects={"get_current_time": hn.Effect.READ}, timeout_s=3.0,
    )  # fmt: skip
    web = hn.MCPServer.http("https://h.example/mcp", headers={"X-Api-Key": key}, name="w")
    for made in (server, web):
        assert pickle.loads(pickle.dumps(made)) == made
    script = (
        "import pickle, sys; from harnessnb.rules._secrets import scrub\n"
        "server = pickle.loads(sys.stdin.buffer.read())\n"
        f"print(scrub('the key is ' + {key!r}))"
    )
    shown = subprocess.run(
        [sys.executable, "-c", script], input=pickle.dumps(server), capture_output=True,
        check=True, cwd=Path(__file__).parents[2],
    ).stdout.decode()  # fmt: skip
    assert key not in shown and shown.startswith("the key is ")


@pytest.mark.parametrize("bad", ["python -m mcp_server_time", [object()], TIME])
async def test_mcp_that_is_not_a_list_of_servers_is_refused_before_any_run(
    tmp_path: Path, bad: Any
) -> None:
    provider = hn.ScriptedProvider(lambda m: "done")
    store = hn.Store(tmp_path / "s.duckdb")
    with pytest.raises(hn.ConfigError, match="sweep: mcp"):
        await hn.sweep(["a"], [provider], workspace=tmp_path, store=store, mcp=bad)
    assert store.runs().empty


async def test_two_servers_with_one_name_are_refused(tmp_path: Path) -> None:
    other = hn.MCPServer.parse("time=python -m mcp_server_git")
    with pytest.raises(hn.ConfigError, match="two MCP servers are named 'time'"):
        await hn.sweep(["a"], [hn.ScriptedProvider(lambda m: "done")], workspace=tmp_path,
                       mcp=[TIME, other])  # fmt: skip


def _ask_the_time(messages: Sequence[dict[str, Any]]) -> Any:
    if messages[-1].get("role") == "tool":
        return "the time is told"
    return {"tool": "get_current_time", "args": {"timezone": "UTC"}}


async def test_each_run_of_a_sweep_opens_its_own_connections(tmp_path: Path) -> None:
    _loop_takes_mcp()
    ws = tmp_path / "ws"
    ws.mkdir()
    store = hn.Store(tmp_path / "s.duckdb")
    policy = hn.Policy.default().layer("t").allow_exec("mcp:time/*")
    provider = hn.ScriptedProvider(_ask_the_time, name="p")
    result = await hn.sweep(["what time is it?", "and now?"], [provider], workspace=ws,
                            store=store, policy=policy, mcp=[TIME])  # fmt: skip
    assert set(result.runs["outcome"]) == {"finished"}
    servers = store.mcp_servers()
    run_ids = set(result.runs["run_id"])
    assert set(servers["run_id"]) == run_ids and len(servers) == 2  # one row per run
    assert set(servers["server"]) == {"time"}
    calls = store.tool_calls()
    mine = calls[calls["run_id"].isin(run_ids)]
    assert len(mine) == 2 and set(mine["server"]) == {"time"}


async def test_on_a_dask_cluster_each_worker_run_opens_the_servers_it_was_sent(
    tmp_path: Path,
) -> None:
    _loop_takes_mcp()
    distributed = pytest.importorskip("distributed")
    cloudpickle = pytest.importorskip("cloudpickle")
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the reply function
    ws = tmp_path / "ws"
    ws.mkdir()
    policy = hn.Policy.default().layer("t").allow_exec("mcp:time/*")
    provider = hn.ScriptedProvider(_ask_the_time, name="p")
    cluster = distributed.LocalCluster(
        n_workers=1, processes=True, threads_per_worker=1, dashboard_address=None
    )
    client = distributed.Client(cluster)
    try:
        result = await hn.sweep(["what time is it?", "and now?"], [provider], workspace=ws,
                                policy=policy, mcp=[TIME], executor=client,
                                shards=tmp_path / "shards")  # fmt: skip
    finally:
        client.close()
        cluster.close()
    assert set(result.runs["outcome"]) == {"finished"}
    servers = result.store.mcp_servers()
    assert len(servers) == 2 and set(servers["run_id"]) == set(result.runs["run_id"])
    assert set(result.store.tool_calls()["server"]) == {"time"}
