"""harnessnb beside its peers: the same durable agent loop, step by step.

The loop: a scripted model (no network) that asks for one cheap READ tool each step, a
tool that reads a small file, the state persisted each step to a file, ``--steps``
steps (500), then a final answer. The same work in:

- ``harnessnb``: ``hn.ScriptedProvider`` and the built-in ``read_file``, a file
  ``hn.Store`` (each step one durable commit: its rows and checkpoint);
- ``langgraph``: a ``StateGraph(MessagesState)`` of a model node and a ``ToolNode``, a
  ``SqliteSaver`` checkpointer on a file, ``durability="sync"`` (each super-step's
  checkpoint written before the next begins);
- ``openai-agents``: the OpenAI Agents SDK's ``Runner`` with a fake ``Model`` subclass
  that returns the tool call, a ``SQLiteSession`` on a file (each turn's items stored),
  tracing disabled;
- ``pydantic-ai``: an ``Agent`` on a ``FunctionModel``, **no persistence** (pydantic-ai
  has none of its own): a framework's loop with nothing persisted, shown for scale, not
  a like-for-like peer.

Each side runs in a FRESH process (its imports done before the clock starts), the sides
interleaved round by round in a rotating order so machine drift hits all alike. A step
is the time between two consecutive model calls (the tool, the persistence and the
framework's own work between them): per-step median, the medians of the first and the
last fifth of the steps (does a step grow with the history?), the whole loop, and the
child's peak RSS (``resource.getrusage``, imports included); the per-step median of
the process's CPU time too (all its threads; waiting on the disk, ``fsync``, is not
CPU time). Ratios are each round's peer figure over harnessnb's in the same round (above
1: the peer is slower): per-step wall median (judged: harnessnb's lead over each
durable peer kept, at least 1x), per-step CPU median and whole loop (shown).

The peers are the ``bench`` extra (``pip install -e '.[bench]'``); a peer not
installed is skipped with a note. They are not in the ``test`` extra: the suite never
needs them. On the team machine they live in their own environment, ``/work/venv-peers``
(``langsmith``, which LangGraph pulls in, registers a pytest plugin, and the Agents SDK
wants ``websockets<17``: kept out of the test environment), made with every package
the two share at the test environment's version::

    python3.11 -m venv /work/venv-peers
    /work/venv/bin/pip freeze | grep -v -e '^-e' -e harnessnb -e '^websockets==' > /tmp/c.txt
    /work/venv-peers/bin/pip install -c /tmp/c.txt -e '.[bench]'
    PYTHONPATH=$PWD /work/venv-peers/bin/python bench/peers.py [--steps 500] [--rounds 3]

``--child NAME`` (internal) runs one side once and prints its figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as a script, this file's folder comes first on sys.path, where bench/mcp.py would
# shadow the MCP SDK the Agents SDK imports: drop the folder, load _report by its path.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]


def _load_report() -> Any:
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "bench" / "_report.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_report = _load_report()
load_line, ratio_line, ratios = _report.load_line, _report.ratio_line, _report.ratios

BASE = "harnessnb"
# Each side: the modules it needs (skipped with a note when one is missing).
NEEDS: dict[str, tuple[str, ...]] = {
    "harnessnb": ("harnessnb",),
    "langgraph": ("langgraph", "langgraph.checkpoint.sqlite"),
    "openai-agents": ("agents",),
    "pydantic-ai": ("pydantic_ai",),
}
PERSISTED = {
    "harnessnb": "DuckDB file, one commit a step",
    "langgraph": "SqliteSaver file, durability sync",
    "openai-agents": "SQLiteSession file",
    "pydantic-ai": "none (no persistence of its own)",
}
TASK = "Read a.txt, again and again."
CONTENT = "a small file\n" * 4


# ------------------------------------------------------------------- the figures


def fifths(gaps: list[float]) -> tuple[float, float]:
    """The median of the first fifth of the steps and of the last fifth."""
    if not gaps:
        raise ValueError("no steps were timed")
    fifth = max(1, len(gaps) // 5)
    return statistics.median(gaps[:fifth]), statistics.median(gaps[-fifth:])


class Script:
    """The scripted model's turns: a tool call for ``steps`` calls, then an answer;
    each call stamped with the wall clock and the process's CPU time (all threads)."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.stamps: list[float] = []
        self.cpu: list[float] = []

    def call(self) -> int | None:
        """Stamp this call; its step number while a tool is asked for, else None."""
        self.stamps.append(time.perf_counter())
        self.cpu.append(time.process_time())
        n = len(self.stamps)
        return n if n <= self.steps else None


