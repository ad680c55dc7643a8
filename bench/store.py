"""Benchmark the DuckDB store: step commits, bulk appends, failure_rates vs pandas/SQLite
and against the same SQL in bare DuckDB, and many processes on one file.

Run: ``python bench/store.py`` (from the repository root); ``python bench/store.py
processes`` runs only the many-processes part, ``python bench/store.py failure_rates
[--rounds N]`` only the failure_rates parts. Prints one table; the numbers in
bench/RESULTS-store.md and BENCHMARKS.md come from this script.

failure_rates at the SQL floor (#31), over 1M attempts, the two sides measured
alternately round by round (their order swapped each round), each round's ratio
reported (min/median/max over rounds, judged on the median):

- warm: ``store.failure_rates()`` on a store whose connection is open, against the
  same query text (``failure_sql``, the one the store runs) on a bare ``duckdb``
  connection to a byte-for-byte copy of the file, held open, with ``.df()`` at the
  end: target <= 1.15x.
- after the linger: the store idle past its ``linger_s`` (its connection closed,
  checked), so ``failure_rates`` takes its turn and reopens the file; against a bare
  ``duckdb.connect(copy)``, the same query and ``.df()``, and ``close()``, after the
  same idle wait: target <= 1.5x.

Many processes: 8 writer processes, each driving 10 runs through ``hn.run_sync`` (two
read-tool steps and an answer, a scripted provider), and 2 reader processes
(``runs``, ``steps``, ``failure_rates`` in a loop) on one store file, while a ninth
process keeps a core busy. Reported: runs lost (not in the store with an outcome, must
be 0), errors (exceptions in any process, must be 0), leases left unreleased, and the
p50/p99/max wait for the file (each open's wait for its turn, over every process).
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import duckdb
import pandas as pd

from bench._report import load_line, ratio_line, ratios
from harnessnb.store._failures import failure_sql
from harnessnb.store._store import Store
from harnessnb.store._writer import store_writer

KINDS = [None] * 8 + ["server", "rate_limited", "timeout", "transport"]
PROVIDERS = ["openai", "anthropic", "openrouter", "local"]


def attempt(step: int, n: int, at: float, rng: random.Random) -> dict[str, Any]:
    """One attempt row shaped like the loop writes it."""
    kind = rng.choice(KINDS)
    return {
        "step": step,
        "attempt": n,
        "provider": rng.choice(PROVIDERS),
        "model": "m-1",
        "kind": kind,
        "status": 200 if kind is None else 503,
        "retry_after_s": rng.choice([None, 1.0, 2.5, 30.0]) if kind else None,
        "latency_ms": rng.uniform(50, 3000),
        "ttft_ms": rng.uniform(10, 500),
        "input_tokens": 1200,
        "output_tokens": 80,
        "request_id": f"req-{step}-{n}",
        "fell_back": False,
        "error": None if kind is None else "HTTP 503",
        "started_at": at,
    }


def step_args(step: int, rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    """(step row, keyword arguments) for one commit: 3 attempts, 2 tool calls."""
    at = time.time()
    row = {
        "step": step, "decision": "tool", "tool_calls": 2, "tokens": 1280,
        "changed_workspace": True, "provider": "openai", "at": at,
    }  # fmt: skip
    tools = [
        {"step": step, "seq": k, "tool": "read_file", "effect": "read",
         "args": {"path": f"f{k}.txt"}, "status": "ok", "output_bytes": 120, "at": at}
        for k in range(2)
    ]  # fmt: skip
    kwargs = {
        "attempts": [attempt(step, n, at, rng) for n in range(3)],
        "tool_calls": tools,
        "stalls": [],
        "checkpoint": {"messages": [{"role": "user", "content": "x" * 200}], "tokens": step},
    }
    return row, kwargs


def timed(fn: Callable[[], None], n: int) -> list[float]:
    """Wall times in ms of ``n`` calls."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def pct(values: list[float], p: float) -> float:
    """The p-th percentile (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * p))]


def bench_commits(root: Path, *, reopen: bool, n: int) -> list[float]:
    """Step commits on a file store, the file held (fast steps) or reopened each time."""
    path = root / ("reopen.duckdb" if reopen else "held.duckdb")
    rng = random.Random(1)
    store = Store(path, linger_s=0.0 if reopen else 0.5)
    store_writer(store).create_run({"run_id": "r", "task": "bench", "started_at": time.time()})
    counter = iter(range(1, 10**9))

    def commit() -> None:
        step = next(counter)
        row, kwargs = step_args(step, rng)
        if reopen:
            # linger 0 lets the connection go; wait until it has, so each commit reopens.
            store._db.close()  # type: ignore[union-attr]
        store_writer(store).commit_step("r", row, **kwargs)

    times = timed(commit, n)
    store.close()
    return times


def attempts_frame(n: int) -> pd.DataFrame:
    """``n`` attempt rows as a DataFrame (the same data for every engine)."""
    rng = random.Random(7)
    rows = [attempt(i // 3, i % 3, 1.7e9 + i, rng) for i in range(n)]
    for r in rows:
        r["run_id"] = f"run-{r['step'] // 50}"
    return pd.DataFrame(rows)


def bench_bulk(root: Path, frame: pd.DataFrame) -> float:
    """Seconds to append the frame's rows through ``add_attempts``."""
    store = Store(root / "bulk.duckdb")
    records = frame.drop(columns=["run_id"]).to_dict("records")
    t0 = time.perf_counter()
    store_writer(store).add_attempts("run-bulk", records)
    elapsed = time.perf_counter() - t0
    store.close()
    return elapsed


