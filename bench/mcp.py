"""An MCP tool call through harnessnb vs the bare ``mcp`` client, on one stdio server.

The server is ``python -m mcp_server_time`` (PyPI, offline) and the call is
``get_current_time`` with ``{"timezone": "UTC"}``: a READ call that does almost no work,
so what is timed is the path around it.

- harnessnb: ``ToolExecutor.execute`` of the ``MCPTool`` that ``ToolServers`` built over
  a ``Connection``; the server is ``trusted`` (its ``readOnlyHint`` makes the tool READ,
  so the gate allows it without asking), and it runs in the command sandbox (the label
  is printed).
- bare: ``mcp.Client(StdioServerParameters(...))`` and ``call_tool``, no sandbox.

Both sides are measured in alternating rounds in one run, so machine load hits both
alike: each round starts a fresh session on each side (its start-up timed: the server
process, ``initialize`` and, for harnessnb, ``tools/list`` and the sandbox), makes its
share of the calls one after another (each timed), and closes it. Printed: start-up
medians, per-call medians (calls only: start-up is once per run), the ratio
harnessnb/bare per call (target <= 1.3x) and each round's own ratio.

``--profile`` profiles the harnessnb calls of one more session with cProfile and prints
where their time goes. ``--quick`` makes a few calls (the test's mode).

Run: ``python bench/mcp.py [--calls 500] [--rounds 5] [--profile] [--quick]``
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import importlib.util
import io
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path, and this file is named
# like the SDK: ``import mcp`` (here and in harnessnb) would import it. Drop the folder.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import harnessnb as hn
from harnessnb.mcp._toolset import ToolServers
from harnessnb.tools._executor import ToolExecutor
from harnessnb.tools._workspace import Workspace


def _load_report() -> Any:
    """bench/_report.py, by its path (this folder is off sys.path, see above)."""
    path = Path(__file__).resolve().with_name("_report.py")
    spec = importlib.util.spec_from_file_location("bench_report", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_report = _load_report()
TOOL = "get_current_time"
ARGS: dict[str, Any] = {"timezone": "UTC"}
SERVER_ARGS = ["-m", "mcp_server_time"]


class Harness:
    """One harnessnb session: the tool set opened, an executor over its tools."""

    def __init__(self, ws: Path) -> None:
        self.ws = ws
        self.policy = hn.Policy.default()
        server = hn.MCPServer.stdio(sys.executable, args=SERVER_ARGS, name="time", trusted=True)
        self.servers = ToolServers([server], workspace=ws, policy=self.policy)
        self.executor: ToolExecutor | None = None
        self.n = 0

    async def start(self) -> None:
        tools = await self.servers.open(set())
        (tool,) = [t for t in tools if t.name == TOOL]
        assert tool.effect is hn.Effect.READ, tool.effect  # trusted: the hint counts
        self.executor = ToolExecutor(
            Workspace(self.ws), policy=self.policy, approver=None, tools=tools
        )

    async def call(self) -> str:
        assert self.executor is not None
        self.n += 1
        result = await self.executor.execute(
            hn.ToolCall(f"c{self.n}", TOOL, ARGS), idempotency_key=f"k{self.n}"
        )
        assert result.ok, result.output
        return result.output

    @property
    def sandbox(self) -> str | None:
        (snap,) = self.servers.snapshot()
        label: str | None = snap["sandbox"]
        return label

    async def aclose(self) -> None:
        await self.servers.aclose()


async def harness_round(ws: Path, calls: int) -> tuple[float, list[float], str | None]:
    """Start-up seconds, each call's seconds, and the sandbox label."""
    side = Harness(ws)
    began = time.perf_counter()
    try:
        await side.start()
        startup = time.perf_counter() - began
        await side.call()  # warm: the first call's imports are not a call's cost
        times: list[float] = []
        for _ in range(calls):
            began = time.perf_counter()
            await side.call()
            times.append(time.perf_counter() - began)
        return startup, times, side.sandbox
    finally:
        await side.aclose()


async def bare_round(ws: Path, calls: int) -> tuple[float, list[float]]:
    """Start-up seconds and each call's seconds with the SDK's own client."""
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=SERVER_ARGS, cwd=ws)
    began = time.perf_counter()
    async with Client(params) as client:
        startup = time.perf_counter() - began
        await client.call_tool(TOOL, ARGS)  # warm, as on the harnessnb side
        times: list[float] = []
        for _ in range(calls):
            began = time.perf_counter()
            result = await client.call_tool(TOOL, ARGS)
            times.append(time.perf_counter() - began)
            assert not result.is_error, result
    return startup, times


async def profile(ws: Path, calls: int) -> str:
    """cProfile of ``calls`` harnessnb calls (not the start-up): the top by own time."""
    side = Harness(ws)
    try:
        await side.start()
        await side.call()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            await side.call()
        prof.disable()
    finally:
        await side.aclose()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
    return out.getvalue()


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


async def run(calls: int, rounds: int, show_profile: bool) -> int:
    print(_report.load_line())
    per_round = max(1, calls // rounds)
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        h_start: list[float] = []
        b_start: list[float] = []
        h_calls: list[float] = []
        b_calls: list[float] = []
        ratios: list[float] = []
        sandbox: str | None = None
        for n in range(rounds):
            # Alternate which side goes first, so neither always follows the other.
            if n % 2 == 0:
                hs, ht, sandbox = await harness_round(ws, per_round)
                bs, bt = await bare_round(ws, per_round)
            else:
                bs, bt = await bare_round(ws, per_round)
                hs, ht, sandbox = await harness_round(ws, per_round)
            h_start.append(hs)
            b_start.append(bs)
            h_calls += ht
            b_calls += bt
            ratios.append(statistics.median(ht) / statistics.median(bt))
        h_med, b_med = statistics.median(h_calls), statistics.median(b_calls)
        ratio = h_med / b_med
        hs_med, bs_med = statistics.median(h_start), statistics.median(b_start)
        total = len(h_calls)
        with_start = (hs_med + h_med * total) / (bs_med + b_med * total)
        print(f"server: python -m mcp_server_time, tool {TOOL}; {total} calls each side")
        print(f"  harnessnb: sandboxed ({sandbox}), start-up median {ms(hs_med)}")
        print(f"  bare mcp.Client: not sandboxed, start-up median {ms(bs_med)}")
        print(
            f"per call (calls only): harnessnb median {ms(h_med)}, bare median {ms(b_med)}, "
            f"ratio {ratio:.2f}x  target <= 1.3x  {'OK' if ratio <= 1.3 else 'MISS'}"
        )
        print(_report.ratio_line("  per call, each round's medians harnessnb/bare", ratios, 1.3))
        print(
            f"one start-up and {total} calls: {with_start:.2f}x "
            f"(start-up ratio {hs_med / bs_med:.2f}x)"
        )
        if show_profile:
            print(await profile(ws, per_round))
    print(_report.load_line())
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=500, help="calls per side in all")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds")
    parser.add_argument("--profile", action="store_true", help="profile the harnessnb calls")
    parser.add_argument("--quick", action="store_true", help="a few calls (the test's mode)")
    opts = parser.parse_args()
    if opts.quick:
        opts.calls, opts.rounds = 4, 2
    return asyncio.run(run(opts.calls, opts.rounds, opts.profile))


if __name__ == "__main__":
    sys.exit(main())
