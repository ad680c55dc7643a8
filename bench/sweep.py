"""What a sweep costs per run, beside the same runs made one by one: wall time and CPU.

N scripted runs (one step each, a final answer; no network) on a FILE store, in
``ROUNDS`` rounds; each round measures every column once, in turn, so a change of load
falls on all of them alike:

1. sequential: ``hn.run`` N times in a loop, every run in the one workspace (no copy);
2. ``hn.sweep(concurrency=1)``: the same runs, each in its own copy of the workspace;
3. ``hn.sweep(concurrency=8)``;
4. ``hn.sweep(executor=client, shards=folder, concurrency=8)`` on a 2-worker Dask
   ``LocalCluster`` (worker processes, one thread each; started once, before the
   rounds, not timed), each worker writing its own shard file.

CPU is process CPU (``time.process_time``, every thread): this process's for 1-3; for 4,
the two worker processes' (read on each worker with ``client.run`` before and after)
plus this process's, which holds the client, the scheduler and the nannies. Column 4's
CPU less column 2's, per run, is what Dask costs a run beyond the same sweep here (the
task's round trip through the scheduler, pickles, the claim): the target is at most
3 ms a run (the median over rounds; also as a ratio, Dask's CPU over column 2's plus
3 ms a run, at most 1.00x). The ratios' min/median/max come from ``bench/_report.py``,
and the load average is printed at the start and the end.

Where that CPU goes: per thread name (psutil, a dependency of distributed), columns 1
and 2's threads here beside column 4's here and on the workers (``worker: MainThread`` is the
Dask worker's event loop; ``worker: Dask-Default-Threads`` the task thread, which
claims each run and waits for it; ``IO loop`` here the client's and the scheduler's
loop). After each Dask round the workers are left idle for as long as the round took
(at most 3 s, scaled): their CPU doing nothing (heartbeats, monitors, the loop's tick),
which is paid by the wall clock, not per run, is printed as a part of the overhead; so
is making the sweep's two shard stores (a new DuckDB file and its schema per worker, as
every sweep on a new shards folder does), measured here as a new ``hn.Store``'s CPU.

Then the readers on the last round's runs: ``store.runs(sweep=...)`` and
``SweepResult.failure_rates()``, and the same through ``Store.combine`` of the Dask
sweep's shards. pandas is imported and one frame built before any timing (the first
``import pandas`` is most of a cold reader's time otherwise).

Run: python bench/sweep.py [N] [ROUNDS]   (default 300 runs, 3 rounds; needs dask[distributed])
"""

from __future__ import annotations

import asyncio
import runpy
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import harnessnb as hn
from harnessnb.sweeps._sweep_dask import chunk_size

# bench/_report.py by its path: putting this folder on sys.path would let bench/mcp.py
# shadow the MCP SDK for whatever imports it later in the same process.
_report = runpy.run_path(str(Path(__file__).resolve().with_name("_report.py")))
load_line = _report["load_line"]
ratio_line = _report["ratio_line"]
ratios = _report["ratios"]
spread = _report["spread"]

DASK_OVERHEAD_TARGET_MS = 3.0


def provider() -> hn.ScriptedProvider:
    return hn.ScriptedProvider(lambda messages: "done")


class Took:
    """One column's round: wall seconds and CPU seconds (of them, the workers'), CPU
    per thread name (this process's, and the workers' as ``worker: NAME``), and the
    workers' idle CPU over as long as the round took."""

    def __init__(self, wall: float, cpu: float) -> None:
        self.wall, self.cpu, self.workers, self.idle = wall, cpu, 0.0, 0.0
        self.threads: dict[str, float] = {}


def thread_cpu() -> dict[str, float]:
    """This process's CPU seconds so far per thread name (numbers dropped: the
    ``asyncio_3`` of ``to_thread`` and Dask's ``0-Dask-Default-Threads`` pooled)."""
    import threading

    import psutil  # distributed's dependency

    names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for t in psutil.Process().threads():
        name = names.get(t.id, "not Python (DuckDB's)").split(":")[0]
        name = name.strip("0123456789-_ ") or name
        out[name] = out.get(name, 0.0) + t.user_time + t.system_time
    return out


def minus(after: dict[str, float], before: dict[str, float], prefix: str = "") -> dict[str, float]:
    return {prefix + k: v - before.get(k, 0.0) for k, v in after.items()}


