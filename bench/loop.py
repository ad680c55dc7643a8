"""Harness overhead per step, and concurrent runs vs raw provider calls.

1. Per-step overhead: a scripted provider (no network) drives N steps of a cheap
   READ tool against a FILE store; median ms/step, the run's own Python work and the
   durable commit included, judged against a bare one-row DuckDB transaction on a
   file (no harness): BEGIN, one 10-column INSERT (a step-like row with its primary
   key), COMMIT. The two are measured side by side, alternating over rounds, so
   machine load hits both alike; each round's ratio is printed as min/median/max.
   Target: a step at most 2.4x the bare transaction (the median round).
2. Throughput: 100 concurrent runs (1 step each, final answer, streamed) against the
   chaos server in its own process vs 100 concurrent raw httpx2 calls sending the same
   streamed request (system prompt, task, tool specs) and parsing its SSE minimally;
   alternating rounds, each round's ratio. Target: runs reach at least 0.70x the raw
   throughput (the median round).
3. With ``--otel`` (only this): a traced run against an untraced one, per step: runs
   of 20 read steps on a file store, whole runs timed (the export at the run's end
   included: its spans made from its rows and flushed), with an in-memory tracer
   provider (the SDK's ``InMemorySpanExporter`` behind a ``SimpleSpanProcessor``) and
   without, alternating over rounds. Target: at most 1.10x.

4. With ``--layouts`` (only this): a step's record laid out in three, two and one
   statements straight on DuckDB, each against the bare one-row transaction: why a
   step costs what it does (DuckDB's per-statement cost), and what a one-statement
   layout would save.

Run: python bench/loop.py [--step | --runs | --otel | --layouts] [--rounds N]  (``--step``:
part 1 only, ``--runs``: part 2 only, ``--rounds``: part 2's rounds, 5 by default; part 2
also prints each side's cyclic GC time per call and a run's CPU beyond its model call)
"""

from __future__ import annotations

import asyncio
import gc
import runpy
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import harnessnb as hn

# bench/_report.py by its path: putting this folder on sys.path would let bench/mcp.py
# shadow the MCP SDK for whatever imports it later in the same process.
_report = runpy.run_path(str(Path(__file__).resolve().with_name("_report.py")))
load_line = _report["load_line"]
ratio_line = _report["ratio_line"]
ratios = _report["ratios"]


async def per_step(store: hn.Store, ws: Path, steps: int) -> list[float]:
    times: list[float] = []
    last = [time.perf_counter()]

    def reply(messages: object) -> dict[str, object]:
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now
        return {"tool": "list_dir", "args": {"path": "."}}

    contract = hn.TaskContract("bench", ws, max_steps=steps, stall=hn.StallPolicy(window=0))
    result = await hn.run(contract, hn.ScriptedProvider(reply), store=store)
    # A read moves the steps still journaled into their tables (schema 14): their cost
    # is the step's too, so it is timed, as the last step's share, and it keeps the
    # writer from settling them later, inside the bare transactions' round.
    t0 = time.perf_counter()
    store.get_run(result.run_id)
    times.append(time.perf_counter() - t0)
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


def bare_transaction(path: Path) -> tuple[Any, Callable[[int], None]]:
    """A DuckDB connection to ``path`` and a function committing one bare one-row
    transaction there: BEGIN, one 10-column INSERT (a step-like row: key, step number,
    text, numbers, a flag, a time, a checkpoint-sized JSON text), COMMIT."""
    import datetime as dt
    import json

    import duckdb

    con = duckdb.connect(str(path))
    con.execute("SET threads = 1")
    con.execute(
        "CREATE TABLE IF NOT EXISTS bare (run_id VARCHAR NOT NULL, step INTEGER NOT NULL, "
        "decision VARCHAR, tool_calls INTEGER, tokens INTEGER, changed BOOLEAN, "
        'provider VARCHAR, "at" TIMESTAMP, checkpoint VARCHAR, note VARCHAR, '
        "PRIMARY KEY (run_id, step))"
    )
    base = con.execute("SELECT count(*) FROM bare").fetchone()[0]  # type: ignore[index]
    now = dt.datetime(2026, 1, 1)
    checkpoint = json.dumps({"messages_delta": [{"role": "tool", "content": "a.txt"}] * 4})
    insert = "INSERT INTO bare VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

    def transaction(n: int) -> None:
        con.execute("BEGIN TRANSACTION")
        con.execute(insert, ["r", base + n, "tool_calls", 1, 15, False, "s", now, checkpoint, None])
        con.execute("COMMIT")

    return con, transaction


