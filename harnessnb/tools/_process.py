"""The one subprocess runner, for ``run_command``, ``hn.Command`` and the agent CLIs.

The child starts without a shell in a new session, so one signal to its process
group reaches every grandchild it started. The one rule for ending it: at the
deadline, on a cancel, or when a reader fails, the group gets SIGTERM (a CLI may
save its session), then, once ``TERM_GRACE_S`` has passed without the leader exiting,
every descendant of the leader (found in /proc, round after round, ``setsid`` or not)
and the group get SIGKILL; after a normal exit, stragglers still in the group are
killed at once (the command is over). A command's leader is a sandbox wrapper that
keeps its tree (bwrap's PID namespace; the launcher's, or its subreaper, under
Landlock and none: ``tools/_landlock_exec``), so nothing it started outlives the
call. Pipes are then drained for at most one more grace period: only a process that
left the tree can hold them open.

Reading is bounded: stdout goes to a ``Sink`` (``BoundedCapture`` keeps head and tail,
the agent drivers split lines), stderr is merged into stdout or captured head and tail.
``run_argv`` is the ``run_command`` / ``hn.Command`` face of ``run_process``;
``confine_off_loop`` (also a stdio MCP server's) asks ``tools/_sandbox`` how to start the
child, in a thread, through ``made_in_thread``: what a thread makes (a scratch folder, a
sweep's workspace copy) is removed, not lost, when its caller is cancelled meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ..rules._errors import ToolError
from ..rules._secrets import scrub_values
from ._landlock_exec import descendants
from ._sandbox import Confined, confine

if TYPE_CHECKING:
    from ..rules._policy import Policy

__all__ = [
    "TERM_GRACE_S",
    "BoundedCapture",
    "CommandResult",
    "ProcessExit",
    "Sink",
    "confine_off_loop",
    "kill_group",
    "kill_tree",
    "made_in_thread",
    "run_argv",
    "run_process",
    "stop_group",
]

T = TypeVar("T")

# After SIGTERM, how long the leader has to exit before the group gets SIGKILL; also
# how long pipes are drained after that. Read at call time (tests shorten it).
TERM_GRACE_S = 1.0
_COMMAND_CAPTURE_BYTES = 16_000
_POLL_S = 0.02
_CHUNK = 65536
_MAX_KILL_ROUNDS = 1000


class Sink(Protocol):
    """Where a child's stdout goes, chunk by chunk; ``close`` at end of file."""

    def feed(self, chunk: bytes) -> Awaitable[None] | None: ...

    def close(self) -> Awaitable[None] | None: ...


class BoundedCapture:
    """Keeps the first and last ``limit // 2`` bytes of a stream and counts the rest.

    A secret lying across a cut would survive as a fragment the scrubber cannot
    recognise, so each side keeps ``MARGIN`` bytes more than it shows: ``text``
    scrubs head and tail with their margins, then cuts the margins off.
    """

    MARGIN = 1024  # longer than any key's spelling (JSON-escaped, URL-encoded)

    def __init__(self, limit: int) -> None:
        self.half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        keep = self.half + self.MARGIN
        room = keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > keep:
                del self.tail[: len(self.tail) - keep]

    def text(self) -> str:
        if self.total <= 2 * self.half:  # nothing cut: the caller scrubs the whole
            return bytes(self.head + self.tail).decode("utf-8", "replace")
        if self.total <= len(self.head) + len(self.tail):  # nothing dropped yet
            whole = scrub_values(bytes(self.head + self.tail).decode("utf-8", "replace"))
            shown_head, shown_tail = whole[: self.half], whole[-self.half :]
        else:
            shown_head = scrub_values(self.head.decode("utf-8", "replace"))[: self.half]
            shown_tail = scrub_values(self.tail.decode("utf-8", "replace"))[-self.half :]
        elided = self.total - 2 * self.half
        return f"{shown_head}\n... [{elided} bytes elided] ...\n{shown_tail}"

    def close(self) -> None:
        """Nothing is held back: ``text`` is complete once the stream ends."""


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal the process group led by ``pid``; a group already gone is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(pid, sig)


