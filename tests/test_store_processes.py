"""Many processes, one store file: crashes, concurrent writers and readers, busy locks."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

import harnessnb as hn
from harnessnb import Store
from harnessnb.store._writer import store_writer
from tests.store_helpers import (
    BURN,
    COMMIT_LOOP,
    HOLD_FILE,
    READ_LOOP,
    READ_RUNS,
    ROOT,
    RUN_LOOP,
    child,
    run_row,
)


def _assert_every_step_whole(store: Store) -> int:
    """Every committed step has its 3 attempts, 2 tool rows and checkpoint; no orphans."""
    broken = store.sql("""
        SELECT s.run_id, s.step,
               (SELECT count(*) FROM attempts a WHERE a.run_id = s.run_id AND a.step = s.step) AS na,
               (SELECT count(*) FROM tool_calls t WHERE t.run_id = s.run_id AND t.step = s.step) AS nt,
               s.checkpoint IS NULL AS no_checkpoint
        FROM steps s WHERE na <> 3 OR nt <> 2 OR no_checkpoint
    """)  # noqa: E501
    assert broken.empty, broken
    orphans = store.sql("""
        SELECT run_id, step FROM attempts EXCEPT SELECT run_id, step FROM steps
        UNION ALL
        SELECT run_id, step FROM tool_calls EXCEPT SELECT run_id, step FROM steps
    """)
    assert orphans.empty, orphans
    counts = store.sql("""
        SELECT r.run_id, r.steps, (SELECT count(*) FROM steps s WHERE s.run_id = r.run_id) AS n
        FROM runs r WHERE r.steps <> n
    """)
    assert counts.empty, counts
    return len(store.steps())


def test_sigkill_at_random_points_never_leaves_a_half_step(tmp_path: Path) -> None:
    path = tmp_path / "crash.duckdb"
    rng = random.Random(3)
    committed = 0
    for i in range(20):
        proc = child(COMMIT_LOOP, str(path), f"run-{i}", str(ROOT),
                     stdout=subprocess.PIPE)  # fmt: skip
        assert proc.stdout is not None
        if rng.random() < 0.25:
            time.sleep(rng.uniform(0.0, 0.3))  # may die while opening or creating
        else:
            assert proc.stdout.readline().strip() == "ready"
            time.sleep(rng.uniform(0.0, 0.15))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        with Store(path) as store:
            committed = _assert_every_step_whole(store)
    assert committed > 20  # the children did commit between kills


@pytest.fixture
def cpu_load() -> Iterator[None]:
    """One core kept busy by a child process for the test's duration."""
    burner = child(BURN)
    try:
        yield
    finally:
        burner.kill()
        burner.wait()


def _race(
    path: Path,
    readers: tuple[str, int],
    writers: tuple[str, int],
    writer_args: Callable[[int], list[str]],
) -> tuple[list[str], list[str]]:
    """Processes on one store file: ``readers`` (a script, how many) read ``path`` until
    the writers are done, each saying "ready" before the writers start; ``writers`` (a
    script, how many) write it, writer k given ``path`` and ``writer_args(k)``. Every
    child must exit 0 with nothing on stderr; their outputs, the writers' and the readers'.
    """
    stop = path.with_name(path.name + ".stop")
    pipes: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    reading = [child(readers[0], str(path), str(stop), **pipes) for _ in range(readers[1])]
    for reader in reading:
        assert reader.stdout is not None and reader.stdout.readline().strip() == "ready"
    writing = [child(writers[0], str(path), *writer_args(k), **pipes) for k in range(writers[1])]
    written = [w.communicate(timeout=120) for w in writing]
    stop.touch()
    read = [r.communicate(timeout=60) for r in reading]
    for (_, err), proc in zip(written + read, writing + reading, strict=True):
        assert (proc.returncode, err) == (0, ""), err
    return [out for out, _ in written], [out for out, _ in read]


@pytest.mark.usefixtures("cpu_load")
def test_four_writers_and_a_reader_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "shared.duckdb"
    Store(path).close()
    written, (read,) = _race(path, (READ_LOOP, 1), (COMMIT_LOOP, 4),
                             lambda k: [f"w{k}", str(ROOT), "50"])
    assert all(out.split() == ["ready", "done"] for out in written), written
    assert int(read.split()[-1]) > 0
    with Store(path) as store:
        counts = store.sql("SELECT run_id, count(*) AS n FROM steps GROUP BY 1 ORDER BY 1")
        assert counts["n"].tolist() == [50] * 4
        assert _assert_every_step_whole(store) == 200


