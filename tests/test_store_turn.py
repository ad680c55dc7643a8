"""Whose turn it is to open a store file, a full disk, and a run that waits both out.

The turn is a real OS lock on ``<store>.lock`` held by real processes; the full disk
is a real tmpfs of 2 MB (skipped where mounting is not allowed).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import harnessnb as hn
from harnessnb.rules._retry import SystemClock
from harnessnb.store._turn import FileTurn, sidecar_path
from harnessnb.store._writer import store_writer
from tests.store_helpers import HOLD_FILE, child, run_row, step_kwargs

# A child that takes the turn of a store file, prints "holding", then on each line of
# stdin prints whether another process waits ("wanted True/False"); gives the turn
# and prints "gave" when stdin closes.
HOLD_TURN = """
import sys, time
from harnessnb.store._turn import FileTurn
turn = FileTurn(sys.argv[1])
turn.take(5.0)
print("holding", flush=True)
for line in sys.stdin:
    print("wanted", turn.wanted(), flush=True)
turn.give()
print("gave", time.monotonic(), flush=True)
"""


def _holder(path: Path) -> subprocess.Popen[str]:
    proc = child(HOLD_TURN, str(path), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
    return proc


def _ask_wanted(proc: subprocess.Popen[str]) -> str:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("?\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


def test_a_waiting_process_is_woken_when_the_turn_is_given(tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    holder = _holder(path)
    assert _ask_wanted(holder) == "wanted False"
    turn = FileTurn(str(path))
    took: list[float] = []
    waiter = threading.Thread(target=lambda: (turn.take(30.0), took.append(time.monotonic())))
    waiter.start()
    deadline = time.monotonic() + 10
    while _ask_wanted(holder) != "wanted True":  # the holder sees the waiter
        assert time.monotonic() < deadline
    assert not took  # still waiting: the turn is held
    assert holder.stdin is not None and holder.stdout is not None
    holder.stdin.close()
    gave = float(holder.stdout.readline().split()[1])
    waiter.join(10)
    holder.wait()
    assert turn.held and took
    assert took[0] - gave < 1.0  # woken by the release, not by a poll interval
    assert turn.waited_s > 0
    turn.give()
    assert not turn.held


def test_a_turn_not_given_within_the_bound_is_a_retryable_busy_error(tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    hn.Store(path).close()
    holder = _holder(path)
    try:
        started = time.monotonic()
        with pytest.raises(hn.StoreError) as info:
            hn.Store(path, busy_timeout_s=0.3)
        waited = time.monotonic() - started
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait()
    assert (info.value.kind, info.value.retryable, info.value.path) == ("busy", True, str(path))
    assert 0.3 <= waited < 2.0
    with hn.Store(path, busy_timeout_s=5) as store:  # the abandoned wait left no lock behind
        store_writer(store).create_run(run_row("r1"))


def test_the_sidecar_is_made_beside_a_new_store_and_not_beside_a_refused_file(
    tmp_path: Path,
) -> None:
    with hn.Store(tmp_path / "runs.duckdb") as store:
        store_writer(store).create_run(run_row("r1"))
    assert Path(sidecar_path(str(tmp_path / "runs.duckdb"))).exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.duckdb").write_text("not a database\n" * 10)
    with pytest.raises(hn.StoreError):
        hn.Store(other / "notes.duckdb")
    assert sorted(p.name for p in other.iterdir()) == ["notes.duckdb"]


# ---------------------------------------------------------------- a full disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs mounted under tmp_path (unmounted after the test)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(folder: Path) -> Path:
    """Fill the disk of ``folder`` to the last byte with a ballast file."""
    ballast = folder / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * 4096)
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0")
    finally:
        os.close(fd)
    return ballast


def _write_until_full(store: hn.Store, run_id: str) -> hn.StoreError:
    for step in range(1, 200):
        row, kwargs = step_kwargs(step)
        try:
            store_writer(store).commit_step(run_id, row, **kwargs)
        except hn.StoreError as exc:
            return exc
    raise AssertionError("the disk never filled")


def test_a_full_disk_is_a_retryable_full_error_and_writes_go_on_once_freed(
    small_disk: Path,
) -> None:
    path = small_disk / "runs.duckdb"
    with hn.Store(path) as store:
        store_writer(store).create_run(run_row("r1"))
        ballast = _fill(small_disk)
        err = _write_until_full(store, "r1")
        assert (err.kind, err.retryable, err.code) == ("full", True, "STORE_FULL")
        assert "full" in err.message and str(path) in err.message
        committed = len(store.steps())  # readers still work on a full disk
        ballast.unlink()
        row, kwargs = step_kwargs(committed + 1)
        store_writer(store).commit_step("r1", row, **kwargs)
        assert store.steps()["step"].tolist() == list(range(1, committed + 2))
    with hn.Store(path) as store:  # and it was durable
        assert len(store.steps()) == committed + 1


class ShortSleeps(SystemClock):
    """The real clock, whose backoff sleeps are cut to 10 ms: the test waits for an
    event it makes itself (space freed, a lock let go), not for a backoff schedule."""

    async def sleep(self, delay: float) -> None:
        await asyncio.sleep(min(delay, 0.01))


def _contract(ws: Path, **extra: object) -> hn.TaskContract:
    ws.mkdir(exist_ok=True)
    (ws / "a.txt").write_text("a\n")
    return hn.TaskContract("read a.txt", ws, max_steps=5, **extra)  # type: ignore[arg-type]


def _replies() -> hn.ScriptedProvider:
    return hn.ScriptedProvider([{"tool": "read_file", "args": {"path": "a.txt"}}, "done"])


def test_a_run_waits_out_a_full_disk_and_finishes_once_space_is_freed(
    small_disk: Path, tmp_path: Path
) -> None:
    path = small_disk / "runs.duckdb"
    store = hn.Store(path)
    store_writer(store).create_run(run_row("filler"))
    ballast = _fill(small_disk)
    _write_until_full(store, "filler")  # the disk is full now
    freed: list[float] = []

    def free_later() -> None:
        time.sleep(0.5)
        ballast.unlink()
        freed.append(time.monotonic())

    threading.Thread(target=free_later).start()
    result = hn.run_sync(_contract(tmp_path / "ws"), _replies(), store=store, clock=ShortSleeps())
    ended = time.monotonic()
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    assert freed and ended > freed[0]  # it finished only after space was freed
    runs = store.runs(result.run_id)
    assert runs["outcome"].astype(str).tolist() == ["finished"] and runs["steps"].tolist() == [2]
    held = store.sql("SELECT count(*) AS n FROM leases WHERE NOT released")
    assert held["n"].tolist() == [0]
    store.close()


def _held_by_another_program(path: Path) -> tuple[hn.Store, subprocess.Popen[str]]:
    """A store on ``path`` (each open waiting 0.3 s at most), its file then held by a
    plain DuckDB connection in another process, which takes no turn."""
    store = hn.Store(path, busy_timeout_s=0.3, linger_s=0.01)
    time.sleep(0.2)  # the linger ends: this process lets go of the file
    holder = child(HOLD_FILE, str(path), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    return store, holder


def test_a_run_waits_for_a_store_another_program_holds_and_finishes(tmp_path: Path) -> None:
    store, holder = _held_by_another_program(tmp_path / "runs.duckdb")
    assert holder.stdin is not None
    timer = threading.Timer(1.0, holder.stdin.close)  # busy through three store waits
    timer.start()
    try:
        result = hn.run_sync(_contract(tmp_path / "ws"), _replies(), store=store,
                             clock=ShortSleeps())  # fmt: skip
    finally:
        timer.join()
        holder.wait()
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    assert store.runs(result.run_id)["outcome"].astype(str).tolist() == ["finished"]
    store.close()


def test_a_store_busy_for_the_whole_budget_ends_the_run_typed_not_raised(tmp_path: Path) -> None:
    store, holder = _held_by_another_program(tmp_path / "runs.duckdb")
    try:
        started = time.monotonic()
        result = hn.run_sync(_contract(tmp_path / "ws", max_time_s=1.0), _replies(),
                             store=store, clock=ShortSleeps())  # fmt: skip
        took = time.monotonic() - started
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait()
    assert result.outcome is hn.RunOutcome.TIME_BUDGET
    assert isinstance(result.error, hn.StoreError)
    assert (result.error.kind, result.error.retryable) == ("busy", True)
    assert 1.0 <= took < 3.0  # the budget, plus at most one store wait past it
    # The run never got its first write in: nothing of it is in the store, no lease.
    assert store.runs(result.run_id).empty
    assert store.sql("SELECT count(*) AS n FROM leases")["n"].tolist() == [0]
    store.close()


# A child that waits for the turn, prints "got <monotonic>", holds it 0.2 s, gives it.
WAIT_TURN = """
import sys, time
from harnessnb.store._turn import FileTurn
turn = FileTurn(sys.argv[1])
turn.take(30.0)
print("got", time.monotonic(), flush=True)
time.sleep(0.2)
turn.give()
"""


def _tickets_drawn(path: Path) -> int:
    raw = Path(sidecar_path(str(path))).read_bytes()[16:24]
    return int.from_bytes(raw, "little") if len(raw) == 8 else 0


def test_turns_are_given_in_the_order_they_were_asked_for(tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    holder = _holder(path)
    waiters = []
    for k in range(3):
        waiters.append(child(WAIT_TURN, str(path), stdout=subprocess.PIPE))
        deadline = time.monotonic() + 20
        while _tickets_drawn(path) < k + 2:  # this waiter is in line before the next starts
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait()
    got = [float(w.communicate(timeout=30)[0].split()[1]) for w in waiters]
    assert got == sorted(got)  # first asked, first served
    assert all(later - earlier >= 0.2 for earlier, later in itertools.pairwise(got))


def test_a_forked_child_does_not_keep_its_parents_turn(tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    turn = FileTurn(str(path))
    turn.take(5.0)
    pid = os.fork()
    if pid == 0:  # the child lives on (a worker of a process pool, say)
        time.sleep(3)
        os._exit(0)
    try:
        turn.give()
        other = FileTurn(str(path))
        started = time.monotonic()
        other.take(2.0)  # a busy error if the child's copy still held the lock
        assert time.monotonic() - started < 1.0
        other.give()
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_a_run_given_a_path_waits_for_a_held_file_off_the_event_loop(tmp_path: Path) -> None:
    path = tmp_path / "runs.duckdb"
    hn.Store(path).close()
    holder = child(HOLD_FILE, str(path), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    assert holder.stdin is not None
    ticks: list[float] = []

    async def main() -> hn.RunResult:
        async def tick() -> None:  # the event loop keeps running while the file is waited for
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.05)

        ticker = asyncio.create_task(tick())
        try:
            return await hn.run(_contract(tmp_path / "ws"), _replies(), store=str(path))
        finally:
            ticker.cancel()

    timer = threading.Timer(1.0, holder.stdin.close)
    timer.start()
    try:
        result = asyncio.run(main())
    finally:
        timer.join()
        holder.wait()
    assert result.outcome is hn.RunOutcome.FINISHED, result.error
    assert len(ticks) >= 10  # 1 s held: the loop ticked through it
    with hn.Store(path) as store:
        assert store.runs(result.run_id)["outcome"].astype(str).tolist() == ["finished"]
