"""What a sweep is asked and how an answer is judged: ``Sample``, ``Score``, ``Scorer``.

A ``Sample`` is a task text with what a scorer compares the answer with (its
``target``), a stable id and files put in the run's workspace copy. A ``Score`` is one
scorer's verdict on one run: a bool or a float in [0, 1], with its explanation. A run
that ended for reasons of infrastructure (``INFRA_OUTCOMES``: the provider, a budget, a
cancel, the store) is not scored: it says nothing about the answer.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

from ..rules._errors import ConfigError
from ..rules._outcomes import RunOutcome

if TYPE_CHECKING:
    from ..loop._result import RunResult
    from ..store._store import Store

__all__ = [
    "INFRA_OUTCOMES",
    "KeepsBesideRun",
    "Sample",
    "Score",
    "Scorer",
    "sample_id",
]

# Outcomes that say nothing about the answer: the provider failed after its retries, a
# budget ran out (steps, time, tokens, money), the run was cancelled or left a write or an
# approval open. A stall, a refusal by the policy and a failed verification are the
# agent's doing and are scored.
INFRA_OUTCOMES: frozenset[RunOutcome] = frozenset(
    {
        RunOutcome.ESCALATED_RETRYABLE,
        RunOutcome.ESCALATED_TERMINAL,
        RunOutcome.STEP_CAP,
        RunOutcome.TIME_BUDGET,
        RunOutcome.TOKEN_BUDGET,
        RunOutcome.COST_BUDGET,
        RunOutcome.CANCELLED,
        RunOutcome.NEEDS_RECONCILIATION,
        RunOutcome.AWAITING_APPROVAL,
    }
)


def sample_id(text: str) -> str:
    """The id of a sample given none: the first 12 hex digits of its input's SHA-256,
    so the same input has the same id in every sweep and process."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def _relative(path: str | os.PathLike[str]) -> str:
    text = os.fspath(path)
    parts = PurePosixPath(text.replace("\\", "/")).parts
    if not parts or text.startswith(("/", "\\")) or ".." in parts or Path(text).is_absolute():
        raise ConfigError(f"a sample's file must be a relative path inside the workspace: {text!r}")
    return PurePosixPath(*parts).as_posix()


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class Sample:
    """One task of a sweep and what its answer is compared with.

    Args:
        input: The task text given to the agent.
        target: What a scorer compares the answer with (``None``: the scorer needs none,
            or is given its own).
        id: A stable id (default: derived from ``input``); two samples of one sweep may
            not share it.
        metadata: Free data kept with the sample (shown, never sent to the model).
        files: Relative path -> text or bytes, written into the run's own copy of the
            workspace before it starts.
    """

    input: str
    target: str | None = None
    id: str = ""
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict, hash=False)
    files: Mapping[str, str | bytes] = dataclasses.field(default_factory=dict, hash=False)

    def __init__(
        self,
        input: str,
        target: str | None = None,
        *,
        id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        files: Mapping[str | os.PathLike[str], str | bytes] | None = None,
    ) -> None:
        if not isinstance(input, str) or not input.strip():
            raise ConfigError(f"a sample's input must be non-empty text, got {input!r}")
        if target is not None and not isinstance(target, str):
            kind = type(target).__name__
            raise ConfigError(f"a sample's target must be text or None, got {kind}")
        if id is not None and (not isinstance(id, str) or not id.strip()):
            raise ConfigError(f"a sample's id must be non-empty text, got {id!r}")
        kept: dict[str, str | bytes] = {}
        for path, content in (files or {}).items():
            if not isinstance(content, (str, bytes)):
                raise ConfigError(f"a sample's file {os.fspath(path)!r} must be text or bytes")
            kept[_relative(path)] = content
        set_ = object.__setattr__
        set_(self, "input", input)
        set_(self, "target", target)
        set_(self, "id", id if id is not None else sample_id(input))
        set_(self, "metadata", dict(metadata or {}))
        set_(self, "files", kept)


@dataclasses.dataclass(frozen=True, slots=True)
class Score:
    """One scorer's verdict on one run: ``value`` a bool or a float in [0, 1] (1 is fully
    right), and why."""

    value: bool | float
    explanation: str = ""

    def __post_init__(self) -> None:
        value = self.value
        if isinstance(value, bool):
            return
        if not isinstance(value, (int, float)) or math.isnan(value) or not 0 <= value <= 1:
            raise ConfigError(f"a score's value must be a bool or a number in [0, 1]: {value!r}")
        object.__setattr__(self, "value", float(value))

    @property
    def number(self) -> float:
        """The value as a number: True 1.0, False 0.0."""
        return float(self.value)

    @property
    def passed(self) -> bool:
        """Fully right: True, or 1.0."""
        return self.number >= 1.0


# A scorer judges one finished run of a sample, given the run's own workspace copy;
# it may be a coroutine function. It has a ``name`` (its ``__name__`` otherwise) and
# may have a ``version``: scores are stored tagged with both.
Scorer: TypeAlias = Callable[["RunResult", Sample, Path], "Score | Awaitable[Score]"]


@runtime_checkable
class KeepsBesideRun(Protocol):
    """A scorer that keeps something beside the run it scores (the LLM judge's
    recordings): before scoring a run, the sweep (and ``hn.rescore``) hands it the store
    holding that run (the sweep's, a Dask worker's shard) and scores with what it
    returns. Passed as a value, never through ambient state."""

    def in_store(self, store: Store) -> Scorer: ...