def pandas_failure_rates(df: pd.DataFrame) -> pd.DataFrame:
    """The ``failure_rates(by=("provider", "kind"))`` result computed in pandas."""
    totals = df.groupby("provider").size().rename("attempts")
    failed = df[df["kind"].notna()]
    per_kind = failed.groupby(["provider", "kind"]).agg(
        failures=("kind", "size"),
        retry_after_s_mean=("retry_after_s", "mean"),
        retry_after_s_p50=("retry_after_s", "median"),
        retry_after_s_max=("retry_after_s", "max"),
    )
    out = per_kind.reset_index().merge(totals.reset_index(), on="provider")
    out["failure_rate"] = out["failures"] / out["attempts"]
    return out.sort_values(["provider", "failures"], ascending=[True, False])


SQLITE_SQL = """
WITH totals AS (SELECT provider, count(*) AS attempts FROM attempts GROUP BY provider),
per_kind AS (
  SELECT provider, kind, count(*) AS failures, avg(retry_after_s) AS mean_ra,
         max(retry_after_s) AS max_ra
  FROM attempts WHERE kind IS NOT NULL GROUP BY provider, kind),
ranked AS (
  SELECT provider, kind, retry_after_s,
         row_number() OVER (PARTITION BY provider, kind ORDER BY retry_after_s) AS rn,
         count(*) OVER (PARTITION BY provider, kind) AS n
  FROM attempts WHERE kind IS NOT NULL AND retry_after_s IS NOT NULL),
median AS (
  SELECT provider, kind, avg(retry_after_s) AS p50 FROM ranked
  WHERE rn IN ((n + 1) / 2, (n + 2) / 2) GROUP BY provider, kind)
SELECT p.provider, p.kind, t.attempts, p.failures, 1.0 * p.failures / t.attempts,
       p.mean_ra, m.p50, p.max_ra
FROM per_kind p JOIN totals t USING (provider) LEFT JOIN median m USING (provider, kind)
ORDER BY p.provider, p.failures DESC
"""


def bench_failure_rates(root: Path, frame: pd.DataFrame) -> None:
    """The same aggregation in the store, pandas and SQLite, alternately round by round;
    prints each one's ratio to the store. Leaves the store file ``big.duckdb`` (closed)
    for ``bench_floor``."""
    store = Store(root / "big.duckdb")
    store_writer(store).add_attempts("x", frame.drop(columns=["run_id"]).to_dict("records"))
    sqlite = sqlite3.connect(root / "big.sqlite")
    cols = ["run_id", "step", "attempt", "provider", "kind", "retry_after_s"]
    frame[cols].to_sql("attempts", sqlite, index=False)
    duck = store.failure_rates()
    theirs = pandas_failure_rates(frame)
    assert "nan" not in set(duck["kind"].dropna().astype(str)), duck  # missing is NULL (#31)
    assert len(duck) == len(theirs), (duck, theirs)
    assert int(duck["failures"].sum()) == int(theirs["failures"].sum())
    mine, in_pandas = _pairs(lambda: store.failure_rates(), lambda: pandas_failure_rates(frame),
                             7, 1)  # fmt: skip
    mine_s, in_sqlite = _pairs(
        lambda: store.failure_rates(), lambda: sqlite.execute(SQLITE_SQL).fetchall(), 3, 1
    )
    store.close()
    sqlite.close()
    print(
        f"failure_rates 1M attempts : store {statistics.median(mine):7.1f} ms | pandas "
        f"{statistics.median(in_pandas):7.1f} ms | sqlite {statistics.median(in_sqlite):7.1f} ms"
    )
    print("  " + ratio_line("pandas / store", ratios(in_pandas, mine), 5.0, at_least=True))
    print("  " + ratio_line("sqlite / store", ratios(in_sqlite, mine_s), 5.0, at_least=True))


