"""Harness overhead per step, and concurrent runs vs raw provider calls.

1. Per-step overhead: a scripted provider (no network) drives N steps of a cheap
   READ tool against a FILE store; median ms/step including the durable commit,
   judged against its floor: a bare DuckDB transaction (no harness) of the three
   one-row inserts a step makes (tool_calls, steps, attempts) and its COMMIT. The
   two are measured side by side, alternating over rounds, so machine load hits both
   alike. Target: per-step at most 1.5x the floor.
2. Throughput: 100 concurrent runs (1 step each, final answer) against the chaos
   server in one process vs 100 concurrent raw ``provider.complete`` calls on the
   same server carrying the same request (system prompt, task, tool specs); best of
   3 alternating rounds. Target: runs reach at least 0.65x the raw throughput.
3. With ``--otel`` (only this): a traced run against an untraced one, per step: runs
   of 20 read steps on a file store, whole runs timed (the export at the run's end
   included: its spans made from its rows and flushed), with an in-memory tracer
   provider (the SDK's ``InMemorySpanExporter`` behind a ``SimpleSpanProcessor``) and
   without, alternating over rounds. Target: at most 1.10x.

Run: python bench/loop.py [--otel]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harnessnb as hn
from harnessnb.chaos import ChaosServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import load_line, ratio_line, ratios


async def per_step(store: hn.Store, ws: Path, steps: int) -> list[float]:
    times: list[float] = []
    last = [time.perf_counter()]

    def reply(messages: object) -> dict[str, object]:
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now
        return {"tool": "list_dir", "args": {"path": "."}}

    contract = hn.TaskContract("bench", ws, max_steps=steps, stall=hn.StallPolicy(window=0))
    await hn.run(contract, hn.ScriptedProvider(reply), store=store)
    return times[1:]  # the first gap includes run creation


def floor_statements(path: Path) -> tuple[Any, Callable[[int], None]]:
    """A DuckDB connection to ``path`` (made a store with the store's schema) and a
    function committing one step's rows there straight on DuckDB: BEGIN, one row each
    into tool_calls, steps and attempts, COMMIT. What a step costs without harnessnb."""
    import datetime as dt
    import json

    import duckdb

    from harnessnb.store._schema import COLUMNS, MIGRATIONS, quote

    fresh = not path.exists()
    con = duckdb.connect(str(path))
    con.execute("SET threads = 1")
    if fresh:
        for version in sorted(MIGRATIONS):
            for statement in MIGRATIONS[version]:
                con.execute(statement)
    base = con.execute("SELECT count(*) FROM steps").fetchone()[0]  # type: ignore[index]
    now = dt.datetime(2026, 1, 1)
    checkpoint = json.dumps({"messages_delta": [{"role": "tool", "content": "a.txt"}] * 4})
    rows = {
        "tool_calls": ["r", 0, 0, "list_dir", "read", '{"path": "."}', None, "ok", None, None,
                       5, now, "a.txt", None],
        "steps": ["r", 0, "tool_calls", 1, 15, False, "scripted", now, checkpoint],
        "attempts": ["r", 0, 0, "scripted", "scripted", None, None, None, 0.1, None, 10, 5,
                     None, False, None, now, None, None],
    }  # fmt: skip
    # Columns added later (and not set by a list_dir step) stay NULL, as in a real step.
    rows = {t: values + [None] * (len(COLUMNS[t]) - len(values)) for t, values in rows.items()}
    inserts = {}
    for t in rows:
        names = ", ".join(quote(c) for c in COLUMNS[t])
        inserts[t] = f"INSERT INTO {t} ({names}) VALUES ({','.join('?' * len(COLUMNS[t]))})"

    def transaction(n: int) -> None:
        con.execute("BEGIN TRANSACTION")
        for table, values in rows.items():
            con.execute(inserts[table], [values[0], base + n, *values[2:]])
        con.execute("COMMIT")

    return con, transaction


def commit_floor(path: Path, n: int = 500) -> list[float]:
    """Seconds of each of ``n`` bare transactions of a step's rows (``floor_statements``)."""
    con, transaction = floor_statements(path)
    times = []
    for step in range(n):
        t0 = time.perf_counter()
        transaction(step)
        times.append(time.perf_counter() - t0)
    con.close()
    return times


async def throughput(
    srv: ChaosServer, store: hn.Store, ws: Path, n: int, rounds: int = 3
) -> tuple[float, float]:
    """Best-of-rounds calls/s: ``n`` raw ``complete()`` calls carrying the very request a
    one-step run sends (system prompt, task, the built-in tool specs), then ``n``
    one-step runs; the two alternate so machine noise hits both alike."""
    from harnessnb.loop._conversation import initial_messages
    from harnessnb.tools._builtin import builtin_tools

    provider = hn.OpenAI("bench", base_url=srv.openai_url)
    contract = hn.TaskContract("say hi", ws, max_steps=1)
    messages = initial_messages(contract)
    specs = [t.spec() for t in builtin_tools()]
    await provider.complete(messages, tools=specs)  # warm the connection pool
    raw_best = runs_best = 0.0
    for _ in range(rounds):
        t0 = time.perf_counter()
        await asyncio.gather(*(provider.complete(messages, tools=specs) for _ in range(n)))
        raw_best = max(raw_best, n / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        results = await asyncio.gather(*(hn.run(contract, provider, store=store) for _ in range(n)))
        runs_best = max(runs_best, n / (time.perf_counter() - t0))
        assert all(r.outcome is hn.RunOutcome.FINISHED for r in results), results[:3]
    return raw_best, runs_best


async def run_per_step(
    store: hn.Store, ws: Path, steps: int, tracer_provider: Any
) -> tuple[float, float]:
    """Wall and process-CPU seconds per step of one whole run of ``steps`` read steps
    (its end included: with a provider, its export and flush)."""

    def reply(messages: object) -> dict[str, object]:
        return {"tool": "list_dir", "args": {"path": "."}}

    contract = hn.TaskContract("bench", ws, max_steps=steps, stall=hn.StallPolicy(window=0))
    t0, c0 = time.perf_counter(), time.process_time()
    result = await hn.run(
        contract, hn.ScriptedProvider(reply), store=store, tracer_provider=tracer_provider
    )
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert result.steps == steps, result
    return took / steps, cpu / steps


async def otel(rounds: int = 21, steps: int = 20) -> None:
    """Traced vs untraced runs, per step (``--otel``): wall and CPU, each round's
    ratio; the target judged on the wall ratios' median."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    print(load_line())
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        (ws / "a.txt").write_text("a\n")
        store = hn.Store(Path(tmp) / "runs.duckdb")
        await run_per_step(store, ws, steps, provider)  # warm both paths up
        await run_per_step(store, ws, steps, None)
        traced: list[tuple[float, float]] = []
        plain: list[tuple[float, float]] = []
        for n in range(rounds):  # alternating, each side first in turn: the same load
            pair = [provider, None] if n % 2 == 0 else [None, provider]
            for given in pair:
                measured = await run_per_step(store, ws, steps, given)
                (traced if given is provider else plain).append(measured)
            exporter.clear()
        store.close()
    wall = ratios([t[0] for t in traced], [p[0] for p in plain])
    cpu = ratios([t[1] for t in traced], [p[1] for p in plain])
    with_ms = statistics.median(t[0] for t in traced) * 1000
    without_ms = statistics.median(p[0] for p in plain) * 1000
    print(f"per step, runs of {steps} steps, {rounds} rounds each side:")
    print(f"  traced (in-memory provider) {with_ms:.2f} ms, untraced {without_ms:.2f} ms (medians)")
    print("  " + ratio_line("cpu  traced/untraced", cpu))
    print("  " + ratio_line("wall traced/untraced", wall, 1.10))
    print(load_line())


async def main() -> None:
    if "--otel" in sys.argv[1:]:
        await otel()
        return
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        (ws / "a.txt").write_text("a\n")
        store = hn.Store(Path(tmp) / "runs.duckdb")
        times: list[float] = []
        floors: list[float] = []
        rounds: list[float] = []  # each round's own ratio: how far the machine's noise goes
        for _ in range(5):  # alternating rounds: the same load on both
            step = await per_step(store, ws, 100)
            bare = commit_floor(Path(tmp) / "floor.duckdb", 100)
            rounds.append(statistics.median(step) / statistics.median(bare))
            times += step
            floors += bare
        med = statistics.median(times) * 1000
        p99 = sorted(times)[int(len(times) * 0.99)] * 1000
        floor = statistics.median(floors) * 1000
        over = med / floor
        print(f"per-step overhead (scripted, file store): median {med:.2f} ms, p99 {p99:.2f} ms")
        print(f"  floor: bare DuckDB BEGIN + 3 one-row inserts + COMMIT, median {floor:.2f} ms")
        print(f"  ratio {over:.2f}x the floor  target <= 1.5x  {'OK' if over <= 1.5 else 'MISS'}")
        print(f"  the 5 rounds' own ratios: {min(rounds):.2f}x to {max(rounds):.2f}x")
        with ChaosServer() as srv:
            raw, runs = await throughput(srv, store, ws, 100)
        ratio = runs / raw
        print(
            f"100 concurrent: raw complete() {raw:.0f}/s, runs {runs:.0f}/s, "
            f"ratio {ratio:.2f}x  target >= 0.65x  {'OK' if ratio >= 0.65 else 'MISS'}"
        )
        store.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
