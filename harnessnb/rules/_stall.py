"""Stall detection: notice an agent going round in circles, replan once, then stop.

Two signals, both pure functions of the steps seen so far:

- ``window``: ``window`` consecutive steps that changed nothing in the workspace AND
  repeated a tool call already seen since the last productive step;
- ``repetition``: the exact same call signature ``window`` steps in a row, whatever
  changed (a loop rewriting the same bytes changes nothing, but a loop appending
  does; both are caught here).

Exploring (four reads of four different files) trips neither.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any, Literal

from ._text import shorten

__all__ = ["StallDetector", "StallPolicy", "StallSignal", "call_signature", "replan_directive"]

_SHOWN = 160  # characters of a call signature quoted in a stall's detail and directive


@dataclasses.dataclass(frozen=True)
class StallPolicy:
    """When to call an agent stuck.

    Args:
        window: Steps in a row that trip a signal (3). 0 disables stall detection.
        max_replans: Replan directives before a stall ends the run (1).
    """

    window: int = 3
    max_replans: int = 1

    def __post_init__(self) -> None:
        if self.window < 0 or self.max_replans < 0:
            raise ValueError("StallPolicy: window and max_replans must be >= 0")


@dataclasses.dataclass(frozen=True)
class StallSignal:
    """A stall was seen at ``step``: ``action`` is replan (first) or stalled (final)."""

    step: int
    signal: Literal["window", "repetition"]
    action: Literal["replan", "stalled"]
    detail: str
    tried: tuple[str, ...]


def call_signature(name: str, arguments: dict[str, Any]) -> str:
    """A canonical text for a tool call: same name and arguments, same signature."""
    return f"{name}({json.dumps(arguments, sort_keys=True, ensure_ascii=False)})"


def _step_signature(calls: Sequence[str]) -> str:
    return " + ".join(calls)


class StallDetector:
    """Feed it each step's calls and whether the workspace changed; it says when stuck.

    Its state is a small dict (``state()`` / ``from_state``) so a resumed run keeps
    counting where it was.
    """

    def __init__(self, policy: StallPolicy) -> None:
        self.policy = policy
        self.replans = 0
        self._seen: list[str] = []  # call signatures since the last productive step
        self._idle_repeats = 0  # consecutive unproductive steps that repeated a call
        self._last_sig: str | None = None
        self._same_in_row = 0

    def observe(self, step: int, calls: Sequence[str], changed: bool) -> StallSignal | None:
        """Record one step (its call signatures, in order) and return a signal if stuck.

        A step with no calls is a final answer; it resets nothing and signals nothing.
        """
        if self.policy.window == 0 or not calls:
            return None
        repeated = any(c in self._seen for c in calls)
        if changed:
            self._seen = []
            self._idle_repeats = 0
        elif repeated:
            self._idle_repeats += 1
        else:
            self._idle_repeats = 0
        self._seen.extend(c for c in calls if c not in self._seen)

        sig = _step_signature(calls)
        self._same_in_row = self._same_in_row + 1 if sig == self._last_sig else 1
        self._last_sig = sig

        kind: Literal["window", "repetition"] | None = None
        if self._same_in_row >= self.policy.window:
            kind = "repetition"
            detail = f"the same call {self._same_in_row} steps in a row: {shorten(sig, _SHOWN)}"
        elif self._idle_repeats >= self.policy.window:
            kind = "window"
            detail = (
                f"{self._idle_repeats} steps in a row changed nothing and repeated earlier calls"
            )
        if kind is None:
            return None

        tried = tuple(self._seen)
        # After a signal the counters start over: a replanned agent gets a full window.
        self._same_in_row = 0
        self._idle_repeats = 0
        if self.replans < self.policy.max_replans:
            self.replans += 1
            return StallSignal(step, kind, "replan", detail, tried)
        return StallSignal(step, kind, "stalled", detail, tried)

    def state(self) -> dict[str, Any]:
        return {
            "replans": self.replans,
            "seen": list(self._seen),
            "idle_repeats": self._idle_repeats,
            "last_sig": self._last_sig,
            "same_in_row": self._same_in_row,
        }

    @classmethod
    def from_state(cls, policy: StallPolicy, state: dict[str, Any]) -> StallDetector:
        det = cls(policy)
        det.replans = int(state.get("replans", 0))
        det._seen = list(state.get("seen", []))
        det._idle_repeats = int(state.get("idle_repeats", 0))
        det._last_sig = state.get("last_sig")
        det._same_in_row = int(state.get("same_in_row", 0))
        return det


def replan_directive(signal: StallSignal) -> str:
    """The message added to the conversation on the first stall."""
    tried = "\n".join(f"- {shorten(t, _SHOWN)}" for t in signal.tried[-8:]) or "- (nothing new)"
    return (
        "You appear to be stuck: "
        f"{signal.detail}. You have already tried:\n{tried}\n"
        "Repeating these calls will end the run. Change approach: use what those calls "
        "already returned, try a different action, or give your final answer now."
    )
