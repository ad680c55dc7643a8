"""One run of a sweep: its own copy of the workspace (its sample's files written in),
``hn.run``, its scores, and its row (any error becomes the row: a sweep never stops for
one run), which keeps what the sweep's grid shows of the run (its steps, its final
text cut short, its error's card). Shared by the local sweep (``_sweep``) and the runs
on Dask workers (``_sweep_dask``).

Each of the sweep's scorers judges the run as it ends, given the ``RunResult``, the
``Sample`` and the run's workspace copy (before the copy is removed): a coroutine
function awaited, any other callable on a daemon thread (it may block: run a command).
A scorer that raises, or does not finish by its deadline (its own ``timeout_s`` and a
grace, else ``SCORER_TIMEOUT_S``), gives a row with no value and the ``error``, never a
task failure.
A run that ended for reasons of infrastructure (``INFRA_OUTCOMES``, or a provider or
store error) is not scored: a row per scorer says ``infra_failure``. The rows go to
the run's store (``scores``) and on the run's ``SweepRun``.

A run that ends keeps its final workspace in the store (``run_files``, with its slot
and sample in ``sweep_runs``), read before its copy is removed, so a scorer can judge
it later (``hn.rescore``): every regular file, text or binary, up to ``MAX_FILE_BYTES``
each and ``MAX_RUN_BYTES`` and ``MAX_RUN_FILES`` a run (walked in path order: what
would pass a cap is left out, its path listed in ``files_cut``), each symlink as its
target (never followed); other entries (a FIFO, a socket) are left out and listed."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import logging
import math
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..loop._contract import RunOutcome, TaskContract
from ..loop._driver import new_id, run
from ..rules._errors import (
    MAX_MESSAGE,
    ConfigError,
    HarnessError,
    ProviderError,
    StoreError,
    wrap_unknown,
)
from ..rules._html import Html
from ..rules._secrets import scrub
from ..rules._text import clip
from ..store._writes import MAX_EXPLANATION
from ..tools._blocking import run_blocking
from ..tools._process import TERM_GRACE_S, made_in_thread
from ._sample import INFRA_OUTCOMES, KeepsBesideRun, Sample, Score, Scorer
from ._sweep_result import MAX_GRID_STEPS, MAX_GRID_TEXT, RunScore, SweepRun

if TYPE_CHECKING:
    from ..loop._result import RunResult
    from ..providers._completion import Provider
    from ..store._row_types import RunFileRow, ScoreRow, SweepRunRow
    from ..store._store import Store

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_RUN_BYTES",
    "MAX_RUN_FILES",
    "SCORER_GRACE_S",
    "SCORER_TIMEOUT_S",
    "NamedScorer",
    "crashed",
    "finished_row",
    "judged",
    "kept_files",
    "named_scorers",
    "one_run",
    "scorer_deadline_s",
    "unfit_template_entry",
]

# What a sweep run keeps of its final workspace (``kept_files``).
MAX_FILE_BYTES: Final = 1 << 20
MAX_RUN_BYTES: Final = 20 << 20
MAX_RUN_FILES: Final = 2_000
# How many of the paths the caps left out a run's ``files_cut`` names.
_CUT_NAMED: Final = 100

_log = logging.getLogger("harnessnb.sweep")


@dataclasses.dataclass(frozen=True)
class NamedScorer:
    """A scorer of a sweep under its name and version (what its rows are tagged with)."""

    name: str
    version: str
    score: Scorer


def named_scorers(scorers: Iterable[Scorer] | None) -> tuple[NamedScorer, ...]:
    """Each scorer with its name (its ``name`` attribute, else ``__name__``, else its
    class's name) and version (its ``version`` attribute, else ``"1"``).

    Raises:
        ConfigError: not a list of callables, or two scorers with one name.
    """
    if scorers is None:
        return ()
    if callable(scorers) or isinstance(scorers, str | bytes | Mapping):
        raise ConfigError("sweep: scorers must be a list of scorers, e.g. scorers=[my_scorer]")
    named: list[NamedScorer] = []
    for scorer in scorers:
        if not callable(scorer):
            raise ConfigError(f"sweep: a scorer must be callable, not {type(scorer).__name__}")
        name = getattr(scorer, "name", None)
        if not isinstance(name, str) or not name:
            name = getattr(scorer, "__name__", None)
        if not isinstance(name, str) or not name:
            name = type(scorer).__name__
        version = getattr(scorer, "version", None)
        named.append(NamedScorer(name, "1" if version is None else str(version), scorer))
    names = [s.name for s in named]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(
            f"sweep: two scorers are named {twice[0]!r}; give one a name attribute of its own"
        )
    return tuple(named)


async def one_run(
    contract: TaskContract,
    name: str,
    provider: Provider,
    repeat: int,
    keep: bool,
    options: dict[str, Any],
    *,
    run_id: str | None = None,
    sample: Sample | None = None,
    scorers: Sequence[NamedScorer] = (),
) -> SweepRun:
    """One run in its own copy of the workspace, scored by ``scorers``; any error
    becomes its row."""
    run_id, folder = run_id or new_id("run"), None
    sample = sample if sample is not None else Sample(contract.task)
    try:
        folder = await _copied(os.fspath(contract.workspace))
        if sample.files:
            await asyncio.to_thread(_write_files, folder, sample.files)
        own = dataclasses.replace(contract, workspace=folder)
        result: RunResult = await run(own, provider, run_id=run_id, **options)
        scores = await _scored(result, sample, Path(folder), scorers, store=options.get("store"))
        kept = await asyncio.to_thread(kept_files, folder)
    except HarnessError as exc:
        row = crashed(contract, name, provider, repeat, run_id, exc)
        return await _with_scores(row, sample, _unscored(scorers, exc, row.outcome), options)
    except Exception as exc:  # a crash (or a copy that failed) is a row: the sweep goes on
        row = crashed(contract, name, provider, repeat, run_id, wrap_unknown(exc))
        return await _with_scores(row, sample, _unscored(scorers, None, row.outcome), options)
    finally:
        if folder is not None and not keep:  # at once, even while being cancelled
            shutil.rmtree(folder, ignore_errors=True)
    await _keep(result.run_id, name, repeat, sample, kept, options)
    return await _with_scores(
        finished_row(contract.task, name, provider.model, repeat, result), sample, scores, options
    )


def kept_files(folder: str) -> tuple[list[RunFileRow], dict[str, Any] | None]:
    """The files of a run's final workspace the store keeps, in path order, and what
    the caps left out (None when nothing): ``count``, the first paths, the caps."""
    rows: list[RunFileRow] = []
    cut: list[str] = []
    total = 0
    for here, dirs, files in os.walk(folder):  # symlinks to folders are not entered
        dirs.sort()
        entries = sorted([*files, *(d for d in dirs if os.path.islink(os.path.join(here, d)))])
        for name in entries:
            path = os.path.join(here, name)
            rel = Path(os.path.relpath(path, folder)).as_posix()
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                rows.append({"path": rel, "link": os.readlink(path)})
                continue
            size = os.lstat(path).st_size
            fits = total + size <= MAX_RUN_BYTES and len(rows) < MAX_RUN_FILES
            if not stat.S_ISREG(mode) or size > MAX_FILE_BYTES or not fits:
                cut.append(rel)
                continue
            with open(path, "rb") as f:
                content = f.read(MAX_FILE_BYTES + 1)
            if len(content) > MAX_FILE_BYTES:  # grew while read
                cut.append(rel)
                continue
            total += len(content)
            rows.append({"path": rel, "content": content, "size": len(content)})
    if not cut:
        return rows, None
    caps = {"file_bytes": MAX_FILE_BYTES, "run_bytes": MAX_RUN_BYTES, "files": MAX_RUN_FILES}
    return rows, {"count": len(cut), "paths": cut[:_CUT_NAMED], "caps": caps}


async def _keep(
    run_id: str,
    name: str,
    repeat: int,
    sample: Sample,
    kept: tuple[list[RunFileRow], dict[str, Any] | None],
    options: dict[str, Any],
) -> None:
    """The run's slot, sample and final files written to its store (a store that fails
    is logged: the run's row stands; the run is then not resumed from nor rescored)."""
    store, sweep_id = options.get("store"), options.get("sweep_id")
    if store is None or not sweep_id:
        return
    from ..store._writer import store_writer

    described: dict[str, Any] = {"input": sample.input, "target": sample.target}
    described |= {"id": sample.id, "metadata": dict(sample.metadata)}
    files, cut = kept
    slot: SweepRunRow = {
        "sweep_id": str(sweep_id),
        "run_id": run_id,
        "sample_id": sample.id,
        "provider": name,
        "repeat": repeat,
        "sample": described,
        "files_cut": cut,
    }
    try:
        await store_writer(store).queued.add_sweep_run(slot, files)
    except HarnessError as exc:
        _log.warning("sweep: the files of %s were not stored: %s", run_id, exc)


def finished_row(task: str, name: str, model: str, repeat: int, result: RunResult) -> SweepRun:
    """The row of a run of a sweep that ended with ``result``."""
    return SweepRun(
        task,
        name,
        model,
        repeat,
        result.outcome.value,
        result.steps,
        result.tokens,
        result.cost_usd,
        result.elapsed_s,
        _error_kind(result.error),
        retries=result.retries,
        run_id=result.run_id,
        step_summaries=result.step_summaries[:MAX_GRID_STEPS],
        text=clip(scrub(result.text), MAX_GRID_TEXT),
        error_card=Html("") if result.error is None else result.error._card_html(),
    )


def _write_files(folder: str, files: Mapping[str, str | bytes]) -> None:
    """A sample's files written into the run's copy, each walked inside it (a symlink
    of the template leading out is refused, as for the agent's own writes)."""
    from ..tools._fileio import replace_walked
    from ..tools._workspace import Workspace

    space = Workspace(folder)
    for rel, content in files.items():
        data = content.encode("utf-8") if isinstance(content, str) else content
        with space.walk(rel, act="write", create=True) as walked:
            replace_walked(walked, data, rel)


async def _scored(
    result: RunResult,
    sample: Sample,
    workspace: Path,
    scorers: Sequence[NamedScorer],
    *,
    store: Store | None = None,
) -> tuple[RunScore, ...]:
    """Every scorer's row for a run that ended: none scored for an infrastructure end.
    A scorer that keeps something beside the run is handed ``store`` (the run's)."""
    if not scorers:
        return ()
    error = result.error
    if result.outcome in INFRA_OUTCOMES or isinstance(error, ProviderError | StoreError):
        return _unscored(scorers, error, result.outcome.value)
    return tuple([await _score(s, result, sample, workspace, store) for s in scorers])


def _unscored(
    scorers: Sequence[NamedScorer], error: HarnessError | None, outcome: str | None
) -> tuple[RunScore, ...]:
    """The rows of a run not scored: infrastructure, its kind the provider or store
    error's, else the run's outcome."""
    kind = _error_kind(error) if isinstance(error, ProviderError | StoreError) else outcome
    at = time.time()
    return tuple(
        RunScore(s.name, s.version, infra_failure=True, infra_kind=kind, scored_at=at)
        for s in scorers
    )


SCORER_TIMEOUT_S: Final = 300.0
"""How long a sweep waits for a scorer with no ``timeout_s`` attribute of its own."""
SCORER_GRACE_S: Final = 3 * TERM_GRACE_S
"""Added to a scorer's own ``timeout_s``: a command scorer stops its process at its
timeout (SIGTERM, SIGKILL, the pipes drained) and says so itself within this."""


def scorer_deadline_s(scorer: object) -> float:
    """How long a sweep waits for ``scorer``: its own ``timeout_s`` (a number > 0) and
    ``SCORER_GRACE_S``, else ``SCORER_TIMEOUT_S``."""
    own = getattr(scorer, "timeout_s", None)
    if isinstance(own, int | float) and not isinstance(own, bool) and 0 < own < math.inf:
        return float(own) + SCORER_GRACE_S
    return SCORER_TIMEOUT_S


async def _score(
    scorer: NamedScorer, result: RunResult, sample: Sample, workspace: Path, store: Store | None
) -> RunScore:
    """One scorer's row: its value and explanation, or the error it raised.

    The call has a deadline (``scorer_deadline_s``); past it the row is a scoring error
    ("the scorer did not finish in N s") and the sweep goes on. A coroutine scorer is
    cancelled there. A sync scorer runs on a daemon thread (``run_blocking``), which
    cannot be killed: the sweep stops waiting for it and the thread is left to end on
    its own, holding neither the sweep's slot nor the interpreter's exit."""
    fn = scorer.score
    limit_s = scorer_deadline_s(fn)
    try:
        if store is not None and isinstance(fn, KeepsBesideRun):
            fn = fn.in_store(store)
        deadline = asyncio.timeout(limit_s)
        try:
            async with deadline:
                got = await _called(fn, result, sample, workspace)
        except TimeoutError:
            if not deadline.expired():  # the scorer's own TimeoutError: its message
                raise
            raise TimeoutError(f"the scorer did not finish in {limit_s:g} s") from None
        if isinstance(got, bool | int | float):  # a bare value: a Score without a why
            got = Score(got)
        if not isinstance(got, Score):
            raise TypeError(f"the scorer returned {type(got).__name__}, not a Score")
    except Exception as exc:  # a scoring error: a row, never the run's failure
        text = clip(scrub(f"{type(exc).__name__}: {exc}"), MAX_MESSAGE)
        return RunScore(scorer.name, scorer.version, error=text, scored_at=time.time())
    explanation = clip(scrub(got.explanation or ""), MAX_EXPLANATION)
    return RunScore(scorer.name, scorer.version, got.number, explanation, scored_at=time.time())


async def _called(fn: Scorer, result: RunResult, sample: Sample, workspace: Path) -> Any:
    """What ``fn`` returned for the run: a coroutine function awaited, any other callable
    on a daemon thread (it may block: run a command, read a file), an awaitable it
    returned awaited."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 (an object with an async __call__)
    ):
        got: Any = await fn(result, sample, workspace)  # type: ignore[misc]
    else:
        got = await run_blocking(fn, result, sample, workspace)
    if inspect.isawaitable(got):
        got = await got
    return got


async def _with_scores(
    row: SweepRun, sample: Sample, scores: tuple[RunScore, ...], options: dict[str, Any]
) -> SweepRun:
    """``row`` with its sample and scores, the scores written to the run's store (a
    store that fails is logged: the rows stay on the result)."""
    row = dataclasses.replace(row, sample_id=sample.id, scores=scores)
    store = options.get("store")
    if not scores or store is None:
        return row
    from ..store._writer import store_writer

    rows: list[ScoreRow] = [
        {
            "sweep_id": options.get("sweep_id"),
            "run_id": row.run_id or "",
            "sample_id": sample.id,
            "scorer": s.scorer,
            "scorer_version": s.scorer_version,
            "value": s.value,
            "explanation": s.explanation,
            "error": s.error,
            "infra_failure": s.infra_failure,
            "infra_kind": s.infra_kind,
            "scored_at": s.scored_at,
        }
        for s in scores
    ]
    try:
        await store_writer(store).queued.add_scores(rows)
    except HarnessError as exc:
        _log.warning("sweep: the scores of %s were not stored: %s", row.run_id, exc)
    return row


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
        error_card=exc._card_html(),
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
    return await made_in_thread(functools.partial(_copy_workspace, template), _removed)


def _removed(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)


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


async def judged(
    row: SweepRun,
    result: RunResult,
    sample: Sample,
    workspace: Path | None,
    scorers: Sequence[NamedScorer],
    infra: str | None,
    options: dict[str, Any],
) -> SweepRun:
    """``row`` scored by ``scorers`` as a live run is (``hn.rescore``, a resumed
    sweep): each called ``(run, sample, workspace)``, or none when ``infra`` names why
    the run is not scored; the rows written to ``options["store"]``."""
    if infra is not None or workspace is None:
        scores = _unscored(scorers, None, infra)
    else:
        store = options.get("store")
        scores = tuple([await _score(s, result, sample, workspace, store) for s in scorers])
    return await _with_scores(row, sample, scores, options)
