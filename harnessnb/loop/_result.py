"""``RunResult``: what a run hands back, with a true text form and an HTML card.

Its steps are ``StepSummary`` values the driver builds as it commits each step
(``StepSummary.of``, from the step's row, tool rows and attempt rows: what it already
holds), so the card reads no store. A run read back from the store gets the same
values from the same rows (``stored_steps``): ``RunResult.from_store``, and a resume
for the steps committed before it, read them once.
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from ..store._store import Store

__all__ = ["RunResult", "StepSummary", "StoredError", "ToolCallSummary", "stored_steps", "usd"]

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


@dataclasses.dataclass(frozen=True)
class ToolCallSummary:
    """One tool call of a step: the tool's name and how the call ended (``ok``,
    ``error``, ``refused``, ``deferred``, ``abandoned``...)."""

    name: str
    status: str

    def __str__(self) -> str:
        return self.name if self.status == "ok" else f"{self.name} ({self.status})"


@dataclasses.dataclass(frozen=True)
class StepSummary:
    """One committed step, as the run's card and text show it.

    Attributes:
        step: The step's number (1 for the first).
        decision: ``tool_calls`` (the model asked for tools) or ``answer``.
        tool_calls: The step's tool calls, in order, each with its status.
        tokens: Tokens the step's answer used (input + output).
        cost_usd: What the step's attempts cost in US dollars; None when one that used
            tokens had no price.
        provider: The provider that answered.
        changed_workspace: True when a tool call changed the workspace.
        failures: The step's failed attempts, as ``kind`` and HTTP status
            (``rate_limited 429``), in order.
    """

    step: int
    decision: str
    tool_calls: tuple[ToolCallSummary, ...] = ()
    tokens: int = 0
    cost_usd: float | None = 0.0
    provider: str | None = None
    changed_workspace: bool = False
    failures: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        step: Mapping[str, Any],
        tool_rows: Sequence[Mapping[str, Any]],
        attempt_rows: Sequence[Mapping[str, Any]],
    ) -> StepSummary:
        """A step's summary from its row (``steps``), its tool rows and its attempt
        rows (those of other steps are left out), as the driver writes them or the
        store reads them back."""
        number = int(step["step"])
        attempts = [a for a in attempt_rows if _value(a.get("step")) == number]
        return cls(
            step=number,
            decision=str(step.get("decision") or ""),
            tool_calls=tuple(
                ToolCallSummary(str(t.get("tool")), str(t.get("status")))
                for t in tool_rows
                if _value(t.get("step")) == number
            ),
            tokens=int(_value(step.get("tokens")) or 0),
            cost_usd=step_cost_usd(attempts),
            provider=_text(step.get("provider")),
            changed_workspace=bool(_value(step.get("changed_workspace"))),
            failures=tuple(_failure(a) for a in attempts if _value(a.get("kind")) is not None),
        )

    def as_row(self) -> dict[str, Any]:
        """The mapping ``RunResult.step_rows`` handed out before (deprecated)."""
        return {
            "step": self.step,
            "decision": self.decision,
            "tools": [call.name for call in self.tool_calls],
            "tokens": self.tokens,
            "provider": self.provider,
            "changed": self.changed_workspace,
            "failures": list(self.failures),
        }


def _failure(attempt: Mapping[str, Any]) -> str:
    """``rate_limited 429``: a failed attempt's kind and HTTP status."""
    status = _value(attempt.get("status"))
    return str(attempt["kind"]) + ("" if status is None else f" {int(status)}")


def step_cost_usd(attempts: Sequence[Mapping[str, Any]]) -> float | None:
    """The dollars of a step's attempts, by the store's rule for a run's: None once an
    attempt that used tokens has no price, else the sum of the priced ones."""
    total = 0.0
    for attempt in attempts:
        cost = _value(attempt.get("cost_usd"))
        if cost is not None:
            total += float(cost)
        elif _value(attempt.get("input_tokens")) is not None or (
            _value(attempt.get("output_tokens")) is not None
        ):
            return None
    return total


