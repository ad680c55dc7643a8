"""``hn.sweep(executor=client, shards=folder)``: a sweep on a real 2-worker Dask
``LocalCluster`` (worker processes), its shard files read through ``Store.combine``."""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import cloudpickle
import pandas as pd
import pytest

import harnessnb as hn
from harnessnb.demo import demo_server
from harnessnb.demo._chaos import ChaosServer, Fault
from harnessnb.demo._model import provider_for
from harnessnb.sweeps._sweep_dask import cancel_marker, chunk_size
from harnessnb.tools._approval import PromptApprover
from tests.files_helpers import folder

distributed = pytest.importorskip("distributed")

# The reply functions below travel to the workers by value (the workers cannot
# import this test module).
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    cluster = distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
    )
    client = distributed.Client(cluster)
    client.run(lambda: hn.set_testing(True) and None)  # no real backoff on the workers
    try:
        yield client
    finally:
        client.close()
        cluster.close()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return folder(tmp_path / "template", {"README.md": "# Title\n"})


def test_import_harnessnb_does_not_import_dask() -> None:
    code = "import sys, harnessnb; print('dask' in sys.modules or 'distributed' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


async def test_the_same_sweep_locally_and_on_the_cluster(
    client: Any, ws: Path, tmp_path: Path
) -> None:
    tasks = [hn.TaskContract(f"say hello {i}", ws, max_retries=2) for i in range(4)]
    with demo_server(rates={"server": 1.0}) as down:
        providers = {"down": provider_for(down, name="down"),
                     "fine": hn.ScriptedProvider(lambda m: "done", name="fine")}  # fmt: skip
        with hn.Store(tmp_path / "local.duckdb") as store:
            local = await hn.sweep(tasks, providers, repeats=2, store=store)
            local_rates = local.failure_rates()
            local_runs = local.runs
        seen: list[hn.SweepRun] = []
        shards = tmp_path / "shards"
        remote = await hn.sweep(tasks, providers, repeats=2, executor=client, shards=shards,
                                on_run=seen.append)  # fmt: skip
    assert len(seen) == 16 and {r.run_id for r in seen} == set(remote.runs["run_id"])
    assert len(remote.runs) == len(local_runs) == 16
    cols = ["task", "provider", "model", "repeat", "outcome", "steps", "error_kind", "retries"]
    pd.testing.assert_frame_equal(remote.runs[cols], local_runs[cols])
    assert len(remote.store.runs(sweep=remote.sweep_id)) == 16
    pd.testing.assert_frame_equal(remote.failure_rates(), local_rates)
    down_rate = remote.failure_rates(by="provider").set_index("provider")
    assert down_rate.loc["down", "failures"] == 8 * 3 and down_rate.loc["fine", "failures"] == 0
    files = sorted(p.name for p in shards.glob("*.duckdb"))
    assert len(files) == 2, files  # one shard per worker process, both used
    assert {os.path.basename(r.shard or "") for r in remote.records} == set(files)
    assert remote.store.read_only and remote.unfinished == []
    with remote.store.merge(into=tmp_path / "all.duckdb") as merged:  # the shards in one file
        pd.testing.assert_frame_equal(merged.runs(), remote.store.runs())
        pd.testing.assert_frame_equal(merged.attempts(), remote.store.attempts())
        pd.testing.assert_frame_equal(merged.failure_rates(sweep=remote.sweep_id), local_rates)


def test_a_chunk_size_comes_from_the_runs_the_threads_and_the_concurrency() -> None:
    # No spend limit: about four chunks per thread the sweep can use, however many runs.
    assert chunk_size(16, 2, 8, spend_limited=False) == 2
    assert chunk_size(1000, 2, 8, spend_limited=False) == 125
    assert chunk_size(1000, 2, 1, spend_limited=False) == 250  # one chunk out at a time
    assert chunk_size(6, 2, 8, spend_limited=False) == 1  # a small sweep: a run a task
    assert chunk_size(1000, 0, 8, spend_limited=False) == 1  # no worker yet (adaptive)
    # A spend limit: at most concurrency over the threads (it stops within concurrency runs).
    assert chunk_size(16, 2, 8) == 2  # about four chunks per worker thread
    assert chunk_size(1000, 2, 8) == 4  # at most concurrency over the threads
    assert chunk_size(1000, 2, 100) == 50
    assert chunk_size(6, 2, 8) == 1  # a small sweep: a run a task
    assert chunk_size(10, 4, 2) == 1  # fewer runs submitted than threads
    assert chunk_size(1000, 0, 8) == 1  # no worker yet (adaptive): a run a task
    assert chunk_size(1000, 1, 8) == 8


