"""How long the first run in a fresh process takes to start, against the second.

Run: ``python bench/first_run.py [--processes 5] [--python PATH]``. Each fresh
interpreter imports what ``%load_ext harnessnb`` imports (a kernel has it), then does
two runs one after the other, each in its own workspace and file store, with a
scripted model whose first answer calls ``read_file`` (its arguments validated) and
whose second answers. Timed per run, from the ``hn.run`` call: ``start``, to its
``started`` event (the store open, the run row written, the driver built), and
``step``, to its first ``step`` event (the tool call validated and run). The first
run pays for what a process does once (opening DuckDB, the event loop's first
use...); issue #24's was ``import jsonschema`` (seconds where JupyterLab is installed).
One untimed process runs first with bytecode writing on, so no timed run compiles a
source (where ``PYTHONDONTWRITEBYTECODE=1`` left none, the first run read high).

``--python`` is another environment's interpreter, e.g. one with JupyterLab or
``jsonschema[format-nongpl]`` installed, where the grammar libraries exist to be
imported; harnessnb is taken from this tree. Target: the first start within 3x the
second's (median over processes), and none of ``GRAMMAR`` imported by either run.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import statistics
import subprocess
import sys
from pathlib import Path

# bench/_report.py by its path: putting this folder on sys.path would let bench/mcp.py
# shadow the MCP SDK in whatever imports this script (tests/test_bench_scripts.py).
_report = runpy.run_path(str(Path(__file__).resolve().with_name("_report.py")))
load_line = _report["load_line"]
ratio_line = _report["ratio_line"]

ROOT = Path(__file__).resolve().parent.parent
# What a run must not import: jsonschema (its format checkers) and the grammar
# libraries those load where they are installed.
GRAMMAR = ("jsonschema", "lark", "rfc3987_syntax", "rfc3987", "uri_template", "webcolors")
TARGET_RATIO = 3.0

PROBE = f"""
import asyncio, json, sys, tempfile, time
from pathlib import Path
import harnessnb as hn
try:
    import harnessnb.notebook._magics  # what %load_ext harnessnb loads, as in a kernel
except ImportError:
    pass

async def one(tmp: Path, n: int) -> dict[str, float]:
    ws = tmp / f"ws{{n}}"
    ws.mkdir()
    (ws / "a.txt").write_text("a\\n")
    seen: dict[str, float] = {{}}
    t0 = time.perf_counter()

    def on_event(event: hn.RunEvent) -> None:
        seen.setdefault(event.kind, time.perf_counter() - t0)

    provider = hn.ScriptedProvider([{{"tool": "read_file", "args": {{"path": "a.txt"}}}}, "done"])
    contract = hn.TaskContract("read a.txt", str(ws))
    result = await hn.run(contract, provider, store=tmp / f"runs{{n}}.duckdb", on_event=on_event)
    assert result.outcome is hn.RunOutcome.FINISHED, result
    return {{"start": seen["started"], "step": seen["step"]}}

async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        first = await one(Path(tmp), 1)
        second = await one(Path(tmp), 2)
    loaded = sorted({{m.split(".")[0] for m in sys.modules}} & set({GRAMMAR!r}))
    print(json.dumps({{"first": first, "second": second, "loaded": loaded}}))

asyncio.run(main())
"""


def probe(python: str, *, write_bytecode: bool = False) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if write_bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run(
        [python, "-c", PROBE], capture_output=True, text=True, env=env, check=True
    ).stdout
    result: dict[str, object] = json.loads(out)
    return result


def main(processes: int, python: str) -> int:
    starts: list[float] = []
    steps: list[float] = []
    loaded: set[str] = set()
    print(load_line())
    version = subprocess.run(
        [python, "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # One untimed process first, writing the bytecode of every module the runs import:
    # where none is written (PYTHONDONTWRITEBYTECODE=1), the first run compiled the
    # sources it imports and read high.
    probe(python, write_bytecode=True)
    print(f"python {version}: {processes} fresh processes, two runs each (bytecode compiled first)")
    for _ in range(processes):
        out = probe(python)
        first, second = out["first"], out["second"]
        assert isinstance(first, dict) and isinstance(second, dict)
        starts.append(first["start"] / second["start"])
        steps.append(first["step"] / second["step"])
        loaded.update(str(m) for m in out["loaded"])  # type: ignore[attr-defined]
        print(
            f"  start {first['start'] * 1000:7.1f} ms then {second['start'] * 1000:6.1f} ms "
            f"({starts[-1]:4.1f}x)   first step {first['step'] * 1000:7.1f} ms "
            f"then {second['step'] * 1000:6.1f} ms ({steps[-1]:4.1f}x)"
        )
    ratio = statistics.median(starts)
    print(ratio_line("first/second start", starts, TARGET_RATIO))
    print(ratio_line("first/second step", steps))
    print(f"grammar modules loaded: {sorted(loaded) or 'none'}")
    ok = ratio <= TARGET_RATIO and not loaded
    print("OK" if ok else "FAIL")
    print(load_line())
    return 0 if ok else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--python", default=sys.executable, help="another interpreter")
    args = parser.parse_args()
    raise SystemExit(main(args.processes, args.python))