@pytest.mark.usefixtures("cpu_load")
def test_eight_run_processes_and_two_readers_lose_no_run(tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    Store(path).close()
    written, read = _race(path, (READ_RUNS, 2), (RUN_LOOP, 8),
                          lambda k: [f"p{k}", str(tmp_path), "10"])
    for out in written:
        lines = out.split("\n")
        assert lines[-2:] == ["done", ""] and len(lines) == 12, out
        assert all(line.endswith(" finished") for line in lines[:10]), out
    assert all(int(out.split()[-1]) > 0 for out in read), read
    with Store(path) as store:
        runs = store.sql("SELECT run_id, outcome, steps FROM runs ORDER BY run_id")
        expected = sorted(f"p{k}-{i}" for k in range(8) for i in range(10))
        assert runs["run_id"].tolist() == expected
        assert set(runs["outcome"].astype(str)) == {"finished"}
        assert set(runs["steps"].tolist()) == {2}
        held = store.sql("SELECT count(*) AS n FROM leases WHERE NOT released")
        assert held["n"].tolist() == [0]
        assert len(store.sql("SELECT * FROM leases")) == 80


def test_lock_held_past_the_bound_is_a_retryable_busy_error(tmp_path: Path) -> None:
    path = tmp_path / "held.duckdb"
    Store(path).close()
    holder = child(HOLD_FILE, str(path), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    try:
        started = time.monotonic()
        with pytest.raises(hn.StoreError) as info:
            Store(path, busy_timeout_s=0.3)
        waited = time.monotonic() - started
    finally:
        holder.communicate("")
    assert (info.value.kind, info.value.retryable, info.value.path) == ("busy", True, str(path))
    assert "locked by another process" in info.value.message
    assert 0.3 <= waited < 2.0


def test_a_busy_lock_released_within_the_bound_is_waited_for(tmp_path: Path) -> None:
    path = tmp_path / "brief.duckdb"
    Store(path).close()
    holder = child(HOLD_FILE, str(path), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    assert holder.stdin is not None
    holder.stdin.close()  # the holder exits now; the store's retries outlast it
    with Store(path, busy_timeout_s=10) as store:
        store_writer(store).create_run(run_row("r1"))
    holder.wait()


def test_the_file_is_let_go_after_the_linger(tmp_path: Path) -> None:
    path = tmp_path / "linger.duckdb"
    with Store(path, linger_s=0.1) as store:
        store_writer(store).create_run(run_row("r1"))
        time.sleep(0.4)
        # Another process (plain DuckDB, no retries) can open the file now.
        code = (f"import duckdb; con = duckdb.connect({str(path)!r}); "
                "print(con.execute('select count(*) from runs').fetchone()[0])")  # fmt: skip
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=30)  # fmt: skip
        assert (out.returncode, out.stdout.strip()) == (0, "1"), out.stderr
        assert store.get_run("r1") is not None  # and this one reopens on demand
    con = duckdb.connect(str(path))
    assert con.execute("SELECT count(*) FROM runs").fetchone() == (1,)
    con.close()


# A child that writes one run to the store in its turn, then lets go.
_WRITE_ONE = """
import sys
from harnessnb import Store
from harnessnb.store._writer import store_writer
from tests.store_helpers import run_row
store = Store(sys.argv[1], busy_timeout_s=30)
store_writer(store).create_run(run_row(sys.argv[2]))
store.close()
print("wrote", flush=True)
"""


def test_a_reader_keeps_the_file_warm_until_another_process_waits_for_its_turn(
    tmp_path: Path,
) -> None:
    # #31: readers in a row handed the file over every MAX_HOLD_S (1 s) though nobody
    # waited, each reopen a cold cache (~2x a warm failure_rates). With the turn held,
    # the file is kept while nobody waits, and handed over once another process waits
    # for its turn: that process writes while this one goes on reading.
    path = tmp_path / "warm.duckdb"
    with Store(path, linger_s=5.0) as store:
        store_writer(store).create_run(run_row("r1"))
        db = store._db
        assert db is not None
        opens = len(db.waits)
        until = time.monotonic() + 1.5  # past MAX_HOLD_S
        while time.monotonic() < until:
            store.failure_rates()
            store.runs()
        assert len(db.waits) == opens  # never reopened: nobody waited
        writer = child(_WRITE_ONE, str(path), "r2", stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)  # fmt: skip
        reads = 0
        deadline = time.monotonic() + 60
        while writer.poll() is None and time.monotonic() < deadline:
            store.failure_rates()  # this process keeps reading, in its turns
            reads += 1
        out, err = writer.communicate(timeout=60)
        assert (writer.returncode, out.strip()) == (0, "wrote"), err
        assert reads > 0
        assert len(db.waits) > opens  # handed over to the writer, then reopened
        assert len(store.runs()) == 2


# A program that takes no turn: plain DuckDB, retrying its lock until it gets the file.
_PLAIN_DUCKDB = """
import sys, time, duckdb
deadline = time.monotonic() + 60
while True:
    try:
        con = duckdb.connect(sys.argv[1])
    except duckdb.IOException:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.01)
        continue
    print(con.execute("SELECT count(*) FROM run_rows").fetchone()[0], flush=True)
    con.close()
    break
"""


def test_a_reader_kept_warm_still_lets_a_program_that_takes_no_turn_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A program on DuckDB's lock alone cannot be seen waiting: a reader that never idles
    # past its linger lets the file go at least every _MAX_HOLD_UNSEEN_S (10 s; 0.3 s
    # here, to keep the test short), so such a program gets in while it reads.
    from harnessnb.store import _conn

    monkeypatch.setattr(_conn, "_MAX_HOLD_UNSEEN_S", 0.3)
    path = tmp_path / "plain.duckdb"
    with Store(path, linger_s=30.0) as store:
        store_writer(store).create_run(run_row("r1"))
        other = child(_PLAIN_DUCKDB, str(path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while other.poll() is None and time.monotonic() < deadline:
            store.failure_rates()  # never idle: only the hold limit lets the file go
        out, err = other.communicate(timeout=60)
        assert (other.returncode, out.strip()) == (0, "1"), err
        assert len(store.runs()) == 1
