"""``import harnessnb`` cost in a fresh interpreter, and what it must not import.

Run: ``python bench/import_time.py [--runs 15] [--as-is]``. Target: median under 150 ms,
with pandas, duckdb, ipywidgets and httpx2 absent from ``sys.modules`` afterwards.

Measured with bytecode compiled first: one untimed child imports what the timed ones
import with bytecode writing on (``PYTHONDONTWRITEBYTECODE`` dropped for it), so every
module's ``.pyc`` exists, as after ``pip install``. Without it, where bytecode is not
written (``PYTHONDONTWRITEBYTECODE=1``, no ``__pycache__``) every import compiles its
source and the figure read 3-10x high. Each timed child counts the modules it imported
from source with no bytecode beside them (printed; 0 is a fair measure); ``--as-is``
skips the warm-up, to see the difference. A ``PYTHONPYCACHEPREFIX`` in the environment
is honoured by the warm-up and the timed children alike.

Also, interleaved with those, the whole process (``python -c 'import harnessnb'``)
against the bare interpreter (``python -c pass``): each round's ratio, min/median/max.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import statistics
import subprocess
import sys
import time
from pathlib import Path

# bench/_report.py by its path: putting this folder on sys.path would let bench/mcp.py
# shadow the MCP SDK in whatever imports this script (tests/test_bench_scripts.py).
_report = runpy.run_path(str(Path(__file__).resolve().with_name("_report.py")))
load_line = _report["load_line"]
ratio_line = _report["ratio_line"]
ratios = _report["ratios"]

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("pandas", "duckdb", "ipywidgets", "httpx2", "IPython")
TARGET_MS = 150.0

PROBE = f"""
import json, os, sys, time
t0 = time.perf_counter()
import harnessnb
ms = (time.perf_counter() - t0) * 1000
uncompiled = [
    name for name, m in list(sys.modules.items())
    if getattr(m, "__cached__", None) and not os.path.exists(m.__cached__)
]
print(json.dumps({{
    "ms": ms,
    "loaded": [m for m in {HEAVY!r} if m in sys.modules],
    "uncompiled": uncompiled,
}}))
"""

# For information: the first provider access pays for httpx2 (lazily, on demand).
PROVIDER_PROBE = """
import time, harnessnb
t0 = time.perf_counter()
harnessnb.OpenAI
print((time.perf_counter() - t0) * 1000)
"""


def run(code: str, *, write_bytecode: bool = False) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if write_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    ).stdout


def compile_first() -> None:
    """Import, untimed, what the timed children import, writing the bytecode of every
    module that has none (harnessnb's own, and the first provider access's)."""
    run(PROBE, write_bytecode=True)
    run(PROVIDER_PROBE, write_bytecode=True)


def main(runs: int, as_is: bool = False) -> int:
    print(load_line())
    if as_is:
        print("bytecode: as found (no warm-up; where none is written, imports compile)")
    else:
        compile_first()
        print("bytecode: compiled first (one untimed import with bytecode writing on)")
    samples: list[float] = []
    wall: list[float] = []
    bare: list[float] = []
    loaded: set[str] = set()
    uncompiled: set[str] = set()
    for n in range(runs):
        out = json.loads(run(PROBE))
        samples.append(out["ms"])
        loaded.update(out["loaded"])
        uncompiled.update(out["uncompiled"])
        # Whole-process view too: interpreter start plus the import, beside the bare
        # interpreter, in alternating order.
        if n % 2 == 0:
            wall.append(_time_process("import harnessnb"))
            bare.append(_time_process("pass"))
        else:
            bare.append(_time_process("pass"))
            wall.append(_time_process("import harnessnb"))
    median = statistics.median(samples)
    print(
        f"import harnessnb: median {median:.1f} ms, min {min(samples):.1f} ms, "
        f"max {max(samples):.1f} ms over {runs} fresh interpreters (target < {TARGET_MS:.0f} ms)"
    )
    print(f"modules imported without bytecode: {len(uncompiled)}")
    print(
        f"python -c 'import harnessnb' whole process: median {statistics.median(wall):.0f} ms; "
        f"python -c pass: median {statistics.median(bare):.0f} ms"
    )
    print(ratio_line("whole process / bare interpreter", ratios(wall, bare)))
    print(f"heavy modules loaded: {sorted(loaded) or 'none'}")
    lazy = statistics.median(float(run(PROVIDER_PROBE)) for _ in range(min(5, runs)))
    print(f"first access to harnessnb.OpenAI (loads httpx2): median {lazy:.0f} ms")
    ok = median < TARGET_MS and not (loaded & {"pandas", "duckdb", "ipywidgets", "httpx2"})
    print("OK" if ok else "FAIL")
    print(load_line())
    return 0 if ok else 1


def _time_process(code: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return (time.perf_counter() - t0) * 1000


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--as-is", action="store_true", help="no bytecode warm-up first")
    options = parser.parse_args()
    raise SystemExit(main(options.runs, options.as_is))
