"""``SweepResult``: what ``hn.sweep`` hands back: one row per run, the sweep's failure
rates, its scores (one row per run and scorer), and a summary table (text and HTML) per
provider."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, Final

from ..loop._contract import RunOutcome
from ..loop._result import StepSummary, usd
from ..rules._errors import ConfigError
from ..rules._html import Html, card, code, facts, grid, outcome_tone
from ..rules._renamed import renamed
from ..rules._text import shorten
from ._grid import sweep_grid

if TYPE_CHECKING:
    import pandas as pd

    from ..store._store import Store

__all__ = [
    "MAX_GRID_STEPS",
    "MAX_GRID_TEXT",
    "RUN_COLUMNS",
    "SPLIT",
    "UNFINISHED",
    "RunScore",
    "Signature",
    "SweepResult",
    "SweepRun",
    "apart",
    "labels",
]

# The columns of ``SweepResult.runs``, in order.
RUN_COLUMNS: Final = (
    "task", "provider", "model", "repeat", "outcome", "steps", "tokens", "cost_usd",
    "elapsed_s", "error_kind", "retries", "run_id",
)  # fmt: skip
# The types of ``SweepResult.scores``' columns (their order: ``_stats.SCORE_COLUMNS``).
_SCORE_TYPES: Final = {
    **dict.fromkeys(("sweep_id", "run_id", "sample_id", "provider", "scorer",
                     "scorer_version", "explanation", "error", "infra_kind", "outcome"),
                    "string"),
    "repeat": "Int64", "value": "Float64", "passed": "boolean", "infra_failure": "bool",
    "cost_usd": "Float64", "elapsed_s": "float64",
}  # fmt: skip
# How much of a run its ``SweepRun`` keeps for the grid: steps, characters of final text.
MAX_GRID_STEPS: Final = 50
MAX_GRID_TEXT: Final = 2000
# The outcome of a run of a sweep on a cluster whose worker died during it: its
# committed steps are in the shard ``SweepRun.shard`` names (``hn.resume`` it there).
UNFINISHED: Final = "unfinished"
_GOOD: Final = frozenset({RunOutcome.SUCCESS.value, RunOutcome.FINISHED.value})

Signature = tuple[str, str, str | None]
"""What tells providers apart, as their attempts record it: name, model, base URL (shown:
no credentials; None off HTTP)."""
SPLIT: Final = ("model", "base_url")
"""The attempt columns after ``provider`` that a signature adds, in order."""


def apart(signature: Signature, others: Collection[Signature]) -> int | None:
    """How many of ``SPLIT`` tell ``signature`` apart from each of ``others`` (0: its
    name alone), or None when one of them is the same."""
    if signature in others:
        return None
    for width in range(len(SPLIT) + 1):
        if all(s[: width + 1] != signature[: width + 1] for s in others):
            return width
    return None  # pragma: no cover (distinct signatures differ in some part)


def _label(signature: Signature, width: int) -> str:
    name, model, base_url = signature
    if width == 0:
        return name
    if width == 1 or base_url is None:
        return f"{name}/{model}"
    return f"{name}/{model}@{base_url}"


def labels(signatures: Sequence[Signature]) -> list[str | None]:
    """Each signature's label: its name, with ``/model`` when another shares the name,
    and ``@base_url`` when another shares both; None for one that is repeated."""
    out: list[str | None] = []
    for i, signature in enumerate(signatures):
        width = apart(signature, [s for j, s in enumerate(signatures) if j != i])
        out.append(None if width is None else _label(signature, width))
    return out


@dataclasses.dataclass(frozen=True)
class RunScore:
    """One scorer's row for one run of a sweep.

    ``value`` is the score as a number in [0, 1] (True 1.0), None when the run was not
    scored: the scorer raised (``error``: its type and message, scrubbed) or the run
    ended for reasons of infrastructure (``infra_failure``, with ``infra_kind``: the
    provider or store error's kind, else the run's outcome).
    """

    scorer: str
    scorer_version: str
    value: float | None = None
    explanation: str = ""
    error: str | None = None
    infra_failure: bool = False
    infra_kind: str | None = None
    scored_at: float | None = None

    @property
    def passed(self) -> bool | None:
        """A full score (1.0), or None when not scored."""
        return None if self.value is None else self.value >= 1.0


@renamed(seconds="elapsed_s")
@dataclasses.dataclass(frozen=True)
class SweepRun:
    """One run of a sweep: which task, provider and repeat, and how it ended.

    ``outcome`` is None for a run the sweep never started (its spend limit was
    reached, or it was cancelled first); ``error_kind`` names the error that ended the
    run (a provider or store error's kind, else the error's code, e.g. ``UNKNOWN``).
    On a cluster (``executor=``), ``shard`` is the store file the run is in; outcome
    ``unfinished`` marks a run whose worker died during it (resumable from that shard).
    ``sample_id`` is the id of the run's sample (a text's derived from it), ``scores``
    what each of the sweep's scorers said of the run, in the scorers' order.
    ``step_summaries`` (the first ``MAX_GRID_STEPS``), ``text`` (the final text, cut to
    ``MAX_GRID_TEXT``) and ``error_card`` (the card of the error that ended it, as ``Html``:
    any other text there is shown escaped) are what the sweep's grid shows of the run.
    """

    task: str
    provider: str
    model: str
    repeat: int
    outcome: str | None = None
    steps: int = 0
    tokens: int = 0
    cost_usd: float | None = None
    elapsed_s: float = 0.0
    error_kind: str | None = None
    retries: int = 0
    run_id: str | None = None
    shard: str | None = None
    sample_id: str | None = None
    scores: tuple[RunScore, ...] = ()
    # What the grid shows of the run (no store query): kept small by ``_sweep_run``.
    step_summaries: tuple[StepSummary, ...] = dataclasses.field(
        default=(), repr=False, compare=False
    )
    text: str = dataclasses.field(default="", repr=False, compare=False)
    error_card: Html = dataclasses.field(default=Html(""), repr=False, compare=False)

    @property
    def spend(self) -> float:
        """What the run adds to its sweep's spend (``max_cost_usd``): its cost; nothing
        when it used no tokens; without end when it used tokens no price is known for
        (the spend cannot be checked: no more runs start, as a run's ``max_cost_usd``
        ends it)."""
        if self.cost_usd is not None:
            return self.cost_usd
        return math.inf if self.tokens else 0.0


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """The end of a sweep (``hn.sweep``).

    Attributes:
        sweep_id: The tag of every run of the sweep in the store
            (``store.runs(sweep=...)``).
        store: The store the runs are recorded in.
        records: One ``SweepRun`` per planned run, in plan order (repeat, task,
            provider); runs that never started have ``outcome`` None.
        stopped: Why runs were left unstarted (``"max_cost_usd"``), else None.
        aliases: (what the attempts record, sweep name) pairs: the sweep's name for
            each provider its attempts tell apart from every other provider of the
            sweep, keyed by the attempts' ``provider`` followed by as many of
            ``SPLIT`` (``model``, ``base_url``) as that takes (the same number in
            every pair); ``failure_rates`` reports those attempts under the sweep's
            name.
        scorers: (name, version) of each scorer of the sweep, in order.
    """

    sweep_id: str
    store: Store
    records: tuple[SweepRun, ...]
    stopped: str | None = None
    aliases: tuple[tuple[tuple[str | None, ...], str], ...] = ()
    scorers: tuple[tuple[str, str], ...] = ()

    @property
    def scores(self) -> pd.DataFrame:
        """One row per run started and scorer (none without scorers): ``sweep_id``,
        ``run_id``, ``sample_id``, ``provider`` (the sweep's name), ``repeat``,
        ``scorer``, ``scorer_version``, ``value`` (``Float64``, missing when not
        scored), ``passed`` (``boolean``: value 1.0), ``explanation``, ``error`` (the
        scorer raised: a scoring error, not a task failure), ``infra_failure``
        (``bool``: the run ended for reasons of infrastructure and was not scored),
        ``infra_kind`` (the provider or store error's kind, else the run's outcome),
        ``outcome``, ``cost_usd``, ``elapsed_s``. Built from the result's own runs: no
        store query."""
        import pandas as pd

        from ._stats import SCORE_COLUMNS

        rows = [
            [
                self.sweep_id,
                r.run_id,
                r.sample_id,
                r.provider,
                r.repeat,
                s.scorer,
                s.scorer_version,
                s.value,
                s.passed,
                s.explanation,
                s.error,
                s.infra_failure,
                s.infra_kind,
                r.outcome,
                r.cost_usd,
                r.elapsed_s,
            ]
            for r in self.records
            if r.outcome is not None
            for s in r.scores or self._unscored(r)
        ]
        data = pd.DataFrame(rows, columns=list(SCORE_COLUMNS), dtype=object)
        return data.astype(_SCORE_TYPES)

    def _unscored(self, run: SweepRun) -> tuple[RunScore, ...]:
        """The rows of a run that came back without scores (its worker died, or it was
        cancelled on a worker): infrastructure, not scored."""
        kind = run.outcome
        return tuple(RunScore(n, v, infra_failure=True, infra_kind=kind) for n, v in self.scorers)

    @property
    def runs(self) -> pd.DataFrame:
        """One row per run started: ``task``, ``provider`` (the sweep's name for it),
        ``model``, ``repeat``, ``outcome``, ``steps``, ``tokens``, ``cost_usd``,
        ``elapsed_s``, ``error_kind``, ``retries`` (provider retries), ``run_id``; in the
        store's DataFrame conventions (``outcome`` a categorical in ``RunOutcome`` order,
        ``pd.NA`` for missing). ``seconds``, last, is ``elapsed_s`` under its deprecated
        name, for one release."""
        import pandas as pd

        from ..store._frames import CATEGORY_ORDER

        started = [r for r in self.records if r.outcome is not None]
        data = pd.DataFrame(
            [[getattr(r, c) for c in RUN_COLUMNS] for r in started], columns=list(RUN_COLUMNS)
        )
        types = {"repeat": "Int64", "steps": "Int64", "tokens": "Int64", "retries": "Int64",
                 "cost_usd": "Float64", "elapsed_s": "Float64"}  # fmt: skip
        for name in ("task", "provider", "model", "run_id"):
            types[name] = "string"
        data = data.astype(types)
        outcomes = CATEGORY_ORDER["outcome"]
        extra = sorted(set(data["outcome"]) - set(outcomes))
        data["outcome"] = pd.Categorical(data["outcome"], categories=[*outcomes, *extra])
        kinds = sorted({k for k in data["error_kind"] if isinstance(k, str)})
        values = [k if isinstance(k, str) else None for k in data["error_kind"]]
        data["error_kind"] = pd.Categorical(values, categories=kinds)
        data["seconds"] = data["elapsed_s"]  # deprecated: goes in the next release
        return data

    def failure_rates(self, by: tuple[str, ...] | str = ("provider", "kind")) -> pd.DataFrame:
        """``Store.failure_rates`` over this sweep's attempts only (same columns: rates
        with their 95% Wilson interval, Retry-After, spend). ``provider`` is the sweep's
        name for each provider, as in ``runs`` (two models of one provider apart:
        ``openai/gpt-4o``, ``openai/gpt-4o-mini``), except where the attempts cannot
        tell: providers of the sweep that record one name, model and server share a
        row, and a ``Fallback``'s attempts keep its leaves' names."""
        import pandas as pd

        groups = (by,) if isinstance(by, str) else tuple(by)
        if not self.aliases or "provider" not in groups:
            return self.store.failure_rates(groups, sweep=self.sweep_id)
        split = SPLIT[: len(self.aliases[0][0]) - 1]  # what the names need to be told apart
        extra = tuple(c for c in split if c not in groups)
        frame = self.store.failure_rates((*groups, *extra), sweep=self.sweep_id)
        keys = [
            tuple(None if pd.isna(v) else str(v) for v in row)
            for row in zip(*(frame[c] for c in ("provider", *split)), strict=True)
        ]
        names = dict(self.aliases)
        # Attempts no alias names (a Fallback's leaves): each under its own name, with as
        # much of its model and server as tells it apart from the others.
        rest = sorted({k for k in keys if k not in names}, key=str)
        padded = [
            (str(k[0]), str(k[1]) if len(k) > 1 else "", k[2] if len(k) > 2 else None) for k in rest
        ]
        shown = dict(zip(rest, labels(padded), strict=True))
        frame["provider"] = pd.array(
            [names.get(k) or shown.get(k) or str(k[0]) for k in keys], dtype="string"
        )
        frame = frame.drop(columns=list(extra))
        return frame.sort_values("provider", kind="stable").reset_index(drop=True)

    @property
    def unfinished(self) -> list[SweepRun]:
        """The runs whose worker died during them (a sweep on a cluster): each names its
        ``shard``, where ``hn.resume(run.run_id, store=run.shard)`` takes it on."""
        return [r for r in self.records if r.outcome == UNFINISHED]

    @property
    def cost_usd(self) -> float | None:
        """The sweep's spend: the sum of its runs' ``cost_usd`` (None if any is unknown)."""
        costs = [r.cost_usd for r in self.records if r.outcome is not None]
        return None if any(c is None for c in costs) else sum(c or 0.0 for c in costs)

    def summary(
        self,
        *,
        by: Sequence[str] = ("provider", "scorer"),
        k: int | None = None,
        confidence: float = 0.95,
    ) -> pd.DataFrame:
        """The sweep's scores per provider and scorer: runs, scored runs and
        infrastructure failures (their rate over all runs), the mean score with its
        interval (clustered by sample: repeats of one sample are not independent),
        pass@k and pass^k, cost per correct answer, p50/p95 seconds.

        Args:
            by: The ``scores`` columns to group by.
            k: pass@k's k (default: the fewest scored runs of any sample in the group).
            confidence: The interval's level.

        Raises:
            ConfigError: The sweep had no scorers (see ``failure_rates`` and ``runs``).
        """
        from ._stats import summary

        return summary(self._scored("summary"), by=by, k=k, confidence=confidence)

    def compare(
        self,
        a: str | None = None,
        b: str | None = None,
        *,
        scorer: str | None = None,
        confidence: float = 0.95,
    ) -> pd.DataFrame:
        """The paired difference of two providers' scores (``b`` minus ``a``) on the
        samples both scored, with its interval and p-value: McNemar's exact test for
        pass/fail with one run a sample, else the paired t-test on each sample's mean
        over its repeats. With no provider named: every pair, Holm-corrected (``p_holm``).
        Infrastructure failures are left out: they are not wrong answers.

        Raises:
            ConfigError: The sweep had no scorers; a provider or scorer it has not.
        """
        from ._stats import compare

        return compare(self._scored("compare"), a, b, scorer=scorer, confidence=confidence)

    def _scored(self, what: str) -> pd.DataFrame:
        if not self.scorers:
            raise ConfigError(
                f"{what}() reads the sweep's scores, and this sweep had no scorers: "
                "pass hn.sweep(..., scorers=[...]) (see hn.scorers); failure_rates() and "
                "runs report a sweep without them"
            )
        return self.scores

    def _provider_rows(self) -> list[tuple[Any, ...]]:
        """Per provider: (provider, done/total, outcomes, failures by kind, retries, spend)."""
        rows = []
        for name in dict.fromkeys(r.provider for r in self.records):
            mine = [r for r in self.records if r.provider == name]
            done = [r for r in mine if r.outcome is not None]
            outcomes = Counter(str(r.outcome) for r in done)
            kinds = Counter(r.error_kind for r in done if r.error_kind)
            costs = [r.cost_usd for r in done]
            spend = "?" if any(c is None for c in costs) else usd(sum(c or 0.0 for c in costs))
            rows.append(
                (
                    name,
                    f"{len(done)}/{len(mine)}",
                    ", ".join(f"{k} {n}" for k, n in outcomes.most_common()) or "-",
                    ", ".join(f"{k} {n}" for k, n in kinds.most_common()) or "-",
                    sum(r.retries for r in done),
                    spend,
                )
            )
        return rows

    def summary_text(self) -> str:
        done = sum(r.outcome is not None for r in self.records)
        good = sum(r.outcome in _GOOD for r in self.records)
        head = f"sweep {self.sweep_id}: {done}/{len(self.records)} runs, {good} succeeded"
        if self.stopped:
            head += f" (stopped launching: {self.stopped})"
        lines = [head]
        for name, count, outcomes, kinds, retries, spend in self._provider_rows():
            lines.append(
                f"  {name}: {count} | {outcomes} | errors: {kinds} | retries {retries} | {spend}"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"SweepResult(sweep_id={self.sweep_id!r}, runs={len(self.records)})"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": self.summary_text(), "text/html": str(self._html())}

    def _html(self) -> Html:
        done = sum(r.outcome is not None for r in self.records)
        good = sum(r.outcome in _GOOD for r in self.records)
        tone = outcome_tone("success" if good == len(self.records) else "unverified")
        return card(
            "harnessnb-sweep",
            ["sweep", code(self.sweep_id)],
            facts(
                [
                    ("runs", f"{done}/{len(self.records)}"),
                    ("succeeded", good),
                    ("spend", "?" if self.cost_usd is None else usd(self.cost_usd)),
                    *([("stopped", self.stopped)] if self.stopped else []),
                ]
            ),
            grid(
                ["provider", "done", "outcomes", "errors", "retries", "spend"],
                [tuple(shorten(str(c), 80) for c in row) for row in self._provider_rows()],
            ),
            sweep_grid(self.records, [name for name, _ in self.scorers]),
            tone=tone,
        )
