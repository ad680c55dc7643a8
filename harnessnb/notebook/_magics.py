"""The ``%harness`` line magic and ``%%harness`` cell magic.

Each subcommand is planned on the kernel thread (parse, build provider and store);
a run is then driven on harnessnb's loop thread while the cell waits, with live
progress, and its card replaces the progress through a display handle.

An interrupt (the kernel's interrupt button, Ctrl-C in a terminal) cancels the run
on the loop thread, waits for it to be recorded ``cancelled``, and ends the cell
with ``RunInterrupted``: IPython shows its one line (``cancelled at step 2 —
%harness resume run_...``) in place of frames, and the cell still ends as an
error, so "Run All" stops there as it does for any interrupt.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import dataclasses
import os
import threading
import traceback
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic import Magics, magics_class

from ..launch import _options
from ..launch._mcp_spec import mcp_from
from ..launch._otel import tracer_provider_from
from ..loop._bridge import loop_thread, run_blocking
from ..loop._contract import RunOutcome
from ..loop._events import RunEvent
from ..loop._result import RunResult
from ..rules._errors import ConfigError, HarnessError, StoreError
from ..rules._html import bold, panel
from ..rules._text import printable
from ..store._open import open_store
from ._args import HelpShown, help_text, interpolate, parse, store_there, words
from ._env import kernel_of, widget_frontend
from ._ipython import display, get_ipython, html_object, magic_method
from ._progress import TextProgress, WidgetProgress
from ._sweep_magic import plan_sweep
from ._tables import scrolling_frame
from ._wait import RunInterrupted, wait_awake

if TYPE_CHECKING:
    from ..mcp._server import MCPServer
    from ..providers._prices import Prices
    from ..store._store import Store
    from ..tools._approval import Approver

__all__ = ["HarnessMagics", "await_harness_cells", "harness_async"]

_T = TypeVar("_T")

Progress = TextProgress | WidgetProgress
# Starts a run (``RunResult``) or a coding-agent CLI run (``AgentResult``).
Starter = Callable[[Callable[[RunEvent], None] | None], Coroutine[Any, Any, Any]]

# Errors of runs driven in this kernel, for ``%harness tb`` (the store keeps no frames).
_ERRORS: dict[str, BaseException] = {}
_ERRORS_KEPT = 50
_NO_RESULT_COLUMNS = ("contract", "policy", "extras", "error", "output")  # long JSON
_WIND_DOWN_S = 30.0  # at most this long for a cancelled run to record itself


def _store(path: str | None, workspace: str | None = None) -> Store:
    """The kernel's store for ``--store`` (``store/_open.py``'s rule: one per file, kept
    across cells); never in ``workspace``."""
    return open_store(path or None, keep=True, workspace=workspace)


def _remember_error(run_id: str, err: BaseException) -> None:
    _ERRORS[run_id] = err
    while len(_ERRORS) > _ERRORS_KEPT:
        _ERRORS.pop(next(iter(_ERRORS)))


def _fail(err: HarnessError, handle: Any = None) -> None:
    """Show ``err``'s card (in place of the progress when there is one), then raise it."""
    if handle is not None:
        handle.update(err)
    else:
        display(err)
    raise err