def figures(script: Script, started: float, ended: float) -> dict[str, Any]:
    """One side's figures from the times of its model calls (a step: the gap between
    two calls), its whole loop and the process's peak RSS."""
    if len(script.stamps) != script.steps + 1:
        raise RuntimeError(f"expected {script.steps + 1} model calls, saw {len(script.stamps)}")
    gaps = [b - a for a, b in itertools.pairwise(script.stamps)]
    cpu = [b - a for a, b in itertools.pairwise(script.cpu)]
    first, last = fifths(gaps)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    if sys.platform == "darwin":  # bytes there
        peak //= 1024
    return {
        "step_ms": statistics.median(gaps) * 1000,
        "cpu_step_ms": statistics.median(cpu) * 1000,
        "first_fifth_ms": first * 1000,
        "last_fifth_ms": last * 1000,
        "loop_s": ended - started,
        "peak_rss_mb": peak / 1024,
    }


def read_small_file(folder: Path, path: str) -> str:
    """The peers' tool: a small file's text (harnessnb uses its built-in read_file)."""
    return (folder / path).read_text()


# ------------------------------------------------------------------- each side


def side_harnessnb(folder: Path, steps: int) -> dict[str, Any]:
    import harnessnb as hn

    script = Script(steps)

    def reply(messages: object) -> str | dict[str, object]:
        n = script.call()
        return "done" if n is None else {"tool": "read_file", "args": {"path": "a.txt"}}

    contract = hn.TaskContract(TASK, folder, max_steps=steps + 1, stall=hn.StallPolicy(window=0))
    store = hn.Store(folder.parent / "harnessnb.duckdb")

    async def loop() -> Any:
        return await hn.run(contract, hn.ScriptedProvider(reply), store=store)

    started = time.perf_counter()
    result = asyncio.run(loop())
    ended = time.perf_counter()
    store.close()
    if result.outcome is not hn.RunOutcome.FINISHED:
        raise RuntimeError(f"harnessnb's run ended {result.outcome}")
    return figures(script, started, ended)


def side_langgraph(folder: Path, steps: int) -> dict[str, Any]:
    import sqlite3

    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    script = Script(steps)

    @tool
    def read_file(path: str) -> str:
        """Read a text file of the workspace."""
        return read_small_file(folder, path)

    def model(state: MessagesState) -> dict[str, list[AIMessage]]:
        n = script.call()
        if n is None:
            return {"messages": [AIMessage(content="done")]}
        call = {"name": "read_file", "args": {"path": "a.txt"}, "id": f"call_{n}"}
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", ToolNode([read_file]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", tools_condition, ["tools", END])
    builder.add_edge("tools", "model")
    conn = sqlite3.connect(folder.parent / "langgraph.sqlite", check_same_thread=False)
    graph = builder.compile(checkpointer=SqliteSaver(conn))
    config: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": 2 * steps + 10}
    started = time.perf_counter()
    out = graph.invoke({"messages": [("user", TASK)]}, config, durability="sync")
    ended = time.perf_counter()
    conn.close()
    if out["messages"][-1].content != "done":
        raise RuntimeError("langgraph's loop did not end with the answer")
    return figures(script, started, ended)


