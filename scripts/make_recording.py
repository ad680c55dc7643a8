"""Make notebooks/data/recorded-run.duckdb, the recorded run that 04-replay.ipynb replays.

    python scripts/make_recording.py [--out PATH]

One run of the quickstart task on the harnessnb demo model (rule-based, not an LLM),
wrapped in ``hn.Record`` so every answer is kept in the store. The first request meets
a 429 with Retry-After, so the attempts table shows a failure the replay will not need.

Run it again when the request a run sends changes (tool specs, the system prompt, the
message format): the notebook then fails with "no recording for this request".
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import duckdb

import harnessnb as hn
from harnessnb.chaos import Fault
from harnessnb.demo import demo_server, make_demo_workspace, provider_for

RUN_ID = "run_recorded_demo"
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "notebooks" / "data" / "recorded-run.duckdb"


def record(out: Path) -> hn.RunResult:
    """Record the quickstart run into a fresh store at ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in (out, out.with_name(out.name + ".wal")):
        stale.unlink(missing_ok=True)
    hn.set_testing(True)  # the Retry-After wait is recorded, not slept
    with tempfile.TemporaryDirectory() as tmp:
        # The workspace path is stored with the run; a neutral name reads better there.
        workspace = make_demo_workspace(Path(tmp) / "demo-project")
        contract = hn.TaskContract(
            "summarise README.md into NOTES.md",
            workspace,
            verification=hn.FileContains("NOTES.md", "#"),
        )
        policy = hn.Policy.default().layer("demo").allow_write("NOTES.md")
        full = Path(tmp) / "full.duckdb"
        with hn.Store(full) as store, demo_server() as server:
            server.push(Fault.status(429, retry_after="1"))
            provider = hn.Record(provider_for(server), store)
            result = hn.run_sync(contract, provider, store=store, policy=policy, run_id=RUN_ID)
        compact(full, out)
    return result


def compact(source: Path, out: Path) -> None:
    """Copy a store into a file with 16 KiB blocks: ~270 KiB instead of ~4 MiB, since
    DuckDB gives every table at least one block (256 KiB by default)."""
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{source}' AS src (READ_ONLY)")
        con.execute(f"ATTACH '{out}' AS dst (BLOCK_SIZE 16384)")
        con.execute("COPY FROM DATABASE src TO dst")
        con.execute("CHECKPOINT dst")
    finally:
        con.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    result = record(args.out)
    size = os.path.getsize(args.out)
    print(
        f"{result.run_id}: {result.outcome.value}, {result.steps} steps -> {args.out} "
        f"({size // 1024} KiB)"
    )


if __name__ == "__main__":
    main()
