"""Harness overhead per step, and concurrent runs vs raw provider calls.

1. Per-step overhead: a scripted provider (no network) drives N steps of a cheap
   READ tool against a FILE store; median ms/step including the durable commit,
   judged against its floor: a bare DuckDB transaction (no harness) of the three
   one-row inserts a step makes (tool_calls, steps, attempts) and its COMMIT. The
   two are measured side by side, alternating over rounds, so machine load hits both
   alike. Target: per-step at most 1.5x the floor.
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
    process's CPU and the main thread's (the rest is other threads: the store's writer)."""

    def __init__(self) -> None:
        self.rate: list[float] = []
        self.cpu_ms: list[float] = []
        self.main_ms: list[float] = []


async def throughput(
    store: hn.Store, ws: Path, n: int = 100, rounds: int = 5, batches: int = 2
) -> dict[str, Sides]:
    """Each round's figures of three sides against the chaos server in its own process:
    ``raw``, ``n`` concurrent raw httpx2 calls sending the very streamed request a
    one-step run sends (system prompt, task, the built-in tool specs, ``stream`` with
    usage) and reading its SSE minimally (``raw_streamed``); ``complete``, harnessnb's
    ``provider.complete`` of the same request (the run's call without the run); ``runs``,
    ``n`` concurrent one-step runs (streamed, as runs are by default; their rows in the
    file store). Each round times ``batches`` batches of each side, in rotated order."""
    import httpx2

    from harnessnb.loop._conversation import initial_messages
    from harnessnb.tools._builtin import builtin_tools

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

        sides = {"raw": raw, "complete": complete, "runs": runs}
        for side in sides.values():  # warm each: connections, imports, the server
            await side()
        figures = {name: Sides() for name in sides}
        names = list(sides)
        for r in range(rounds):
            took = dict.fromkeys(names, 0.0)
            cpu = dict.fromkeys(names, 0.0)
            main = dict.fromkeys(names, 0.0)
            for b in range(batches):
                turn = (r * batches + b) % len(names)
                for name in names[turn:] + names[:turn]:
                    t0, c0, m0 = time.perf_counter(), time.process_time(), time.thread_time()
                    await sides[name]()
                    took[name] += time.perf_counter() - t0
                    cpu[name] += time.process_time() - c0
                    main[name] += time.thread_time() - m0
            for name in names:
                figures[name].rate.append(n * batches / took[name])
                figures[name].cpu_ms.append(cpu[name] / (n * batches) * 1000)
                figures[name].main_ms.append(main[name] / (n * batches) * 1000)
        await client.aclose()
        return figures
    finally:
        proc.terminate()
        proc.wait(timeout=5)


async def concurrent_runs(store: hn.Store, ws: Path, n: int = 100, rounds: int = 5) -> None:
    """Part 2, printed: each side's calls/s and CPU per call, and each round's ratio of
    runs to raw throughput (target >= 0.70x), with where the runs' extra CPU goes."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import load_line, ratio_line, ratios

    print(load_line())
    fig = await throughput(store, ws, n, rounds)
    med = statistics.median
    print(f"{n} concurrent one-step runs (streamed), the chaos server in its own process:")
    for name, label in (
        ("raw", "raw httpx2 streamed  "),
        ("complete", "harnessnb complete() "),
        ("runs", "one-step runs        "),
    ):
        f = fig[name]
        print(
            f"  {label} {med(f.rate):6.0f}/s  CPU per call {med(f.cpu_ms):.2f} ms "
            f"(main thread {med(f.main_ms):.2f}, other threads "
            f"{med(f.cpu_ms) - med(f.main_ms):.2f})"
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


async def run_per_step(store: hn.Store, ws: Path, steps: int, tracer_provider: Any) -> float:
    """Seconds per step of one whole run of ``steps`` read steps (its end included)."""

    def reply(messages: object) -> dict[str, object]:
        return {"tool": "list_dir", "args": {"path": "."}}

    contract = hn.TaskContract("bench", ws, max_steps=steps, stall=hn.StallPolicy(window=0))
    t0 = time.perf_counter()
    result = await hn.run(
        contract, hn.ScriptedProvider(reply), store=store, tracer_provider=tracer_provider
    )
    took = time.perf_counter() - t0
    assert result.steps == steps, result
    return took / steps


async def otel(rounds: int = 15, steps: int = 20) -> None:
    """Traced vs untraced runs, per step (``--otel``)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

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
        traced: list[float] = []
        plain: list[float] = []
        for _ in range(rounds):  # alternating: the same load on both
            traced.append(await run_per_step(store, ws, steps, provider))
            plain.append(await run_per_step(store, ws, steps, None))
        store.close()
    spans = len(exporter.get_finished_spans())
    with_ms, without_ms = statistics.median(traced) * 1000, statistics.median(plain) * 1000
    ratio = with_ms / without_ms
    print(f"per step, runs of {steps} steps, {rounds} rounds each ({spans} spans exported):")
    print(f"  traced (in-memory provider) {with_ms:.2f} ms, untraced {without_ms:.2f} ms")
    print(f"  ratio {ratio:.2f}x  target <= 1.10x  {'OK' if ratio <= 1.10 else 'MISS'}")


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
        await concurrent_runs(store, ws)
        store.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
