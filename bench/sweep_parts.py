"""Where a Dask sweep's overhead per run goes, side by side (bench/sweep.py gives the total).

On 2-worker ``LocalCluster``s (worker processes, one thread each), N scripted runs (one
step each, a final answer, five files copied per run) as ``hn.sweep(executor=...)``, in
``ROUNDS`` rounds; each round measures every column once, in turn:

1. a run a task (the chunk size forced to 1);
2. chunks of ``concurrency`` over the threads (4 runs: the rule before #31's last cut,
   still the rule with ``max_cost_usd``);
3. chunks as a sweep with no spend limit makes them (``chunk_size``: about four per
   worker thread over the sweep);
4. as 3, on a second cluster whose workers run without Dask's statistical profiler
   (``distributed.worker.profile.enabled: false``): a worker samples the stack of the
   thread running a task every 10 ms on its event loop, for as long as a task runs.

Each column's CPU per run: the workers' (every thread) and this process's (client,
schedulers and nannies of both clusters: the idle one's too, so compare the workers'
column), and the workers' event loop (``MainThread``) per second of the sweep's wall
time, the cost paid by the clock rather than per run. Then, in this process: a new shard
store's CPU (a sweep on a new shards folder makes one per worker), a run's claim
(``O_EXCL`` file, written, ``fsync``) with and without its ``fsync``, and the write a
sweep adds to every run, here or on a worker (``add_sweep_run``: the run's slot, sample
and final files in a transaction of its own), with five files and with none.

Run: python bench/sweep_parts.py [N] [ROUNDS]   (default 300 runs, 3 rounds; needs
dask[distributed])
"""

from __future__ import annotations

import asyncio
import os
import runpy
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import harnessnb as hn
import harnessnb.sweeps._sweep_dask as sweep_dask

_HERE = Path(__file__).resolve()
_report = runpy.run_path(str(_HERE.with_name("_report.py")))
_sweep = runpy.run_path(str(_HERE.with_name("sweep.py")))
load_line, ratio_line, ratios = _report["load_line"], _report["ratio_line"], _report["ratios"]
thread_cpu, new_store_cpu = _sweep["thread_cpu"], _sweep["new_store_cpu"]

CHUNK_RULE = sweep_dask.chunk_size


def provider() -> hn.ScriptedProvider:
    return hn.ScriptedProvider(lambda messages: "done")


def forced(size: int | None) -> None:
    """The chunk size every sweep uses from now: ``size``, or the sweep's own rule."""
    if size is None:
        sweep_dask.chunk_size = CHUNK_RULE
    else:
        sweep_dask.chunk_size = lambda runs, threads, concurrency, spend_limited=True: size


def loop_cpu(client: Any) -> float:
    """The workers' event loops' CPU seconds so far (``MainThread``), summed."""
    return sum(t.get("MainThread", 0.0) for t in client.run(thread_cpu).values())


async def one(client: Any, ws: Path, shards: Path, n: int) -> tuple[float, float, float, float]:
    """One sweep: (wall s, workers' CPU s, this process's CPU s, workers' loops' CPU s)."""
    workers = sum(client.run(time.process_time).values())
    loops, here = loop_cpu(client), time.process_time()
    wall = time.perf_counter()
    await hn.sweep([f"task {i}" for i in range(n)], [provider()], workspace=ws,
                   concurrency=8, executor=client, shards=shards)  # fmt: skip
    wall = time.perf_counter() - wall
    here = time.process_time() - here
    workers = sum(client.run(time.process_time).values()) - workers
    return wall, workers, here, loop_cpu(client) - loops