@pytest.mark.parametrize(("limit", "tasks"), [(None, 8), (100.0, 16)])
async def test_a_sweep_on_the_cluster_sends_its_runs_in_chunks(
    client: Any, ws: Path, tmp_path: Path, limit: float | None, tasks: int
) -> None:
    """16 runs, concurrency 2, two one-thread workers: with no spend limit 8 tasks of 2
    runs each (at most 2 chunks out, each one run at a time); with one, a run a task (at
    most 2 runs out, so the limit stops launching within 2 runs of it). Every run still
    its own row (in plan order, told to on_run as its chunk comes back), claimed once, in
    the shard of the worker that made it."""
    fine = hn.ScriptedProvider(lambda m: "done", name="fine", model="free")
    shards = tmp_path / "shards"
    seen: list[hn.SweepRun] = []
    plan = [f"t{i}" for i in range(16)]
    free = hn.Prices({"free": (0.0, 0.0)})  # priced: a spend the limit can check
    with distributed.get_task_stream(client) as stream:
        result = await hn.sweep(plan, [fine], workspace=ws, executor=client, shards=shards,
                                concurrency=2, max_cost_usd=limit, prices=free,
                                on_run=seen.append)  # fmt: skip
    ours = [t for t in stream.data if str(t["key"]).startswith("harnessnb-")]
    assert len(ours) == tasks
    assert [r.task for r in result.records] == plan and result.stopped is None
    assert set(result.runs["outcome"]) == {"finished"} and result.runs["run_id"].is_unique
    assert sorted(r.run_id or "" for r in seen) == sorted(result.runs["run_id"])
    claims = sorted(p.name for p in (shards / "claims").iterdir())
    assert claims == sorted(result.runs["run_id"])
    files = {str(p) for p in shards.glob("*.duckdb")}
    assert {r.shard for r in result.records} == files and len(files) == 2
    stored = hn.Store.combine(shards).runs(sweep=result.sweep_id)
    assert sorted(stored["run_id"]) == claims and set(stored["outcome"]) == {"finished"}


def _shards_held() -> list[tuple[str, int, str]]:
    """On a worker: the shard stores its process holds (path, object id, repr)."""
    from harnessnb.sweeps import _sweep_worker

    return [(s.path, id(s), repr(s)) for s in _sweep_worker._SHARDS.values()]


def _has_plugin(dask_worker: Any) -> bool:
    return "harnessnb-shards" in dask_worker.plugins


async def _remove_plugin(dask_worker: Any) -> None:
    """What a closing worker does with each of its plugins (``Worker.close``)."""
    await dask_worker.plugin_remove("harnessnb-shards")


