"""What a sweep's scores come to: ``summary`` per provider and scorer, ``compare`` of two
providers on the samples both scored, and the pass@k / pass^k estimators.

Pure functions over the scores frame (one row per run x scorer; ``SCORE_COLUMNS``).
The choices, once:

- A mean score's interval accounts for repeats of one sample not being independent: the
  standard error is the cluster-robust one of an intercept-only regression, clustered by
  ``sample_id``, with the CR1 small-sample factor G/(G-1) (N-1)/(N-K) (K = 1: G/(G-1)),
  and a t quantile with G-1 degrees of freedom (statsmodels' ``OLS(...).fit(
  cov_type="cluster", use_t=True)``). It is left unclipped to [0, 1], as the regression
  gives it; with one sample it is <NA>; when every score is equal it has width 0 (the
  regression sees no variation: read it with ``scored``).
- ``compare`` reports b - a (positive: b scored higher). With one scored run per sample on
  each side and pass/fail values it is McNemar's exact test (the discordant pairs against
  a fair coin, two-sided) with the Wald interval of the paired difference of proportions
  (normal quantile); otherwise the paired t-test on the per-sample means (t quantile, n-1
  degrees of freedom). Differences that are all equal give an interval of width 0 and a
  p-value of 1 (no difference) or 0 (the same nonzero difference on every sample).
- Infrastructure failures and unscored runs (a scorer's error) are left out of every score
  statistic: they are not wrong answers. They count as runs, in the failure rate and cost.

scipy is imported on use, so importing this module stays as light as pandas.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import combinations
from typing import Any, Final

import numpy as np
import pandas as pd

from ..rules._errors import ConfigError

__all__ = [
    "COMPARE_COLUMNS",
    "SCORE_COLUMNS",
    "SUMMARY_COLUMNS",
    "compare",
    "pass_at_k",
    "pass_hat_k",
    "summary",
]

# The scores frame's columns, in order (SweepResult.scores).
SCORE_COLUMNS: Final = (
    "sweep_id", "run_id", "sample_id", "provider", "repeat", "scorer", "scorer_version",
    "value", "passed", "explanation", "error", "infra_failure", "infra_kind", "outcome",
    "cost_usd", "elapsed_s",
)  # fmt: skip
# summary's statistics, after the ``by`` columns, with their dtypes.
SUMMARY_COLUMNS: Final = {
    "runs": "Int64", "scored": "Int64", "infra_failures": "Int64",
    "infra_failure_rate": "Float64", "mean": "Float64", "ci_low": "Float64",
    "ci_high": "Float64", "k": "Int64", "pass_at_k": "Float64", "pass_hat_k": "Float64",
    "cost_per_correct_usd": "Float64", "p50_s": "Float64", "p95_s": "Float64",
}  # fmt: skip
COMPARE_COLUMNS: Final = {
    "a": "string", "b": "string", "scorer": "string", "samples": "Int64",
    "mean_a": "Float64", "mean_b": "Float64", "diff": "Float64", "ci_low": "Float64",
    "ci_high": "Float64", "p_value": "Float64", "test": "string", "p_holm": "Float64",
    "reason": "string",
}  # fmt: skip
MCNEMAR: Final = "mcnemar_exact"
PAIRED_T: Final = "paired_t"
_SUMMARY_NEEDS: Final = ("run_id", "sample_id", "value", "infra_failure", "cost_usd", "elapsed_s")
_COMPARE_NEEDS: Final = ("sample_id", "provider", "scorer", "value", "infra_failure")


def _counts(n: int, c: int, k: int) -> None:
    for name, count in (("n", n), ("c", c), ("k", k)):
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)):
            raise ConfigError(f"pass@k needs whole numbers: {name}={count!r}")
    if not 0 <= c <= n:
        raise ConfigError(f"pass@k needs 0 <= c <= n (c passes of n runs): n={n}, c={c}")
    if not 1 <= k <= n:
        raise ConfigError(f"pass@k needs 1 <= k <= n (k of the n runs drawn): n={n}, k={k}")


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of k runs drawn from n (c of them passing) passes: the
    unbiased estimator 1 - C(n-c, k) / C(n, k) (Chen et al. 2021). k > n is a
    ``ConfigError``."""
    _counts(n, c, k)
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k: the chance that all k runs drawn from n (c of them passing) pass,
    C(c, k) / C(n, k). k > n is a ``ConfigError``."""
    _counts(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _need(scores: pd.DataFrame, columns: Sequence[str]) -> None:
    if not isinstance(scores, pd.DataFrame):
        raise ConfigError(f"scores must be a DataFrame, got {type(scores).__name__}")
    missing = [c for c in columns if c not in scores.columns]
    if missing:
        raise ConfigError(f"the scores frame lacks the columns {', '.join(missing)}")


def _level(confidence: float) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)):
        raise ConfigError(f"confidence must be a number in (0, 1), got {confidence!r}")
    if not 0 < confidence < 1:
        raise ConfigError(f"confidence must be in (0, 1), got {confidence!r}")
    return float(confidence)


def _values(rows: pd.DataFrame) -> pd.Series:
    """The scores of the rows that were scored (an infrastructure failure never is), as
    floats; the other rows dropped."""
    values = pd.to_numeric(rows["value"]).astype("Float64")
    kept = values.notna() & ~rows["infra_failure"].astype("boolean").fillna(False)
    return values[kept].astype(float)


def _frame(
    rows: list[dict[str, Any]], columns: dict[str, str], front: Sequence[str]
) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=[*front, *columns])
    return frame.astype(columns)


def summary(
    scores: pd.DataFrame,
    *,
    by: Sequence[str] = ("provider", "scorer"),
    k: int | None = None,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """One row per group of ``by``: how many runs, scored and infrastructure failures, the
    mean score with its interval (clustered by sample), pass@k and pass^k, cost per
    correct answer, p50/p95 seconds (``SUMMARY_COLUMNS``).

    Args:
        scores: The scores frame (one row per run x scorer).
        by: The columns to group by.
        k: pass@k's k (default: the fewest scored runs of any sample in the group);
            samples with fewer scored runs than k are left out of pass@k and pass^k.
        confidence: The interval's level.

    Runs, infrastructure failures, cost and seconds count each run once; the score
    statistics are over scored rows (a pass is a full score, 1.0). A group with no scored
    run has <NA> statistics.
    """
    by = [by] if isinstance(by, str) else list(by)
    _need(scores, [*_SUMMARY_NEEDS, *by])
    level = _level(confidence)
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ConfigError(f"k must be a whole number of runs, at least 1: {k!r}")
    rows = []
    if by and len(scores):
        for key, group in scores.groupby(by, sort=False, dropna=False):
            keys = dict(zip(by, key, strict=True))
            rows.append(keys | _group_summary(group, k, level))
    elif len(scores):
        rows.append(_group_summary(scores, k, level))
    return _frame(rows, SUMMARY_COLUMNS, by)


def _group_summary(group: pd.DataFrame, k: int | None, level: float) -> dict[str, Any]:
    runs = group.drop_duplicates("run_id")
    infra = int(runs["infra_failure"].astype("boolean").fillna(False).sum())
    values = _values(group)
    samples = group.loc[values.index, "sample_id"]
    passes = int((values >= 1.0).sum())
    mean, low, high = _clustered_mean(values, samples, level)
    drawn, at_k, hat_k = _pass_rates(values, samples, k)
    costs = pd.to_numeric(runs["cost_usd"]).astype("Float64")
    per_correct = float(costs.sum()) / passes if passes and not costs.isna().any() else None
    seconds = pd.to_numeric(runs["elapsed_s"]).astype(float).dropna()
    return {
        "runs": len(runs),
        "scored": len(values),
        "infra_failures": infra,
        "infra_failure_rate": infra / len(runs),
        "mean": mean,
        "ci_low": low,
        "ci_high": high,
        "k": drawn,
        "pass_at_k": at_k,
        "pass_hat_k": hat_k,
        "cost_per_correct_usd": per_correct,
        "p50_s": float(np.percentile(seconds, 50)) if len(seconds) else None,
        "p95_s": float(np.percentile(seconds, 95)) if len(seconds) else None,
    }


def _clustered_mean(
    values: pd.Series, samples: pd.Series, level: float
) -> tuple[float | None, float | None, float | None]:
    """The mean and its interval, the standard error clustered by sample (CR1, t with
    G-1 degrees of freedom), kept to [0, 1] where every score lies (with few samples the
    t interval reaches far past both ends); no interval with fewer than two samples."""
    if not len(values):
        return None, None, None
    mean = float(values.mean())
    clusters = samples.nunique()
    if clusters < 2:
        return mean, None, None
    from scipy import stats

    sums = (values - mean).groupby(samples.to_numpy()).sum().to_numpy()
    variance = clusters / (clusters - 1) * float(np.sum(sums**2)) / len(values) ** 2
    half = float(stats.t.ppf((1 + level) / 2, clusters - 1)) * math.sqrt(variance)
    return mean, max(0.0, mean - half), min(1.0, mean + half)


def _pass_rates(
    values: pd.Series, samples: pd.Series, k: int | None
) -> tuple[int | None, float | None, float | None]:
    """pass@k and pass^k per sample (its scored runs and their passes), averaged over
    the samples with at least k scored runs."""
    if not len(values):
        return k, None, None
    per_sample = (values >= 1.0).groupby(samples.to_numpy()).agg(["size", "sum"])
    drawn = int(per_sample["size"].min()) if k is None else k
    kept = per_sample[per_sample["size"] >= drawn]
    if not len(kept):
        return drawn, None, None
    pairs = list(zip(kept["size"].astype(int), kept["sum"].astype(int), strict=True))
    at_k = float(np.mean([pass_at_k(n, c, drawn) for n, c in pairs]))
    hat_k = float(np.mean([pass_hat_k(n, c, drawn) for n, c in pairs]))
    return drawn, at_k, hat_k


def compare(
    scores: pd.DataFrame,
    a: str | None = None,
    b: str | None = None,
    *,
    scorer: str | None = None,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """The paired difference b - a of two providers' scores on the samples both scored
    (each sample's score the mean over its repeats), per scorer (``COMPARE_COLUMNS``).

    Args:
        scores: The scores frame (one row per run x scorer).
        a: One provider (the sweep's label); with ``b`` None too: every pair, in the order
            the providers first appear, Holm's correction across the pairs of each scorer.
        b: The other provider; ``diff`` is b's mean minus a's.
        scorer: One scorer's scores (default: each scorer's, a row each).
        confidence: The interval's level.

    With one scored run per sample on each side and pass/fail values: McNemar's exact
    test; otherwise the paired t-test. Infrastructure failures are left out. Fewer than two
    shared samples give a row with <NA> statistics and the ``reason``. An unknown provider
    or scorer is a ``ConfigError`` naming those there are.
    """
    _need(scores, _COMPARE_NEEDS)
    level = _level(confidence)
    providers = [str(p) for p in dict.fromkeys(scores["provider"])]
    pairs = _pairs(providers, a, b)
    scorers = [str(s) for s in dict.fromkeys(scores["scorer"])]
    if scorer is not None:
        if scorer not in scorers:
            raise ConfigError(f"no scorer {scorer!r} in these scores; there are: {scorers}")
        scorers = [scorer]
    values = _values(scores)
    kept = scores.loc[values.index, ["sample_id", "provider", "scorer"]].assign(value=values)
    rows: list[dict[str, Any]] = []
    for name in scorers:
        own = kept[kept["scorer"] == name]
        family = [_paired(own, first, second, level) | {"scorer": name} for first, second in pairs]
        for row, adjusted in zip(
            family, _holm([row.get("p_value") for row in family]), strict=True
        ):
            row["p_holm"] = adjusted
        rows.extend(family)
    return _frame(rows, COMPARE_COLUMNS, ())


def _pairs(providers: list[str], a: str | None, b: str | None) -> list[tuple[str, str]]:
    if a is None and b is None:
        return list(combinations(providers, 2))
    if a is None or b is None:
        raise ConfigError("compare takes two providers (a and b), or none for every pair")
    for name in (a, b):
        if name not in providers:
            raise ConfigError(f"no provider {name!r} in these scores; there are: {providers}")
    if a == b:
        raise ConfigError(f"compare needs two different providers, got {a!r} twice")
    return [(a, b)]


def _paired(kept: pd.DataFrame, a: str, b: str, level: float) -> dict[str, Any]:
    side_a, side_b = (
        kept[kept["provider"] == name].groupby("sample_id")["value"].agg(["mean", "size"])
        for name in (a, b)
    )
    shared = side_a.index.intersection(side_b.index).sort_values()
    row: dict[str, Any] = {"a": a, "b": b, "samples": len(shared)}
    if len(shared):
        mean_a = float(side_a.loc[shared, "mean"].mean())
        mean_b = float(side_b.loc[shared, "mean"].mean())
        row |= {"mean_a": mean_a, "mean_b": mean_b, "diff": mean_b - mean_a}
    if len(shared) < 2:
        return row | {"reason": f"{len(shared)} sample(s) scored by both; a paired test needs 2"}
    first, second = side_a.loc[shared], side_b.loc[shared]
    single = bool((first["size"] == 1).all() and (second["size"] == 1).all())
    both = np.concatenate([first["mean"].to_numpy(), second["mean"].to_numpy()])
    if single and bool(np.isin(both, (0.0, 1.0)).all()):
        return row | _mcnemar(first["mean"].to_numpy(), second["mean"].to_numpy(), level)
    return row | _paired_t(first["mean"].to_numpy(), second["mean"].to_numpy(), level)


def _mcnemar(a: np.ndarray, b: np.ndarray, level: float) -> dict[str, Any]:
    """McNemar's exact test (b right where a was wrong, against the reverse) and the Wald
    interval of the paired difference of proportions, (n01 - n10) / n."""
    from scipy import stats

    gained = int(np.sum((a == 0) & (b == 1)))
    lost = int(np.sum((a == 1) & (b == 0)))
    n = len(a)
    discordant = gained + lost
    p = float(stats.binomtest(gained, discordant, 0.5).pvalue) if discordant else 1.0
    diff = (gained - lost) / n
    half = float(stats.norm.ppf((1 + level) / 2)) * math.sqrt(discordant - n * diff**2) / n
    return {"ci_low": diff - half, "ci_high": diff + half, "p_value": p, "test": MCNEMAR}


def _paired_t(a: np.ndarray, b: np.ndarray, level: float) -> dict[str, Any]:
    """The paired t-test on b - a and its t interval; differences all equal: an interval
    of width 0, p 1 when they are 0, else 0 (scipy would warn and give NaN for 0/0)."""
    differences = b - a
    if np.ptp(differences) == 0:
        diff = float(differences[0])
        p = 1.0 if diff == 0 else 0.0
        return {"ci_low": diff, "ci_high": diff, "p_value": p, "test": PAIRED_T}
    from scipy import stats

    result = stats.ttest_rel(b, a)
    interval = result.confidence_interval(confidence_level=level)
    return {
        "ci_low": float(interval.low),
        "ci_high": float(interval.high),
        "p_value": float(result.pvalue),
        "test": PAIRED_T,
    }


def _holm(p_values: list[float | None]) -> list[float | None]:
    """Holm's step-down adjustment over the p-values given (None stays None)."""
    known = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(known):
        running = max(running, min(1.0, (len(known) - rank) * p))
        adjusted[i] = running
    return adjusted