def stored_steps(store: Store, run_id: str) -> tuple[tuple[StepSummary, ...], list[dict[str, Any]]]:
    """A stored run's step summaries and its attempt rows, read once (three queries)."""
    steps = _records(store.steps(run_id))
    tools = _records(store.tool_calls(run_id))
    attempts = _records(store.attempts(run_id))
    return tuple(StepSummary.of(s, tools, attempts) for s in steps), attempts


def _records(frame: Any) -> list[dict[str, Any]]:
    """A DataFrame's rows as dicts, missing values (``pd.NA``, NaN) as None."""
    return [{k: _value(v) for k, v in row.items()} for row in frame.to_dict("records")]


def _value(value: Any) -> Any:
    """None for a missing value (None, ``pd.NA``, NaN, NaT), else the value."""
    if value is None or type(value).__name__ in ("NAType", "NaTType"):
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _text(value: Any) -> str | None:
    value = _value(value)
    return None if value is None else str(value)


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
        step_summaries: One ``StepSummary`` per committed step (its tool calls with
            their status, tokens, cost, what changed, failed attempts), filled by the
            loop as it commits each step: the card's step table, which reads no store.
        step_rows: Deprecated: ``step_summaries`` as mappings (``StepSummary.as_row``).
        output: The typed answer (``TaskContract(output=T)``): a ``T``, validated; None
            when the run asked for none or got none it could use (``error`` says why).
        output_mode: How the typed answer was asked for in the end (``native``, ``tool``,
            ``prompted``); None for a run without ``output=``.
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
    step_summaries: tuple[StepSummary, ...] = dataclasses.field(default=(), repr=False)
    output: Any = None
    output_mode: str | None = None

    @classmethod
    def from_store(
        cls, run_id: str, *, store: Store | str | os.PathLike[str] | None = None
    ) -> RunResult:
        """A stored run's result, rebuilt from its rows: its outcome, steps and their
        summaries, tokens, cost, attempts and the providers that answered, the counters,
        check and answer of its last checkpoint, its error as a ``StoredError``; a typed
        run's ``output_mode`` and ``output`` (the stored JSON value, not a ``T``).
        ``commands`` is None (the store does not say how the commands were contained).

        Raises:
            ConfigError: ``store`` names a folder or a file that is no store.
            StoreError: ``missing`` when the store holds no run ``run_id``.
        """
        from ..store._open import open_store

        opened = open_store(store)
        try:
            return _rebuilt(cls, run_id, opened)
        finally:
            if opened is not store and store is not None:
                opened.close()  # opened here from a path

    @property
    def step_rows(self) -> tuple[dict[str, Any], ...]:
        """Deprecated: use ``step_summaries``; the same steps as mappings."""
        warnings.warn(
            "RunResult.step_rows is deprecated: use RunResult.step_summaries "
            "(StepSummary values); step_rows goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return tuple(s.as_row() for s in self.step_summaries)

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

    def summary_text(self, *, steps: bool = False) -> str:
        """The result as text; ``steps=True`` adds a line per step (the notebook's plain
        text form: the command printed each step as it happened)."""
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
        listed = self.step_summaries if steps else ()
        for summary in listed[:_TEXT_STEPS]:
            lines.append("  " + _step_text(summary))
        if len(listed) > _TEXT_STEPS:
            lines.append(f"  ... {len(listed) - _TEXT_STEPS} more steps")
        shown = self._shown_error()
        if shown is not None:
            lines.append("  " + shown._card_text().replace("\n", "\n  "))
        return scrub("\n".join(lines))  # the lines not cut by shorten, too

    def _cost_text(self) -> str:
        return "" if self.cost_usd is None else f", cost {usd(self.cost_usd)}"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": self.summary_text(steps=True), "text/html": str(self._card_html())}

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
            facts(
                [
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
                ]
            ),
            text_block(f"check: {self.verify_detail}") if self.verify_detail else "",
            *self._answer_html(),
            _steps_html(self.step_summaries),
            shown._card_html() if shown is not None else "",
            tone=tone,
        )


