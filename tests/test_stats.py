"""A sweep's statistics, each figure checked against scipy's or statsmodels' own result on
the same seeded data: clustered intervals, pass@k, McNemar, the paired t-test, Holm."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import special, stats
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.weightstats import DescrStatsW

from harnessnb import ConfigError, pass_at_k, pass_hat_k
from harnessnb.sweeps._stats import (
    COMPARE_COLUMNS,
    SCORE_COLUMNS,
    SUMMARY_COLUMNS,
    compare,
    summary,
)

REL = 1e-9

# n = 10 runs, c = 3 passes, k = 1..10, worked out by hand from the binomials:
# pass@k = 1 - C(7, k) / C(10, k), pass^k = C(3, k) / C(10, k).
PASS_AT_K = [Fraction(3, 10), Fraction(24, 45), Fraction(85, 120), Fraction(175, 210),
             Fraction(231, 252), Fraction(203, 210), Fraction(119, 120), 1, 1, 1]  # fmt: skip
PASS_HAT_K = [Fraction(3, 10), Fraction(3, 45), Fraction(1, 120), 0, 0, 0, 0, 0, 0, 0]


def _row(run: str, sample: str, provider: str, value: float | None, **more: object) -> dict:
    infra = bool(more.pop("infra", False))
    row = {
        "sweep_id": "s1", "run_id": run, "sample_id": sample, "provider": provider,
        "repeat": 0, "scorer": "exact", "scorer_version": "1",
        "value": None if infra else value,
        "passed": None if infra or value is None else value >= 1.0, "explanation": "",
        "error": None, "infra_failure": infra, "infra_kind": "rate_limit" if infra else None,
        "outcome": "escalated_retryable" if infra else "success", "cost_usd": 0.01,
        "elapsed_s": 1.0,
    }  # fmt: skip
    return row | more


def _frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=list(SCORE_COLUMNS))
    types = {"value": "Float64", "passed": "boolean", "cost_usd": "Float64", "repeat": "int64"}
    return frame.astype(types)


def _sweep(
    seed: int,
    providers: tuple[str, ...] = ("fast", "slow"),
    samples: int = 12,
    repeats: int = 3,
    *,
    binary: bool = False,
    infra_rate: float = 0.1,
) -> pd.DataFrame:
    """A seeded sweep's scores: samples of differing difficulty, some infrastructure
    failures, some scorer errors (no value), costs and seconds."""
    rng = np.random.default_rng(seed)
    difficulty = rng.uniform(0.1, 0.9, samples)
    rows = []
    for p, provider in enumerate(providers):
        for s in range(samples):
            for r in range(repeats):
                chance = min(1.0, difficulty[s] + 0.1 * p)
                value = float(rng.random() < chance) if binary else rng.choice([0, 0.5, 1.0])
                infra = rng.random() < infra_rate
                error = not infra and rng.random() < 0.05
                rows.append(
                    _row(f"{provider}-{s}-{r}", f"q{s:02d}", provider, None if error else value,
                         infra=infra, repeat=r, cost_usd=float(rng.uniform(0.001, 0.02)),
                         elapsed_s=float(rng.gamma(2.0, 3.0)),
                         error="ValueError: boom" if error else None)
                )  # fmt: skip
    return _frame(rows)


def _scored(group: pd.DataFrame) -> pd.DataFrame:
    return group[~group["infra_failure"] & group["value"].notna()]


def _chen(n: int, c: int, k: int) -> float:
    """Chen et al. 2021's numerically stable pass@k, as their paper's code writes it."""
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


# --- pass@k and pass^k ------------------------------------------------------------------


@pytest.mark.parametrize("k", range(1, 11))
def test_pass_at_k_and_pass_hat_k_match_the_table_worked_by_hand(k: int) -> None:
    assert pass_at_k(10, 3, k) == pytest.approx(float(PASS_AT_K[k - 1]), rel=REL, abs=0)
    assert pass_hat_k(10, 3, k) == pytest.approx(float(PASS_HAT_K[k - 1]), rel=REL, abs=0)
    assert pass_at_k(10, 3, k) == pytest.approx(_chen(10, 3, k), rel=REL)


@pytest.mark.parametrize(("n", "c", "k"), [(3, 1, 4), (3, 4, 1), (3, 1, 0), (3, -1, 1)])
def test_pass_at_k_refuses_impossible_counts(n: int, c: int, k: int) -> None:
    for estimator in (pass_at_k, pass_hat_k):
        with pytest.raises(ConfigError, match="pass@k needs"):
            estimator(n, c, k)


# --- summary ----------------------------------------------------------------------------


def _reference_interval(group: pd.DataFrame, confidence: float) -> tuple[float, float, float]:
    """statsmodels: an intercept-only OLS, covariance clustered by sample (its default
    CR1 correction), t quantile with G - 1 degrees of freedom."""
    scored = _scored(group)
    y = scored["value"].to_numpy(dtype=float)
    fit = sm.OLS(y, np.ones(len(y))).fit(
        cov_type="cluster",
        cov_kwds={"groups": pd.factorize(scored["sample_id"])[0]},
        use_t=True,
    )
    low, high = fit.conf_int(alpha=1 - confidence)[0]
    return float(fit.params[0]), float(low), float(high)


@pytest.mark.parametrize(("seed", "confidence"), [(1, 0.95), (2, 0.9), (3, 0.99)])
def test_summary_figures_equal_statsmodels_and_scipy(seed: int, confidence: float) -> None:
    scores = _sweep(seed)
    table = summary(scores, confidence=confidence)
    assert list(table.columns) == ["provider", "scorer", *SUMMARY_COLUMNS]
    assert list(table["provider"]) == ["fast", "slow"]
    for _, row in table.iterrows():
        group = scores[scores["provider"] == row["provider"]]
        scored = _scored(group)
        mean, low, high = _reference_interval(group, confidence)
        assert row["mean"] == pytest.approx(mean, rel=REL)
        assert row["ci_low"] == pytest.approx(max(0.0, low), rel=REL)
        assert row["ci_high"] == pytest.approx(min(1.0, high), rel=REL)
        assert row["runs"] == len(group) == 36
        assert row["scored"] == len(scored)
        assert row["infra_failures"] == group["infra_failure"].sum()
        assert row["infra_failure_rate"] == pytest.approx(group["infra_failure"].mean(), rel=REL)
        per_sample = scored.groupby("sample_id")["value"].agg(
            n="size", c=lambda v: int((v >= 1.0).sum())
        )
        k = int(per_sample["n"].min())
        assert row["k"] == k
        counts = zip(per_sample["n"], per_sample["c"], strict=True)
        at_k = np.mean([_chen(n, c, k) for n, c in counts])
        hat_k = np.mean(special.comb(per_sample["c"], k) / special.comb(per_sample["n"], k))
        assert row["pass_at_k"] == pytest.approx(at_k, rel=REL)
        assert row["pass_hat_k"] == pytest.approx(hat_k, rel=REL)
        passes = int((scored["value"] >= 1.0).sum())
        assert row["cost_per_correct_usd"] == pytest.approx(group["cost_usd"].sum() / passes)
        seconds = group["elapsed_s"].to_numpy()
        assert row["p50_s"] == pytest.approx(stats.scoreatpercentile(seconds, 50), rel=REL)
        assert row["p95_s"] == pytest.approx(stats.scoreatpercentile(seconds, 95), rel=REL)


def test_summary_k_given_leaves_out_samples_with_fewer_scored_runs() -> None:
    # q1 has two scored runs (one infrastructure failure), q0 three.
    rows = [_row("a0", "q0", "p", 1.0), _row("a1", "q0", "p", 0.0), _row("a2", "q0", "p", 1.0),
            _row("b0", "q1", "p", 1.0), _row("b1", "q1", "p", 1.0),
            _row("b2", "q1", "p", None, infra=True)]  # fmt: skip
    default, three = summary(_frame(rows)).iloc[0], summary(_frame(rows), k=3).iloc[0]
    assert default["k"] == 2
    expected = (pass_at_k(3, 2, 2) + pass_at_k(2, 2, 2)) / 2
    assert default["pass_at_k"] == pytest.approx(expected, rel=REL)
    assert default["pass_hat_k"] == pytest.approx((1 / 3 + 1) / 2, rel=REL)
    assert three["k"] == 3
    assert three["pass_at_k"] == 1.0
    assert three["pass_hat_k"] == 0.0
    with pytest.raises(ConfigError, match="k must be"):
        summary(_frame(rows), k=0)


def test_summary_of_only_infrastructure_failures_has_no_statistics_but_the_rate() -> None:
    scores = _sweep(4, providers=("down",), samples=3, repeats=2, infra_rate=1.0)
    row = summary(scores).iloc[0]
    assert (row["runs"], row["scored"], row["infra_failures"]) == (6, 0, 6)
    assert row["infra_failure_rate"] == 1.0
    for column in ("mean", "ci_low", "ci_high", "k", "pass_at_k", "pass_hat_k",
                   "cost_per_correct_usd"):  # fmt: skip
        assert row[column] is pd.NA, column
    assert row["p50_s"] == pytest.approx(stats.scoreatpercentile(scores["elapsed_s"], 50))


def test_summary_of_one_sample_has_a_mean_and_no_interval() -> None:
    rows = [_row(f"r{i}", "q0", "p", v) for i, v in enumerate([1.0, 0.5, 0.0])]
    row = summary(_frame(rows)).iloc[0]
    assert row["mean"] == pytest.approx(0.5)
    assert row["ci_low"] is pd.NA
    assert row["ci_high"] is pd.NA


def test_summary_keeps_the_interval_inside_0_and_1_where_every_score_lies() -> None:
    # Two samples, one right and one wrong: the t interval (1 degree of freedom) spans
    # about -5.9 to 6.9; scores lie in [0, 1], so the interval is cut there.
    rows = [_row("r0", "q0", "p", 1.0), _row("r1", "q1", "p", 0.0)]
    scores = _frame(rows)
    row = summary(scores).iloc[0]
    _, low, high = _reference_interval(scores, 0.95)
    assert low < -5 and high > 6
    assert (row["mean"], row["ci_low"], row["ci_high"]) == (0.5, 0.0, 1.0)


def test_summary_of_equal_scores_has_an_interval_of_width_zero() -> None:
    rows = [_row(f"r{s}{r}", f"q{s}", "p", 1.0) for s in range(4) for r in range(2)]
    scores = _frame(rows)
    row = summary(scores).iloc[0]
    assert (row["mean"], row["ci_low"], row["ci_high"]) == (1.0, 1.0, 1.0)
    _, low, high = _reference_interval(scores, 0.95)  # statsmodels: width ~1e-16
    assert (low, high) == pytest.approx((1.0, 1.0), abs=1e-12)
    assert row["pass_at_k"] == row["pass_hat_k"] == 1.0


def test_summary_cost_per_correct_is_unknown_when_a_cost_is_or_nothing_passed() -> None:
    rows = [_row("r0", "q0", "p", 1.0, cost_usd=0.2), _row("r1", "q1", "p", 0.0, cost_usd=0.1),
            _row("r2", "q0", "o", 1.0, cost_usd=None), _row("r3", "q1", "o", 1.0),
            _row("r4", "q0", "z", 0.0), _row("r5", "q1", "z", 0.5)]  # fmt: skip
    table = summary(_frame(rows)).set_index("provider")
    assert table.loc["p", "cost_per_correct_usd"] == pytest.approx(0.3, rel=REL)
    assert table.loc["o", "cost_per_correct_usd"] is pd.NA
    assert table.loc["z", "cost_per_correct_usd"] is pd.NA


def test_summary_counts_each_run_once_when_not_grouped_by_scorer() -> None:
    rows = [_row("r0", "q0", "p", 1.0), _row("r0", "q0", "p", 0.0, scorer="judge"),
            _row("r1", "q1", "p", 1.0), _row("r1", "q1", "p", 1.0, scorer="judge")]
    row = summary(_frame(rows), by=["provider"]).iloc[0]
    assert (row["runs"], row["scored"]) == (2, 4)
    assert row["cost_per_correct_usd"] == pytest.approx(0.02 / 3, rel=REL)


def test_summary_refuses_a_frame_without_the_columns_and_answers_an_empty_one() -> None:
    with pytest.raises(ConfigError, match="lacks the columns sample_id"):
        summary(_frame([_row("r0", "q0", "p", 1.0)]).drop(columns="sample_id"))
    with pytest.raises(ConfigError, match="confidence"):
        summary(_frame([]), confidence=1.0)
    empty = summary(_frame([]))
    assert empty.empty
    assert list(empty.columns) == ["provider", "scorer", *SUMMARY_COLUMNS]


# --- compare ----------------------------------------------------------------------------


def _sample_means(scores: pd.DataFrame, provider: str) -> pd.Series:
    return _scored(scores[scores["provider"] == provider]).groupby("sample_id")["value"].mean()


def test_compare_of_pass_fail_single_runs_is_mcnemars_exact_test() -> None:
    scores = _sweep(5, samples=60, repeats=1, binary=True, infra_rate=0.0)
    scores = scores[scores["value"].notna()]
    row = compare(scores, "fast", "slow").iloc[0]
    a, b = (_sample_means(scores, p) for p in ("fast", "slow"))
    shared = a.index.intersection(b.index)
    a, b = a[shared].to_numpy(), b[shared].to_numpy()
    table = pd.crosstab(a, b).reindex(index=[0.0, 1.0], columns=[0.0, 1.0], fill_value=0)
    assert row["test"] == "mcnemar_exact"
    assert row["samples"] == len(shared)
    assert row["p_value"] == pytest.approx(mcnemar(table.to_numpy(), exact=True).pvalue, rel=REL)
    assert row["diff"] == pytest.approx(b.mean() - a.mean(), rel=REL)
    # The Wald interval of a paired difference of proportions (Agresti, Categorical Data
    # Analysis, 10.1.1), from the table's discordant cells.
    n, gained, lost = len(shared), table.loc[0.0, 1.0], table.loc[1.0, 0.0]
    se = np.sqrt((gained + lost) / n - ((gained - lost) / n) ** 2) / np.sqrt(n)
    z = stats.norm.ppf(0.975)
    assert row["ci_low"] == pytest.approx(row["diff"] - z * se, rel=REL)
    assert row["ci_high"] == pytest.approx(row["diff"] + z * se, rel=REL)
    assert row["p_holm"] == row["p_value"]
    assert row["reason"] is pd.NA


@pytest.mark.parametrize(("seed", "confidence"), [(6, 0.95), (7, 0.9)])
def test_compare_of_repeated_scores_is_the_paired_t_test(seed: int, confidence: float) -> None:
    scores = _sweep(seed, samples=20)
    row = compare(scores, "fast", "slow", confidence=confidence).iloc[0]
    a, b = (_sample_means(scores, p) for p in ("fast", "slow"))
    shared = a.index.intersection(b.index)
    reference = stats.ttest_rel(b[shared], a[shared])
    interval = reference.confidence_interval(confidence_level=confidence)
    assert row["test"] == "paired_t"
    assert row["samples"] == len(shared)
    assert row["mean_a"] == pytest.approx(a[shared].mean(), rel=REL)
    assert row["mean_b"] == pytest.approx(b[shared].mean(), rel=REL)
    assert row["p_value"] == pytest.approx(reference.pvalue, rel=REL)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(interval, rel=REL)
    differences = DescrStatsW((b[shared] - a[shared]).to_numpy())
    assert row["diff"] == pytest.approx(differences.mean, rel=REL)
    assert row["p_value"] == pytest.approx(differences.ttest_mean()[1], rel=REL)
    low, high = differences.tconfint_mean(alpha=1 - confidence)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((low, high), rel=REL)


def test_compare_of_every_pair_has_holms_correction_per_scorer() -> None:
    scores = _sweep(8, providers=("a", "b", "c", "d"), samples=15)
    judged = scores.assign(scorer="judge", value=scores["value"].mul(0.5))
    table = compare(pd.concat([scores, judged], ignore_index=True))
    assert list(table.columns) == list(COMPARE_COLUMNS)
    pairs = [("a", "b"), ("a", "c"), ("a", "d"), ("b", "c"), ("b", "d"), ("c", "d")]
    assert list(zip(table["a"], table["b"], strict=True)) == pairs * 2
    for name in ("exact", "judge"):
        family = table[table["scorer"] == name]
        holm = multipletests(family["p_value"].to_numpy(dtype=float), method="holm")[1]
        assert family["p_holm"].to_numpy(dtype=float) == pytest.approx(holm, rel=REL)
    one = compare(scores, "a", "c").iloc[0]
    assert one["p_value"] == pytest.approx(table.iloc[1]["p_value"], rel=REL)


def test_compare_leaves_infrastructure_failures_out() -> None:
    # b fails on q0 and q1 for its provider (not a wrong answer): only q2..q5 are paired.
    rows = [_row(f"a{s}", f"q{s}", "a", 1.0) for s in range(6)]
    rows += [_row(f"b{s}", f"q{s}", "b", 0.0 if s < 2 else 1.0, infra=s < 2) for s in range(6)]
    row = compare(_frame(rows), "a", "b").iloc[0]
    assert row["samples"] == 4
    assert (row["mean_a"], row["mean_b"], row["diff"]) == (1.0, 1.0, 0.0)
    assert (row["p_value"], row["ci_low"], row["ci_high"]) == (1.0, 0.0, 0.0)


def test_compare_of_equal_differences_has_width_zero_and_p_one_or_zero() -> None:
    rows = [_row(f"{p}{s}{r}", f"q{s}", p, v) for s in range(3) for r in range(2)
            for p, v in (("a", 0.5), ("b", 0.5), ("c", 1.0))]  # fmt: skip
    table = compare(_frame(rows)).set_index(["a", "b"])
    same, better = table.loc[("a", "b")], table.loc[("a", "c")]
    assert (same["test"], same["diff"], same["ci_low"], same["ci_high"]) == ("paired_t", 0, 0, 0)
    assert same["p_value"] == 1.0
    assert (better["diff"], better["ci_low"], better["ci_high"]) == (0.5, 0.5, 0.5)
    assert better["p_value"] == 0.0


def test_compare_with_fewer_than_two_shared_samples_gives_a_row_with_the_reason() -> None:
    rows = [_row("a0", "q0", "a", 1.0), _row("a1", "q1", "a", 0.0),
            _row("b0", "q0", "b", 0.0), _row("b1", "q2", "b", 1.0)]  # fmt: skip
    row = compare(_frame(rows), "a", "b").iloc[0]
    assert row["samples"] == 1
    assert row["diff"] == -1.0
    for column in ("ci_low", "ci_high", "p_value", "test", "p_holm"):
        assert row[column] is pd.NA, column
    assert "1 sample(s) scored by both" in row["reason"]


def test_compare_refuses_an_unknown_provider_or_scorer_naming_those_there_are() -> None:
    scores = _sweep(9, samples=3)
    with pytest.raises(ConfigError, match=r"no provider 'gpt' in these scores.*'fast', 'slow'"):
        compare(scores, "fast", "gpt")
    with pytest.raises(ConfigError, match=r"no scorer 'judge'.*'exact'"):
        compare(scores, scorer="judge")
    with pytest.raises(ConfigError, match="two providers"):
        compare(scores, "fast")
    with pytest.raises(ConfigError, match="two different providers"):
        compare(scores, "fast", "fast")