@dataclasses.dataclass
class _RunJob:
    """A run, resume or replay ready to go: how to start it and how to present it."""

    shell: Any
    start: Starter
    store: Any
    run_id: str | None
    out: str | None = None
    quiet: bool = False
    note: str | None = None
    resumable: bool = True  # ``%harness resume`` continues it (not a coding-agent CLI run)

    # -- presentation

    def _open(self) -> tuple[Progress | None, Any]:
        if self.note:
            display(_Note(self.note))
        if self.quiet:
            return None, None
        if widget_frontend(self.shell):
            widget = WidgetProgress()
            handle = display(widget.panel, display_id=True)
            progress: Progress = widget
        else:
            progress, handle = TextProgress(), None
        progress.show()
        return progress, handle

    def _close(self, progress: Progress | None, handle: Any, result: Any) -> None:
        if progress is not None:
            progress.close()
        if self.out:  # the result carries its steps: its card reads no store
            self.shell.user_ns[self.out] = result
        failed = result.error is not None and result.outcome not in (
            RunOutcome.CANCELLED,
            RunOutcome.AWAITING_APPROVAL,
        )
        if handle is not None:
            handle.update(result)
        elif not self.quiet or failed:
            display(result)
        if failed and result.error is not None:
            _remember_error(result.run_id, result.error)
            raise result.error

    def _interrupted(self, progress: Progress | None, handle: Any) -> RunInterrupted:
        """The cancelled run's one line, as the error that ends the cell."""
        if progress is not None:
            progress.close()
        if handle is not None:  # the live panel goes: the line is the cell's output
            handle.update({"text/plain": ""}, raw=True)
        return RunInterrupted(self._stopped_line())

    def _stopped_line(self) -> str:
        """``cancelled at step N — %harness resume RUN_ID``, read from the store."""
        if self.run_id is None:
            return "cancelled"
        try:
            row = self.store.get_run(self.run_id)
        except HarnessError:
            row = None
        if row is None:  # stopped before its row was written: an id would promise a run
            return "cancelled before the run was recorded: nothing to resume"
        if row.get("outcome") not in (RunOutcome.CANCELLED.value, None):
            return f"interrupted after run {self.run_id} had ended {row.get('outcome')}"
        step = int(row.get("steps") or 0) + 1  # the step it was in
        how = f"%harness resume {self.run_id}" if self.resumable else f"run {self.run_id}"
        return f"cancelled at step {step} — {how}"

    def _errored(self, progress: Progress | None, handle: Any, err: HarnessError) -> None:
        if progress is not None:
            progress.close()
        if self.run_id:
            _remember_error(self.run_id, err)
        _fail(err, handle)

    # -- the two ways to wait

    def run_sync(self) -> None:
        """Block the cell on the run (terminal IPython, plain shells, autoawait off)."""
        progress, handle = self._open()
        try:
            result = run_blocking(self.start(progress))  # Ctrl-C: cancelled and recorded
        except KeyboardInterrupt:
            raise self._interrupted(progress, handle) from None
        except HarnessError as err:
            self._errored(progress, handle, err)
            raise
        self._close(progress, handle, result)

    async def run_async(self) -> None:
        """Await the run on the kernel's loop: the kernel keeps handling widget clicks."""
        progress, handle = self._open()
        finished = threading.Event()

        async def tracked() -> Any:
            try:
                return await self.start(progress)
            finally:
                finished.set()

        future = asyncio.run_coroutine_threadsafe(tracked(), loop_thread())
        interrupted = False
        try:
            await wait_awake(future)
        except asyncio.CancelledError:
            # ipykernel turns the interrupt button into a cancellation of the cell.
            interrupted = True
            if future.cancel():
                await asyncio.to_thread(finished.wait, _WIND_DOWN_S)
        try:
            result = future.result()
        except concurrent.futures.CancelledError:
            raise self._interrupted(progress, handle) from None
        except HarnessError as err:
            self._errored(progress, handle, err)
            raise
        self._close(progress, handle, result)
        if interrupted:  # the run had ended as the interrupt came: its card, then the line
            raise RunInterrupted(self._stopped_line())


class _Note:
    """A one-line note with a true text form (no key found, run cancelled, ...)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"[harnessnb] {self.text}"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {
            "text/plain": repr(self),
            "text/html": str(panel("harnessnb-note", f"harnessnb: {self.text}", faint=True)),
        }


def plan(shell: Any, line: str, cell: str | None) -> Any:
    """Parse ``line`` and do the subcommand; a run comes back as a ``_RunJob`` to wait on."""
    try:
        sub, args = parse(line, shell.user_ns)
    except HelpShown:
        return None
    if cell is not None and sub not in ("run", "sweep") and cell.strip():
        raise UsageError(f"%%harness {sub}: only `run` and `sweep` take a cell body")
    store_there(sub, args)  # runs, failures, show: a missing store is said, not created
    return _HANDLERS[sub](shell, args, cell)


def _checked(sub: str, check: Callable[[argparse.Namespace], _T], args: argparse.Namespace) -> _T:
    """Run a ``launch._options`` check (its answer returned); its ``ConfigError`` is a
    one-line usage error."""
    try:
        return check(args)
    except ConfigError as err:
        raise UsageError(f"%harness {sub}: {err.message}") from None


def _plan_run(shell: Any, args: argparse.Namespace, cell: str | None) -> _RunJob:
    from ..loop._driver import new_id
    from ..loop._driver import run as run_loop

    task = _task(shell, args, cell)
    _checked("run", _options.check_run_options, args)
    if args.agent:
        return _plan_agent_run(shell, args, task)
    prices = _checked("run", lambda a: _options.prices_from(a, shell.user_ns), args)
    servers = _checked("run", mcp_from, args)
    try:
        contract = _options.contract_from(args, task)
        provider, note = _options.provider_from(args)
        store = _store(args.store, os.fspath(contract.workspace))
    except HarnessError as err:
        _fail(err)
        raise
    policy = _options.policy_from(args, "magic")
    run_id = new_id("run")
    options = _loop_options(args, store, prices, servers)

    def start(on_event: Callable[[RunEvent], None] | None) -> Coroutine[Any, Any, RunResult]:
        return run_loop(
            contract, provider, policy=policy, on_event=on_event, run_id=run_id, **options
        )

    return _RunJob(shell, start, store, run_id, out=args.out, quiet=args.quiet, note=note)


def _plan_agent_run(shell: Any, args: argparse.Namespace, task: str) -> _RunJob:
    from ..agents import run as run_agent
    from ..loop._driver import new_id

    try:
        agent = _options.agent_from(args)
    except ConfigError as err:
        raise UsageError(f"%harness run: {err.message}") from None
    try:
        store = _store(args.store)
    except HarnessError as err:
        _fail(err)
        raise
    run_id = new_id("run")

    def start(on_event: Callable[[RunEvent], None] | None) -> Coroutine[Any, Any, Any]:
        return run_agent(
            agent,
            task,
            args.workspace,
            session=args.session,
            store=store,
            on_event=on_event,
            tracer_provider=tracer_provider_from(args),
            run_id=run_id,
        )

    return _RunJob(shell, start, store, run_id, out=args.out, quiet=args.quiet, resumable=False)


class _LoopOptions(TypedDict):
    """What ``%harness run`` and ``%harness resume`` both hand the loop (``run``,
    ``resume``) from the magic's line, built once by ``_loop_options``."""

    store: Store
    approver: Approver | None
    prices: Prices | None
    mcp: tuple[MCPServer, ...]
    tracer_provider: Any  # --otel-endpoint's factory, or None


