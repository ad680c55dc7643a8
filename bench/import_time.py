"""``import harnessnb`` cost in a fresh interpreter, and what it must not import.

Run: ``python bench/import_time.py [--runs 15]``. Target: median under 150 ms, with
pandas, duckdb, ipywidgets and httpx2 absent from ``sys.modules`` afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("pandas", "duckdb", "ipywidgets", "httpx2", "IPython")
TARGET_MS = 150.0

PROBE = f"""
import json, sys, time
t0 = time.perf_counter()
import harnessnb
ms = (time.perf_counter() - t0) * 1000
print(json.dumps({{"ms": ms, "loaded": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""

# For information: the first provider access pays for httpx2 (lazily, on demand).
PROVIDER_PROBE = """
import time, harnessnb
t0 = time.perf_counter()
harnessnb.OpenAI
print((time.perf_counter() - t0) * 1000)
"""


def run(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout


def main(runs: int) -> int:
    samples, wall = [], []
    loaded: set[str] = set()
    for _ in range(runs):
        out = json.loads(run(PROBE))
        samples.append(out["ms"])
        loaded.update(out["loaded"])
        # Whole-process view too: interpreter start plus the import.
        wall.append(_time_process())
    median = statistics.median(samples)
    print(
        f"import harnessnb: median {median:.1f} ms, min {min(samples):.1f} ms, "
        f"max {max(samples):.1f} ms over {runs} fresh interpreters (target < {TARGET_MS:.0f} ms)"
    )
    print(f"python -c 'import harnessnb' whole process: median {statistics.median(wall):.0f} ms")
    print(f"heavy modules loaded: {sorted(loaded) or 'none'}")
    lazy = statistics.median(float(run(PROVIDER_PROBE)) for _ in range(5))
    print(f"first access to harnessnb.OpenAI (loads httpx2): median {lazy:.0f} ms")
    ok = median < TARGET_MS and not (loaded & {"pandas", "duckdb", "ipywidgets", "httpx2"})
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


def _time_process() -> float:
    import time

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import harnessnb"], env=env, check=True)
    return (time.perf_counter() - t0) * 1000


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    raise SystemExit(main(parser.parse_args().runs))