def side_openai_agents(folder: Path, steps: int) -> dict[str, Any]:
    from agents import (
        Agent,
        ModelResponse,
        Runner,
        SQLiteSession,
        Usage,
        function_tool,
        set_tracing_disabled,
    )
    from agents.models.interface import Model
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    set_tracing_disabled(True)
    script = Script(steps)

    @function_tool
    def read_file(path: str) -> str:
        """Read a text file of the workspace."""
        return read_small_file(folder, path)

    class Scripted(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            n = script.call()
            item: Any
            if n is None:
                text = ResponseOutputText(type="output_text", text="done", annotations=[])
                item = ResponseOutputMessage(
                    id="msg_done",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[text],
                )
            else:
                item = ResponseFunctionToolCall(
                    id=f"fc_{n}",
                    call_id=f"call_{n}",
                    type="function_call",
                    name="read_file",
                    arguments=json.dumps({"path": "a.txt"}),
                )
            return ModelResponse(output=[item], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the bench does not stream")

    agent = Agent(name="bench", instructions="You read files.", model=Scripted(), tools=[read_file])
    session = SQLiteSession("bench", str(folder.parent / "agents.sqlite"))

    async def loop() -> Any:
        return await Runner.run(agent, TASK, session=session, max_turns=steps + 5)

    started = time.perf_counter()
    result = asyncio.run(loop())
    ended = time.perf_counter()
    session.close()
    if result.final_output != "done":
        raise RuntimeError("the Agents SDK's loop did not end with the answer")
    return figures(script, started, ended)


def side_pydantic_ai(folder: Path, steps: int) -> dict[str, Any]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import UsageLimits

    script = Script(steps)

    def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = script.call()
        if n is None:
            return ModelResponse(parts=[TextPart("done")])
        part = ToolCallPart("read_file", {"path": "a.txt"}, tool_call_id=f"call_{n}")
        return ModelResponse(parts=[part])

    agent = Agent(FunctionModel(scripted), instructions="You read files.")

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a text file of the workspace."""
        return read_small_file(folder, path)

    limits = UsageLimits(request_limit=None)

    async def loop() -> Any:
        return await agent.run(TASK, usage_limits=limits)

    started = time.perf_counter()
    result = asyncio.run(loop())
    ended = time.perf_counter()
    if result.output != "done":
        raise RuntimeError("pydantic-ai's loop did not end with the answer")
    return figures(script, started, ended)


SIDES: dict[str, Callable[[Path, int], dict[str, Any]]] = {
    "harnessnb": side_harnessnb,
    "langgraph": side_langgraph,
    "openai-agents": side_openai_agents,
    "pydantic-ai": side_pydantic_ai,
}


def child(name: str, steps: int) -> None:
    with tempfile.TemporaryDirectory(prefix=f"peers-{name}-") as tmp:
        folder = Path(tmp) / "ws"
        folder.mkdir()
        (folder / "a.txt").write_text(CONTENT)
        print(json.dumps(SIDES[name](folder, steps)))


# ------------------------------------------------------------------ the parent


def missing(name: str) -> list[str]:
    """The modules a side needs that are not installed here."""
    absent = []
    for module in NEEDS[name]:
        try:
            found = importlib.util.find_spec(module)
        except ModuleNotFoundError:  # its parent package is absent
            found = None
        if found is None:
            absent.append(module)
    return absent


def measure(name: str, steps: int) -> dict[str, Any]:
    """One side once, in a fresh interpreter."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, __file__, "--child", name, "--steps", str(steps)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def rotated(names: list[str], r: int) -> list[str]:
    """Round ``r``'s order: the list rotated by ``r``, so no side always goes first."""
    k = r % len(names)
    return names[k:] + names[:k]


def report(results: dict[str, list[dict[str, Any]]], steps: int) -> None:
    def med(name: str, key: str) -> float:
        return statistics.median(row[key] for row in results[name])

    rounds = len(results[BASE])
    print(f"\n{steps} steps a loop, medians over {rounds} rounds (fresh process each):")
    head = (
        f"{'side':<15}{'ms/step':>9}{'CPU ms':>8}{'first 1/5':>11}{'last 1/5':>10}"
        f"{'growth':>8}{'loop s':>8}{'peak RSS MB':>13}  persisted"
    )
    print(head)
    for name in results:
        first, last = med(name, "first_fifth_ms"), med(name, "last_fifth_ms")
        print(
            f"{name:<15}{med(name, 'step_ms'):>9.2f}{med(name, 'cpu_step_ms'):>8.2f}"
            f"{first:>11.2f}{last:>10.2f}{last / first:>7.2f}x{med(name, 'loop_s'):>8.2f}"
            f"{med(name, 'peak_rss_mb'):>13.0f}  {PERSISTED[name]}"
        )
    print("\n(ms/step and CPU ms: medians of the steps; growth: last fifth / first fifth)")
    for key, what in (
        ("step_ms", "per-step median"),
        ("cpu_step_ms", "per-step CPU median"),
        ("loop_s", "whole loop"),
    ):
        print(f"\n{what}, each round's peer over harnessnb (above 1: harnessnb is faster):")
        base = [row[key] for row in results[BASE]]
        for name in results:
            if name == BASE:
                continue
            per_round = ratios([row[key] for row in results[name]], base)
            if name == "pydantic-ai":  # no persistence: no lead to keep, shown for scale
                print(ratio_line(f"{name} / harnessnb (no persistence)", per_round))
            elif key == "step_ms":  # the lead to keep: a durable step, wall time
                print(ratio_line(f"{name} / harnessnb", per_round, 1.0, at_least=True))
            else:
                print(ratio_line(f"{name} / harnessnb", per_round))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="*", choices=list(SIDES), help="these sides only")
    parser.add_argument("--child", choices=list(SIDES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps)
        return
    print(load_line())
    names: list[str] = []
    for name in args.only or list(SIDES):
        absent = missing(name)
        if absent:
            print(
                f"{name}: skipped, not installed here ({', '.join(absent)} missing; "
                "pip install -e '.[bench]')"
            )
        else:
            names.append(name)
    if BASE not in names:
        names.insert(0, BASE)
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for r in range(args.rounds):
        for name in rotated(names, r):
            results[name].append(measure(name, args.steps))
            row = results[name][-1]
            print(f"round {r + 1} {name}: {row['step_ms']:.2f} ms/step", flush=True)
    report(results, args.steps)
    print(load_line())


if __name__ == "__main__":
    main()