def claim_cpu(folder: Path, sync: bool, times: int = 300) -> float:
    """CPU ms of one run's claim as ``_sweep_worker`` makes it (with ``fsync`` or not)."""
    cpu = time.thread_time()
    for i in range(times):
        fd = os.open(folder / f"{sync}-{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, b"/shards/host-1234.duckdb")
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
    return (time.thread_time() - cpu) / times * 1000


def sweep_run_write_cpu(folder: Path, files: int, times: int = 200) -> float:
    """CPU ms of the write a sweep adds to each run (``add_sweep_run``: its slot, its
    sample and its final files, in a transaction of its own), ``files`` files of 200 B."""
    from harnessnb.store._writer import store_writer
    from harnessnb.store._writes import add_sweep_run

    kept: list[Any] = [{"path": f"file{i}.md", "content": b"x" * 200, "size": 200}
                       for i in range(files)]  # fmt: skip
    sample = {"input": "task", "target": None, "id": "s", "metadata": {}}
    with hn.Store(folder / f"writes{files}.duckdb") as store:
        writer = store_writer(store)
        cpu = time.process_time()
        for i in range(times):
            slot: Any = {"sweep_id": "sweep", "run_id": f"run_{i}", "sample_id": f"s{i}"}
            slot |= {"provider": "p", "repeat": 0, "sample": sample, "files_cut": None}
            writer.write(add_sweep_run(slot, kept))
        return (time.process_time() - cpu) / times * 1000


def cluster(profile: bool) -> tuple[Any, Any]:
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.worker.profile.enabled": profile}):
        made = LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                            dashboard_address=None)  # fmt: skip
    client = Client(made)
    client.run(lambda: hn.set_testing(True) and None)
    return made, client


def show(name: str, took: list[tuple[float, float, float, float]], n: int) -> None:
    def med(i: int) -> float:
        return statistics.median(t[i] for t in took)

    print(f"  {name:44} wall {med(0) / n * 1000:6.2f}  workers {med(1) / n * 1000:6.2f}  "
          f"here {med(2) / n * 1000:5.2f} ms/run; workers' loops "
          f"{statistics.median(t[3] / t[0] for t in took) * 1000:5.1f} ms/s")  # fmt: skip


async def main(n: int = 300, rounds: int = 3) -> None:
    print(load_line())
    plain, with_profile = cluster(True)
    bare, without_profile = cluster(False)
    columns: dict[str, list[tuple[float, float, float, float]]] = {}
    plan = {"a run a task": (with_profile, 1), "chunks of 4 (concurrency 8 / 2 threads)":
            (with_profile, 4), "chunks by chunk_size": (with_profile, None),
            "chunks by chunk_size, no worker profiler": (without_profile, None)}  # fmt: skip
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ws = Path(tmp) / "ws"
            ws.mkdir()
            for i in range(5):
                (ws / f"file{i}.md").write_text(f"# file {i}\n" * 20)
            for client in (with_profile, without_profile):  # workers warm: imports, loop
                await one(client, ws, Path(tmp) / f"warm{id(client)}", 20)
            for r in range(rounds):
                for c, (name, (client, size)) in enumerate(plan.items()):
                    forced(size)
                    took = await one(client, ws, Path(tmp) / f"s{r}-{c}", n)
                    columns.setdefault(name, []).append(took)
            forced(None)
            shard_s = new_store_cpu(Path(tmp))
            claims = Path(tmp) / "claims"
            claims.mkdir()
            synced, unsynced = claim_cpu(claims, True), claim_cpu(claims, False)
            writes = {k: sweep_run_write_cpu(Path(tmp), k) for k in (5, 0)}
    finally:
        for closing in (with_profile, plain, without_profile, bare):
            closing.close()
    print(f"{n} scripted runs a sweep on 2 one-thread workers; {rounds} rounds (medians)")
    for name, took in columns.items():
        show(name, took, n)
    workers = {name: [t[1] for t in took] for name, took in columns.items()}
    base = workers["chunks by chunk_size"]
    for name in ("a run a task", "chunks of 4 (concurrency 8 / 2 threads)"):
        print(ratio_line(f"workers' CPU, {name} / chunks by chunk_size",
                         ratios(workers[name], base)))  # fmt: skip
    bare_cpu = workers["chunks by chunk_size, no worker profiler"]
    print(ratio_line("workers' CPU, no profiler / with it (chunks by chunk_size)",
                     ratios(bare_cpu, base)))  # fmt: skip
    print(f"  a new shard store (schema made): {shard_s * 1000:.1f} ms CPU, "
          f"{2 * shard_s / n * 1000:.2f} ms/run for the sweep's two")  # fmt: skip
    print(f"  a run's claim: {synced:.3f} ms CPU with its fsync, {unsynced:.3f} ms without")
    print(f"  local too: the sweep's own write per run (add_sweep_run): {writes[5]:.2f} ms CPU "
          f"with 5 files, {writes[0]:.2f} ms with none")  # fmt: skip
    print(load_line())


if __name__ == "__main__":
    hn.set_testing(True)
    args = [int(a) for a in sys.argv[1:3]]
    asyncio.run(main(*args))
