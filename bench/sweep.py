"""What a sweep costs per run, beside the same runs made one by one.

N scripted runs (one step each, a final answer; no network) on a FILE store:

1. sequential: ``hn.run`` N times in a loop, every run in the one workspace (no copy);
2. ``hn.sweep(concurrency=1)``: the same runs, each in its own copy of the workspace;
3. ``hn.sweep(concurrency=8)``;
4. ``hn.sweep(executor=client, shards=folder, concurrency=8)`` on a 2-worker Dask
   ``LocalCluster`` (worker processes, one thread each; the cluster's start is not
   timed), each worker writing its own shard file.

The sweep machinery's overhead per run is (2 - 1) / N: the workspace copy and removal,
the semaphore, the row; on Dask, where each worker makes N/2 runs one at a time, a
worker's time per run (2 x 4 / N) less 1's also holds the task's round trip through
the scheduler, the provider's pickle, the run's claim and the worker's own loop
thread. Then the readers on the sweep's runs: ``store.runs(sweep=...)`` and
``SweepResult.failure_rates()``, and the same through ``Store.combine`` of the Dask
sweep's shards.

Run: python bench/sweep.py [N]   (default 1000; needs dask[distributed])
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

import harnessnb as hn


def provider() -> hn.ScriptedProvider:
    return hn.ScriptedProvider(lambda messages: "done")


async def sequential(store: hn.Store, ws: Path, n: int) -> float:
    started = time.perf_counter()
    for i in range(n):
        await hn.run(hn.TaskContract(f"task {i}", ws), provider(), store=store)
    return time.perf_counter() - started


async def swept(
    store: hn.Store, ws: Path, n: int, concurrency: int
) -> tuple[float, hn.SweepResult]:
    started = time.perf_counter()
    result = await hn.sweep([f"task {i}" for i in range(n)], [provider()], workspace=ws,
                            concurrency=concurrency, store=store)  # fmt: skip
    return time.perf_counter() - started, result


async def on_dask(ws: Path, shards: Path, n: int) -> tuple[float, hn.SweepResult]:
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                      dashboard_address=None) as cluster, Client(cluster) as client:  # fmt: skip
        client.run(lambda: hn.set_testing(True) and None)
        started = time.perf_counter()
        result = await hn.sweep([f"task {i}" for i in range(n)], [provider()], workspace=ws,
                                concurrency=8, executor=client, shards=shards)  # fmt: skip
        return time.perf_counter() - started, result


def timed(call: object) -> float:
    started = time.perf_counter()
    call()  # type: ignore[operator]
    return (time.perf_counter() - started) * 1000


async def main(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        for i in range(5):  # a small project: five files to copy per run
            (ws / f"file{i}.md").write_text(f"# file {i}\n" * 20)
        store = hn.Store(Path(tmp) / "runs.duckdb")
        one_by_one = await sequential(store, ws, n)
        alone, _ = await swept(store, ws, n, 1)
        eight, result = await swept(store, ws, n, 8)
        runs_ms = timed(lambda: store.runs(sweep=result.sweep_id))
        rates_ms = timed(lambda: result.failure_rates())
        store.close()
        dask, remote = await on_dask(ws, Path(tmp) / "shards", n)
        shards = len(list((Path(tmp) / "shards").glob("*.duckdb")))
        done = int(remote.runs["outcome"].eq("finished").sum())
        combined_runs_ms = timed(lambda: remote.store.runs(sweep=remote.sweep_id))
        combined_rates_ms = timed(lambda: remote.failure_rates())
    print(f"{n} scripted runs, one step each, file store")
    print(f"  sequential hn.run:        {one_by_one:6.2f} s  {one_by_one / n * 1000:6.2f} ms/run")
    print(f"  hn.sweep concurrency=1:   {alone:6.2f} s  {alone / n * 1000:6.2f} ms/run")
    print(f"  hn.sweep concurrency=8:   {eight:6.2f} s  {eight / n * 1000:6.2f} ms/run")
    print(f"  hn.sweep on 2 Dask workers: {dask:6.2f} s  {dask / n * 1000:6.2f} ms/run "
          f"({done} finished, {shards} shard files)")  # fmt: skip
    print(f"  sweep overhead per run (concurrency 1 - sequential): "
          f"{(alone - one_by_one) / n * 1000:.2f} ms")  # fmt: skip
    print(f"  Dask overhead per run (each worker's time per run, 2 x wall / N, - sequential): "
          f"{(2 * dask - one_by_one) / n * 1000:.2f} ms")  # fmt: skip
    print(f"  store.runs(sweep=...) of {n} runs among {3 * n}: {runs_ms:.1f} ms; "
          f"SweepResult.failure_rates(): {rates_ms:.1f} ms")  # fmt: skip
    print(f"  through Store.combine of {shards} shards: runs(sweep=...) {combined_runs_ms:.1f} ms;"
          f" failure_rates(): {combined_rates_ms:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    hn.set_testing(True)
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000))