@dataclasses.dataclass(frozen=True)
class ProcessExit:
    """How a child ended: exit code (-N for signal N), None when stopped at the deadline."""

    exit_code: int | None
    timed_out: bool
    stderr: str  # empty when stderr was merged into stdout
    elapsed_s: float


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    stdout: Sink,
    timeout_s: float | None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    stderr_bytes: int | None = None,
    wrapped: bool = False,
) -> ProcessExit:
    """Run ``argv`` to its end (or its deadline), feeding stdout to ``stdout``.

    Args:
        stderr_bytes: ``None`` merges stderr into stdout; a number captures it apart,
            keeping its first and last halves.
        wrapped: The leader is a sandbox wrapper (``bwrap``) that forwards no signal
            and takes its whole tree down when it dies: SIGTERM goes to the process
            groups beneath it instead, so the command can still say goodbye.

    Raises:
        FileNotFoundError, PermissionError, OSError: the child could not be started.
        asyncio.CancelledError: after the whole process group is gone.
        Exception: whatever ``stdout`` raised, after the process group is gone.
    """
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=None if env is None else dict(env),
        stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT if stderr_bytes is None else asyncio.subprocess.PIPE,
        start_new_session=True,  # its own group, so one killpg reaches grandchildren
    )
    assert proc.stdout is not None
    err = BoundedCapture(stderr_bytes or 0)
    readers = [asyncio.create_task(_pump(proc.stdout, stdout))]
    if proc.stderr is not None:
        readers.append(asyncio.create_task(_pump(proc.stderr, err)))
    if stdin is not None:
        readers.append(asyncio.create_task(_write_stdin(proc, stdin)))
    try:
        timed_out = not await _wait_exit(proc, readers[0], timeout_s)
        await stop_group(proc, wrapped=wrapped)
        await _drain(readers)
        for task in readers:
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]  # the sink's own error
    except BaseException:
        # Cancelled, or the sink failed: the tree goes before the error travels on.
        await asyncio.shield(stop_group(proc, wrapped=wrapped))
        for task in readers:
            task.cancel()
        raise
    return ProcessExit(
        exit_code=None if timed_out else proc.returncode,
        timed_out=timed_out,
        stderr=err.text(),
        elapsed_s=time.monotonic() - started,
    )


async def stop_group(proc: asyncio.subprocess.Process, *, wrapped: bool = False) -> None:
    """The one rule: SIGTERM, SIGKILL after ``TERM_GRACE_S``; stragglers killed at once.

    A leader still running gets SIGTERM with its group and ``TERM_GRACE_S`` to exit;
    then the whole group gets SIGKILL. The group id is the leader's pid: after a
    normal exit it was reaped moments ago, and sequential pid allocation makes a
    reuse within this window practically impossible. A ``wrapped`` leader (a sandbox
    that dies at once on SIGTERM, killing its tree) is spared the SIGTERM: the
    process groups beneath it get it.
    """
    loop = asyncio.get_running_loop()
    if proc.returncode is None:
        if wrapped:
            for group in _groups_beneath(proc.pid):
                kill_group(group, signal.SIGTERM)
        else:
            kill_group(proc.pid, signal.SIGTERM)
        deadline = loop.time() + TERM_GRACE_S
        while proc.returncode is None and loop.time() < deadline:
            await asyncio.sleep(_POLL_S)
    if proc.returncode is None:
        # Every descendant first, while the leader (a subreaper launcher, or bwrap)
        # still holds the orphans a ``setsid`` made: killed with it, they would go to
        # init and outlive the call.
        kill_tree(proc.pid)
    kill_group(proc.pid, signal.SIGKILL)
    if proc.returncode is None:  # reap the leader; its exit, once seen, needs no wait
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), TERM_GRACE_S)


def _groups_beneath(leader: int) -> set[int]:
    """The process groups of ``leader``'s descendants other than its own (from /proc)."""
    groups = {pgrp for _, pgrp in descendants(leader)}
    groups.discard(leader)
    return groups


def kill_tree(leader: int) -> None:
    """SIGKILL every live descendant of ``leader`` (not ``leader``), round after round
    until none is left: a process forking while it is killed is found again."""
    for _ in range(_MAX_KILL_ROUNDS):
        left = descendants(leader)
        if not left:
            return
        for pid, _ in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.001)  # let the killed die before the next look


async def _pump(stream: asyncio.StreamReader, sink: Sink) -> None:
    while chunk := await stream.read(_CHUNK):
        fed = sink.feed(chunk)
        if fed is not None:
            await fed
    closed = sink.close()
    if closed is not None:
        await closed


async def _write_stdin(proc: asyncio.subprocess.Process, data: bytes) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # it exited early
        proc.stdin.write(data)
        await proc.stdin.drain()
    proc.stdin.close()


