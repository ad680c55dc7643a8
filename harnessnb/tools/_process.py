"""Child-process helpers shared by ``run_command`` and the coding-agent drivers."""

from __future__ import annotations

import contextlib
import os
import signal

__all__ = ["BoundedCapture", "kill_group"]


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
