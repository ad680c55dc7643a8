"""Run events as values: one frozen class per kind, each with its ``kind`` and its fields.

An ``on_event`` callback receives one of the classes of ``AnyEvent``; every one is a
``RunEvent`` sharing ``run_id``, ``step`` and ``at`` (the time it happened, seconds
since the epoch). ``kind`` is each class's discriminator (a ``Literal`` class
attribute: ``event.kind == "retry"`` and ``isinstance(event, RetryEvent)`` agree), so a
listener matches on types::

    match event:
        case RetryEvent(error_kind=kind, delay_s=wait): ...
        case FinishedEvent(outcome=outcome): ...

The place that emits an event builds it with its own fields; the run stamps
``run_id``, ``step`` and ``at`` as it sends it (``stamped``). Field names follow the
units rule: seconds end ``_s``, dollars ``_usd``.

``event.data``, the dict the events were before, still answers with the old key
names (``delay``, ``retry_after``, ``kind`` for the error kind...) for one release, and
warns ``DeprecationWarning`` the first time it is read.

Pure: the standard library only. Here, below ``tools/``, because the gate and the
executor emit events too.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

__all__ = [
    "AnyEvent",
    "ApprovalDecidedEvent",
    "ApprovalRequestedEvent",
    "DeltaEvent",
    "EventKind",
    "FellBackEvent",
    "FinishedEvent",
    "RefusedEvent",
    "ReplanEvent",
    "RetryEvent",
    "RunEvent",
    "ShrunkEvent",
    "StalledEvent",
    "StartedEvent",
    "StepEvent",
    "ToolCallEvent",
    "ToolEvent",
]  # the events ``harnessnb.events`` re-exports; ``stamped`` is the emitters' helper

EventKind = Literal[
    "started",
    "step",
    "delta",
    "tool_call",
    "refused",
    "approval_requested",
    "approval_decided",
    "retry",
    "fell_back",
    "shrunk",
    "replan",
    "stalled",
    "finished",
]

_BASE = frozenset({"run_id", "step", "at"})
_warned = [False]  # ``.data`` warns once per process


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunEvent:
    """What every run event has: the run, the step it happened in, and when.

    ``run_id``, ``step`` and ``at`` are filled in by the run as it sends the event.
    """

    kind: ClassVar[EventKind]
    # The old ``data`` key of a field renamed by the units rule (new name -> old).
    _old_names: ClassVar[dict[str, str]] = {}

    run_id: str = ""
    step: int = 0
    at: float = 0.0

    @property
    def data(self) -> dict[str, Any]:
        """Deprecated: the event's fields as the dict events were, with the old key
        names. Read the fields (``event.delay_s``) or match on the class instead."""
        if not _warned[0]:
            _warned[0] = True
            warnings.warn(
                "RunEvent.data is deprecated and goes in the next release: read the "
                f"event's fields (harnessnb.events.{type(self).__name__}) instead",
                DeprecationWarning,
                stacklevel=2,
            )
        old = self._old_names
        return {
            old.get(f.name, f.name): getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in _BASE
        }


@dataclasses.dataclass(frozen=True, kw_only=True)
class StartedEvent(RunEvent):
    """The run started (``resumed``: a resume took it up); ``session`` names a coding
    agent's named session."""

    kind: ClassVar[Literal["started"]] = "started"
    provider: str
    model: str | None
    max_steps: int
    task: str | None = None
    resumed: bool = False
    session: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepEvent(RunEvent):
    """A step ended: the run's tokens and spend so far (``cost_usd`` None when unknown),
    the step's tool calls, whether it changed the workspace, the provider that served it."""

    kind: ClassVar[Literal["step"]] = "step"
    tokens: int
    tool_calls: int
    provider: str | None
    cost_usd: float | None = None
    changed_workspace: bool | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class DeltaEvent(RunEvent):
    """Answer text streamed since the last delta (its last ``DELTA_TAIL`` characters);
    ``restart`` when it begins a new attempt's answer (drop what came before)."""

    kind: ClassVar[Literal["delta"]] = "delta"
    text: str
    restart: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToolCallEvent(RunEvent):
    """A tool call ended (a coding agent's also when it starts: ``status`` started).

    ``status`` is ``ok``, ``error``, ``refused``, ``deferred`` (or ``started``);
    ``args`` the model's arguments (a coding agent's as JSON text); ``error`` the
    failure's ``to_dict()``; ``executions`` how often the tool body ran.
    """

    kind: ClassVar[Literal["tool_call"]] = "tool_call"
    tool: str
    args: dict[str, Any] | str
    status: str
    call_id: str | None = None
    ok: bool | None = None
    changed_workspace: bool | None = None
    executions: int | None = None
    error: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class RefusedEvent(RunEvent):
    """An act was refused: by ``source`` (``policy``, ``approver``, ``containment``, or
    a coding agent's own permission mode), under ``rule`` of ``layer``."""

    kind: ClassVar[Literal["refused"]] = "refused"
    act: str
    target: str
    rule: str | None
    layer: str | None
    tool: str | None = None
    call_id: str | None = None
    source: str | None = None
    message: str | None = None
    reason: str | None = None


