"""The sweep's grid: samples (rows) x providers (columns), one static HTML table.

Each cell holds one sample's runs on one provider (its repeats): the first scorer's
score over them (``2/3`` for pass/fail, else the mean) sets the cell's colour, and every
scorer's is listed. A run ended by infrastructure is not scored: a cell with no scored
run shows the failure's kind in a tone of its own (blue), never as a wrong answer (red).
Each cell is a ``<details>`` that opens, on a click and with no script, to its runs'
transcripts: steps and tool calls, the final text, each scorer's explanation or
scoring error, the error card of a run that failed. Nothing here queries the store: the
transcripts are what each ``SweepRun`` kept.

The cap: every cell's score is always shown; transcripts are added in grid order (row
by row) while at most ``MAX_TRANSCRIPTS`` runs and ``MAX_GRID_BYTES`` of HTML (the cells
and the transcripts together) are reached; the grid then says how many it shows and
where the rest are (``result.scores``, ``hn.RunResult.from_store``).

Colours are inline styles over the theme variables with fallbacks (``rules/_html``), so
the grid reads the same in JupyterLab (light or dark), nbviewer and on GitHub.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final, Protocol

from ..loop._result import StepSummary
from ..rules._html import (
    FAINT,
    STRONG,
    Html,
    Tone,
    badge,
    bullets,
    code,
    escape,
    join,
    outcome_tone,
    scrolling,
    text_block,
)
from ..rules._outcomes import RunOutcome
from ..rules._text import shorten
from ._sample import INFRA_OUTCOMES

__all__ = ["MAX_GRID_BYTES", "MAX_TRANSCRIPTS", "GridRun", "GridScore", "sweep_grid"]

MAX_TRANSCRIPTS: Final = 200
"""The most runs whose transcripts the grid shows."""
MAX_GRID_BYTES: Final = 1_000_000
"""The grid's size in bytes of HTML past which no more transcripts are added (the cells
and their scores are always there)."""

_GOOD: Final = frozenset({RunOutcome.SUCCESS.value, RunOutcome.FINISHED.value})
# ``unfinished``: a run whose Dask worker died (``_sweep_result.UNFINISHED``).
_INFRA: Final = frozenset({*(o.value for o in INFRA_OUTCOMES), "unfinished"})
_STEPS_SHOWN: Final = 30
_TD: Final = "padding:2px 3px;vertical-align:top;text-align:left"


class GridScore(Protocol):
    """What the grid reads of one scorer's row for a run (``RunScore``)."""

    @property
    def scorer(self) -> str: ...
    @property
    def value(self) -> float | None: ...
    @property
    def explanation(self) -> str: ...
    @property
    def error(self) -> str | None: ...
    @property
    def infra_failure(self) -> bool: ...
    @property
    def infra_kind(self) -> str | None: ...


class GridRun(Protocol):
    """What the grid reads of one run of a sweep (``SweepRun``)."""

    @property
    def task(self) -> str: ...
    @property
    def provider(self) -> str: ...
    @property
    def repeat(self) -> int: ...
    @property
    def outcome(self) -> str | None: ...
    @property
    def error_kind(self) -> str | None: ...
    @property
    def run_id(self) -> str | None: ...
    @property
    def sample_id(self) -> str | None: ...
    @property
    def scores(self) -> Sequence[GridScore]: ...
    @property
    def step_summaries(self) -> Sequence[StepSummary]: ...
    @property
    def text(self) -> str: ...
    @property
    def error_card(self) -> Html: ...


def _infra_kind(run: GridRun) -> str | None:
    """The kind of infrastructure failure that ended ``run`` (None: it did not)."""
    for score in run.scores:
        if score.infra_failure:
            return score.infra_kind or run.outcome or "infra"
    if not run.scores and run.outcome in _INFRA:
        return run.error_kind or run.outcome
    return None


def _figure(values: Sequence[float]) -> str:
    """``2/3`` when every value is pass/fail, else the mean (``0.67``)."""
    if all(v in (0.0, 1.0) for v in values):
        return f"{sum(v == 1.0 for v in values)}/{len(values)}"
    return f"{sum(values) / len(values):.2f}"


