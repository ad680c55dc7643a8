"""What a sweep costs per run, beside the same runs made one by one.

N scripted runs (one step each, a final answer; no network) on a FILE store:

1. sequential: ``hn.run`` N times in a loop, every run in the one workspace (no copy);
2. ``hn.sweep(concurrency=1)``: the same runs, each in its own copy of the workspace;
3. ``hn.sweep(concurrency=8)``.

The sweep machinery's overhead per run is (2 - 1) / N: the workspace copy and removal,
the semaphore, the row. Then the readers on the sweep's runs: ``store.runs(sweep=...)``
and ``SweepResult.failure_rates()``. (Dask workers, issue #18 item 3, are not here yet.)

Run: python bench/sweep.py [N]   (default 1000)
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
    print(f"{n} scripted runs, one step each, file store")
    print(f"  sequential hn.run:        {one_by_one:6.2f} s  {one_by_one / n * 1000:6.2f} ms/run")
    print(f"  hn.sweep concurrency=1:   {alone:6.2f} s  {alone / n * 1000:6.2f} ms/run")
    print(f"  hn.sweep concurrency=8:   {eight:6.2f} s  {eight / n * 1000:6.2f} ms/run")
    print(f"  sweep overhead per run (concurrency 1 - sequential): "
          f"{(alone - one_by_one) / n * 1000:.2f} ms")  # fmt: skip
    print(f"  store.runs(sweep=...) of {n} runs among {3 * n}: {runs_ms:.1f} ms; "
          f"SweepResult.failure_rates(): {rates_ms:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    hn.set_testing(True)
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1000))