_TEXT_STEPS = 20
_STEP_COLUMNS = ("step", "decision", "tools", "tokens", "cost", "provider", "changed", "failures")


def _cells(summary: StepSummary) -> tuple[str, ...]:
    """A step's cells, in ``_STEP_COLUMNS`` order ("-" for none)."""
    cost = "-" if summary.cost_usd is None else usd(summary.cost_usd)
    return (
        str(summary.step),
        summary.decision or "-",
        ", ".join(str(call) for call in summary.tool_calls) or "-",
        str(summary.tokens),
        cost,
        summary.provider or "-",
        "yes" if summary.changed_workspace else "no",
        ", ".join(summary.failures) or "-",
    )


def _step_text(summary: StepSummary) -> str:
    """``step 2: decision tool_calls, tools write_file, tokens 30, ...`` (nothing said
    of what is not there)."""
    cells = dict(zip(_STEP_COLUMNS, _cells(summary), strict=True))
    parts = [f"{c} {cells[c]}" for c in _STEP_COLUMNS[1:] if cells[c] != "-"]
    return f"step {summary.step}: " + ", ".join(parts)


def _steps_html(summaries: tuple[StepSummary, ...]) -> Html:
    """A collapsible table of the steps (``<details>``)."""
    if not summaries:
        return Html("")
    cells = [[shorten(cell, 200) for cell in _cells(s)] for s in summaries]
    label = f"{len(summaries)} step{'' if len(summaries) == 1 else 's'}"
    return details(label, grid(_STEP_COLUMNS, cells))


def _rebuilt(cls: type[RunResult], run_id: str, store: Store) -> RunResult:
    """``RunResult.from_store``'s reading: the run's row, its steps, tool calls and
    attempts, its last checkpoint."""
    from ..rules._errors import StoreError
    from ..store._writer import store_writer

    row = store.get_run(run_id)
    if row is None:
        raise StoreError(f"no run {run_id!r} in {store.path}", kind="missing")
    summaries, attempts = stored_steps(store, run_id)
    last = store_writer(store).last_checkpoint(run_id)
    state: Mapping[str, Any] = last["state"] if last else {}
    counts = state.get("counts") or {}
    answered = (
        str(a["provider"])
        for a in attempts
        if a.get("kind") is None and not a.get("cancelled") and a.get("provider")
    )
    error = row.get("error")
    return cls(
        run_id=run_id,
        outcome=RunOutcome(row["outcome"]),
        steps=int(row.get("steps") or 0),
        tokens=int(row.get("tokens") or 0),
        verified=state.get("verified"),
        verify_detail=state.get("verify_detail"),
        elapsed_s=float((row.get("finished_at") or 0) - (row.get("started_at") or 0)),
        text=str(state.get("text") or ""),
        providers=tuple(dict.fromkeys(answered)) or tuple(state.get("providers") or ()),
        attempts=len(attempts),
        retries=int(counts.get("retries", 0)),
        fallbacks=int(counts.get("fallbacks", 0)),
        replans=int((state.get("stall") or {}).get("replans", 0)),
        task=str(row.get("task") or ""),
        cost_usd=None if row.get("cost_usd") is None else float(row["cost_usd"]),
        stored_error=StoredError.from_dict(error) if error else None,
        step_summaries=summaries,
        output=row.get("output"),  # a typed run's answer as its JSON value
        output_mode=row.get("output_mode"),
    )


def usd(dollars: float) -> str:
    """Dollars as a card shows them: cents for a dollar or more, else six decimals."""
    if dollars == 0:
        return "$0"
    return f"${dollars:,.2f}" if dollars >= 1 else f"${dollars:.6f}"


def _verified_word(verified: bool | None) -> str:
    return {True: "yes", False: "no", None: "-"}[verified]
