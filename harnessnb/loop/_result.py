"""``RunResult``: what a run hands back, with a true text form and an HTML card."""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Mapping
from typing import Any

from ..rules._errors import HarnessError
from ._contract import RunOutcome

__all__ = ["RunResult"]

_GOOD = {RunOutcome.SUCCESS, RunOutcome.FINISHED}
_WAITING = {RunOutcome.AWAITING_APPROVAL, RunOutcome.NEEDS_RECONCILIATION, RunOutcome.CANCELLED}


@dataclasses.dataclass(frozen=True)
class RunResult:
    """The end of a run.

    Attributes:
        run_id: The id under which the store keeps the run.
        outcome: How it ended (``hn.RunOutcome``).
        steps: Steps committed.
        tokens: Tokens used (input + output, all steps).
        verified: True/False when a verification ran, None when none did.
        error: The error that ended the run, if one did.
        elapsed: Seconds from start to end (time the process was down included on resume).
        text: The model's last text answer.
        providers: Leaf providers that answered, in first-use order.
        attempts: Provider HTTP attempts made. retries/fallbacks/replans: counts.
        step_rows: One mapping per committed step for the card's step table (keys
            ``step``, ``decision``, ``tools``, ``tokens``, ``provider``, ``changed``,
            ``failures``); filled by whoever has read the store (the notebook layer),
            so the repr itself stays free of I/O.
    """

    run_id: str
    outcome: RunOutcome
    steps: int
    tokens: int
    verified: bool | None = None
    error: HarnessError | None = None
    elapsed: float = 0.0
    text: str = ""
    providers: tuple[str, ...] = ()
    attempts: int = 0
    retries: int = 0
    fallbacks: int = 0
    replans: int = 0
    task: str = ""
    verify_detail: str | None = None
    step_rows: tuple[Mapping[str, Any], ...] = dataclasses.field(default=(), repr=False)

    @property
    def ok(self) -> bool:
        """True for ``success`` and ``finished``."""
        return self.outcome in _GOOD

    def __repr__(self) -> str:
        err = f", error={self.error.code}" if self.error else ""
        return (
            f"RunResult(run_id={self.run_id!r}, outcome={self.outcome.value!r}, "
            f"steps={self.steps}, tokens={self.tokens}, verified={self.verified}{err})"
        )

    def summary_text(self) -> str:
        lines = [
            f"run {self.run_id}: {self.outcome.value}",
            f"  steps {self.steps}, tokens {self.tokens}, {self.elapsed:.1f} s, "
            f"verified {_verified_word(self.verified)}",
            f"  providers {', '.join(self.providers) or '-'}; attempts {self.attempts}, "
            f"retries {self.retries}, fallbacks {self.fallbacks}, replans {self.replans}",
        ]
        if self.verify_detail:
            lines.append(f"  check: {self.verify_detail}")
        if self.text:
            lines.append(f"  answer: {_clip(self.text, 300)}")
        for row in self.step_rows[:_TEXT_STEPS]:
            lines.append("  " + _step_text(row))
        if len(self.step_rows) > _TEXT_STEPS:
            lines.append(f"  ... {len(self.step_rows) - _TEXT_STEPS} more steps")
        if self.error is not None:
            lines.append("  " + self.error._card_text().replace("\n", "\n  "))
        return "\n".join(lines)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": self.summary_text(), "text/html": self._card_html()}

    def _card_html(self) -> str:
        esc = html.escape
        if self.outcome in _GOOD:
            color = "#2a7"
        elif self.outcome in _WAITING:
            color = "#b80"
        else:
            color = "#c33"
        facts = [
            ("steps", str(self.steps)),
            ("tokens", str(self.tokens)),
            ("time", f"{self.elapsed:.1f} s"),
            ("verified", _verified_word(self.verified)),
            ("providers", ", ".join(self.providers) or "-"),
            ("attempts", str(self.attempts)),
            ("retries", str(self.retries)),
            ("fallbacks", str(self.fallbacks)),
            ("replans", str(self.replans)),
        ]
        cells = "".join(
            f"<td style='padding:0 10px 0 0'><b>{esc(k)}</b> {esc(v)}</td>" for k, v in facts
        )
        answer = (
            f"<div style='white-space:pre-wrap;margin-top:6px'>{esc(_clip(self.text, 2000))}</div>"
            if self.text
            else ""
        )
        check = (
            f"<div style='margin-top:4px'>check: {esc(self.verify_detail)}</div>"
            if self.verify_detail
            else ""
        )
        error = self.error._card_html() if self.error is not None else ""
        steps = _steps_html(self.step_rows)
        return (
            "<div class='harnessnb-run' style='border:1px solid #ccc;border-radius:6px;"
            "padding:8px 12px;font-family:sans-serif;font-size:13px'>"
            f"<span style='background:{color};color:white;border-radius:4px;padding:1px 8px'>"
            f"{esc(self.outcome.value)}</span> <code>{esc(self.run_id)}</code>"
            f"<div style='color:#555;margin:4px 0'>{esc(_clip(self.task, 200))}</div>"
            f"<table><tr>{cells}</tr></table>{check}{answer}{steps}{error}</div>"
        )


_TEXT_STEPS = 20
_STEP_COLUMNS = ("step", "decision", "tools", "tokens", "provider", "changed", "failures")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or "-"
    return str(value)


def _step_text(row: Mapping[str, Any]) -> str:
    parts = [
        f"{c} {_cell(row.get(c))}"
        for c in _STEP_COLUMNS[1:]
        if row.get(c) not in (None, "", (), [])
    ]
    return f"step {_cell(row.get('step'))}: " + ", ".join(parts)


def _steps_html(rows: tuple[Mapping[str, Any], ...]) -> str:
    """A collapsible table of the steps (``<details>``), every cell escaped."""
    if not rows:
        return ""
    esc = html.escape
    th = "<th style='text-align:left;padding-right:10px'>"
    head = "".join(f"{th}{c}</th>" for c in _STEP_COLUMNS)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td style='padding-right:10px'>{esc(_clip(_cell(r.get(c)), 200))}</td>"
            for c in _STEP_COLUMNS
        )
        + "</tr>"
        for r in rows
    )
    return (
        f"<details style='margin-top:6px'><summary>{len(rows)} step"
        f"{'' if len(rows) == 1 else 's'}</summary>"
        f"<table style='font-size:12px'><tr>{head}</tr>{body}</table></details>"
    )


def _verified_word(verified: bool | None) -> str:
    return {True: "yes", False: "no", None: "-"}[verified]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
