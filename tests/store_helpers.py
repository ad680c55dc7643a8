"""Shared builders for the store tests: rows shaped like the run loop writes them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import duckdb

ROOT = Path(__file__).resolve().parent.parent
AT = 1_700_000_000.0


def old_store(path: Path, version: int) -> duckdb.DuckDBPyConnection:
    """A connection to a new store file at ``path`` as harnessnb wrote it at schema
    ``version`` (its migrations up to there, each recorded): add the old rows, close."""
    from harnessnb.store._schema import MIGRATIONS

    con = duckdb.connect(str(path))
    for v in range(1, version + 1):
        for statement in MIGRATIONS[v]:
            con.execute(statement)
        con.execute("INSERT INTO schema_version VALUES (?, TIMESTAMP '2025-01-01')", [v])
    return con


def altered(path: Path, *statements: str) -> Path:
    """``path`` after ``statements`` ran on it straight through DuckDB (no harnessnb): a
    store file made wrong on purpose, or a foreign database."""
    con = duckdb.connect(str(path))
    try:
        for statement in statements:
            con.execute(statement)
    finally:
        con.close()
    return path


def run_row(run_id: str = "r1", **extra: Any) -> dict[str, Any]:
    """A ``create_run`` dict."""
    return {
        "run_id": run_id,
        "task": "summarise README",
        "workspace": "/ws",
        "provider": "openai",
        "model": "gpt-x",
        "started_at": AT,
        "contract": {"max_steps": 12},
        "policy": {"layers": ["default"]},
        **extra,
    }


def attempt(step: int, n: int, *, kind: str | None = None, **extra: Any) -> dict[str, Any]:
    """An attempt dict (success unless ``kind``)."""
    return {
        "step": step,
        "attempt": n,
        "provider": "openai",
        "model": "gpt-x",
        "kind": kind,
        "status": 200 if kind is None else 503,
        "retry_after_s": None if kind is None else 2.0,
        "latency_ms": 120.5,
        "ttft_ms": 30.0,
        "input_tokens": 100,
        "output_tokens": 20,
        "request_id": f"req-{step}-{n}",
        "fell_back": False,
        "error": None if kind is None else "HTTP 503",
        "started_at": AT + step,
        **extra,
    }


def tool(step: int, seq: int, *, status: str = "ok", **extra: Any) -> dict[str, Any]:
    """A tool-call dict."""
    return {
        "step": step,
        "seq": seq,
        "tool": "read_file",
        "effect": "read",
        "args": {"path": f"f{seq}.txt"},
        "idempotency_key": f"k-{step}-{seq}",
        "status": status,
        "error_name": None,
        "error_code": None,
        "output_bytes": 12,
        "at": AT + step,
        **extra,
    }


def step_kwargs(step: int, *, tokens: int = 120) -> tuple[dict[str, Any], dict[str, Any]]:
    """(step dict, keyword arguments of ``commit_step``): 3 attempts, 2 tool calls."""
    row = {
        "step": step,
        "decision": "tool",
        "tool_calls": 2,
        "tokens": tokens,
        "changed_workspace": False,
        "provider": "openai",
        "at": AT + step,
    }
    kwargs: dict[str, Any] = {
        "attempts": [attempt(step, 0, kind="server"), attempt(step, 1, kind="server"),
                     attempt(step, 2)],
        "tool_calls": [tool(step, 0), tool(step, 1)],
        "stalls": [],
        "checkpoint": {"messages": [{"role": "user", "content": f"step {step}"}],
                       "tokens": tokens * step},
    }  # fmt: skip
    return row, kwargs


def child(script: str, *args: str, **popen: Any) -> subprocess.Popen[str]:
    """Start ``python -c script args...`` with the package importable."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", script, *args], env=env, text=True, **popen)


# A child that commits steps for its own run until killed; prints "ready" once.
COMMIT_LOOP = """
import sys
sys.path.insert(0, sys.argv[3])
from tests.store_helpers import run_row, step_kwargs
from harnessnb import Store
from harnessnb.store._writer import store_writer
store = Store(sys.argv[1], linger_s=0.05)
run_id = sys.argv[2]
store_writer(store).create_run(run_row(run_id))
n = int(sys.argv[4]) if len(sys.argv) > 4 else 10**9
for step in range(1, n + 1):
    row, kw = step_kwargs(step)
    store_writer(store).commit_step(run_id, row, **kw)
    if step == 1:
        print("ready", flush=True)
store.close()
print("done", flush=True)
"""

# A child that reads (steps, failure_rates) until the stop file appears.
READ_LOOP = """
import os, sys
from harnessnb import Store
store = Store(sys.argv[1], linger_s=0.05)
print("ready", flush=True)
queries = 0
while not os.path.exists(sys.argv[2]):
    store.steps()
    store.failure_rates()
    queries += 2
store.close()
print(queries, flush=True)
"""

# A child that holds the file with a plain DuckDB connection until stdin closes.
HOLD_FILE = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
print("holding", flush=True)
sys.stdin.read()
"""

# A child that drives ``n`` runs (a read-tool step, then an answer) through
# ``hn.run_sync`` on the store file; prints each run's id and outcome, then "done".
RUN_LOOP = """
import os, sys
import harnessnb as hn
path, name, root, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
ws = os.path.join(root, name)
os.makedirs(ws, exist_ok=True)
with open(os.path.join(ws, "a.txt"), "w") as fh:
    fh.write("a\\n")
store = hn.Store(path)
for i in range(n):
    replies = [{"tool": "read_file", "args": {"path": "a.txt"}}, "done"]
    result = hn.run_sync(hn.TaskContract("read a.txt", ws, max_steps=5),
                         hn.ScriptedProvider(replies), store=store, run_id=f"{name}-{i}")
    print(result.run_id, result.outcome.value, flush=True)
store.close()
print("done", flush=True)
"""

# A child that reads the way a notebook does (runs, steps, failure_rates) until the stop
# file appears; prints how many reads it made.
READ_RUNS = """
import os, sys
import harnessnb as hn
store = hn.Store(sys.argv[1])
print("ready", flush=True)
reads = 0
while not os.path.exists(sys.argv[2]):
    store.runs()
    store.steps()
    store.failure_rates()
    reads += 3
store.close()
print(reads, flush=True)
"""

# A child that keeps one core busy until killed (CPU load for the tests that need it).
BURN = "while True: pass"


def harnessnb_before(version: int, into: Path) -> Path:
    """The package as it was just before schema ``version`` (the parent of the commit
    that made it), from this repository's history, unpacked into ``into``; the test is
    skipped where there is none (a shallow clone, an unpacked sdist)."""
    import io
    import tarfile

    import pytest

    found = subprocess.run(
        ["git", "log", "--format=%H", "-S", f"SCHEMA_VERSION: Final = {version}", "--",
         "harnessnb/store/_schema.py"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    commits = found.stdout.split()
    if found.returncode != 0 or not commits:
        pytest.skip(f"no git history holding the commit that made schema {version}")
    packed = subprocess.run(
        ["git", "archive", "--format=tar", f"{commits[-1]}^", "harnessnb"],
        cwd=ROOT, capture_output=True, check=False,
    )  # fmt: skip
    if packed.returncode != 0:
        pytest.skip(f"git archive failed: {packed.stderr.decode(errors='replace')[:200]}")
    with tarfile.open(fileobj=io.BytesIO(packed.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into