async def measured(work: Callable[[], Awaitable[Any]]) -> tuple[Took, Any]:
    threads = thread_cpu()
    cpu, wall = time.process_time(), time.perf_counter()
    out = await work()
    took = Took(time.perf_counter() - wall, time.process_time() - cpu)
    took.threads = minus(thread_cpu(), threads)
    return took, out


async def sequential(store: hn.Store, ws: Path, n: int) -> None:
    for i in range(n):
        await hn.run(hn.TaskContract(f"task {i}", ws), provider(), store=store)


async def swept(store: hn.Store, ws: Path, n: int, concurrency: int) -> hn.SweepResult:
    return await hn.sweep([f"task {i}" for i in range(n)], [provider()], workspace=ws,
                          concurrency=concurrency, store=store)  # fmt: skip


def workers_cpu(client: Any) -> float:
    """The worker processes' CPU seconds so far, summed."""
    return sum(client.run(time.process_time).values())


async def on_dask(client: Any, ws: Path, shards: Path, n: int) -> tuple[Took, hn.SweepResult]:
    before, threads = workers_cpu(client), client.run(thread_cpu)
    tasks = [f"task {i}" for i in range(n)]
    took, result = await measured(
        lambda: hn.sweep(
            tasks, [provider()], workspace=ws, concurrency=8, executor=client, shards=shards
        )
    )
    took.workers = workers_cpu(client) - before
    took.cpu += took.workers
    for address, after in client.run(thread_cpu).items():
        for name, used in minus(after, threads[address], "worker: ").items():
            took.threads[name] = took.threads.get(name, 0.0) + used
    # What the two workers cost doing nothing for as long (heartbeats, monitors, ticks).
    idle_s = min(took.wall, 3.0)
    before = workers_cpu(client)
    await asyncio.sleep(idle_s)
    took.idle = (workers_cpu(client) - before) / idle_s * took.wall
    return took, result


def new_store_cpu(tmp: Path, times: int = 3) -> float:
    """CPU seconds a new store file (its schema made) costs in this process (median)."""
    used = []
    for i in range(times):
        cpu = time.process_time()
        hn.Store(tmp / f"new{i}.duckdb").close()
        used.append(time.process_time() - cpu)
    return statistics.median(used)


