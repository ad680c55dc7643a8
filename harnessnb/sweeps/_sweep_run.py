"""One run of a sweep: its own copy of the workspace, ``hn.run``, and its row (any
error becomes the row: a sweep never stops for one run). Shared by the local sweep
(``_sweep``) and the runs on Dask workers (``_sweep_dask``)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
import stat
import tempfile
from typing import TYPE_CHECKING, Any

from ..loop._contract import RunOutcome, TaskContract
from ..loop._driver import new_id, run
from ..rules._errors import HarnessError, wrap_unknown
from ._sweep_result import SweepRun

if TYPE_CHECKING:
    from ..loop._result import RunResult
    from ..providers._completion import Provider

__all__ = ["crashed", "one_run", "unfit_template_entry"]

_log = logging.getLogger("harnessnb.sweep")


async def one_run(
    contract: TaskContract,
    name: str,
    provider: Provider,
    repeat: int,
    keep: bool,
    options: dict[str, Any],
    *,
    run_id: str | None = None,
) -> SweepRun:
    """One run in its own copy of the workspace; any error becomes its row."""
    run_id, folder = run_id or new_id("run"), None
    try:
        folder = await _copied(os.fspath(contract.workspace))
        own = dataclasses.replace(contract, workspace=folder)
        result: RunResult = await run(own, provider, run_id=run_id, **options)
    except HarnessError as exc:
        return crashed(contract, name, provider, repeat, run_id, exc)
    except Exception as exc:  # a crash (or a copy that failed) is a row: the sweep goes on
        return crashed(contract, name, provider, repeat, run_id, wrap_unknown(exc))
    finally:
        if folder is not None and not keep:  # at once, even while being cancelled
            shutil.rmtree(folder, ignore_errors=True)
    return SweepRun(
        contract.task,
        name,
        provider.model,
        repeat,
        result.outcome.value,
        result.steps,
        result.tokens,
        result.cost_usd,
        result.elapsed_s,
        _error_kind(result.error),
        retries=result.retries,
        run_id=result.run_id,
    )


def crashed(
    contract: TaskContract,
    name: str,
    provider: Provider,
    repeat: int,
    run_id: str,
    exc: HarnessError,
) -> SweepRun:
    # The row keeps the error's kind alone: its text goes to the log (a crash would
    # otherwise be "UNKNOWN" and nothing more), scrubbed like every harnessnb log line.
    _log.warning("sweep: %s (%s, repeat %d) could not run: %s", run_id, name, repeat, exc)
    outcome = RunOutcome.ESCALATED_TERMINAL.value
    return SweepRun(
        contract.task,
        name,
        provider.model,
        repeat,
        outcome,
        error_kind=_error_kind(exc),
        run_id=run_id,
    )


def _error_kind(error: HarnessError | None) -> str | None:
    """A provider or store error's kind, else its code (``UNKNOWN`` for a crash), else
    its class name."""
    if error is None:
        return None
    kind = getattr(error, "kind", None)
    if kind is not None:
        return str(getattr(kind, "value", kind))
    return error.code or type(error).__name__


async def _copied(template: str) -> str:
    """``_copy_workspace`` in a thread; cancelled while it copies, the copy is removed
    once made (the thread cannot be stopped; nothing would remove it otherwise)."""
    copying = asyncio.ensure_future(asyncio.to_thread(_copy_workspace, template))
    try:
        return await asyncio.shield(copying)
    except asyncio.CancelledError:
        copying.add_done_callback(_drop_copy)
        raise


def _drop_copy(copying: asyncio.Future[str]) -> None:
    if not copying.cancelled() and copying.exception() is None:
        shutil.rmtree(copying.result(), ignore_errors=True)


def unfit_template_entry(template: str) -> str | None:
    """The first entry of ``template`` a run's copy cannot hold, or None: a copy holds
    regular files, folders and symlinks (as links) only. A device, a FIFO or a socket
    is refused by name (``/dev/zero`` as a "file" would be copied until the disk is full;
    a FIFO would block the copy for ever)."""
    for folder, dirs, files in os.walk(template):  # symlinks to folders are not entered
        for name in (*dirs, *files):
            mode = os.lstat(os.path.join(folder, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                return os.path.join(folder, name)
    return None


def _copy_regular(src: str, dst: str) -> None:
    # Checked again as it is copied: an entry replaced since the sweep began.
    if not stat.S_ISREG(os.lstat(src).st_mode):
        raise OSError(f"sweep: {src!r} is not a regular file, folder or symlink: not copied")
    shutil.copy2(src, dst, follow_symlinks=False)


def _copy_workspace(template: str) -> str:
    """A fresh temporary folder holding a copy of ``template`` (symlinks kept as links)."""
    folder = tempfile.mkdtemp(prefix="harnessnb-sweep-")
    try:
        shutil.copytree(
            template, folder, dirs_exist_ok=True, symlinks=True, copy_function=_copy_regular
        )
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return folder