def _verdict(runs: Sequence[GridRun], scorer: str | None) -> tuple[str, float | None]:
    """One scorer's figure over a cell's runs (the outcomes' without a scorer) and the
    mean it came to (None: nothing scored)."""
    if scorer is None:
        judged = [1.0 if r.outcome in _GOOD else 0.0 for r in runs if _infra_kind(r) is None]
    else:
        judged = [
            s.value
            for r in runs
            for s in r.scores
            if s.scorer == scorer and s.value is not None and not s.infra_failure
        ]
    if not judged:
        return "", None
    mean = sum(judged) / len(judged)
    return (_figure(judged) + ("" if scorer is not None else " ok")), mean


def _cell_tone(mean: float | None, infra: int, errors: int) -> tuple[Tone, str]:
    """The cell's tone and its name (``data-tone``): by the first scorer's mean; a cell
    with nothing scored is infrastructure's tone, or neutral (scoring errors, not run)."""
    if mean is not None:
        if mean >= 1.0:
            return Tone.GOOD, "good"
        return (Tone.BAD, "bad") if mean <= 0.0 else (Tone.WARN, "partial")
    if infra:
        return Tone.INFRA, "infra"
    return Tone.NEUTRAL, "error" if errors else "none"


def _summary(runs: Sequence[GridRun], scorers: Sequence[str]) -> tuple[str, Tone, str]:
    """A cell's line (every scorer's figure, the infrastructure failures with their
    kinds, scoring errors), its tone and the tone's name."""
    started = [r for r in runs if r.outcome is not None]
    if not started:
        return "not run", Tone.NEUTRAL, "none"
    parts, first = [], None
    for i, name in enumerate(scorers or [None]):
        figure, mean = _verdict(started, name)
        if i == 0:
            first = mean
        if figure:
            parts.append(figure if name is None or len(scorers) == 1 else f"{name} {figure}")
    kinds = [k for k in (_infra_kind(r) for r in started) if k is not None]
    if kinds:
        parts.append(f"infra {len(kinds)}: {', '.join(sorted(set(kinds)))}")
    errors = sum(any(s.error is not None for s in r.scores) for r in started)
    if errors:
        parts.append(f"scorer error {errors}")
    tone, name = _cell_tone(first, len(kinds), errors)
    return " · ".join(parts), tone, name


def _step_line(step: StepSummary) -> str:
    calls = ", ".join(str(call) for call in step.tool_calls)
    failed = f"; failed attempts: {', '.join(step.failures)}" if step.failures else ""
    return f"step {step.step} {step.decision}{': ' + calls if calls else ''}{failed}"


def _score_line(score: GridScore) -> Html:
    if score.infra_failure:
        said = f"not scored: infrastructure ({score.infra_kind or 'infra'})"
    elif score.error is not None:
        said = f"scoring error: {score.error}"
    else:
        value = "-" if score.value is None else f"{score.value:g}"
        said = value + (f": {score.explanation}" if score.explanation else "")
    return join([code(score.scorer), " ", said])


def _transcript(run: GridRun) -> Html:
    """One run of a cell: repeat, outcome and id, its steps, its final text, each
    scorer's verdict, its error card."""
    head = join(
        [
            f"repeat {run.repeat} ",
            badge(run.outcome or "not run", outcome_tone(run.outcome or "")),
            " ",
            code(run.run_id or "-"),
        ]
    )
    steps = [_step_line(s) for s in run.step_summaries[:_STEPS_SHOWN]]
    if len(run.step_summaries) > _STEPS_SHOWN:
        steps.append(f"... {len(run.step_summaries) - _STEPS_SHOWN} more steps")
    return Html(
        f"<div style='border-top:1px solid {Tone.NEUTRAL};margin-top:4px;padding-top:2px'>"
        + join(
            [
                head,
                bullets(steps),
                text_block(run.text) if run.text else "",
                bullets([_score_line(s) for s in run.scores]),
                escape(run.error_card),  # the error's own card (Html); other text escaped
            ]
        )
        + "</div>"
    )


