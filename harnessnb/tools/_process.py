"""The one subprocess runner, for ``run_command``, ``hn.Command`` and the agent CLIs.

``run_argv`` runs argv without a shell in its own session, captures stdout and stderr
together, keeps only head and tail while reading, and kills the whole process group
on timeout (and any stragglers after a normal exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import time
from pathlib import Path

from ..rules._errors import ToolError

__all__ = ["BoundedCapture", "CommandResult", "kill_group", "run_argv"]

_COMMAND_CAPTURE_BYTES = 16_000
_PIPE_GRACE_S = 1.0
_POLL_S = 0.02


class BoundedCapture:
    """Keeps the first and last ``limit // 2`` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        elided = self.total - len(self.head) - len(self.tail)
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if elided <= 0:
            return head + tail
        return f"{head}\n... [{elided} bytes elided] ...\n{tail}"


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal the process group led by ``pid``; a group already gone is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(pid, sig)


@dataclasses.dataclass(frozen=True)
class CommandResult:
    """What ``run_command`` saw: exit code (None if killed on timeout) and bounded output."""

    exit_code: int | None
    output: str
    timed_out: bool
    elapsed_s: float
    output_bytes: int


async def run_argv(
    argv: list[str], *, cwd: Path, timeout_s: float, limit_bytes: int = _COMMAND_CAPTURE_BYTES
) -> CommandResult:
    """Run ``argv`` (no shell) in ``cwd``; kill its process group at ``timeout_s``."""
    if not argv:
        raise ToolError("argv needs at least the program to run", code="TOOL_ARGS")
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=cwd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,  # its own group, so one killpg reaches grandchildren
        )
    except FileNotFoundError as exc:
        raise ToolError(f"command not found: {argv[0]}", code="COMMAND_NOT_FOUND") from exc
    except PermissionError as exc:
        raise ToolError(f"not executable: {argv[0]}", code="COMMAND_NOT_EXECUTABLE") from exc
    except OSError as exc:
        raise ToolError(f"cannot start {argv[0]}: {exc}", code="COMMAND_FAILED") from exc
    capture = BoundedCapture(limit_bytes)
    assert proc.stdout is not None
    reader = asyncio.create_task(_pump(proc.stdout, capture))
    try:
        timed_out = not await _wait_exit(proc, reader, timeout_s)
        # Also kills stragglers a finished command left behind. The group id is the
        # leader's pid, reaped moments ago; sequential pid allocation makes a reuse
        # within this window practically impossible.
        kill_group(proc.pid)
        await _settle(proc, reader)
    except BaseException:
        kill_group(proc.pid)
        reader.cancel()
        raise
    return CommandResult(
        exit_code=None if timed_out else proc.returncode,
        output=capture.text(),
        timed_out=timed_out,
        elapsed_s=time.monotonic() - started,
        output_bytes=capture.total,
    )


async def _pump(stream: asyncio.StreamReader, capture: BoundedCapture) -> None:
    while chunk := await stream.read(65536):
        capture.feed(chunk)


async def _wait_exit(
    proc: asyncio.subprocess.Process, reader: asyncio.Task[None], timeout_s: float
) -> bool:
    """True when the process exited within ``timeout_s``.

    ``Process.wait()`` also waits for the pipes to close, which a backgrounded child
    can hold open forever, so the exit is seen through ``returncode`` instead, checked
    whenever the reader finishes or every ``_POLL_S``.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while proc.returncode is None:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return False
        if reader.done():  # pipe closed: the exit itself follows at once
            try:
                await asyncio.wait_for(proc.wait(), remaining)
            except TimeoutError:
                return False
            return True
        await asyncio.wait({reader}, timeout=min(_POLL_S, remaining))
    return True


async def _settle(proc: asyncio.subprocess.Process, reader: asyncio.Task[None]) -> None:
    """Read what is left and reap the process, each within a grace period.

    After the group is killed the pipe closes; only a process that left the group
    (its own ``setsid``) could hold it open, and then reading stops at the grace.
    """
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(reader, _PIPE_GRACE_S)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), _PIPE_GRACE_S)
