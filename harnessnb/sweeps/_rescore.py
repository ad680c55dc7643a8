"""``hn.rescore``: a sweep's stored runs judged again by new scorers, no model called;
and what a sweep resumed by its id takes from the store.

Each sweep run that ended keeps its slot (sample, the sweep's name for its provider,
repeat), its sample and its final workspace files in the store (``sweep_runs``,
``run_files``: ``_sweep_run``). ``rescore`` reads each run back (``RunResult.from_store``),
writes its kept files into a fresh temporary folder and calls every scorer as the sweep
does, ``(run, sample, workspace)``; the scores go to the ``scores`` table under the same
(run, scorer) key: a new scorer adds rows, one of the same name replaces its rows. A run
that ended for reasons of infrastructure stays unscored (``infra_failure``).

The store is untrusted input: a kept path that is absolute, climbs out (``..``) or is
not a plain relative path is refused (``StoreError(kind="foreign")``) before any file
is written; each file is written through the workspace's containment (a symlink the
store planted cannot lead a later write out), and a kept symlink whose target leads
out of the folder is not made.

A slot is *finished* when a run of it has a stored outcome other than ``cancelled``,
``awaiting_approval`` or ``needs_reconciliation`` (a run a person stopped, or must look
at): ``hn.sweep(sweep_id=...)`` again takes a finished slot's newest run from the store
and runs every other slot afresh, as a new run of the sweep (the older run stays in the
store, counted nowhere).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import os
import posixpath
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Final

from ..loop._bridge import sync_twin
from ..loop._result import RunResult
from ..loop._store_wait import open_patiently
from ..rules._errors import ConfigError, ProviderError, StoreError
from ..rules._outcomes import RunOutcome
from ..rules._retry import SystemClock
from ..tools._process import made_in_thread
from ._sample import INFRA_OUTCOMES, Sample, Scorer
from ._sweep_result import SweepResult, SweepRun
from ._sweep_run import NamedScorer, finished_row, judged, named_scorers

if TYPE_CHECKING:
    from ..store._store import Store

__all__ = [
    "Slot",
    "finished_slots",
    "rescore",
    "rescore_sync",
    "scorers_lacking",
    "stored_run",
    "stored_slots",
]

# Outcomes of a run that leave its slot to be run again by a resumed sweep.
UNFINISHED_OUTCOMES: Final = frozenset(
    {
        RunOutcome.CANCELLED.value,
        RunOutcome.AWAITING_APPROVAL.value,
        RunOutcome.NEEDS_RECONCILIATION.value,
    }
)

Slot = tuple[str, str, int]
"""A place in a sweep: (sample id, the sweep's name for the provider, repeat)."""

# Each kept run of a sweep, the newest of each slot, with its run row's outcome.
_SLOTS: Final = """
    SELECT s.run_id, s.sample_id, s.provider, s.repeat, s.sample, r.outcome, r.model,
        r.task, r.error
    FROM sweep_runs s JOIN run_rows r ON r.run_id = s.run_id
    WHERE s.sweep_id = ? AND r.outcome IS NOT NULL
    ORDER BY s.repeat, s."at", s.run_id
"""


def _slot_rows(store: Store, sweep_id: str) -> list[dict[str, Any]]:
    return [
        {str(k): v for k, v in r.items()} for r in store.sql(_SLOTS, [sweep_id]).to_dict("records")
    ]


def stored_slots(store: Store, sweep_id: str) -> list[dict[str, Any]]:
    """The kept runs of ``sweep_id`` that ended, in (repeat, time) order, the newest
    of each slot only."""
    rows = _slot_rows(store, sweep_id)
    newest = {(str(r["sample_id"]), str(r["provider"]), int(r["repeat"])): r for r in rows}
    return list(newest.values())


def finished_slots(store: Store, sweep_id: str) -> dict[Slot, dict[str, Any]]:
    """Each finished slot of ``sweep_id`` (see the module docstring) -> its newest
    finished run's row."""
    rows = _slot_rows(store, sweep_id)
    done = [r for r in rows if str(r["outcome"]) not in UNFINISHED_OUTCOMES]
    return {(str(r["sample_id"]), str(r["provider"]), int(r["repeat"])): r for r in done}


async def rescore(
    sweep_id: str, scorers: Sequence[Scorer], *, store: Store | str | os.PathLike[str] | None = None
) -> SweepResult:
    """Score a sweep's stored runs again with ``scorers``, calling no model.

    Each run the sweep kept (the newest of each sample, provider and repeat) is read
    from the store, its final workspace files written into a fresh temporary folder
    (removed after), and each scorer called as ``hn.sweep`` calls it:
    ``(run, sample, workspace)``. The scores are written to the store's ``scores``
    (a scorer of a name already there replaces that scorer's rows). A run that ended
    for reasons of infrastructure is not scored (``infra_failure``).

    Args:
        sweep_id: The sweep (``SweepResult.sweep_id``).
        scorers: As for ``hn.sweep``.
        store: The sweep's store (a ``Store``, a path, or the default store).

    Returns:
        A ``SweepResult`` of the kept runs with the new scores only (``summary()``,
        ``compare()``...).

    Raises:
        ConfigError: No scorers, or the store keeps no run of ``sweep_id``.
        StoreError: ``foreign`` when a kept file's path is absolute or leads out.
    """
    named = named_scorers(scorers)
    if not named:
        raise ConfigError("rescore: give at least one scorer, e.g. [hn.scorers.exact()]")
    opened = await open_patiently(store, None, SystemClock())
    try:
        slots = await asyncio.to_thread(stored_slots, opened, sweep_id)
        if not slots:
            raise ConfigError(
                f"rescore: the store {opened.path} keeps no finished run of the sweep "
                f"{sweep_id!r} (a sweep of an older harnessnb kept no files)"
            )
        options = {"store": opened, "sweep_id": sweep_id}
        records = [await stored_run(opened, slot, named, options, every=True) for slot in slots]
    except BaseException:
        if opened is not store:  # opened here from a path: nobody else will close it
            opened.close()
        raise
    tags = tuple((s.name, s.version) for s in named)
    return SweepResult(sweep_id, opened, tuple(records), scorers=tags)


rescore_sync = sync_twin(
    rescore,
    """``rescore`` for blocking callers (a script, a notebook cell): runs on harnessnb's
    loop thread.""",
)


async def stored_run(
    store: Store,
    slot: dict[str, Any],
    scorers: Sequence[NamedScorer],
    options: dict[str, Any],
    *,
    every: bool,
) -> SweepRun:
    """A kept run's row, scored by ``scorers``: every one (``every``, a rescore), or
    only those without a stored row for the run (a resumed sweep: the rest are read
    back)."""
    run_id = str(slot["run_id"])
    result = await asyncio.to_thread(RunResult.from_store, run_id, store=store)
    sample = _sample(slot)
    stored = {} if every else await asyncio.to_thread(_stored_scores, store, run_id)
    missing = [s for s in scorers if (s.name, s.version) not in stored]
    kind = _infra_kind(result, slot)
    folder = None
    try:
        if missing and kind is None:  # a cancel meanwhile: the thread removes its folder
            folder = await made_in_thread(functools.partial(_materialised, store, run_id), _rmtree)
        row = _row(slot, result)
        workspace = Path(folder) if folder is not None else None
        judged_row = await judged(row, result, sample, workspace, missing, kind, options)
    finally:
        if folder is not None:
            _rmtree(folder)
    by_name = {(s.scorer, s.scorer_version): s for s in judged_row.scores}
    kept = tuple(by_name.get((s.name, s.version)) or stored[(s.name, s.version)] for s in scorers)
    return dataclasses.replace(judged_row, scores=kept)


def _sample(slot: dict[str, Any]) -> Sample:
    described = json.loads(slot["sample"]) if slot.get("sample") else {}
    if not isinstance(described, dict) or not isinstance(described.get("input"), str):
        return Sample(str(slot.get("task") or "?"), id=str(slot["sample_id"]))
    metadata = described.get("metadata")
    return Sample(
        described["input"],
        described.get("target") if isinstance(described.get("target"), str) else None,
        id=str(slot["sample_id"]),
        metadata=metadata if isinstance(metadata, dict) else None,
    )


def _row(slot: dict[str, Any], result: RunResult) -> SweepRun:
    error = result.stored_error
    kind = None
    if error is not None:
        kind = str(error.fields.get("kind") or error.code or error.name)
    row = finished_row(
        result.task,
        str(slot["provider"]),
        str(slot.get("model") or ""),
        int(slot["repeat"]),
        result,
    )
    return dataclasses.replace(row, error_kind=kind, sample_id=str(slot["sample_id"]))


def _family(root: type[Exception]) -> set[str]:
    found = {root.__name__}
    sub: type[Exception]
    for sub in root.__subclasses__():
        found |= _family(sub)
    return found


def _infra_kind(result: RunResult, slot: dict[str, Any]) -> str | None:
    """Why a stored run is not scored (a provider or store error's kind, else its
    outcome), or None: it is scored. As ``_sweep_run`` decides for a live run."""
    error = result.stored_error
    if error is not None and error.name in _family(ProviderError) | _family(StoreError):
        return str(error.fields.get("kind") or error.code)
    if result.outcome in INFRA_OUTCOMES:
        return result.outcome.value
    return None


def scorers_lacking(store: Store, run_id: str, scorers: Sequence[NamedScorer]) -> list[str]:
    """The names of ``scorers`` with no stored row for ``run_id``."""
    stored = _stored_scores(store, run_id)
    return [s.name for s in scorers if (s.name, s.version) not in stored]


def _stored_scores(store: Store, run_id: str) -> dict[tuple[str, str], Any]:
    from ._sweep_result import RunScore

    rows = store.sql(
        "SELECT scorer, scorer_version, value, explanation, error, infra_failure, infra_kind, "
        "epoch(scored_at) AS at FROM scores WHERE run_id = ?",
        [run_id],
    ).to_dict("records")
    return {
        (str(r["scorer"]), str(r["scorer_version"])): RunScore(
            str(r["scorer"]),
            str(r["scorer_version"]),
            _or_none(r["value"]),
            str(_or_none(r["explanation"]) or ""),
            _or_none(r["error"]),
            bool(r["infra_failure"]),
            _or_none(r["infra_kind"]),
            _or_none(r["at"]),
        )
        for r in rows
    }


def _or_none(value: Any) -> Any:
    import pandas as pd

    return None if value is None or value is pd.NA or (pd.isna(value) is True) else value


def kept_path(path: str, store_path: str) -> str:
    """A kept file's path as a plain relative POSIX path, or ``StoreError(foreign)``:
    the store is untrusted, and a path that is absolute or climbs out would write
    outside the folder."""
    bad = (
        not path
        or "\x00" in path
        or "\\" in path
        or path.startswith("/")
        or PurePosixPath(path).is_absolute()
        or any(part in ("..", ".", "") for part in path.split("/"))
    )
    if bad:
        raise StoreError(
            f"{store_path} keeps a run file at {path!r}, which is not a relative path "
            "inside the workspace; the store was refused and nothing was written",
            kind="foreign",
            path=store_path,
        )
    return path


def _materialised(store: Store, run_id: str) -> str:
    """A new temporary folder holding the kept files of ``run_id`` (removed if that fails)."""
    folder = tempfile.mkdtemp(prefix="harnessnb-rescore-")
    try:
        materialise(store, run_id, folder)
    except BaseException:
        _rmtree(folder)
        raise
    return folder


def _rmtree(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def materialise(store: Store, run_id: str, folder: str) -> None:
    """The kept files of ``run_id`` written into ``folder`` (new and empty), every
    path checked first, each write through the workspace's containment."""
    from ..tools._fileio import replace_walked
    from ..tools._workspace import Workspace

    rows = store.sql(
        "SELECT path, link, content FROM run_files WHERE run_id = ? ORDER BY path", [run_id]
    ).to_dict("records")
    files = [(kept_path(str(r["path"]), store.path), r["link"], r["content"]) for r in rows]
    space = Workspace(folder)
    for rel, link, content in files:
        if _or_none(link) is not None:
            continue
        data = bytes(content) if _or_none(content) is not None else b""
        with space.walk(rel, act="write", create=True) as walked:
            replace_walked(walked, data, rel)
    root = os.path.realpath(folder)
    for rel, link, _ in files:  # links last: none can redirect a file written above
        if _or_none(link) is None:
            continue
        target = str(link)
        inside = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
        if target.startswith("/") or inside == ".." or inside.startswith("../"):
            continue  # a link leading out of the folder is not made
        where = os.path.join(folder, *rel.split("/"))
        parent = os.path.dirname(where)
        os.makedirs(parent, exist_ok=True)
        if os.path.realpath(parent) == os.path.join(root, *rel.split("/")[:-1]).rstrip("/") and (
            not os.path.lexists(where)
        ):
            os.symlink(target, where)