def bare_floor(path: Path, n: int = 100) -> list[float]:
    """Seconds of each of ``n`` bare one-row transactions (``bare_transaction``)."""
    con, transaction = bare_transaction(path)
    times = []
    for step in range(n):
        t0 = time.perf_counter()
        transaction(step)
        times.append(time.perf_counter() - t0)
    con.close()
    return times


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


def layouts(path: Path, rounds: int = 7, n: int = 60) -> None:
    """``--layouts``: what a step's durable record costs laid out in fewer statements,
    straight on DuckDB (no harness), each against the bare one-row transaction, round
    by round: today's three inserts (attempts, tool_calls, steps), two (the tool calls
    carried by the step row as JSON text), one (tool calls and attempts as JSON text in
    the step row), one with them as LIST(STRUCT) columns (bound from Python dicts)."""
    import datetime as dt
    import json

    import duckdb

    con = duckdb.connect(str(path))
    con.execute("SET threads = 1")
    now = dt.datetime(2026, 1, 1)
    step = "run_id VARCHAR, step INTEGER, decision VARCHAR, n INTEGER, tokens INTEGER, " \
        'changed BOOLEAN, provider VARCHAR, "at" TIMESTAMP, checkpoint VARCHAR'  # fmt: skip
    call = "seq INTEGER, tool VARCHAR, effect VARCHAR, args VARCHAR, status VARCHAR, " \
        'output_bytes BIGINT, "at" TIMESTAMP, output VARCHAR'  # fmt: skip
    tried = (
        "attempt INTEGER, provider VARCHAR, model VARCHAR, status INTEGER, "
        'latency_ms DOUBLE, input_tokens INTEGER, output_tokens INTEGER, "at" TIMESTAMP'
    )
    con.execute(f"CREATE TABLE s3 ({step}, PRIMARY KEY (run_id, step))")
    con.execute(f"CREATE TABLE c3 (run_id VARCHAR, step INTEGER, {call}, "
                "PRIMARY KEY (run_id, step, seq))")  # fmt: skip
    con.execute(f"CREATE TABLE a3 (run_id VARCHAR, step INTEGER, {tried})")
    con.execute(f"CREATE TABLE s2 ({step}, calls VARCHAR, PRIMARY KEY (run_id, step))")
    con.execute(f"CREATE TABLE a2 (run_id VARCHAR, step INTEGER, {tried})")
    con.execute(f"CREATE TABLE s1 ({step}, calls VARCHAR, tries VARCHAR, "
                "PRIMARY KEY (run_id, step))")  # fmt: skip
    con.execute(f"CREATE TABLE sn ({step}, calls STRUCT({call})[], tries STRUCT({tried})[], "
                "PRIMARY KEY (run_id, step))")  # fmt: skip
    checkpoint = json.dumps({"messages_delta": [{"role": "tool", "content": "a.txt"}] * 4})
    head = ["tool_calls", 1, 15, False, "scripted", now, checkpoint]
    c = {"seq": 0, "tool": "list_dir", "effect": "read", "args": '{"path": "."}',
         "status": "ok", "output_bytes": 5, "at": now, "output": "a.txt"}  # fmt: skip
    a = {"attempt": 0, "provider": "scripted", "model": "m", "status": 200,
         "latency_ms": 0.1, "input_tokens": 10, "output_tokens": 5, "at": now}  # fmt: skip

    def three(i: int) -> None:
        con.execute("INSERT INTO a3 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", ["r", i, *a.values()])
        con.execute("INSERT INTO c3 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", ["r", i, *c.values()])
        con.execute("INSERT INTO s3 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", ["r", i, *head])

    def two(i: int) -> None:
        con.execute("INSERT INTO a2 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", ["r", i, *a.values()])
        calls = json.dumps([c], default=str)
        con.execute("INSERT INTO s2 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", ["r", i, *head, calls])

    def one(i: int) -> None:
        calls, tries = json.dumps([c], default=str), json.dumps([a], default=str)
        con.execute("INSERT INTO s1 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    ["r", i, *head, calls, tries])  # fmt: skip

    def nested(i: int) -> None:
        con.execute("INSERT INTO sn VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    ["r", i, *head, [c], [a]])  # fmt: skip

    _, bare = bare_transaction(path.with_name("layouts-bare.duckdb"))
    ways: dict[str, Callable[[int], None]] = {
        "three statements (today)": three, "two (tool calls as JSON in the step row)": two,
        "one (tool calls, attempts as JSON)": one, "one (as LIST(STRUCT) columns)": nested,
    }  # fmt: skip
    per_round: dict[str, list[float]] = {name: [] for name in ways}
    done = 0
    for _ in range(rounds):
        bare_times, times = [], {name: [] for name in ways}
        for i in range(n):
            t0 = time.perf_counter()
            bare(done + i)
            bare_times.append(time.perf_counter() - t0)
            for name, write in ways.items():
                t0 = time.perf_counter()
                con.execute("BEGIN TRANSACTION")
                write(done + i)
                con.execute("COMMIT")
                times[name].append(time.perf_counter() - t0)
        done += n
        for name in ways:
            per_round[name].append(statistics.median(times[name]) / statistics.median(bare_times))
    print(f"a step's record laid out, against the bare one-row transaction ({n} each a round):")
    for name, values in per_round.items():
        print("  " + ratio_line(name, values))
    con.close()


def chaos_process() -> tuple[Any, str]:
    """The chaos server in a process of its own (as bench/providers.py runs it), so its
    CPU does not share this process's GIL: the figures are the clients'. Its URL."""
    import os
    import subprocess

    root = Path(__file__).resolve().parent.parent
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "harnessnb.chaos", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http://"):
        proc.kill()
        raise SystemExit("chaos server did not start")
    return proc, url


async def raw_streamed(client: Any, url: str, body: dict[str, Any]) -> str:
    """One streamed chat completion read the least a client can: lines iterated, each
    ``data:`` line JSON-loaded until ``[DONE]``, the content deltas and tool-call
    fragments accumulated; the body read to its end so the connection is pooled again."""
    import json

    text: list[str] = []
    calls: dict[int, list[str]] = {}
    done = False
    async with client.stream("POST", url, json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if done or not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                continue
            for choice in json.loads(data).get("choices") or ():
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    text.append(delta["content"])
                for frag in delta.get("tool_calls") or ():
                    call = calls.setdefault(frag.get("index", 0), ["", ""])
                    fn = frag.get("function") or {}
                    call[0] += fn.get("name") or ""
                    call[1] += fn.get("arguments") or ""
    assert done, "stream ended before [DONE]"
    return "".join(text)


class Sides:
    """Each side's figures per round: calls (or runs) per second, and per call the
    process's CPU, the main thread's (the rest is other threads: the store's writer) and
    the cyclic GC's CPU (whichever thread it ran in: part of the process's)."""

    def __init__(self) -> None:
        self.rate: list[float] = []
        self.cpu_ms: list[float] = []
        self.main_ms: list[float] = []
        self.gc_ms: list[float] = []


class GCTime:
    """CPU seconds the cyclic garbage collector has taken since installed (``gc.callbacks``;
    the CPU of the thread it ran in, from its start to its stop: no other thread's)."""

    def __init__(self) -> None:
        self.total = 0.0
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.thread_time()
        else:
            self.total += time.thread_time() - self._began


async def throughput(
    store: hn.Store, ws: Path, n: int = 100, rounds: int = 5, batches: int = 2
) -> dict[str, Sides]:
    """Each round's figures of three sides against the chaos server in its own process:
    ``raw``, ``n`` concurrent raw httpx2 calls sending the very streamed request a
    one-step run sends (system prompt, task, the built-in tool specs, ``stream`` with
    usage) and reading its SSE minimally (``raw_streamed``); ``complete``, harnessnb's
    ``provider.complete`` of the same request (the run's call without the run); ``runs``,
    ``n`` concurrent one-step runs (streamed, as runs are by default; their rows in the
    file store); ``scripted``, the same runs answered by a scripted model (no HTTP: the
    run's own cost). Each round times ``batches`` batches of each side, in rotated order."""
    import httpx2

    from harnessnb.loop._conversation import initial_messages
    from harnessnb.tools._builtin import builtin_tools

    collected = GCTime()
    proc, url = chaos_process()
    try:
        provider = hn.OpenAI("bench", base_url=url + "/v1")
        contract = hn.TaskContract("say hi", ws, max_steps=1)
        messages = initial_messages(contract)
        specs = [t.spec() for t in builtin_tools()]
        body = provider._request_body(messages, specs, None, True)
        # A plain httpx2 client configured as harnessnb's is (no redirects, only connect
        # bounded, the same pool limits); harnessnb's own also polls idle connections'
        # sockets itself (providers/_client.py), which raw httpx2 does not.
        client = httpx2.AsyncClient(
            follow_redirects=False,
            timeout=httpx2.Timeout(None, connect=10.0),
            limits=httpx2.Limits(max_connections=1000, max_keepalive_connections=100),
        )
        target = url + "/v1/chat/completions"

        async def raw() -> None:
            said = await asyncio.gather(*(raw_streamed(client, target, body) for _ in range(n)))
            assert all(said), said[:3]

        async def complete() -> None:
            done = await asyncio.gather(
                *(provider.complete(messages, tools=specs) for _ in range(n))
            )
            assert all(c.text for c in done), done[:3]

        async def runs() -> None:
            results = await asyncio.gather(
                *(hn.run(contract, provider, store=store) for _ in range(n))
            )
            assert all(r.outcome is hn.RunOutcome.FINISHED for r in results), results[:3]

        async def scripted() -> None:  # the same runs without HTTP: a run's own cost
            answer = hn.ScriptedProvider(lambda messages: "hi")
            results = await asyncio.gather(
                *(hn.run(contract, answer, store=store) for _ in range(n))
            )
            assert all(r.outcome is hn.RunOutcome.FINISHED for r in results), results[:3]

        sides = {"raw": raw, "complete": complete, "runs": runs, "scripted": scripted}
        for side in sides.values():  # warm each: connections, imports, the server
            await side()
        figures = {name: Sides() for name in sides}
        names = list(sides)
        gc.callbacks.append(collected)
        for r in range(rounds):
            took = dict.fromkeys(names, 0.0)
            cpu = dict.fromkeys(names, 0.0)
            main = dict.fromkeys(names, 0.0)
            gcs = dict.fromkeys(names, 0.0)
            for b in range(batches):
                turn = (r * batches + b) % len(names)
                for name in names[turn:] + names[:turn]:
                    t0, c0, m0 = time.perf_counter(), time.process_time(), time.thread_time()
                    g0 = collected.total
                    await sides[name]()
                    took[name] += time.perf_counter() - t0
                    cpu[name] += time.process_time() - c0
                    main[name] += time.thread_time() - m0
                    gcs[name] += collected.total - g0
            for name in names:
                per_call_ms = 1000 / (n * batches)
                figures[name].rate.append(n * batches / took[name])
                figures[name].cpu_ms.append(cpu[name] * per_call_ms)
                figures[name].main_ms.append(main[name] * per_call_ms)
                figures[name].gc_ms.append(gcs[name] * per_call_ms)
        await client.aclose()
        return figures
    finally:
        if collected in gc.callbacks:
            gc.callbacks.remove(collected)
        proc.terminate()
        proc.wait(timeout=5)


async def concurrent_runs(store: hn.Store, ws: Path, n: int = 100, rounds: int = 5) -> None:
    """Part 2, printed: each side's calls/s and CPU per call (the cyclic GC's share),
    each round's ratio of runs to raw throughput (target >= 0.70x), and where a run's
    CPU beyond its model call goes. ``--rounds N`` sets the rounds (5)."""
    print(load_line())
    fig = await throughput(store, ws, n, rounds)
    med = statistics.median
    print(f"{n} concurrent one-step runs (streamed), the chaos server in its own process:")
    for name, label in (
        ("raw", "raw httpx2 streamed  "),
        ("complete", "harnessnb complete() "),
        ("runs", "one-step runs        "),
        ("scripted", "runs, scripted model "),
    ):
        f = fig[name]
        print(
            f"  {label} {med(f.rate):6.0f}/s  CPU per call {med(f.cpu_ms):.2f} ms "
            f"(main thread {med(f.main_ms):.2f}, other threads "
            f"{med(f.cpu_ms) - med(f.main_ms):.2f}; cyclic GC {med(f.gc_ms):.2f} of it)"
        )
    runs, call = fig["runs"], fig["complete"]
    print(
        "  a run's CPU beyond its complete() call (medians, ms): main thread "
        f"{med(runs.main_ms) - med(call.main_ms):.2f}, other threads "
        f"{med(runs.cpu_ms) - med(runs.main_ms) - med(call.cpu_ms) + med(call.main_ms):.2f}, "
        f"cyclic GC {med(runs.gc_ms) - med(call.gc_ms):.2f} (in those)"
    )
    print(
        ratio_line(
            "  runs / raw streamed throughput",
            ratios(fig["runs"].rate, fig["raw"].rate),
            0.70,
            at_least=True,
        )
    )
    print(
        ratio_line(
            "  complete() / raw streamed throughput", ratios(fig["complete"].rate, fig["raw"].rate)
        )
    )
    print(
        ratio_line(
            "  runs / raw streamed CPU per call", ratios(fig["runs"].cpu_ms, fig["raw"].cpu_ms)
        )
    )
    print(load_line())


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


def part2_rounds() -> int:
    """``--rounds N``: part 2's rounds (5 unless given; more where the load is high)."""
    args = sys.argv[1:]
    if "--rounds" not in args:
        return 5
    at = args.index("--rounds") + 1
    if at >= len(args) or not args[at].isdigit() or int(args[at]) < 1:
        raise SystemExit("--rounds takes a whole number of rounds, at least 1")
    return int(args[at])


async def main() -> None:
    if "--otel" in sys.argv[1:]:
        await otel()
        return
    print(load_line())
    if "--layouts" in sys.argv[1:]:
        with tempfile.TemporaryDirectory() as tmp:
            layouts(Path(tmp) / "layouts.duckdb")
        print(load_line())
        return
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        (ws / "a.txt").write_text("a\n")
        store = hn.Store(Path(tmp) / "runs.duckdb")
        if "--runs" in sys.argv[1:]:  # --runs: part 2 only
            await concurrent_runs(store, ws, rounds=part2_rounds())
            store.close()
            print(load_line())
            return
        await per_step(store, ws, 20)  # warm up: imports, the file, the writer thread
        bare_floor(Path(tmp) / "bare.duckdb", 20)
        times: list[float] = []
        bares: list[float] = []
        rounds: list[float] = []  # each round's own ratio: how far the machine's noise goes
        means: list[float] = []  # the same with means: a step's share of every settle
        for _ in range(7):  # alternating rounds: the same load on both
            step = await per_step(store, ws, 100)
            bare = bare_floor(Path(tmp) / "bare.duckdb", 100)
            rounds.append(statistics.median(step) / statistics.median(bare))
            means.append(statistics.fmean(step) / statistics.fmean(bare))
            times += step
            bares += bare
        med = statistics.median(times) * 1000
        p99 = sorted(times)[int(len(times) * 0.99)] * 1000
        floor = statistics.median(bares) * 1000
        print(f"per step (scripted, one READ tool call, file store): median {med:.2f} ms, "
              f"p99 {p99:.2f} ms")  # fmt: skip
        print(f"bare one-row DuckDB transaction (BEGIN, 10-column INSERT, COMMIT): {floor:.2f} ms")
        print(ratio_line("step / bare transaction", rounds, 2.4))
        print(ratio_line("step / bare transaction (means, settles included)", means))
        if "--step" not in sys.argv[1:]:  # --step: part 1 only
            await concurrent_runs(store, ws, rounds=part2_rounds())
        store.close()
    print(load_line())


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
