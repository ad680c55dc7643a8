"""Why the store's writer thread cannot hide a step's commit behind the run loop's work.

A writer thread commits small transactions (BEGIN, the three one-row inserts of a step
with the store's schema, COMMIT: ``bench/loop.py``'s floor) for one second, first while
the main thread sleeps, then while the main thread runs Python without pause (as the
run loop does while it builds a step, or drives a hundred runs). DuckDB lets go of the
GIL inside every statement; taking it back after each one waits for the main thread to
give it up, which a busy thread does only every ``sys.getswitchinterval()`` (5 ms by
default). So a transaction of five statements takes up to ~25 ms beside a busy main
thread. Printed: transactions per second alone and beside the busy main thread, their
ratio, and the same with a 0.5 ms and a 0.2 ms switch interval (the mechanism: the
ratio follows the interval). Each line is measured side by side in one process.

Run: python bench/gil.py
"""

from __future__ import annotations

import runpy
import sys
import tempfile
import threading
import time
from pathlib import Path

# bench/loop.py by its path (this folder on sys.path would let bench/mcp.py shadow
# the MCP SDK for whatever imports it later in the same process).
floor_statements = runpy.run_path(str(Path(__file__).resolve().with_name("loop.py")))[
    "floor_statements"
]


def commits_per_second(path: Path, busy: bool, seconds: float = 1.0) -> tuple[float, float]:
    """(transactions/s of the writer thread, main thread's spin rate) over ``seconds``."""
    con, transaction = floor_statements(path)
    stop = threading.Event()
    count = 0

    def writer() -> None:
        nonlocal count
        while not stop.is_set():
            transaction(count)
            count += 1

    thread = threading.Thread(target=writer)
    t0 = time.perf_counter()
    thread.start()
    spins = 0
    if busy:
        while time.perf_counter() - t0 < seconds:
            spins += 1
    else:
        time.sleep(seconds)
    stop.set()
    thread.join()
    elapsed = time.perf_counter() - t0
    con.close()
    return count / elapsed, spins / elapsed


def main() -> None:
    default = sys.getswitchinterval()
    print("writer thread: BEGIN + 3 one-row inserts + COMMIT on a file, 1 s each")
    print(f"{'switch interval':>16} {'alone':>10} {'busy main':>10} {'ratio':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for n, interval in enumerate((default, 0.0005, 0.0002)):
            sys.setswitchinterval(interval)
            try:
                alone, _ = commits_per_second(Path(tmp) / f"a{n}.duckdb", busy=False)
                beside, _ = commits_per_second(Path(tmp) / f"b{n}.duckdb", busy=True)
            finally:
                sys.setswitchinterval(default)
            print(
                f"{interval * 1000:>13.1f} ms {alone:>8.0f}/s {beside:>8.0f}/s "
                f"{beside / alone:>6.3f}x"
            )


if __name__ == "__main__":
    main()
