"""Run a CLI as a child process: its own process group, bounded reading, timeout, cancel.

The child is started without a shell in a new session, so one signal to its process
group reaches every grandchild it started (a CLI's shell commands, MCP servers). On a
timeout or a cancel the group gets SIGTERM (a CLI may save its session), then SIGKILL
after a grace period; after a normal exit, stragglers still in the group are killed.

Reading is bounded whatever the child prints: stdout is split into lines of at most
``Limits.line_bytes`` (a longer line is skipped and counted, never buffered whole) and
stderr keeps its first and last ``Limits.stderr_bytes // 2`` bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from ..tools._process import BoundedCapture, kill_group

__all__ = ["Limits", "ProcessEnd", "run_process"]

# After SIGTERM, how long the group has to exit before SIGKILL.
TERM_GRACE_S = 1.0
# How long pipes are drained after the leader exits (a grandchild may hold them open).
_DRAIN_S = 0.5
_POLL_S = 0.05
_CHUNK = 65536


@dataclasses.dataclass(frozen=True)
class Limits:
    """Bounds on what is kept of a child's output.

    Attributes:
        capture_bytes: Answer text and partial output kept (the earliest is kept).
        line_bytes: Longest stdout line parsed; longer lines are skipped and counted.
        event_bytes: Longest text kept from one event (a tool's input or output).
        stderr_bytes: stderr kept (first and last half).
    """

    capture_bytes: int = 1 << 20
    line_bytes: int = 512 << 10
    event_bytes: int = 64 << 10
    stderr_bytes: int = 64 << 10


@dataclasses.dataclass(frozen=True)
class ProcessEnd:
    """How the child ended: exit code (-N for signal N), None when killed by us."""

    exit_code: int | None
    timed_out: bool
    stderr: str
    stdout_bytes: int
    oversize_lines: int
    elapsed_s: float


class _LineSplitter:
    """Feeds complete lines to ``on_line``; a line over ``limit`` bytes is dropped."""

    def __init__(self, limit: int, on_line: Callable[[bytes], Awaitable[None]]) -> None:
        self.limit = limit
        self.on_line = on_line
        self.buf = bytearray()
        self.skipping = False
        self.oversize = 0
        self.total = 0

    async def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        start = 0
        while True:
            nl = chunk.find(b"\n", start)
            if nl < 0:
                self._keep(chunk[start:])
                return
            self._keep(chunk[start:nl])
            if not self.skipping and self.buf:
                await self.on_line(bytes(self.buf))
            self.buf.clear()
            self.skipping = False
            start = nl + 1

    def _keep(self, part: bytes) -> None:
        if self.skipping:
            return
        if len(self.buf) + len(part) > self.limit:
            self.buf.clear()
            self.skipping = True
            self.oversize += 1
            return
        self.buf += part

    async def close(self) -> None:
        if self.buf and not self.skipping:
            await self.on_line(bytes(self.buf))
        self.buf.clear()


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    stdin: bytes | None,
    timeout_s: float | None,
    on_line: Callable[[bytes], Awaitable[None]],
    limits: Limits,
) -> ProcessEnd:
    """Run ``argv`` to its end, handing each stdout line to ``on_line``.

    Raises:
        FileNotFoundError, PermissionError, OSError: the child could not be started
            (``errno.E2BIG`` when the command line is too large).
        asyncio.CancelledError: after the whole process group is gone.
        Exception: whatever ``on_line`` raised, after the process group is gone.
    """
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own group: one killpg reaches grandchildren
    )
    assert proc.stdout is not None and proc.stderr is not None
    lines = _LineSplitter(limits.line_bytes, on_line)
    err = BoundedCapture(limits.stderr_bytes)
    readers = [
        asyncio.create_task(_pump_lines(proc.stdout, lines)),
        asyncio.create_task(_pump(proc.stderr, err.feed)),
    ]
    if stdin is not None:
        readers.append(asyncio.create_task(_write_stdin(proc, stdin)))
    timed_out = False
    try:
        exited = await _wait_exit(proc, readers[0], timeout_s)
        if not exited:
            timed_out = True
            await _stop_group(proc)
        await _drain(readers)
        kill_group(proc.pid)  # stragglers left behind by a finished CLI
        for task in readers:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]  # on_line's own error
    except BaseException:
        # Cancelled, or on_line failed: the tree goes before the error travels on.
        await asyncio.shield(_stop_group(proc))
        for task in readers:
            task.cancel()
        raise
    return ProcessEnd(
        exit_code=None if timed_out else proc.returncode,
        timed_out=timed_out,
        stderr=err.text(),
        stdout_bytes=lines.total,
        oversize_lines=lines.oversize,
        elapsed_s=time.monotonic() - started,
    )


def too_large(exc: OSError) -> bool:
    """True when starting a child failed because its command line was too large."""
    return exc.errno == errno.E2BIG


async def _pump_lines(stream: asyncio.StreamReader, lines: _LineSplitter) -> None:
    while chunk := await stream.read(_CHUNK):
        await lines.feed(chunk)
    await lines.close()


async def _pump(stream: asyncio.StreamReader, feed: Callable[[bytes], None]) -> None:
    while chunk := await stream.read(_CHUNK):
        feed(chunk)


async def _write_stdin(proc: asyncio.subprocess.Process, data: bytes) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it exited early
        proc.stdin.write(data)
        await proc.stdin.drain()
    proc.stdin.close()


async def _wait_exit(
    proc: asyncio.subprocess.Process, reader: asyncio.Task[None], timeout_s: float | None
) -> bool:
    """True when the leader exited before the timeout.

    ``Process.wait()`` also waits for the pipes to close, which a backgrounded grandchild
    can hold open for ever, so the exit is seen through ``returncode``, polled. A
    failing ``reader`` (``on_line`` raised) ends the wait early.
    """
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    while proc.returncode is None:
        if reader.done() and reader.exception() is not None:
            return True  # the error is raised by the caller
        remaining = None if deadline is None else deadline - loop.time()
        if remaining is not None and remaining <= 0:
            return False
        step = _POLL_S if remaining is None else min(_POLL_S, remaining)
        if reader.done():  # stdout closed: the exit follows at once
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), step)
        else:
            await asyncio.wait({reader}, timeout=step)
    return True


async def _stop_group(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the group, SIGKILL it after ``TERM_GRACE_S``, reap the leader."""
    if proc.returncode is None:
        kill_group(proc.pid, signal.SIGTERM)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TERM_GRACE_S
        while proc.returncode is None and loop.time() < deadline:
            await asyncio.sleep(_POLL_S)
    kill_group(proc.pid, signal.SIGKILL)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), TERM_GRACE_S)


async def _drain(readers: list[asyncio.Task[None]]) -> None:
    """Let the readers reach end of file; a pipe held open past the grace is abandoned."""
    pending = [t for t in readers if not t.done()]
    if pending:
        await asyncio.wait(pending, timeout=_DRAIN_S)
    for task in readers:
        if not task.done():
            task.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