def timed(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return (time.perf_counter() - started) * 1000


def per_run(values: list[float], n: int) -> str:
    low, mid, high = spread([v / n * 1000 for v in values])
    return f"{mid:7.2f} ms/run (min {low:.2f}, max {high:.2f})"


async def main(n: int = 300, rounds: int = 3) -> None:
    import pandas as pd
    from distributed import Client, LocalCluster

    print(load_line())
    pd.DataFrame({"warm": [1]}).to_dict("records")  # pandas imported before any timing
    columns: dict[str, list[Took]] = {"seq": [], "c1": [], "c8": [], "dask": []}
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
    ) as cluster, Client(cluster) as client:  # fmt: skip
        client.run(lambda: hn.set_testing(True) and None)
        ws = Path(tmp) / "ws"
        ws.mkdir()
        for i in range(5):  # a small project: five files to copy per run
            (ws / f"file{i}.md").write_text(f"# file {i}\n" * 20)
        store = hn.Store(Path(tmp) / "runs.duckdb")
        shard_s = new_store_cpu(Path(tmp))
        for r in range(rounds):
            took, _ = await measured(lambda: sequential(store, ws, n))
            columns["seq"].append(took)
            took, _ = await measured(lambda: swept(store, ws, n, 1))
            columns["c1"].append(took)
            took, result = await measured(lambda: swept(store, ws, n, 8))
            columns["c8"].append(took)
            shards = Path(tmp) / f"shards{r}"
            took, remote = await on_dask(client, ws, shards, n)
            columns["dask"].append(took)
        runs_ms = timed(lambda: store.runs(sweep=result.sweep_id))
        rates_ms = timed(lambda: result.failure_rates())
        store.close()
        files = len(list(shards.glob("*.duckdb")))
        done = int(remote.runs["outcome"].eq("finished").sum())
        combined_runs_ms = timed(lambda: remote.store.runs(sweep=remote.sweep_id))
        combined_rates_ms = timed(lambda: remote.failure_rates())
    names = {"seq": "sequential hn.run", "c1": "hn.sweep concurrency=1",
             "c8": "hn.sweep concurrency=8", "dask": "hn.sweep on 2 Dask workers"}  # fmt: skip
    print(f"{n} scripted runs, one step each, file store; {rounds} rounds (medians)")
    for key, name in names.items():
        walls, cpus = [t.wall for t in columns[key]], [t.cpu for t in columns[key]]
        print(f"  {name:27} wall {per_run(walls, n)}   CPU {per_run(cpus, n)}")
    workers = [t.workers for t in columns["dask"]]
    here = [t.cpu - t.workers for t in columns["dask"]]
    print(f"  of Dask's CPU: workers {per_run(workers, n)}; client, scheduler and nannies "
          f"{per_run(here, n)}")  # fmt: skip
    size = chunk_size(n, 2, 8, spend_limited=False)
    print(f"  the last Dask sweep: {done} finished, {files} shard files, "
          f"{-(-n // size)} tasks of up to {size} runs")  # fmt: skip
    print("  CPU per thread, ms/run (medians): sequential here | sweep concurrency=1 here | Dask")
    seen = columns["seq"] + columns["c1"] + columns["dask"]
    for name in sorted({k for t in seen for k in t.threads}):
        used = [statistics.median(t.threads.get(name, 0.0) for t in columns[key]) / n * 1000
                for key in ("seq", "c1", "dask")]  # fmt: skip
        if max(abs(u) for u in used) >= 0.05:
            print(f"    {name:40} {used[0]:7.2f} | {used[1]:7.2f} | {used[2]:7.2f}")
    cpu = {key: [t.cpu for t in took] for key, took in columns.items()}
    wall = {key: [t.wall for t in took] for key, took in columns.items()}
    print(
        ratio_line("sweep concurrency=1 / sequential, CPU per run", ratios(cpu["c1"], cpu["seq"]))
    )
    print(ratio_line("Dask / sweep concurrency=1, CPU per run", ratios(cpu["dask"], cpu["c1"])))
    print(ratio_line("Dask / sweep concurrency=1, wall per run", ratios(wall["dask"], wall["c1"])))
    overhead = [(d - c) / n * 1000 for d, c in zip(cpu["dask"], cpu["c1"], strict=True)]
    floor = [c + DASK_OVERHEAD_TARGET_MS / 1000 * n for c in cpu["c1"]]
    print(ratio_line("Dask CPU / (sweep concurrency=1 CPU + 3 ms a run)",
                     ratios(cpu["dask"], floor), 1.0))  # fmt: skip
    low, mid, high = spread(overhead)
    met = "OK" if mid <= DASK_OVERHEAD_TARGET_MS else "MISS"
    print(f"Dask overhead per run (CPU, Dask - sweep concurrency=1)  {mid:.2f} ms "
          f"(min {low:.2f}, max {high:.2f} over {rounds} rounds)  "
          f"target <= {DASK_OVERHEAD_TARGET_MS:.2f} ms  {met}")  # fmt: skip
    idle = [t.idle / n * 1000 for t in columns["dask"]]
    net = [o - i for o, i in zip(overhead, idle, strict=True)]
    low, mid, high = spread(idle)
    shards_ms = 2 * shard_s / n * 1000
    rest = statistics.median(net) - shards_ms
    print(f"  of it, the 2 workers idle as long as the sweep took: {mid:.2f} ms/run "
          f"(min {low:.2f}, max {high:.2f}); two new shard stores ({shard_s * 1000:.1f} ms "
          f"CPU each here): {shards_ms:.2f} ms/run; the rest {rest:.2f} ms/run")  # fmt: skip
    print(f"  store.runs(sweep=...) of {n} runs among {3 * rounds * n}: {runs_ms:.1f} ms; "
          f"SweepResult.failure_rates(): {rates_ms:.1f} ms (pandas warm)")  # fmt: skip
    print(f"  through Store.combine of {files} shards: runs(sweep=...) {combined_runs_ms:.1f} ms;"
          f" failure_rates(): {combined_rates_ms:.1f} ms")  # fmt: skip
    print(load_line())


if __name__ == "__main__":
    hn.set_testing(True)
    args = [int(a) for a in sys.argv[1:3]]
    asyncio.run(main(*args))