def _loop_options(
    args: argparse.Namespace, store: Store, prices: Prices | None, servers: tuple[MCPServer, ...]
) -> _LoopOptions:
    otel = tracer_provider_from(args)
    return {
        "store": store,
        "approver": _approver(args),
        "prices": prices,
        "mcp": servers,
        "tracer_provider": otel,
    }


def _approver(args: argparse.Namespace) -> Any:
    """``--approval-timeout S``: the widget approver waiting S seconds; else None (the
    approver ``load`` registered, which waits until answered or interrupted)."""
    if args.approval_timeout is None:
        return None
    from ._approver import WidgetApprover

    return WidgetApprover(timeout_s=args.approval_timeout)


def _task(shell: Any, args: argparse.Namespace, cell: str | None) -> str:
    line_task = words(args.task)
    if cell is not None and cell.strip():
        if line_task:
            raise UsageError(
                "%%harness run: give the task as the cell body or on the line, not both"
            )
        task = interpolate(cell, shell.user_ns).strip()
    else:
        task = line_task
    if not task:
        raise UsageError("%harness run: no task (write it in the cell body, or after `run`)")
    return task


def _plan_resume(shell: Any, args: argparse.Namespace, cell: str | None) -> _RunJob:
    from ..launch._choose import recorded_run
    from ..loop._durable import resume

    _checked("resume", _options.check_provider_options, args)
    prices = _checked("resume", lambda a: _options.prices_from(a, shell.user_ns), args)
    servers = _checked("resume", mcp_from, args)
    try:
        store = _store(args.store)
        recorded = recorded_run(store, args.run_id)  # None: resume itself says why
        provider, note = _options.resume_provider_from(args, recorded)
    except HarnessError as err:
        _fail(err)
        raise

    options = _loop_options(args, store, prices, servers)

    def start(on_event: Callable[[RunEvent], None] | None) -> Coroutine[Any, Any, RunResult]:
        return resume(args.run_id, provider, on_event=on_event, **options)

    return _RunJob(shell, start, store, args.run_id, out=args.out, quiet=args.quiet, note=note)


def _plan_replay(shell: Any, args: argparse.Namespace, cell: str | None) -> _RunJob:
    from ..loop._replay import replay

    try:
        source = _store(args.store)
        target = _store(args.into or ":memory:")
    except HarnessError as err:
        _fail(err)
        raise

    def start(on_event: Callable[[RunEvent], None] | None) -> Coroutine[Any, Any, RunResult]:
        return replay(
            args.run_id, source, store=target, workspace=args.workspace, on_event=on_event
        )

    return _RunJob(shell, start, target, None, out=args.out, quiet=args.quiet)


def _plan_runs(shell: Any, args: argparse.Namespace, cell: str | None) -> Any:
    try:
        frame = _store(args.store).runs()
    except HarnessError as err:
        _fail(err)
        raise
    frame = frame.drop(columns=[c for c in _NO_RESULT_COLUMNS if c in frame.columns])
    if args.out:
        shell.user_ns[args.out] = frame
    return frame


def _plan_failures(shell: Any, args: argparse.Namespace, cell: str | None) -> Any:
    by = tuple(c.strip() for c in args.by.split(",") if c.strip())
    try:
        frame = scrolling_frame(_store(args.store).failure_rates(by=by))
    except StoreError as err:
        if err.kind == "query":
            raise UsageError(f"%harness failures: --by {args.by!r}: {err.message}") from None
        _fail(err)
        raise
    if args.out:
        shell.user_ns[args.out] = frame
    return frame


