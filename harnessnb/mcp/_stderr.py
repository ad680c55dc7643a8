"""A stdio server's stderr: a pipe read by a thread into a bounded ring, scrubbed when read.

The SDK hands its ``errlog`` (a text file with a real descriptor) to the child as fd 2;
``StderrPipe`` is that file's write end, and a daemon thread drains the read end, so a
server that floods stderr never blocks and nothing reaches the kernel's terminal. Only
the last ``RING_BYTES`` are kept.

The server runs under a small watcher (``watched``): it starts the command, says its pid
on stderr and, when the command ends, its exit status, each as a marker line the reader
takes out of the text. Through those two lines a connection knows the process group it
must leave no process in, and the code a dead server exited with (the SDK keeps its
process object to itself).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import threading
from typing import TextIO

from ..rules._secrets import scrub

__all__ = ["RING_BYTES", "StderrPipe", "watched"]

RING_BYTES = 64 * 1024
_MARK = re.compile(rb"\x00harnessnb-(pid|exit) (-?\d+)\n")
# The watcher: start the command, say its pid, pass signals on, say its exit status.
_WATCHER = r"""
import os, signal, subprocess, sys
child = subprocess.Popen(sys.argv[1:])
os.write(2, b"\x00harnessnb-pid %d\n" % os.getpid())
os.close(0); os.close(1)
for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(sig, lambda n, f: child.send_signal(n))
code = child.wait()
os.write(2, b"\n\x00harnessnb-exit %d\n" % code)
os._exit(code if code >= 0 else 128 - code)
"""


def watched(argv: list[str]) -> list[str]:
    """``argv`` run under the watcher (the same interpreter, isolated, no site)."""
    return [sys.executable, "-I", "-S", "-c", _WATCHER, *argv]


class StderrPipe:
    """The write end (``errlog``) for the SDK and the reader of the other end."""

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        self.errlog: TextIO = os.fdopen(write_fd, "w")
        self._read_fd = read_fd
        self._ring = bytearray()
        self._carry = b""  # a marker cut across two reads
        self._lock = threading.Lock()
        self.ended = threading.Event()  # every writer closed its end
        self.exited = threading.Event()  # the watcher said the command's exit status
        self.pid: int | None = None
        self._told: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.exit_code: int | None = None
        self._thread = threading.Thread(target=self._read, name="mcp-stderr", daemon=True)
        self._thread.start()

    def close_writer(self) -> None:
        """Close our copy of the write end (after the spawn), so EOF means the child's
        end closed too."""
        if not self.errlog.closed:
            self.errlog.close()

    def _read(self) -> None:
        try:
            while chunk := os.read(self._read_fd, 65536):
                self._take(chunk)
        except OSError:
            pass
        finally:
            self._take(b"", final=True)
            os.close(self._read_fd)
            self.ended.set()

    def _take(self, chunk: bytes, *, final: bool = False) -> None:
        data = self._carry + chunk
        self._carry = b""
        out = bytearray()
        at = 0
        for found in _MARK.finditer(data):
            out += data[at : found.start()]
            at = found.end()
            if found.group(1) == b"pid":
                self.pid = int(found.group(2))
            else:
                self.exit_code = int(found.group(2))
                self.exited.set()
                for loop, future in self._told:
                    loop.call_soon_threadsafe(_settle, future)
        rest = data[at:]
        nul = rest.rfind(b"\x00")
        if nul >= 0 and not final and len(rest) - nul < 40:  # maybe a marker's start
            out += rest[:nul]
            self._carry = rest[nul:]
        else:
            out += rest
        with self._lock:
            self._ring += out
            if len(self._ring) > RING_BYTES:
                del self._ring[: len(self._ring) - RING_BYTES]

    def tail(self) -> str:
        """The last ``RING_BYTES`` the server wrote, decoded and scrubbed."""
        with self._lock:
            raw = bytes(self._ring)
        return scrub(raw.decode("utf-8", "replace").strip("\n"))

    def on_exit(self) -> asyncio.Future[None]:
        """A future of the running loop, done when the server's command has ended."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._told = [(lp, f) for lp, f in self._told if not f.done()]
            self._told.append((loop, future))
        if self.exited.is_set():
            _settle(future)
        return future

    def wait_exited(self, timeout: float) -> bool:
        """True once the server's command has ended (its exit status is known)."""
        return self.exited.wait(timeout)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