def _timed_once(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def _pairs(
    store_side: Callable[[], object],
    bare_side: Callable[[], object],
    rounds: int,
    calls: int,
    before: Callable[[], None] = lambda: None,
) -> tuple[list[float], list[float]]:
    """Per round, each side's total ms over ``calls`` calls, the sides taking turns call
    by call (which goes first swapped each round); ``before`` runs before each call."""
    mine: list[float] = []
    bare: list[float] = []
    for i in range(rounds):
        totals = [0.0, 0.0]
        for _ in range(calls):
            for side in (0, 1) if i % 2 == 0 else (1, 0):
                before()
                totals[side] += _timed_once(store_side if side == 0 else bare_side)
        mine.append(totals[0])
        bare.append(totals[1])
    return mine, bare


def bench_floor(root: Path, rounds: int, linger_rounds: int) -> None:
    """failure_rates against the same SQL in bare DuckDB, warm and after the linger
    (module docstring); ``big.duckdb`` is the closed store ``bench_failure_rates`` made."""
    path = root / "big.duckdb"
    copy = root / "bare.duckdb"
    copy.write_bytes(path.read_bytes())
    query = failure_sql(("provider", "kind"))  # what failure_rates() runs by default
    linger_s = 0.5
    store = Store(path, linger_s=linger_s)
    bare = duckdb.connect(str(copy))
    try:
        expected = store.failure_rates()
        got = bare.execute(query, {}).df()
        # The query computes every column (the interval too; before #31 pandas added it).
        assert set(got.columns) <= set(expected.columns), (got.columns, expected.columns)
        assert got["failures"].sum() == expected["failures"].sum()
        db = store._db
        assert db is not None
        opens = len(db.waits)
        mine, theirs = _pairs(
            lambda: store.failure_rates(), lambda: bare.execute(query, {}).df(), rounds, 3
        )
        print(
            f"failure_rates warm     : store {statistics.median(mine) / 3:6.1f} ms | bare "
            f"duckdb {statistics.median(theirs) / 3:6.1f} ms (held connection, same query, "
            f".df(); 3 calls a side a round; the store let the file go and reopened it "
            f"{len(db.waits) - opens} times)"
        )
        print("  " + ratio_line("store / bare, warm", ratios(mine, theirs), 1.15))
        bare.close()
        opens = len(db.waits)

        def idle() -> None:
            time.sleep(linger_s + 0.25)  # past the linger: the store lets the file go

        def fresh() -> None:
            with duckdb.connect(str(copy)) as con:
                con.execute(query, {}).df()

        mine, theirs = _pairs(lambda: store.failure_rates(), fresh, linger_rounds, 1, idle)
        reopened = len(db.waits) - opens
        assert reopened >= linger_rounds, f"the store reopened {reopened} times"
        print(
            f"failure_rates idle     : store {statistics.median(mine):6.1f} ms | bare "
            f"duckdb {statistics.median(theirs):6.1f} ms (connect, same query, .df(), "
            f"close; store reopened {reopened} times)"
        )
        print("  " + ratio_line("store / bare, after linger", ratios(mine, theirs), 1.5))
    finally:
        bare.close()
        store.close()


_ROOT = Path(__file__).resolve().parent.parent

# One writer process: ``n`` runs through ``hn.run_sync``; prints JSON with the outcomes,
# the errors and every wait for the file.
_WRITER = """
import json, os, sys, traceback
import harnessnb as hn
path, name, root, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ws = os.path.join(root, name)
os.makedirs(ws, exist_ok=True)
with open(os.path.join(ws, "a.txt"), "w") as fh:
    fh.write("a\\n")
store = hn.Store(path)
outcomes, errors = [], []
for i in range(n):
    replies = [{"tool": "list_dir", "args": {"path": "."}},
               {"tool": "read_file", "args": {"path": "a.txt"}}, "done"]
    try:
        result = hn.run_sync(hn.TaskContract("read a.txt", ws, max_steps=5),
                             hn.ScriptedProvider(replies), store=store, run_id=f"{name}-{i}")
        outcomes.append(result.outcome.value)
    except Exception:
        errors.append(traceback.format_exc(limit=2))
waits = list(getattr(store._db, 'waits', []))
store.close()
print(json.dumps({"outcomes": outcomes, "errors": errors, "waits": waits}))
"""

# One reader process: reads until the stop file appears.
_READER = """
import json, os, sys, traceback
import harnessnb as hn
store = hn.Store(sys.argv[1])
print("ready", flush=True)
reads, errors = 0, []
while not os.path.exists(sys.argv[2]):
    try:
        store.runs(); store.steps(); store.failure_rates()
        reads += 3
    except Exception:
        errors.append(traceback.format_exc(limit=2))
waits = list(getattr(store._db, 'waits', []))
store.close()
print(json.dumps({"reads": reads, "errors": errors, "waits": waits}))
"""


def _child(script: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(_ROOT)}
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def bench_processes(root: Path, writers: int = 8, runs: int = 10, readers: int = 2) -> None:
    """Writers and readers on one file under CPU load: runs lost, errors, waits."""
    path = root / "shared.duckdb"
    Store(path).close()
    stop = root / "stop"
    burner = _child("while True: pass")
    t0 = time.perf_counter()
    try:
        reading = [_child(_READER, str(path), str(stop)) for _ in range(readers)]
        for reader in reading:
            assert reader.stdout is not None and reader.stdout.readline().strip() == "ready"
        writing = [
            _child(_WRITER, str(path), f"w{k}", str(root), str(runs)) for k in range(writers)
        ]
        done = [w.communicate(timeout=600) for w in writing]
        elapsed = time.perf_counter() - t0
        stop.touch()
        read = [r.communicate(timeout=120) for r in reading]
    finally:
        burner.kill()
        burner.wait()
    reports = [json.loads(out.strip().splitlines()[-1]) if out.strip() else {} for out, _ in done]
    reader_reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in read]
    crashed = sum(1 for (_, err), w in zip(done + read, writing + reading, strict=True)
                  if w.returncode != 0 or err.strip())  # fmt: skip
    errors = sum(len(r.get("errors", [])) for r in reports + reader_reports) + crashed
    for r in reports + reader_reports:
        for text in r.get("errors", [])[:2]:
            print("  error:", text.strip().splitlines()[-1])
    with Store(path) as store:
        found = store.sql("SELECT count(*) AS n FROM runs WHERE outcome IS NOT NULL")
        held = store.sql("SELECT count(*) AS n FROM leases WHERE NOT released")
    lost = writers * runs - int(found["n"].iloc[0])
    waits = [w * 1000 for r in reports + reader_reports for w in r.get("waits", [])] or [0.0]
    worst = [max(r.get("waits") or [0.0]) * 1000 for r in reports + reader_reports]
    reads = sum(r.get("reads", 0) for r in reader_reports)
    print(
        f"{writers} writers x {runs} runs + {readers} readers, 1 core busy: {elapsed:5.1f} s, "
        f"runs lost {lost} (must be 0), errors {errors} (must be 0), leases held "
        f"{int(held['n'].iloc[0])}, reads {reads}"
    )
    print(
        f"  wait for the file ({len(waits)} opens): p50 {pct(waits, 0.5):6.1f} ms  "
        f"p99 {pct(waits, 0.99):6.1f} ms  max {max(waits):6.1f} ms; "
        f"longest wait per process {' '.join(f'{w / 1000:.1f}' for w in worst)} s"
    )