async def _wait_exit(
    proc: asyncio.subprocess.Process, reader: asyncio.Task[None], timeout_s: float | None
) -> bool:
    """True when the leader exited (or the stdout reader failed) before the deadline.

    ``Process.wait()`` also waits for the pipes to close, which a backgrounded
    grandchild can hold open for ever, so the exit is seen through ``returncode``,
    checked whenever the reader finishes or every ``_POLL_S``.
    """
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    while proc.returncode is None:
        if reader.done() and not reader.cancelled() and reader.exception() is not None:
            return True  # the caller raises the error
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


async def _drain(readers: list[asyncio.Task[None]]) -> None:
    """Let the readers reach end of file; a pipe held open past the grace is abandoned."""
    pending = [t for t in readers if not t.done()]
    if pending:
        await asyncio.wait(pending, timeout=TERM_GRACE_S)
    for task in readers:
        if not task.done():
            task.cancel()
    await asyncio.gather(*readers, return_exceptions=True)


async def made_in_thread(make: Callable[[], T], drop: Callable[[T], None]) -> T:
    """``make()`` run in a worker thread, what it made never lost to a cancel.

    A caller cancelled while ``make`` runs (a run cancelled, an MCP start timed out)
    never receives what it made (a scratch folder, a workspace copy), so it cannot
    remove it: whichever side comes last calls ``drop`` on it instead, the thread when
    it finishes after the cancel, the cancelled caller when the thread had already
    finished. Only a ``threading.Lock`` is shared with the thread (no asyncio object is
    touched there). ``make`` cleans up after itself when it raises.
    """
    lock = threading.Lock()
    made: list[T] = []
    abandoned: list[bool] = []

    def work() -> T:
        value = make()
        with lock:
            if abandoned:
                drop(value)
            else:
                made.append(value)
        return value

    try:
        return await asyncio.to_thread(work)
    except asyncio.CancelledError:
        with lock:
            abandoned.append(True)
            for value in made:
                drop(value)
        raise


async def confine_off_loop(argv: Sequence[str], **options: Any) -> Confined:
    """``confine(argv, **options)`` in a worker thread (``made_in_thread``): a cancel
    meanwhile leaves no ``harnessnb-cmd-*`` scratch folder behind."""
    return await made_in_thread(functools.partial(confine, argv, **options), Confined.close)


# ------------------------------------------------------------------ run_command's face


@dataclasses.dataclass(frozen=True)
class CommandResult:
    """What ``run_command`` saw: exit code (None if killed on timeout) and bounded output."""

    exit_code: int | None
    output: str
    timed_out: bool
    elapsed_s: float
    output_bytes: int
    sandbox: str  # how it was contained, in words: "sandbox: bubblewrap, no network"
    backend: str = "none"  # the backend by name, as the tool row records it


async def run_argv(
    argv: list[str],
    *,
    cwd: Path,
    timeout_s: float,
    policy: Policy | None = None,
    env: Mapping[str, str] | None = None,
    limit_bytes: int = _COMMAND_CAPTURE_BYTES,
) -> CommandResult:
    """Run ``argv`` (no shell) in the workspace ``cwd``, contained by ``tools/_sandbox``.

    stdout and stderr together, head and tail kept. The child sees only the minimal
    environment plus ``env`` (never a secret-looking name); ``policy`` (None: the
    default) decides which workspace files are masked and whether it has network.
    """
    if not argv:
        raise ToolError("argv needs at least the program to run", code="TOOL_ARGS")
    capture = BoundedCapture(limit_bytes)
    try:
        child = await confine_off_loop(argv, workspace=cwd, policy=policy, env=env)
        try:
            end = await run_process(
                child.argv,
                cwd=cwd,
                stdout=capture,
                timeout_s=timeout_s,
                env=child.env,
                wrapped=child.backend == "bubblewrap",
            )
        finally:
            child.close()
    except FileNotFoundError as exc:
        raise ToolError(f"command not found: {argv[0]}", code="COMMAND_NOT_FOUND") from exc
    except PermissionError as exc:
        raise ToolError(f"not executable: {argv[0]}", code="COMMAND_NOT_EXECUTABLE") from exc
    except OSError as exc:
        raise ToolError(f"cannot start {argv[0]}: {exc}", code="COMMAND_FAILED") from exc
    return CommandResult(
        exit_code=end.exit_code,
        output=capture.text(),
        timed_out=end.timed_out,
        elapsed_s=end.elapsed_s,
        output_bytes=capture.total,
        sandbox=child.label,
        backend=child.backend,
    )
