"""What each sandbox backend adds to starting a command: ``true`` through ``run_argv``.

Run: ``python bench/sandbox_start.py [--runs 40] [--files 200]``. For each backend
that runs here (none, landlock, bubblewrap), ``--runs`` sequential ``run_argv(["true"])``
calls in a workspace of ``--files`` files beside a ``.env`` (so Landlock grants reading
entry by entry), the backends interleaved run by run so drift hits them alike. Prints
the median and p90 per call and the ratio to ``none``, then the same for the bare
start alone (the argv ``confine`` built, run with ``subprocess.run``: no workspace
walk, no asyncio), which isolates the launcher's cost, beside the bare interpreter
the launcher runs on (``python -I -S -c pass``): its floor.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import runpy
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# bench/_report.py by its path: putting this folder on sys.path would let bench/mcp.py
# shadow the MCP SDK in whatever imports this script (tests/test_bench_scripts.py).
_report = runpy.run_path(str(Path(__file__).resolve().with_name("_report.py")))
load_line = _report["load_line"]
ratio_line = _report["ratio_line"]
ratios = _report["ratios"]

from harnessnb.rules._errors import ConfigError  # noqa: E402
from harnessnb.rules._policy import Policy  # noqa: E402
from harnessnb.tools._process import run_argv  # noqa: E402
from harnessnb.tools._sandbox import confine  # noqa: E402


def available() -> list[str]:
    found = []
    for name in ("none", "landlock", "bubblewrap"):
        os.environ["HARNESSNB_SANDBOX"] = name
        try:
            from harnessnb.tools._sandbox import sandbox_backend

            sandbox_backend()
            found.append(name)
        except ConfigError:
            print(f"{name}: cannot run here, skipped")
    return found


async def one_call(ws: Path, backend: str) -> float:
    os.environ["HARNESSNB_SANDBOX"] = backend
    started = time.perf_counter()
    done = await run_argv(["true"], cwd=ws, timeout_s=30, policy=Policy.permissive())
    assert done.exit_code == 0, done.output
    return time.perf_counter() - started


def one_start(ws: Path, backend: str) -> float:
    child = confine(["true"], workspace=ws, policy=Policy.permissive(), backend=backend)
    try:
        started = time.perf_counter()
        subprocess.run(child.argv, cwd=ws, env=child.env, check=True)
        return time.perf_counter() - started
    finally:
        child.close()


def interpreter() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-I", "-S", "-c", "pass"], check=True)
    return time.perf_counter() - started


def report(title: str, times: dict[str, list[float]]) -> None:
    base = statistics.median(times["none"])
    print(f"\n{title}")
    print(f"{'backend':<14}{'median ms':>11}{'p90 ms':>9}{'vs none':>9}")
    for name, samples in times.items():
        med = statistics.median(samples)
        p90 = sorted(samples)[int(len(samples) * 0.9) - 1]
        print(f"{name:<14}{med * 1000:>11.1f}{p90 * 1000:>9.1f}{med / base:>8.2f}x")
    # Each run's pair (measured one after the other): its ratio, min/median/max.
    for name, samples in times.items():
        if name != "none":
            print(ratio_line(f"  {name} / none, run by run", ratios(samples, times["none"])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--files", type=int, default=200)
    args = parser.parse_args()
    print(load_line())
    backends = available()
    with tempfile.TemporaryDirectory() as folder:
        ws = Path(folder) / "ws"
        ws.mkdir()
        (ws / ".env").write_text("OPENAI_API_KEY=sk-bench\n")
        for i in range(args.files):
            (ws / f"f{i}.txt").write_text("x\n")
        calls: dict[str, list[float]] = {name: [] for name in backends}
        starts: dict[str, list[float]] = {name: [] for name in backends}
        starts["python -I -S"] = []
        for _ in range(args.runs):
            for name in backends:
                calls[name].append(asyncio.run(one_call(ws, name)))
                starts[name].append(one_start(ws, name))
            starts["python -I -S"].append(interpreter())
    print(f"{args.runs} runs of `true`, workspace of {args.files} files beside a .env")
    report("run_argv(['true']) per call (confine + start + wait):", calls)
    report("the start alone (subprocess.run of the confined argv):", starts)
    print(load_line())


if __name__ == "__main__":
    main()