def _cell(
    runs: Sequence[GridRun], scorers: Sequence[str], transcripts: Sequence[Html | None]
) -> Html:
    line, tone, name = _summary(runs, scorers)
    shown = [t for t in transcripts if t is not None]
    left = [r.run_id for r, t in zip(runs, transcripts, strict=True) if t is None and r.run_id]
    note = (
        text_block(f"transcript not shown (the grid's cap): {', '.join(left)}", faint=True)
        if left
        else ""
    )
    box = (
        f"background:color-mix(in srgb, {tone} 22%, transparent);color:{STRONG};"
        f"border:1px solid {tone};border-radius:4px;padding:0 4px"
    )
    return Html(
        f"<td data-tone='{name}' style='{_TD}'><details style='{box}'>"
        f"<summary style='cursor:pointer;white-space:nowrap'>{escape(line)}</summary>"
        f"{join(shown)}{note}</details></td>"
    )


def _rows(records: Sequence[GridRun]) -> Iterator[tuple[str, str, list[list[GridRun]]]]:
    """Per sample (its id, its input), in the order first seen: each provider's runs."""
    providers = list(dict.fromkeys(r.provider for r in records))
    table: dict[str, dict[str, list[GridRun]]] = {}
    inputs: dict[str, str] = {}
    for r in records:
        key = r.sample_id or r.task
        inputs.setdefault(key, r.task)
        table.setdefault(key, {}).setdefault(r.provider, []).append(r)
    for key, cells in table.items():
        yield (
            key,
            inputs[key],
            [sorted(cells.get(p, []), key=lambda r: r.repeat) for p in providers],
        )


def sweep_grid(records: Sequence[GridRun], scorers: Sequence[str]) -> Html:
    """The grid of a sweep's runs (see the module's docstring for the cap)."""
    providers = list(dict.fromkeys(r.provider for r in records))
    rows = [
        (Html(f"<th style='{_TD};font-weight:normal'>{join(_sample_head(key, task))}</th>"), cells)
        for key, task, cells in _rows(records)
    ]
    # What is always shown first (the cells without transcripts, the samples), then
    # transcripts in grid order while the cap allows.
    size = sum(
        len(h) + sum(len(_cell(c, scorers, [None] * len(c))) for c in cells) for h, cells in rows
    )
    shown = total = 0
    full = False
    body = []
    for head, cells in rows:
        tds = []
        for runs in cells:
            kept: list[Html | None] = []
            for run in runs:
                total += run.outcome is not None
                piece = None if full or run.outcome is None else _transcript(run)
                if piece is not None and (
                    shown >= MAX_TRANSCRIPTS or size + len(piece) > MAX_GRID_BYTES
                ):
                    full, piece = True, None
                if piece is not None:
                    shown += 1
                    size += len(piece)
                kept.append(piece)
            tds.append(_cell(runs, scorers, kept))
        body.append(f"<tr>{head}{''.join(tds)}</tr>")
    cols = "".join(f"<th style='{_TD}'>{escape(shorten(p, 60))}</th>" for p in providers)
    table = (
        "<table style='color:inherit;font-size:12px;border-collapse:collapse'>"
        f"<tr><th style='{_TD}'>sample</th>{cols}</tr>{''.join(body)}</table>"
    )
    return join([_legend(scorers, shown, total), scrolling(Html(table))])


def _sample_head(key: str, task: str) -> list[object]:
    return [code(shorten(key, 40)), " ", shorten(task, 80)] if key != task else [shorten(task, 80)]


def _legend(scorers: Sequence[str], shown: int, total: int) -> Html:
    what = (
        f"each cell: {scorers[0]}'s score over the repeats (its colour)"
        + (", every scorer's listed" if len(scorers) > 1 else "")
        if scorers
        else "each cell: the runs that succeeded over the repeats (no scorers)"
    )
    lines = [
        f"{what}; green all, amber some, red none; blue: infrastructure failures (not "
        "scored); open a cell for its runs' transcripts"
    ]
    if shown < total:
        lines.append(
            f"transcripts of the first {shown} of {total} runs shown (the grid's cap: "
            f"{MAX_TRANSCRIPTS} runs, {MAX_GRID_BYTES // 1000} kB); see result.scores, "
            "hn.RunResult.from_store(run_id, store) or %harness show RUN_ID"
        )
    return Html(
        f"<div style='margin-top:6px;color:{FAINT}'>"
        + join([text_block(line) for line in lines])
        + "</div>"
    )