def main() -> None:
    """Run every benchmark (or the part named) and print the results."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("part", nargs="?", choices=["all", "processes", "failure_rates"],
                        default="all")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=31, help="warm failure_rates rounds")
    parser.add_argument(
        "--linger-rounds", type=int, default=11, help="failure_rates rounds after the linger"
    )
    args = parser.parse_args()
    print(load_line())
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        if args.part == "processes":
            bench_processes(root)
            print(load_line())
            return
        if args.part == "all":
            held = bench_commits(root, reopen=False, n=500)
            reopened = bench_commits(root, reopen=True, n=100)
            print(
                f"step commit, file held    : median {statistics.median(held):6.2f} ms  "
                f"p99 {pct(held, 0.99):6.2f} ms  (n=500, target median < 5 ms)"
            )
            print(
                f"step commit, file reopened: median {statistics.median(reopened):6.2f} ms  "
                f"p99 {pct(reopened, 0.99):6.2f} ms  (n=100, no target)"
            )
            bulk = bench_bulk(root, attempts_frame(100_000))
            print(f"bulk append 100k attempts : {bulk:6.3f} s  (target < 1 s)")
        bench_failure_rates(root, attempts_frame(1_000_000))
        bench_floor(root, args.rounds, args.linger_rounds)
        if args.part == "all":
            bench_processes(root)
        print(
            f"python {sys.version.split()[0]}, duckdb {duckdb.__version__}, "
            f"pandas {pd.__version__}, sqlite {sqlite3.sqlite_version}, cpus {os.cpu_count()}"
        )
    print(load_line())


if __name__ == "__main__":
    main()