def _plan_show(shell: Any, args: argparse.Namespace, cell: str | None) -> None:
    store = _store(args.store)
    try:
        result = RunResult.from_store(args.run_id, store=store)
    except StoreError as exc:
        if exc.kind != "missing":
            raise
        raise UsageError(f"%harness show: no run {args.run_id!r} in {store.path}") from None
    display(result)
    for title, frame in (
        ("steps", store.steps(args.run_id)),
        ("attempts", store.attempts(args.run_id)),
        ("tool calls", store.tool_calls(args.run_id)),
    ):
        display(html_object(str(bold(title))))
        display(frame)


def _plan_tb(shell: Any, args: argparse.Namespace, cell: str | None) -> None:
    err = _ERRORS.get(args.run_id)
    if err is not None:
        print(printable("".join(traceback.format_exception(err)), lines=True), end="")
        return
    store = _store(store_there("tb", args, late=True))  # a missing store: said, not made
    row = store.get_run(args.run_id)
    if row is None:
        raise UsageError(f"%harness tb: no run {args.run_id!r} in {store.path}")
    stored = row.get("error")
    if not stored:
        print(f"run {args.run_id} ended {row.get('outcome')} with no error")
        return
    print(printable(f"{stored.get('name')} [{stored.get('code')}]: {stored.get('message')}"))
    for key, value in stored.items():
        if key not in ("name", "code", "message", "causes") and value is not None:
            print(printable(f"  {key}: {value}"))
    for cause in stored.get("causes") or ():
        print(printable(f"  caused by {cause}"))
    print("(frames are kept only in the kernel that ran it; this is the stored error)")


_HANDLERS: dict[str, Callable[[Any, argparse.Namespace, str | None], Any]] = {
    "run": _plan_run,
    "resume": _plan_resume,
    "replay": _plan_replay,
    "runs": _plan_runs,
    "failures": _plan_failures,
    "show": _plan_show,
    "tb": _plan_tb,
    "sweep": lambda shell, args, cell: plan_sweep(shell, args, cell, _store),
}


@magics_class
class HarnessMagics(Magics):
    """``%harness`` and ``%%harness``: see ``%harness --help``."""

    @magic_method
    def harness(self, line: str, cell: str | None = None) -> Any:
        job = plan(self.shell, line, cell)
        if isinstance(job, _RunJob):
            job.run_sync()
            return None
        return job


HarnessMagics.harness.__doc__ = help_text()


async def harness_async(shell: Any, line: str, cell: str | None = None) -> Any:
    """The magic as a coroutine: what ``%%harness`` cells become in ipykernel."""
    job = plan(shell, line, cell)
    if isinstance(job, _RunJob):
        await job.run_async()
        return None
    return job


_CALLS = (
    "get_ipython().run_cell_magic('harness', ",
    "get_ipython().run_line_magic('harness', ",
)
_AWAIT = (
    "await __import__('harnessnb.notebook._magics', fromlist=['_']).harness_async(get_ipython(), "
)


def await_harness_cells(lines: list[str]) -> list[str]:
    """IPython post-transformer: make top-level ``%harness`` calls awaiting ones.

    Quirk (a blocking cell starves the kernel): ipykernel handles widget clicks as
    shell messages, which a synchronously blocking cell holds back until it ends,
    so Approve / Deny could never reach a waiting run. A cell that *awaits* lets
    ipykernel (7.4+) dispatch comm messages meanwhile, and keeps cell order for
    "Run All". Only top-level statements are rewritten, and only with autoawait on.
    """
    shell = get_ipython()
    if shell is None or not getattr(shell, "autoawait", False):
        return lines
    out = []
    for line in lines:
        for call in _CALLS:
            if line.startswith(call):
                line = _AWAIT + line[len(call) :]
                break
        out.append(line)
    return out


def load(shell: Any) -> None:
    """Register the magics; in ipykernel, the awaiting-cell transformer and widget approver."""
    shell.register_magics(HarnessMagics)
    if kernel_of(shell) is not None and await_harness_cells not in shell.input_transformers_post:
        shell.input_transformers_post.append(await_harness_cells)
    if widget_frontend(shell):
        from ..loop._driver import set_default_approver_factory
        from ._approver import WidgetApprover

        set_default_approver_factory(WidgetApprover)


def unload(shell: Any) -> None:
    """Undo ``load`` (``%unload_ext harnessnb``)."""
    from ..loop._driver import set_default_approver_factory

    if await_harness_cells in shell.input_transformers_post:
        shell.input_transformers_post.remove(await_harness_cells)
    set_default_approver_factory(None)