def test_a_worker_opens_its_shard_once_and_closes_it_as_it_closes(ws: Path, tmp_path: Path) -> None:
    """One store per worker process for every task and sweep on a folder, closed by
    the worker plugin's teardown, which Dask runs as the worker closes (here: the plugin
    removed, as the worker's close does); a later task opens the shard again."""
    shards = tmp_path / "shards"
    fine = hn.ScriptedProvider(lambda m: "done", name="fine")
    with distributed.LocalCluster(n_workers=1, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as one:  # fmt: skip
        one.run(lambda: hn.set_testing(True) and None)
        common: dict[str, Any] = {"workspace": ws, "executor": one, "shards": shards}
        first = hn.sweep_sync([f"a{i}" for i in range(12)], [fine], **common)
        (held,) = one.run(_shards_held).values()
        (path, _, state) = held[0]
        assert len(held) == 1 and state.endswith("open)") and first.records[0].shard == path
        second = hn.sweep_sync(["b0", "b1"], [fine], **common)
        assert list(one.run(_shards_held).values()) == [held]  # the same store object
        assert list(one.run(_has_plugin).values()) == [True]
        one.run(_remove_plugin)  # its teardown, as the worker's close runs it
        assert list(one.run(_shards_held).values()) == [[]]
        third = hn.sweep_sync(["c0"], [fine], **common)
        ((again,),) = one.run(_shards_held).values()
        assert again[0] == path and again[2].endswith("open)")  # opened anew, one file
        assert list(one.run(_has_plugin).values()) == [True]  # and closed at the end
    rows = first.records + second.records + third.records
    assert {r.outcome for r in rows} == {"finished"} and {r.shard for r in rows} == {path}
    with hn.Store(path) as store:
        assert len(store.runs()) == 15


def _holds_its_file(run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
    """Pass when the sample's file is in the run's workspace copy the worker scored in."""
    name = next(iter(sample.files))
    return hn.Score((workspace / name).exists(), f"{name} on {os.getpid()}")


async def _answered(run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
    return hn.Score(run.text == "done")


async def test_a_sweep_with_scorers_on_the_cluster_scores_as_it_does_here(
    client: Any, ws: Path, tmp_path: Path
) -> None:
    samples = [hn.Sample(f"say hello {i}", id=f"s{i}", files={f"in{i}.txt": "x"})
               for i in range(2)]  # fmt: skip
    keep = ["provider", "sample_id", "repeat", "scorer", "value", "infra_failure", "infra_kind"]
    with demo_server(rates={"server": 1.0}) as down:
        providers = {"down": provider_for(down, name="down"),
                     "fine": hn.ScriptedProvider(lambda m: "done", name="fine")}  # fmt: skip
        scorers = [_holds_its_file, _answered]
        with hn.Store(tmp_path / "local.duckdb") as store:
            local = await hn.sweep(samples, providers, workspace=ws, repeats=2, store=store,
                                   scorers=scorers)  # fmt: skip
        remote = await hn.sweep(samples, providers, workspace=ws, repeats=2, executor=client,
                                shards=tmp_path / "shards", scorers=scorers)  # fmt: skip
    assert len(remote.scores) == 16
    pd.testing.assert_frame_equal(remote.scores[keep], local.scores[keep])
    fine = remote.scores[remote.scores["provider"] == "fine"]
    assert set(fine["value"]) == {1.0}  # the files were on the worker's copy too
    pids = {e.split(" on ")[1] for e in fine["explanation"] if " on " in e}
    assert str(os.getpid()) not in pids  # scored on the workers, not here
    stored = remote.store.scores(sweep_id=remote.sweep_id)  # the shards' rows, combined
    assert len(stored) == 16
    mine = remote.scores.set_index(["run_id", "scorer"])["value"]
    for row in stored.itertuples():
        want = mine.loc[(row.run_id, row.scorer)]
        assert (pd.isna(row.value) and pd.isna(want)) or row.value == want


async def test_two_models_of_one_provider_are_named_by_model_on_the_cluster(
    client: Any, ws: Path, tmp_path: Path
) -> None:
    with demo_server(rates={"server": 1.0}) as down, demo_server() as up:
        models = [hn.OpenAI("big", base_url=down.openai_url, api_key="sk-test"),
                  hn.OpenAI("small", base_url=up.openai_url, api_key="sk-test")]  # fmt: skip
        result = await hn.sweep(["say hello"], models, workspace=ws, repeats=2,
                                executor=client, shards=tmp_path / "shards")  # fmt: skip
    assert sorted(result.runs["provider"]) == ["openai/big"] * 2 + ["openai/small"] * 2
    rates = result.failure_rates(by="provider").set_index("provider")
    assert sorted(rates.index) == ["openai/big", "openai/small"]
    assert rates.loc["openai/big", "failure_rate"] == 1.0
    assert rates.loc["openai/small", "failures"] == 0


async def test_what_cannot_go_with_an_executor_is_refused(
    client: Any, ws: Path, tmp_path: Path
) -> None:
    fine = [hn.ScriptedProvider(lambda m: "done")]
    shards = tmp_path / "shards"
    with pytest.raises(hn.ConfigError, match="not store="), hn.Store(tmp_path / "s.duckdb") as s:
        await hn.sweep(["a"], fine, workspace=ws, executor=client, shards=shards, store=s)
    with pytest.raises(hn.ConfigError, match="needs shards=FOLDER"):
        await hn.sweep(["a"], fine, workspace=ws, executor=client)
    with pytest.raises(hn.ConfigError, match=r"dask\.distributed\.Client, not str"):
        await hn.sweep(["a"], fine, workspace=ws, executor="cluster", shards=shards)
    with pytest.raises(hn.ConfigError, match="asks a person"):
        await hn.sweep(["a"], fine, workspace=ws, executor=client, shards=shards,
                       approver=PromptApprover())  # fmt: skip
    with pytest.raises(hn.ConfigError, match="on_event"):
        await hn.sweep(["a"], fine, workspace=ws, executor=client, shards=shards,
                       on_event=print)  # fmt: skip
    assert not list(shards.glob("*.duckdb"))  # nothing ran


def test_without_dask_an_executor_names_the_extra(ws: Path, tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['distributed'] = None\n"
        "import harnessnb as hn\n"
        "try:\n"
        f"    hn.sweep_sync(['a'], [hn.ScriptedProvider(lambda m: 'done')], workspace={str(ws)!r},"
        f" executor=object(), shards={str(tmp_path)!r})\n"
        "except hn.ConfigError as e: print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'harnessnb[dask]'" in out.stdout


def _slow_second_step(gate: str) -> Any:
    """Read README.md, then (the second call of a run) say which worker process is
    there and wait for ``gate`` to exist before answering."""

    def reply(messages: Sequence[dict[str, Any]]) -> Any:
        if messages[-1].get("role") != "tool":
            return {"tool": "read_file", "args": {"path": "README.md"}}
        Path(gate, f"started-{os.getpid()}").touch()
        while not Path(gate, "go").exists():
            time.sleep(0.02)
        return "done"

    return reply


@pytest.mark.parametrize("n", [6, 16], ids=["a run a task", "chunks of two"])
async def test_a_worker_killed_mid_sweep_loses_no_committed_row(
    client: Any, ws: Path, tmp_path: Path, n: int
) -> None:
    """The killed worker's task goes to the other worker: its run begun is reported
    ``unfinished`` (never run again), the runs of its chunk not begun yet run there."""
    gate = tmp_path / "gate"
    gate.mkdir()
    slow = hn.ScriptedProvider(_slow_second_step(str(gate)), name="slow")
    shards = tmp_path / "shards"
    sweep = asyncio.create_task(hn.sweep([f"t{i}" for i in range(n)], [slow], workspace=ws,
                                         executor=client, shards=shards))  # fmt: skip
    for _ in range(1500):
        started = sorted(gate.glob("started-*"))
        if started:
            break
        await asyncio.sleep(0.02)
    victim = int(started[0].name.split("-")[1])
    assert victim in client.run(os.getpid).values()
    os.kill(victim, signal.SIGKILL)
    (gate / "go").touch()
    result = await asyncio.wait_for(sweep, 60)
    assert all(r.outcome is not None for r in result.records) and len(result.records) == n
    lost = result.unfinished
    assert [r.error_kind for r in lost] == ["worker_lost"]
    (run,) = lost
    assert run.shard and os.path.basename(run.shard).endswith(f"-{victim}.duckdb")
    # The killed worker's shard kept the run's committed first step: read through
    # Store.combine (read-only, the dead process's log as it left it), then as a Store.
    combined = hn.Store.combine(shards)  # would refuse a run found in two shards
    assert len(combined.steps(run.run_id)) == 1
    with hn.Store(run.shard) as shard:
        assert shard.get_run(run.run_id or "")["outcome"] is None  # type: ignore[index]
        assert len(shard.steps(run.run_id)) == 1
    stored = combined.runs(sweep=result.sweep_id)
    assert len(stored) == n and stored["run_id"].is_unique
    # Resumable from its shard (the dead worker's lease is taken over).
    done = hn.ScriptedProvider(lambda m: "done", name="slow")
    resumed = hn.resume_sync(run.run_id or "", done, store=run.shard)
    assert resumed.outcome == hn.RunOutcome.FINISHED
    assert combined.get_run(run.run_id or "")["outcome"] == "finished"  # type: ignore[index]
    finished = result.runs[result.runs["outcome"] == "finished"]
    assert len(finished) == n - 1 and run.run_id not in set(finished["run_id"])


@pytest.mark.parametrize("n", [8, 16], ids=["a run a task", "chunks of two"])
async def test_cancelling_a_sweep_on_the_cluster_stops_the_runs_begun(
    client: Any, ws: Path, tmp_path: Path, n: int
) -> None:
    """Both workers in a run hanging on the provider: the cancel records both runs
    ``cancelled`` in their shards within seconds (leases released, workspace copies
    removed), starts no other, and leaves each worker free for a next task; a new
    sweep on the same folder, and one reusing the cancelled sweep's id, run to their end.
    In chunks, a chunk's runs after the one cancelled are not started."""
    shards = tmp_path / "shards"
    tasks = [hn.TaskContract(f"t{i}", ws, max_time_s=600) for i in range(n)]
    with ChaosServer() as srv:
        srv.set_default(Fault.hang(seconds=120))
        hangs = hn.OpenAI("m", api_key="sk-test", base_url=srv.openai_url)
        sweep = asyncio.create_task(hn.sweep(tasks, {"hangs": hangs}, concurrency=4,
                                             executor=client, shards=shards,
                                             sweep_id="sweep_stopped"))  # fmt: skip
        for _ in range(1500):  # both workers are in a run, waiting on the provider
            if len(srv.requests) == 2:
                break
            await asyncio.sleep(0.02)
        assert len(srv.requests) == 2
        sweep.cancel()
        cancelled_at = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await sweep
        combined = hn.Store.combine(shards)
        while combined.runs()["outcome"].notna().sum() < 2:
            assert time.monotonic() - cancelled_at < 5, combined.runs()
            await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # time for a run the cancel missed to start (none may)
    runs = combined.runs()
    assert len(runs) == 2 and set(runs["outcome"]) == {"cancelled"}
    assert set(runs["sweep_id"]) == {"sweep_stopped"}
    claims = sorted(p.name for p in (shards / "claims").iterdir())
    assert claims == sorted(runs["run_id"])  # each run claimed once, no other claimed
    leases = combined.sql("SELECT run_id, released FROM leases")
    assert sorted(leases["run_id"]) == claims and leases["released"].all()
    assert not any(os.path.exists(w) for w in runs["workspace"])  # the copies are gone
    assert len(srv.requests) == 2  # no other run called the provider
    for address in client.scheduler_info()["workers"]:  # no worker is stuck in a run
        pid = client.submit(os.getpid, workers=[address], allow_other_workers=False,
                            pure=False)  # fmt: skip
        assert pid.result(timeout=10) in client.run(os.getpid).values()

    fine = hn.ScriptedProvider(lambda m: "done", name="fine")
    again = await asyncio.wait_for(hn.sweep(tasks[:4], [fine], executor=client,
                                            shards=shards), 60)  # fmt: skip
    assert set(again.runs["outcome"]) == {"finished"} and len(again.runs) == 4
    assert (shards / "cancel" / "sweep_stopped").exists()  # keyed by id: not in its way
    reused = await asyncio.wait_for(hn.sweep(tasks[:2], [fine], executor=client, shards=shards,
                                             sweep_id="sweep_stopped"), 60)  # fmt: skip
    assert set(reused.runs["outcome"]) == {"finished"} and len(reused.runs) == 2


def test_a_cancel_marker_is_one_file_in_the_cancel_folder() -> None:
    for sweep_id in ["sweep_1a2b", "../../etc/x", "..", "a/b", "é %41"]:
        marker = cancel_marker("/shards", sweep_id)
        assert os.path.dirname(marker) == "/shards/cancel" and os.path.basename(marker)
        assert os.path.basename(marker) not in (".", "..")
    assert cancel_marker("/s", "a/b") != cancel_marker("/s", "a%2Fb")
    assert cancel_marker("/s", "sweep_1a2b-x") == "/s/cancel/sweep_1a2b-x"


def test_the_sweep_command_and_cell_run_on_a_cluster(
    client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """``--executor ADDRESS --shards DIR`` on both faces: the runs happen on the
    cluster's workers, told here as each ends, and their rows are in the shards."""
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from harnessnb import cli
    from harnessnb.demo import make_demo_workspace

    template = make_demo_workspace(tmp_path / "ws")
    address = client.scheduler.address
    shards = tmp_path / "shards"
    code = cli.main(["sweep", "list the files", "--providers", "demo", "--repeats", "3",
                     "--workspace", str(template), "--executor", address,
                     "--shards", str(shards)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "demo: 3/3 | finished 3" in out, out
    assert len([line for line in out.splitlines() if line.endswith(": finished")]) == 3
    assert len(hn.Store.combine(shards).runs()) == 3
    # Each half of the pair alone is a usage error (exit 2), nothing run.
    assert cli.main(["sweep", "x", "--providers", "demo", "--workspace", str(template),
                     "--executor", address]) == 2  # fmt: skip
    assert "--executor needs --shards" in capsys.readouterr().err
    assert cli.main(["sweep", "x", "--providers", "demo", "--workspace", str(template),
                     "--shards", str(shards)]) == 2  # fmt: skip
    assert cli.main(["sweep", "x", "--providers", "demo", "--workspace", str(template),
                     "--executor", address, "--shards", str(shards),
                     "--store", str(tmp_path / "s.duckdb")]) == 2  # fmt: skip
    assert len(hn.Store.combine(shards).runs()) == 3

    monkeypatch.setenv("HARNESSNB_STORE", str(tmp_path / "kernel.duckdb"))
    monkeypatch.setenv("HARNESSNB_NO_WIDGETS", "1")
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "harnessnb")
    line = (f"sweep --providers demo --repeats 2 --workspace {template} --executor {address} "
            f"--shards {tmp_path / 'cell-shards'} --out swept")  # fmt: skip
    with capture_output() as shown:
        shell.run_cell_magic("harness", line, "list the files\nsay hello\n")
    result = shell.user_ns["swept"]
    assert len(result.runs) == 4 and set(result.runs["outcome"]) == {"finished"}
    assert len([row for row in shown.stdout.splitlines() if " · " in row]) == 4  # live rows
    assert len(result.store.runs(sweep=result.sweep_id)) == 4
    with pytest.raises(UsageError, match="--executor needs --shards"):
        shell.run_cell_magic("harness", f"sweep --providers demo --workspace {template} "
                             f"--executor {address}", "x")  # fmt: skip


def test_a_shard_folder_that_cannot_be_read_as_one_fails_before_any_run(
    client: Any, ws: Path, tmp_path: Path
) -> None:
    """The result reads every shard of the folder as one store: a file there that is
    no store is refused before a run is paid for, and left as it was."""
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "notes.duckdb").write_text("not a database\n")
    calls: list[int] = []
    provider = hn.ScriptedProvider(lambda m: calls.append(1) or "done", name="fine")
    with pytest.raises(hn.StoreError) as err:
        hn.sweep_sync(["say hello"], [provider], workspace=ws, executor=client, shards=shards)
    assert err.value.kind == "corrupt"
    assert sorted(p.name for p in shards.iterdir()) == ["claims", "notes.duckdb"]
    assert not list((shards / "claims").iterdir())  # no run was claimed, none ran


def test_executor_local_starts_workers_here_and_stops_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from harnessnb import cli
    from harnessnb.demo import make_demo_workspace

    template = make_demo_workspace(tmp_path / "ws")
    shards = tmp_path / "shards"
    before = set(multiprocessing.active_children())  # the module's cluster, if started
    code = cli.main(["sweep", "list the files", "--providers", "demo", "--repeats", "2",
                     "--workspace", str(template), "--executor", "local",
                     "--shards", str(shards)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "demo: 2/2 | finished 2" in out, out
    # the runs were made by worker processes, not this one: their shards name other pids
    made = [p.name for p in shards.glob("*.duckdb")]
    assert made and all(not p.endswith(f"-{os.getpid()}.duckdb") for p in made)
    assert len(hn.Store.combine(shards).runs()) == 2
    deadline = time.monotonic() + 10  # the workers it started are gone
    while set(multiprocessing.active_children()) - before:
        assert time.monotonic() < deadline, multiprocessing.active_children()
        time.sleep(0.05)


def test_ctrl_c_on_a_terminal_stops_the_command_sweep_on_local_workers_without_tracebacks(
    ws: Path, tmp_path: Path
) -> None:
    # A terminal's Ctrl-C reaches the whole process group, the worker processes of
    # `--executor local` too: they leave the cancelling to the sweep (no traceback each).
    shards = tmp_path / "shards"
    with ChaosServer() as srv:
        srv.set_default(Fault.hang(seconds=60))
        child = subprocess.Popen(
            [sys.executable, "-m", "harnessnb", "sweep", "a", "b", "c", "--providers", "local",
             "--base-url", srv.openai_url, "--concurrency", "2", "--workspace", str(ws),
             "--executor", "local", "--shards", str(shards)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            while len(srv.requests) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)  # both runs in flight on the workers
            os.killpg(child.pid, signal.SIGINT)  # as a terminal does
            out, _ = child.communicate(timeout=60)
        finally:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
    assert child.returncode == 130, out
    assert "Traceback" not in out and "cancelled: sweep sweep_" in out
    runs = hn.Store.combine(shards).runs()
    assert len(runs) == 2 and set(runs["outcome"]) == {"cancelled"}


# A key only the worker knows (registered there, no token shape): the client's scrubber
# cannot hide it, so only the worker's scrub on the way out can.
WORKER_KEY = "worker-only-secret-0123456789"


def _fail_on_the_worker() -> None:
    from harnessnb.rules._secrets import register

    register(WORKER_KEY)
    try:
        raise ConnectionResetError(f"reset while sending key {WORKER_KEY}")
    except ConnectionResetError as exc:
        raise hn.ProviderError(
            "the model is overloaded", kind=hn.ProviderErrorKind.SERVER, status=529,
            retry_after_s=3.0, provider="anthropic", request_id="req-42", model="claude-x",
        ) from exc  # fmt: skip


def test_a_provider_error_raised_on_a_worker_reaches_the_client_with_its_fields(
    client: Any,
) -> None:
    future = client.submit(_fail_on_the_worker, pure=False)
    with pytest.raises(hn.ProviderError) as raised:
        future.result(timeout=60)
    err = raised.value
    assert type(err) is hn.ProviderError and err.code == "PROVIDER_SERVER"
    assert (err.kind, err.status, err.retry_after_s, err.provider, err.request_id, err.model) == (
        hn.ProviderErrorKind.SERVER, 529, 3.0, "anthropic", "req-42", "claude-x")  # fmt: skip
    assert err.retryable and str(err) == "the model is overloaded"
    assert err.to_dict()["causes"] == ["ConnectionResetError: reset while sending key [redacted]"]
    # Dask sends the live cause chain too (tblib): what Python prints of it is scrubbed
    assert WORKER_KEY not in "".join(traceback.format_exception(err))


async def test_runs_on_the_cluster_bring_back_what_the_sweep_grid_shows(
    client: Any, ws: Path, tmp_path: Path
) -> None:
    """The rows cross from the worker processes with their steps, final text and error
    card (what ``SweepResult``'s grid shows: test_sweep_grid)."""
    from tests.test_sweep_grid import Parsed

    scripted = hn.ScriptedProvider(lambda m: "done", name="fine")
    with demo_server(rates={"server": 1.0}) as down:
        providers = {"down": provider_for(down, name="down"), "fine": scripted}
        res = await hn.sweep([hn.Sample("say done", id="s0")], providers, workspace=ws,
                             executor=client, shards=tmp_path / "shards",
                             scorers=[_answered])  # fmt: skip
    fine = next(r for r in res.records if r.provider == "fine")
    down_run = next(r for r in res.records if r.provider == "down")
    assert fine.text == "done" and [s.decision for s in fine.step_summaries] == ["answer"]
    assert "server" in down_run.error_card and "harnessnb-error" in down_run.error_card
    assert Parsed(res._repr_mimebundle_()["text/html"]).cells == ["infra", "good"]


def _said(run: hn.RunResult, sample: hn.Sample, workspace: Path) -> hn.Score:
    """Pass when the run gave a final text; the explanation names the process that scored."""
    return hn.Score(bool(run.text), f"scored in {os.getpid()}")


def _asked_about(server: Any, sample: hn.Sample) -> int:
    """The requests ``server`` received for ``sample``'s task."""
    return sum(sample.input in str(r.json) for r in server.requests)


async def test_a_sweep_resumed_on_the_cluster_runs_only_the_slots_it_has_not_finished(
    client: Any, ws: Path, tmp_path: Path
) -> None:
    shards = tmp_path / "shards"
    small, grown = [hn.Sample("say hello 0", id="s0")], [hn.Sample(f"say hello {i}", id=f"s{i}")
                                                         for i in range(2)]  # fmt: skip
    common: dict[str, Any] = {"workspace": ws, "executor": client, "shards": shards,
                              "sweep_id": "sweep_grown", "scorers": [_said]}  # fmt: skip
    with demo_server() as good:
        providers = {"good": provider_for(good, name="good")}
        first = await hn.sweep(small, providers, **common)
        asked = _asked_about(good, small[0])
        seen: list[hn.SweepRun] = []
        second = await hn.sweep(grown, providers, repeats=2, on_run=seen.append, **common)
        (old,) = first.records
        assert second.records[0].run_id == old.run_id  # taken back from its shard, not run again
        assert asked > 0 and _asked_about(good, small[0]) == 2 * asked  # its new repeat 1 only
        runs_now = len(good.requests)
        with pytest.raises(hn.ConfigError, match=r"no score of '_answered'.*hn\.rescore"):
            await hn.sweep(
                grown, providers, repeats=2, **(common | {"scorers": [_said, _answered]})
            )
        assert len(good.requests) == runs_now  # refused before any run
    slots = {(r.sample_id, r.repeat): r for r in second.records}
    assert [(r.sample_id, r.repeat) for r in second.records] == [("s0", 0), ("s1", 0), ("s0", 1),
                                                                 ("s1", 1)]  # fmt: skip
    assert slots["s0", 0].shard == old.shard and slots["s0", 0].outcome == old.outcome
    (kept,), (scored,) = slots["s0", 0].scores, old.scores  # the stored score, not scored again
    assert dataclasses.replace(kept, scored_at=None) == dataclasses.replace(scored, scored_at=None)
    assert kept.scored_at == pytest.approx(scored.scored_at, abs=1e-5)  # the store's microseconds
    assert kept.explanation != f"scored in {os.getpid()}"  # by its worker, not here
    assert len({r.run_id for r in second.records}) == 4 and len(seen) == 4
    assert len(second.store.runs(sweep="sweep_grown")) == 4  # 1 + the 3 new slots
    assert second.scores["value"].tolist() == [1.0] * 4
    # The refusal's way: a merged copy of the shards takes the new scorer's rows.
    with second.store.merge(into=tmp_path / "all.duckdb") as merged:
        again = await hn.rescore("sweep_grown", [_answered], store=merged)
    assert len(again.scores) == 4
