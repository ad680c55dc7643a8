"""The SQL behind ``Store.failure_rates``: how often attempts fail, per group.

Attempts a cancel cut off (``cancelled``) are in no group: the provider neither
answered nor failed them.

``by`` names columns that are spliced into SQL, so they are checked against
``FAILURE_GROUPS`` first.
"""

from __future__ import annotations

from typing import Final

from ..rules._errors import StoreError
from ._schema import quote

__all__ = ["FAILURE_GROUPS", "failure_groups", "failure_sql"]

# Columns ``failure_rates(by=...)`` may group on (validated: ``by`` is spliced into SQL).
FAILURE_GROUPS: Final = (
    "run_id", "step", "provider", "model", "kind", "status", "fell_back", "base_url",
)  # fmt: skip

# A group's spend: the priced attempts' dollars, what one answer cost on average (the
# group's spend over its attempts that succeeded), and how many attempts used tokens at
# a price nobody knows (their dollars are not in ``cost_usd``).
_COST: Final = (
    "sum(cost_usd) AS cost_usd, "
    "sum(cost_usd) / nullif(count(*) - count(kind), 0) AS cost_per_success_usd, "
    "count(*) FILTER (WHERE cost_usd IS NULL AND (input_tokens IS NOT NULL "
    "OR output_tokens IS NOT NULL)) AS unpriced_attempts"
)

_STATS: Final = (
    "avg(retry_after_s) AS retry_after_s_mean, "
    "quantile_cont(retry_after_s, 0.5) AS retry_after_s_p50, "
    "max(retry_after_s) AS retry_after_s_max"
)


def failure_groups(by: tuple[str, ...] | str, path: str) -> tuple[str, ...]:
    """``by`` as a tuple of distinct ``FAILURE_GROUPS`` names.

    Raises:
        StoreError: ``query`` for any other name, or a name given twice.
    """
    groups = (by,) if isinstance(by, str) else tuple(by)
    bad = [g for g in groups if g not in FAILURE_GROUPS]
    if bad or len(set(groups)) != len(groups):
        raise StoreError(
            f"failure_rates(by={by!r}): group by distinct names among {FAILURE_GROUPS}",
            kind="query",
            path=path,
        )
    return groups


def failure_sql(
    groups: tuple[str, ...], every_us: int | None = None, *, sweep: bool = False
) -> str:
    """The aggregation behind ``failure_rates`` (``groups`` already validated).

    ``every_us`` (an int from ``bucket_us``) adds a first group, ``period``: the start
    of the time bucket of that many microseconds each attempt started in. ``sweep``
    keeps the attempts of one sweep's runs: the query then takes the named parameter
    ``$sweep`` (the sweep id, never spliced into the text).
    """
    # An attempt a cancel cut off is no provider's success nor failure: left out.
    kept = "cancelled IS NOT TRUE"
    source = f"(SELECT * FROM attempts WHERE {kept}) AS c"
    if sweep:
        source = (
            f"(SELECT * FROM attempts WHERE {kept} AND run_id IN "
            "(SELECT run_id FROM run_rows WHERE sweep_id = $sweep)) AS s"
        )
    if every_us is not None:
        source = (
            "(SELECT *, time_bucket(to_microseconds("
            f"{int(every_us)}), started_at) AS period FROM {source}) AS a"
        )
        groups = ("period", *groups)
    quoted = [quote(g) for g in groups]
    if "kind" not in groups:
        cols = ", ".join(quoted)
        head, tail = (f"{cols}, ", f" GROUP BY {cols} ORDER BY {cols}") if cols else ("", "")
        return (
            f"SELECT {head}count(*) AS attempts, count(kind) AS failures, "
            f"count(kind) / count(*) AS failure_rate, {_STATS}, {_COST} FROM {source}{tail}"
        )
    # Totals per outer group, and failures per (outer group, kind) from the failed rows
    # only: two cheap aggregations beat one GROUP BY over every (group, kind) pair (3x).
    outer = [quote(g) for g in groups if g != "kind"]
    out_cols = ", ".join(outer)
    t_select = f"{out_cols}, " if outer else ""
    t_group = f" GROUP BY {out_cols}" if outer else ""
    join = " AND ".join(f"t.{c} IS NOT DISTINCT FROM f.{c}" for c in outer) or "true"
    select = ", ".join("f.kind AS kind" if g == "kind" else f"t.{quote(g)}" for g in groups)
    order = ", ".join([*(f"t.{c}" for c in outer), "failures DESC", "f.kind"])
    return (
        f"WITH t AS (SELECT {t_select}count(*) AS attempts, {_COST} FROM {source}{t_group}), "
        f"f AS (SELECT {t_select}kind, count(*) AS failures, {_STATS} FROM {source} "
        f"WHERE kind IS NOT NULL GROUP BY {t_select}kind) "
        f"SELECT {select}, t.attempts, coalesce(f.failures, 0) AS failures, "
        "coalesce(f.failures, 0) / t.attempts AS failure_rate, "
        "f.retry_after_s_mean, f.retry_after_s_p50, f.retry_after_s_max, "
        "t.cost_usd, t.cost_per_success_usd, t.unpriced_attempts "
        f"FROM t LEFT JOIN f ON {join} ORDER BY {order}"
    )
