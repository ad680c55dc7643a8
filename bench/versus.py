"""Old code vs new code, side by side in one run: is a change slower?

Measures the same things on two source trees of harnessnb, alternating between them
round by round so that machine drift hits both alike, and prints new/old ratios
(best of the rounds; noise only ever adds time):

- ``complete``: sequential and 100-wide concurrent ``provider.complete()`` calls on a
  healthy chaos server that runs in its own process (what ``bench/providers.py``
  times for harnessnb);
- ``step``: the per-step overhead of a run (a scripted provider, a cheap READ tool,
  a FILE store: ``bench/loop.py`` part 1);
- ``runs``: 100 concurrent one-step runs against the chaos server (``bench/loop.py``
  part 2).

Only the public API is used, so any two revisions can be compared. The old tree is a
``git worktree`` of ``--base`` made in a temporary folder and removed afterwards.

Each measure prints the best of each side, then each round's new/old ratio (min,
median, max over the rounds: ``bench/_report.py``); the step's is judged against the
speed issue's target (a step at most 0.5x the old one, with ``--base`` that issue's
start). ``--only step`` (or ``complete``, ``runs``; repeatable) measures only those.
The load average is printed at the start and the end.

Run: ``python bench/versus.py [--base REV] [--rounds 5] [--only step]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import runpy
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# bench/_report.py by its path: putting this folder on sys.path would let bench/mcp.py
# shadow the MCP SDK for whatever imports it later in the same process.
_report = runpy.run_path(str(Path(__file__).resolve().with_name("_report.py")))
load_line = _report["load_line"]
ratio_line = _report["ratio_line"]
ratios = _report["ratios"]

MEASURES = ("complete", "step", "runs")
# The speed issue's target for a measure, as a new/old ratio (at most).
TARGETS: dict[str, float] = {"step median (s)": 0.5}
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a benchmark."},
    {"role": "user", "content": "Say hello in a sentence of moderate length, please."},
]


# ------------------------------------------------------------------- in a child


async def _complete(url: str, seq_n: int, conc_n: int) -> dict[str, float]:
    import harnessnb as hn

    provider = hn.OpenAI("bench-model", api_key="unused", base_url=url + "/v1")
    for _ in range(50):
        await provider.complete(MESSAGES)
    started = time.perf_counter()
    for _ in range(seq_n):
        await provider.complete(MESSAGES)
    seq = time.perf_counter() - started
    gate = asyncio.Semaphore(100)

    async def one() -> None:
        async with gate:
            await provider.complete(MESSAGES)

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(conc_n)))
    return {"complete seq (s)": seq, "complete conc (s)": time.perf_counter() - started}


async def _step(folder: Path, steps: int) -> dict[str, float]:
    import harnessnb as hn

    ws = folder / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a\n")
    times: list[float] = []
    last = [time.perf_counter()]

    def reply(messages: object) -> dict[str, object]:
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now
        return {"tool": "list_dir", "args": {"path": "."}}

    store = hn.Store(folder / "step.duckdb")
    contract = hn.TaskContract("bench", ws, max_steps=steps, stall=hn.StallPolicy(window=0))
    result = await hn.run(contract, hn.ScriptedProvider(reply), store=store)
    # A read: since schema 14 it settles the steps still journaled, a cost of the steps
    # (the medians skip the 1-in-32 settle; the mean counts it, and this read's).
    t0 = time.perf_counter()
    store.get_run(result.run_id)
    settle = time.perf_counter() - t0
    store.close()
    return {
        "step median (s)": statistics.median(times[1:]),
        "step mean, settles included (s)": (sum(times[1:]) + settle) / len(times[1:]),
    }


async def _runs(url: str, folder: Path, n: int) -> dict[str, float]:
    import harnessnb as hn

    ws = folder / "ws-runs"
    ws.mkdir()
    store = hn.Store(folder / "runs.duckdb")
    provider = hn.OpenAI("bench-model", api_key="unused", base_url=url + "/v1")
    await hn.run(hn.TaskContract("warm up", ws, max_steps=1), provider, store=store)
    started = time.perf_counter()
    await asyncio.gather(
        *(
            hn.run(hn.TaskContract(f"say hello {i}", ws, max_steps=1), provider, store=store)
            for i in range(n)
        )
    )
    elapsed = time.perf_counter() - started
    store.close()
    return {"100 runs (s)": elapsed}


def child(url: str, seq_n: int, conc_n: int, steps: int, only: list[str]) -> None:
    import harnessnb as hn

    hn.set_testing(True)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if "complete" in only:
            out.update(asyncio.run(_complete(url, seq_n, conc_n)))
        if "step" in only:
            out.update(asyncio.run(_step(Path(tmp), steps)))
        if "runs" in only:
            out.update(asyncio.run(_runs(url, Path(tmp), 100)))
    print(json.dumps(out))


# ------------------------------------------------------------------ the parent


def _start_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "harnessnb.chaos", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http://"):
        proc.kill()
        raise SystemExit("chaos server did not start")
    return proc, url


def _measure(tree: Path, url: str, args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            url,
            "--sequential",
            str(args.sequential),
            "--concurrent",
            str(args.concurrent),
            "--steps",
            str(args.steps),
            *(f"--only={m}" for m in args.only),
        ],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"the bench failed in {tree}:\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="7fec1fa", help="the old revision (default 7fec1fa)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sequential", type=int, default=300)
    parser.add_argument("--concurrent", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--only", action="append", choices=MEASURES, help="measure only this")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.only = args.only or list(MEASURES)
    if args.child:
        child(args.child, args.sequential, args.concurrent, args.steps, args.only)
        return
    print(load_line())
    holder = Path(tempfile.mkdtemp(prefix="harnessnb-versus-"))
    old = holder / "old"
    subprocess.run(
        ["git", "worktree", "add", "--detach", "-q", str(old), args.base], cwd=ROOT, check=True
    )
    proc, url = _start_server()
    try:
        trees = {"old": old, "new": ROOT}
        results: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
        for r in range(args.rounds):
            for name in ["old", "new"] if r % 2 == 0 else ["new", "old"]:
                results[name].append(_measure(trees[name], url, args))
        report(results, args)
    finally:
        proc.terminate()
        proc.wait(timeout=5)
        subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=False)
        shutil.rmtree(holder, ignore_errors=True)


def report(results: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> None:
    best = {
        name: {key: min(r[key] for r in rows) for key in rows[0]} for name, rows in results.items()
    }
    print(f"old = {args.base}, new = the working tree; best of {args.rounds} alternating rounds")
    print(f"{'measure':<20} {'old':>10} {'new':>10} {'new/old':>8}")
    for key in best["old"]:
        o, n = best["old"][key], best["new"][key]
        print(f"{key:<20} {o:>10.4f} {n:>10.4f} {n / o:>7.2f}x")
    print("(a ratio above 1 is slower; within about +-10 % is noise on this machine)")
    print("each round's new/old (old and new of a round measured one after the other):")
    for key in best["old"]:
        per_round = ratios([r[key] for r in results["new"]], [r[key] for r in results["old"]])
        print("  " + ratio_line(key, per_round, TARGETS.get(key)))
    print(load_line())


if __name__ == "__main__":
    main()
