"""``RunResult``: what a run hands back, with a true text form and an HTML card."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from ..rules._errors import HarnessError
from ..rules._html import (
    Html,
    Tone,
    badge,
    bullets,
    card,
    code,
    details,
    facts,
    grid,
    join,
    kv_table,
    outcome_tone,
    retry_badge,
    text_block,
)
from ..rules._renamed import renamed
from ..rules._secrets import scrub
from ..rules._text import shorten
from ._contract import RunOutcome

__all__ = ["RunResult", "StoredError", "usd"]

_GOOD = {RunOutcome.SUCCESS, RunOutcome.FINISHED}
_HEAD_KEYS = ("name", "code", "message", "causes")


@dataclasses.dataclass(frozen=True)
class StoredError:
    """A run's error as the store keeps it (``HarnessError.to_dict()``), shown as that
    error's card where the error object is gone (``%harness show`` of a failed run).

    Attributes:
        name: The error's class name (``ProviderError``).
        code: Its code (``PROVIDER_AUTH``).
        message: Its message (scrubbed when it was stored).
        fields: Its context fields (``kind``, ``status``, ``retryable``...), in order.
        causes: The cause chain, as text.
    """

    name: str
    code: str
    message: str
    fields: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    causes: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StoredError:
        """The stored dict (``runs.error``) read back."""
        return cls(
            name=str(data.get("name") or "HarnessError"),
            code=str(data.get("code") or "UNKNOWN"),
            message=str(data.get("message") or ""),
            fields={k: v for k, v in data.items() if k not in _HEAD_KEYS},
            causes=tuple(str(c) for c in data.get("causes") or ()),
        )

    @property
    def retryable(self) -> bool:
        return self.fields.get("retryable") is True

    def _hint(self) -> str:
        """``rate_limited, HTTP 429, retryable, retry after 1 s`` for a provider error."""
        if "kind" not in self.fields:
            return ""
        parts = [str(self.fields["kind"])]
        if self.fields.get("status") is not None:
            parts.append(f"HTTP {self.fields['status']}")
        parts.append("retryable" if self.retryable else "not retryable")
        wait = self.fields.get("retry_after_s", self.fields.get("retry_after"))  # older: no _s
        if wait is not None:
            parts.append(f"retry after {wait:g} s")
        return ", ".join(parts)

    def _card_text(self) -> str:
        lines = [f"{self.name} [{self.code}]: {self.message}"]
        lines += [f"  {k}: {v}" for k, v in self.fields.items() if v is not None]
        lines += [f"  caused by {cause}" for cause in self.causes]
        return scrub("\n".join(lines))

    def _card_html(self) -> Html:
        hint = self._hint()
        return card(
            "harnessnb-error",
            [
                self.name,
                code(self.code),
                retry_badge(hint, retryable=self.retryable) if hint else "",
            ],
            text_block(self.message),
            kv_table(self.fields.items()),
            join(["caused by:", bullets(self.causes)]) if self.causes else "",
            tone=Tone.WARN if self.retryable else Tone.BAD,
        )


@renamed(elapsed="elapsed_s")
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
        elapsed_s: Seconds from start to end (time the process was down included on
            resume); was ``elapsed`` (deprecated).
        text: The model's last text answer.
        providers: Leaf providers that answered, in first-use order.
        attempts: Provider HTTP attempts made. retries/fallbacks/replans: counts.
        cost_usd: What the run's attempts cost in US dollars (``hn.Prices``); None
            when unknown (a model with no price) and for older stored runs.
        commands: How this run's commands were contained (``sandbox: bubblewrap`` or
            ``uncontained: no sandbox backend``); None for a run read back from the store.
        stored_error: The stored form of the error that ended a run read back from the
            store (``error`` is None there): its card is shown where ``error``'s would be.
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
    elapsed_s: float = 0.0
    text: str = ""
    providers: tuple[str, ...] = ()
    attempts: int = 0
    retries: int = 0
    fallbacks: int = 0
    replans: int = 0
    task: str = ""
    verify_detail: str | None = None
    commands: str | None = None
    cost_usd: float | None = None
    stored_error: StoredError | None = dataclasses.field(default=None, repr=False)
    step_rows: tuple[Mapping[str, Any], ...] = dataclasses.field(default=(), repr=False)

    @property
    def ok(self) -> bool:
        """True for ``success`` and ``finished`` (no check set); never for a failed check."""
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
            f"  steps {self.steps}, tokens {self.tokens}{self._cost_text()}, "
            f"{self.elapsed_s:.1f} s, verified {_verified_word(self.verified)}",
            f"  providers {', '.join(self.providers) or '-'}; attempts {self.attempts}, "
            f"retries {self.retries}, fallbacks {self.fallbacks}, replans {self.replans}",
        ]
        if self.commands:
            lines.append(f"  commands: {self.commands}")
        if self.verify_detail:
            lines.append(f"  check: {self.verify_detail}")
        if self.outcome is RunOutcome.AWAITING_APPROVAL:
            lines.append(f"  {self._waiting()}")
            if self.text:
                lines.append(f"  planned, not done: {shorten(self.text, 300)}")
        elif self.text:
            lines.append(f"  answer: {shorten(self.text, 300)}")
        for row in self.step_rows[:_TEXT_STEPS]:
            lines.append("  " + _step_text(row))
        if len(self.step_rows) > _TEXT_STEPS:
            lines.append(f"  ... {len(self.step_rows) - _TEXT_STEPS} more steps")
        shown = self._shown_error()
        if shown is not None:
            lines.append("  " + shown._card_text().replace("\n", "\n  "))
        return scrub("\n".join(lines))  # the lines not cut by shorten, too

    def _cost_text(self) -> str:
        return "" if self.cost_usd is None else f", cost {usd(self.cost_usd)}"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": self.summary_text(), "text/html": str(self._card_html())}

    def _waiting(self) -> str:
        # The last text came with the step's tool calls, which have not run: the step
        # waits uncommitted, so it must not read as done ("Writing NOTES.md...").
        return (
            f"waiting: step {self.steps + 1}'s tool calls have not run; they wait for a "
            "person's approval (resume the run to ask again)"
        )

    def _answer_html(self) -> tuple[Html, ...]:
        if self.outcome is RunOutcome.AWAITING_APPROVAL:
            planned = text_block(f"planned, not done: {shorten(self.text, 2000)}", faint=True)
            return (text_block(self._waiting()), planned if self.text else Html(""))
        return (text_block(shorten(self.text, 2000)) if self.text else Html(""),)

    def _shown_error(self) -> HarnessError | StoredError | None:
        return self.error if self.error is not None else self.stored_error

    def _card_html(self) -> Html:
        tone = outcome_tone(self.outcome.value)
        shown = self._shown_error()
        return card(
            "harnessnb-run",
            [badge(self.outcome.value, tone), code(self.run_id)],
            text_block(shorten(self.task, 200), faint=True) if self.task else "",
            facts([
                ("steps", self.steps),
                ("tokens", self.tokens),
                *([("cost", usd(self.cost_usd))] if self.cost_usd is not None else []),
                ("time", f"{self.elapsed_s:.1f} s"),
                ("verified", _verified_word(self.verified)),
                ("providers", ", ".join(self.providers) or "-"),
                ("attempts", self.attempts),
                ("retries", self.retries),
                ("fallbacks", self.fallbacks),
                ("replans", self.replans),
                *([("commands", self.commands)] if self.commands else []),
            ]),
            text_block(f"check: {self.verify_detail}") if self.verify_detail else "",
            *self._answer_html(),
            _steps_html(self.step_rows),
            shown._card_html() if shown is not None else "",
            tone=tone,
        )  # fmt: skip


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


def _steps_html(rows: tuple[Mapping[str, Any], ...]) -> Html:
    """A collapsible table of the steps (``<details>``)."""
    if not rows:
        return Html("")
    cells = [[shorten(_cell(r.get(c)), 200) for c in _STEP_COLUMNS] for r in rows]
    label = f"{len(rows)} step{'' if len(rows) == 1 else 's'}"
    return details(label, grid(_STEP_COLUMNS, cells))


def usd(dollars: float) -> str:
    """Dollars as a card shows them: cents for a dollar or more, else six decimals."""
    if dollars == 0:
        return "$0"
    return f"${dollars:,.2f}" if dollars >= 1 else f"${dollars:.6f}"


def _verified_word(verified: bool | None) -> str:
    return {True: "yes", False: "no", None: "-"}[verified]
