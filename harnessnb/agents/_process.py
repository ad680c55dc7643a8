"""Run a CLI as a child process through the one runner (``tools._process``).

The runner owns the process group, the deadline, the cancel and the kill rule (SIGTERM,
then SIGKILL after one grace period; stragglers of a finished CLI killed at once).
This module adds what the CLI drivers need on top: stdout as lines.

Reading is bounded whatever the child prints: stdout is split into lines of at most
``Limits.line_bytes`` (a longer line is skipped and counted, never buffered whole) and
stderr keeps its first and last ``Limits.stderr_bytes // 2`` bytes.
"""

from __future__ import annotations

import dataclasses
import errno
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

from ..tools import _process

__all__ = ["Limits", "ProcessEnd", "run_process"]


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
class ProcessEnd(_process.ProcessExit):
    """How the child ended (the runner's ``ProcessExit``) and what its output held."""

    stdout_bytes: int
    oversize_lines: int


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
    lines = _LineSplitter(limits.line_bytes, on_line)
    end = await _process.run_process(
        argv,
        cwd=cwd,
        stdout=lines,
        timeout_s=timeout_s,
        env=env,
        stdin=stdin,
        stderr_bytes=limits.stderr_bytes,
    )
    return ProcessEnd(
        **dataclasses.asdict(end), stdout_bytes=lines.total, oversize_lines=lines.oversize
    )


def too_large(exc: OSError) -> bool:
    """True when starting a child failed because its command line was too large."""
    return exc.errno == errno.E2BIG