@dataclasses.dataclass(frozen=True)
class ApprovalFields:
    """What an approver is asked, declared once: ``hn.ApprovalRequest`` (in ``tools/``,
    which documents them) and ``ApprovalRequestedEvent`` are these fields."""

    act: str
    target: str
    preview: str
    rule: str | None
    layer: str | None
    tool: str
    args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    call_id: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ApprovalRequestedEvent(ApprovalFields, RunEvent):
    """The approver was asked (the fields of ``hn.ApprovalRequest``)."""

    kind: ClassVar[Literal["approval_requested"]] = "approval_requested"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ApprovalDecidedEvent(RunEvent):
    """The approver answered: ``decision`` approve, deny or defer, with its reason."""

    kind: ClassVar[Literal["approval_decided"]] = "approval_decided"
    tool: str
    decision: Literal["approve", "deny", "defer"]
    reason: str | None = None
    call_id: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetryEvent(RunEvent):
    """A failed call is tried again after ``delay_s`` seconds: attempt ``attempt`` of
    ``max_attempts`` (None when a coding agent did not say), the failure's
    ``error_kind`` and HTTP ``status``, the server's ``retry_after_s``."""

    kind: ClassVar[Literal["retry"]] = "retry"
    _old_names: ClassVar[dict[str, str]] = {
        "error_kind": "kind",
        "delay_s": "delay",
        "retry_after_s": "retry_after",
    }
    error_kind: str
    status: int | None
    attempt: int | None
    max_attempts: int | None
    delay_s: float
    retry_after_s: float | None = None
    provider: str | None = None
    detail: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class FellBackEvent(RunEvent):
    """``from_provider`` (``model``) failed with ``error_kind``: the next one answers."""

    kind: ClassVar[Literal["fell_back"]] = "fell_back"
    _old_names: ClassVar[dict[str, str]] = {"error_kind": "kind"}
    from_provider: str
    model: str | None
    error_kind: str | None
    status: int | None


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShrunkEvent(RunEvent):
    """The context was too long: old tool output dropped (the request's JSON from
    ``before_chars`` to ``after_chars`` characters) and the call tried again."""

    kind: ClassVar[Literal["shrunk"]] = "shrunk"
    _old_names: ClassVar[dict[str, str]] = {"before_chars": "before", "after_chars": "after"}
    before_chars: int
    after_chars: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReplanEvent(RunEvent):
    """A stall was seen (``signal``, ``detail``): the model is told to change approach."""

    kind: ClassVar[Literal["replan"]] = "replan"
    signal: str
    detail: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class StalledEvent(RunEvent):
    """A stall was seen again (``signal``, ``detail``): the run stops."""

    kind: ClassVar[Literal["stalled"]] = "stalled"
    signal: str
    detail: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class FinishedEvent(RunEvent):
    """The run ended: its ``outcome`` (a ``RunOutcome`` value), steps, tokens, spend
    (None when unknown), whether it verified, and its error's ``to_dict()``."""

    kind: ClassVar[Literal["finished"]] = "finished"
    outcome: str
    steps: int
    tokens: int
    cost_usd: float | None = None
    verified: bool | None = None
    error: dict[str, Any] | None = None


AnyEvent = (
    StartedEvent
    | StepEvent
    | DeltaEvent
    | ToolCallEvent
    | RefusedEvent
    | ApprovalRequestedEvent
    | ApprovalDecidedEvent
    | RetryEvent
    | FellBackEvent
    | ShrunkEvent
    | ReplanEvent
    | StalledEvent
    | FinishedEvent
)
"""Every event a run emits, one class per kind (match on it)."""

ToolEvent = ToolCallEvent | RefusedEvent | ApprovalRequestedEvent | ApprovalDecidedEvent
"""The events the gate and the tool executor emit."""


def stamped(event: AnyEvent, run_id: str, step: int, at: float) -> AnyEvent:
    """``event`` with its run, step and time filled in (as the run sends it)."""
    # Not dataclasses.replace: this is every event's path, and a plain call is faster.
    return type(event)(**{**vars(event), "run_id": run_id, "step": step, "at": at})
