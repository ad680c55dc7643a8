"""The SQL behind ``Store.failure_rates``: how often attempts (or tool calls) fail,
per group.

Attempts a cancel cut off (``cancelled``) are in no group: the provider neither
answered nor failed them. Tool calls (``of="tool_calls"``) count those with an
outcome; their ``kind`` is the MCP failure kind, else ``error``/``refused``.

``by`` names columns that are spliced into SQL, so they are checked against
``FAILURE_GROUPS`` first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from ..rules._errors import ConfigError, StoreError
from ._schema import quote

__all__ = [
    "FAILURE_GROUPS",
    "FAILURE_SUBJECTS",
    "TOOL_FAILURE_GROUPS",
    "failure_groups",
    "failure_sql",
    "failure_subject",
]

# Columns ``failure_rates(by=...)`` may group on (validated: ``by`` is spliced into SQL).
# ``output_mode`` is the mode a typed call asked in (missing for an untyped one), so
# ``by=("provider", "output_mode", "kind")`` says who follows a schema, and how.
FAILURE_GROUPS: Final = (
    "run_id", "step", "provider", "model", "kind", "status", "fell_back", "base_url",
    "output_mode",
)  # fmt: skip
# ... and with ``of="tool_calls"``: ``server`` is the MCP server (missing for harnessnb's
# own tools and ``@hn.tool`` ones), ``kind`` how a call failed (``_TOOL_KIND``).
TOOL_FAILURE_GROUPS: Final = ("run_id", "step", "tool", "server", "effect", "sandbox", "kind")

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

# A tool call's failure kind: the MCP kind where there is one (``error_kind``), else
# the status of a call that failed (``error``, ``refused``); NULL for one that worked.
_TOOL_KIND: Final = "coalesce(error_kind, CASE WHEN status IN ('error', 'refused') THEN status END)"

# z for a two-sided 95% interval (``_frames.with_intervals`` computes the same in pandas).
_Z95: Final = 1.959963984540054


def _wilson(failures: str, total: str) -> str:
    """``failure_rate_low, failure_rate_high``: the 95% Wilson score interval of
    ``failures`` out of ``total`` (SQL expressions; ``total`` is never 0), computed in
    the query rather than on its frame (the same operations as ``with_intervals``)."""
    n = f"({total})::DOUBLE"
    p = f"(({failures})::DOUBLE / {n})"
    z2 = repr(_Z95 * _Z95)
    den = f"(1 + {z2} / {n})"
    centre = f"(({p} + {z2} / (2 * {n})) / {den})"
    half = f"({_Z95!r} * sqrt({p} * (1 - {p}) / {n} + {z2} / (4 * {n} * {n})) / {den})"
    return (
        f"greatest({centre} - {half}, 0.0) AS failure_rate_low, "
        f"least({centre} + {half}, 1.0) AS failure_rate_high"
    )


@dataclass(frozen=True)
class _Subject:
    """What ``failure_rates(of=...)`` counts: the rows (``select`` from ``table``,
    ``kept`` ones, with a ``kind`` column that is NULL on success), the name of a
    group's count (``total``), the time column ``every=`` buckets, and the extra
    aggregates over a group's rows (``totals``) and over its failures (``stats``),
    each as SQL and as the names of its columns."""

    table: str
    select: str
    kept: str
    total: str
    time: str
    groups: tuple[str, ...]
    totals: str = ""
    total_names: tuple[str, ...] = ()
    stats: str = ""
    stat_names: tuple[str, ...] = ()


FAILURE_SUBJECTS: Final[dict[str, _Subject]] = {
    # An attempt a cancel cut off is no provider's success nor failure: left out.
    "attempts": _Subject(
        table="attempts",
        select="*",
        kept="cancelled IS NOT TRUE",
        total="attempts",
        time="started_at",
        groups=FAILURE_GROUPS,
        totals=_COST,
        total_names=("cost_usd", "cost_per_success_usd", "unpriced_attempts"),
        stats=_STATS,
        stat_names=("retry_after_s_mean", "retry_after_s_p50", "retry_after_s_max"),
    ),
    # A call still ``intent`` (running, or cut off by a crash) or ``needs_reconciliation``
    # (nobody knows whether it ran) has no outcome yet: left out.
    "tool_calls": _Subject(
        table="tool_calls",
        select=f"* EXCLUDE (output), {_TOOL_KIND} AS kind",
        kept="(status IN ('ok', 'error', 'refused') OR error_kind IS NOT NULL)",
        total="calls",
        time='"at"',
        groups=TOOL_FAILURE_GROUPS,
    ),
}


def failure_subject(of: str) -> _Subject:
    """What ``of`` counts.

    Raises:
        ConfigError: ``of`` is none of ``FAILURE_SUBJECTS``, naming them.
    """
    if of not in FAILURE_SUBJECTS:
        raise ConfigError(
            f"failure_rates(of={of!r}): count one of {', '.join(map(repr, FAILURE_SUBJECTS))}"
        )
    return FAILURE_SUBJECTS[of]


def failure_groups(by: tuple[str, ...] | str, path: str, of: str = "attempts") -> tuple[str, ...]:
    """``by`` as a tuple of distinct names among ``of``'s groups (``FAILURE_GROUPS``
    for attempts, ``TOOL_FAILURE_GROUPS`` for tool calls).

    Raises:
        StoreError: ``query`` for any other name, or a name given twice, naming the
            choices.
    """
    allowed = failure_subject(of).groups
    groups = (by,) if isinstance(by, str) else tuple(by)
    bad = [g for g in groups if g not in allowed]
    if bad or len(set(groups)) != len(groups):
        where = "" if of == "attempts" else f"of={of!r}, "
        raise StoreError(
            f"failure_rates({where}by={by!r}): group by distinct names among {allowed}",
            kind="query",
            path=path,
        )
    return groups


def failure_sql(
    groups: tuple[str, ...],
    every_us: int | None = None,
    *,
    sweep: bool = False,
    of: str = "attempts",
) -> str:
    """The aggregation behind ``failure_rates`` (``groups`` already validated) of the
    rows ``of`` names (``FAILURE_SUBJECTS``), the rates' 95% interval included
    (``failure_rate_low``/``_high``, after ``failure_rate``).

    ``every_us`` (an int from ``bucket_us``) adds a first group, ``period``: the start
    of the time bucket of that many microseconds each row started in. ``sweep`` keeps
    the rows of one sweep's runs: the query then takes the named parameter ``$sweep``
    (the sweep id, never spliced into the text).
    """
    subject = failure_subject(of)
    kept = subject.kept
    if sweep:
        kept += " AND run_id IN (SELECT run_id FROM run_rows WHERE sweep_id = $sweep)"
    source = f"(SELECT {subject.select} FROM {subject.table} WHERE {kept}) AS s"
    if every_us is not None:
        source = (
            "(SELECT *, time_bucket(to_microseconds("
            f"{int(every_us)}), {subject.time}) AS period FROM {source}) AS a"
        )
        groups = ("period", *groups)
    total = subject.total
    totals = f", {subject.totals}" if subject.totals else ""
    stats = f", {subject.stats}" if subject.stats else ""
    quoted = [quote(g) for g in groups]
    if "kind" not in groups:
        cols = ", ".join(quoted)
        head, tail = (f"{cols}, ", f" GROUP BY {cols} ORDER BY {cols}") if cols else ("", "")
        return (
            f"SELECT {head}count(*) AS {total}, count(kind) AS failures, "
            f"count(kind) / count(*) AS failure_rate, {_wilson('count(kind)', 'count(*)')}"
            f"{stats}{totals} FROM {source}{tail}"
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
    picked = "".join(f", f.{n}" for n in subject.stat_names)
    picked += "".join(f", t.{n}" for n in subject.total_names)
    return (
        f"WITH t AS (SELECT {t_select}count(*) AS {total}{totals} FROM {source}{t_group}), "
        f"f AS (SELECT {t_select}kind, count(*) AS failures{stats} FROM {source} "
        f"WHERE kind IS NOT NULL GROUP BY {t_select}kind) "
        f"SELECT {select}, t.{total}, coalesce(f.failures, 0) AS failures, "
        f"coalesce(f.failures, 0) / t.{total} AS failure_rate, "
        f"{_wilson('coalesce(f.failures, 0)', f't.{total}')}{picked} "
        f"FROM t LEFT JOIN f ON {join} ORDER BY {order}"
    )
