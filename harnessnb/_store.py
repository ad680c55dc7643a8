"""The run history in DuckDB: transactional step commits, leases, DataFrame readers.

``Store`` is the one object the loop, resume and users touch. All methods are
synchronous and thread-safe; every statement of a process on one file goes through
one shared connection and lock (``_store_conn``), and every multi-row write is one
transaction, so after a crash a step is wholly present or wholly absent.

Timestamps are TIMESTAMP (naive UTC) in DuckDB and Unix seconds (float) in the dicts
that go in and come out; JSON-ish values are stored as JSON text, credentials removed.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import duckdb

from ._errors import ConflictError, StoreError
from ._store_conn import SharedDb, acquire_shared, parallel, release_shared
from ._store_rows import dumps, from_ts, insert_records, insert_rows, row, to_ts
from ._store_schema import COLUMNS, SCHEMA_VERSION, quote

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["SCHEMA_VERSION", "Lease", "Store"]

# Columns ``failure_rates(by=...)`` may group on (validated: ``by`` is spliced into SQL).
FAILURE_GROUPS: Final = (
    "run_id", "step", "provider", "model", "kind", "status", "fell_back", "base_url",
)  # fmt: skip

_RUN_FIELDS: Final = frozenset(COLUMNS["runs"])
_ORDER: Final = {
    "runs": "started_at, run_id",
    "steps": "run_id, step",
    "attempts": "run_id, step, attempt, started_at",
    "tool_calls": "run_id, step, seq",
    "stalls": 'run_id, step, "at"',
    "markers": 'run_id, "at"',
}
_INT_TYPES: Final = frozenset(
    {"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER"}
)


_EFFECT: Final = COLUMNS["tool_calls"].index("effect")


@dataclass(frozen=True, slots=True)
class Lease:
    """The right to drive one run: valid while ``generation`` is current in the store."""

    run_id: str
    owner: str
    generation: int
    expires_at: float


class Store:
    """The DuckDB store of runs, steps, attempts, tool calls, stalls and checkpoints.

    Args:
        path: A database file (created if missing) or ``":memory:"``.
        linger_s: Seconds the file stays open after the last operation, so bursts of
            commits reuse one connection while other processes get their turn between
            provider calls.
        busy_timeout_s: How long to retry a file locked by another process before
            ``StoreError(kind="busy")`` (retryable).

    Raises:
        StoreError: ``corrupt`` (not a DuckDB file, or damaged; the file is left as it
            was), ``newer`` (written by a newer harnessnb), ``busy``, ``io``.
    """

    schema_version: int = SCHEMA_VERSION

    def __init__(
        self,
        path: str | os.PathLike[str] = "runs.duckdb",
        *,
        linger_s: float = 0.5,
        busy_timeout_s: float = 10.0,
    ) -> None:
        self.path: str = os.fspath(path)
        self._linger_s = linger_s
        self._busy_timeout_s = busy_timeout_s
        self._db: SharedDb | None = acquire_shared(self.path, linger_s=linger_s)
        try:
            # Open now so a corrupt or newer file fails here, not at the first commit.
            with self._connection():
                pass
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------- plumbing

    @contextmanager
    def _connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if self._db is None:
            raise StoreError(f"the store {self.path} is closed", kind="closed", path=self.path)
        with self._db.connection(self._busy_timeout_s) as con:
            yield con

    @contextmanager
    def _transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self._connection() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
            except BaseException:
                _rollback(con)
                raise
            con.execute("COMMIT")

    def close(self) -> None:
        """Let go of the file (the last ``Store`` on a path in this process closes it)."""
        db, self._db = self._db, None
        if db is not None:
            release_shared(db)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._db is None else "open"
        return f"Store({self.path!r}, {state})"

    # --------------------------------------------------------------- writes

    def create_run(self, run: Mapping[str, Any]) -> None:
        """Insert a run row; keys outside the ``runs`` columns are kept in ``extras``."""
        extras = {k: v for k, v in run.items() if k not in _RUN_FIELDS}
        values = row(
            "runs",
            run,
            outcome=None,
            finished_at=None,
            steps=0,
            tokens=0,
            schema_version=SCHEMA_VERSION,
            extras=extras or None,
            updated_at=run.get("started_at") or time.time(),
        )
        with self._transaction() as con:
            insert_rows(con, "runs", [values])

    def commit_step(
        self,
        run_id: str,
        step: Mapping[str, Any],
        *,
        attempts: list[dict[str, Any]],
        tool_calls: list[dict[str, Any]],
        stalls: list[dict[str, Any]],
        checkpoint: Mapping[str, Any],
        lease: Lease | None = None,
    ) -> None:
        """Commit one step whole: its row, attempts, tool calls, stalls and checkpoint.

        Tool rows replace rows with the same (run_id, step, seq), such as the intent row
        of a WRITE tool. ``runs.steps`` grows by one and ``runs.tokens`` by the step's.

        Raises:
            ConflictError: ``lease`` is no longer current (another owner took the run);
                nothing is written.
            StoreError: ``missing`` for an unknown run, ``duplicate`` for a step already
                committed.
        """
        at = step.get("at")
        tools = [row("tool_calls", t, run_id=run_id) for t in tool_calls]
        rows = {
            "steps": [row("steps", step, run_id=run_id, checkpoint=checkpoint)],
            "attempts": [row("attempts", a, run_id=run_id) for a in attempts],
            "stalls": [row("stalls", s, run_id=run_id) for s in stalls],
        }
        run_update = [int(step.get("tokens") or 0), to_ts(at if at is not None else time.time())]
        # Only an effectful call can have an intent row to replace: decide up front
        # rather than fail and redo the whole transaction.
        effectful = any(t[_EFFECT] != "read" for t in tools)
        try:
            self._commit_step_once(run_id, tools, rows, run_update, lease, replace=effectful)
        except StoreError as exc:
            if exc.kind != "duplicate":
                raise
            # A tool row with the same key exists (a WRITE's intent): redo, replacing it.
            self._commit_step_once(run_id, tools, rows, run_update, lease, replace=True)

    def _commit_step_once(
        self,
        run_id: str,
        tools: list[tuple[Any, ...]],
        rows: dict[str, list[tuple[Any, ...]]],
        run_update: list[Any],
        lease: Lease | None,
        *,
        replace: bool,
    ) -> None:
        with self._transaction() as con:
            # Tool rows first: the common case has no intent row to replace, and a plain
            # INSERT is 3x cheaper than an upsert; a clash fails here, before other work.
            if replace and tools:
                con.execute(
                    "DELETE FROM tool_calls WHERE run_id = ? AND step = ?", [run_id, tools[0][1]]
                )
            insert_rows(con, "tool_calls", tools)
            for table, values in rows.items():
                insert_rows(con, table, values)
            # The lease check rides on the run update: one statement fewer per step.
            _update_run(
                con,
                run_id,
                "steps = steps + 1, tokens = tokens + ?, updated_at = ?",
                run_update,
                lease=lease,
            )

    def record_intent(
        self,
        run_id: str,
        tool_call: Mapping[str, Any],
        *,
        lease: Lease | None = None,
        pending: Mapping[str, Any] | None = None,
    ) -> None:
        """Commit a WRITE tool's intent row on its own, before the tool runs.

        ``pending`` (the step's answer and attempts, given with the step's first
        intent) is kept in the same transaction for ``pending_step``.
        """
        values = row("tool_calls", tool_call, run_id=run_id, status="intent")
        with self._transaction() as con:
            _check_lease(con, run_id, lease)
            _delete_tool_rows(con, run_id, [values])
            insert_rows(con, "tool_calls", [values])
            if pending is not None:
                con.execute(
                    'INSERT OR REPLACE INTO pending_steps VALUES (?, ?, ?, ?)',
                    [run_id, tool_call["step"], dumps(pending, text=False),
                     to_ts(tool_call.get("at") or time.time())],
                )

    def add_attempts(self, run_id: str, attempts: list[dict[str, Any]]) -> None:
        """Append attempt rows outside a step (a call that ended the run), in one batch."""
        with self._transaction() as con:
            insert_records(con, "attempts", attempts, run_id=run_id)

    def finish_run(
        self,
        run_id: str,
        *,
        outcome: str,
        finished_at: float,
        error: dict[str, Any] | None = None,
        attempts: list[dict[str, Any]] | None = None,
        stalls: list[dict[str, Any]] | None = None,
        lease: Lease | None = None,
    ) -> None:
        """Set the run's outcome, end time and error, with its last attempts and stalls.

        Raises:
            ConflictError: ``lease`` is stale; nothing is written.
            StoreError: ``missing`` for an unknown run.
        """
        outcome = getattr(outcome, "value", outcome)
        with self._transaction() as con:
            _check_lease(con, run_id, lease)
            insert_rows(
                con, "attempts", [row("attempts", a, run_id=run_id) for a in attempts or []]
            )
            insert_rows(con, "stalls", [row("stalls", s, run_id=run_id) for s in stalls or []])
            _update_run(
                con,
                run_id,
                "outcome = ?, finished_at = ?, error = ?, updated_at = ?",
                [outcome, to_ts(finished_at), dumps(error), to_ts(finished_at)],
            )

    def settle_tool_call(
        self, run_id: str, step: int, seq: int, *, status: str, output: str | None = None
    ) -> None:
        """Set the status (and output) of a tool row, e.g. an intent resolved by a person.

        Raises:
            StoreError: ``missing`` when there is no such tool row.
        """
        size = None if output is None else len(output.encode("utf-8"))
        with self._transaction() as con:
            updated = con.execute(
                "UPDATE tool_calls SET status = ?, output = coalesce(?, output), "
                "output_bytes = coalesce(?, output_bytes) "
                "WHERE run_id = ? AND step = ? AND seq = ?",
                [status, output, size, run_id, step, seq],
            ).fetchone()
            if not updated or updated[0] == 0:
                raise StoreError(
                    f"run {run_id!r} has no tool call at step {step} seq {seq}",
                    kind="missing",
                    path=self.path,
                )

    def add_marker(self, run_id: str, kind: str, detail: str, at: float) -> None:
        """Append a resume/skipped/resolved/abandoned marker row."""
        values = row("markers", {}, run_id=run_id, kind=kind, detail=detail, at=at)
        with self._transaction() as con:
            insert_rows(con, "markers", [values])

    # ------------------------------------------------------- reads for resume

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        """The runs row as a dict: JSON parsed, timestamps as Unix seconds, extras merged."""
        with self._connection() as con:
            cur = con.execute("SELECT * FROM runs WHERE run_id = ?", [run_id])
            names = [d[0] for d in cur.description or []]
            found = cur.fetchone()
        if found is None:
            return None
        out = dict(zip(names, found, strict=True))
        for key in ("started_at", "finished_at", "updated_at"):
            out[key] = from_ts(out[key])
        for key in ("contract", "policy", "error"):
            out[key] = _loads(out[key])
        extras = _loads(out.pop("extras")) or {}
        return {**extras, **out}

    def checkpoints(self, run_id: str) -> list[dict[str, Any]]:
        """``[{"step": n, "state": {...}}, ...]`` of every committed step, in step order."""
        with self._connection() as con:
            found = con.execute(
                "SELECT step, checkpoint FROM steps WHERE run_id = ? AND checkpoint IS NOT NULL "
                "ORDER BY step",
                [run_id],
            ).fetchall()
        return [{"step": int(step), "state": json.loads(state)} for step, state in found]

    def last_checkpoint(self, run_id: str) -> dict[str, Any] | None:
        """``{"step": n, "state": {...}}`` of the highest committed step, or None."""
        with self._connection() as con:
            found = con.execute(
                "SELECT step, checkpoint FROM steps WHERE run_id = ? AND checkpoint IS NOT NULL "
                "ORDER BY step DESC LIMIT 1",
                [run_id],
            ).fetchone()
        if found is None:
            return None
        return {"step": int(found[0]), "state": json.loads(found[1])}

    def open_intents(self, run_id: str) -> list[dict[str, Any]]:
        """Tool rows still in status ``intent`` (a WRITE that may or may not have run)."""
        return self._tool_rows("WHERE run_id = ? AND status = 'intent'", [run_id])

    def pending_step(self, run_id: str, step: int) -> dict[str, Any] | None:
        """The answer recorded with step ``step``'s first intent, if that step began."""
        with self._connection() as con:
            found = con.execute(
                "SELECT answer FROM pending_steps WHERE run_id = ? AND step = ?", [run_id, step]
            ).fetchone()
        return None if found is None else dict(json.loads(found[0]))

    def step_tool_calls(self, run_id: str, step: int) -> list[dict[str, Any]]:
        """The tool rows of one step, whatever their status, ordered by seq."""
        return self._tool_rows("WHERE run_id = ? AND step = ?", [run_id, step])

    def unsettled_tool_calls(self, run_id: str) -> list[dict[str, Any]]:
        """Tool rows still ``intent`` or ``needs_reconciliation``."""
        return self._tool_rows(
            "WHERE run_id = ? AND status IN ('intent', 'needs_reconciliation')", [run_id]
        )

    def _tool_rows(self, where: str, params: list[Any]) -> list[dict[str, Any]]:
        with self._connection() as con:
            cur = con.execute(f"SELECT * FROM tool_calls {where} ORDER BY step, seq", params)
            names = [d[0] for d in cur.description or []]
            rows = cur.fetchall()
        out = []
        for values in rows:
            item = dict(zip(names, values, strict=True))
            item["args"] = _loads(item["args"])
            item["at"] = from_ts(item["at"])
            out.append(item)
        return out

    # ---------------------------------------------------------------- leases

    def acquire_lease(
        self,
        run_id: str,
        owner: str,
        *,
        ttl_s: float = 30.0,
        now: float | None = None,
        owner_alive: Callable[[str], bool] | None = None,
    ) -> Lease:
        """Take the right to drive ``run_id``; every acquire bumps the generation.

        A lease held by another owner is taken over at once when it has expired or
        ``owner_alive(owner)`` says its process is gone; otherwise ``ConflictError``.
        The previous holder's next commit then fails with ``ConflictError``.
        """
        now = time.time() if now is None else now
        with self._transaction() as con:
            held = con.execute(
                "SELECT owner, generation, expires_at, released FROM leases WHERE run_id = ?",
                [run_id],
            ).fetchone()
            generation = 1 if held is None else int(held[1]) + 1
            if held is not None and _lease_blocks(held, owner, now, owner_alive):
                raise ConflictError(
                    f"run {run_id!r} is driven by {held[0]!r} (lease generation {held[1]}, "
                    f"expires in {(from_ts(held[2]) or now) - now:.0f} s)",
                    run_id=run_id,
                    owner=str(held[0]),
                )
            con.execute(
                "INSERT INTO leases VALUES (?, ?, ?, ?, ?, ?, false) ON CONFLICT (run_id) DO "
                "UPDATE SET owner = excluded.owner, generation = excluded.generation, "
                "acquired_at = excluded.acquired_at, renewed_at = excluded.renewed_at, "
                "expires_at = excluded.expires_at, released = false",
                [run_id, owner, generation, to_ts(now), to_ts(now), to_ts(now + ttl_s)],
            )
        return Lease(run_id, owner, generation, now + ttl_s)

    def renew_lease(self, lease: Lease, *, ttl_s: float = 30.0) -> Lease:
        """Extend a current lease. Raises ``ConflictError`` when it was taken over."""
        now = time.time()
        with self._transaction() as con:
            _check_lease(con, lease.run_id, lease)
            con.execute(
                "UPDATE leases SET renewed_at = ?, expires_at = ? WHERE run_id = ?",
                [to_ts(now), to_ts(now + ttl_s), lease.run_id],
            )
        return Lease(lease.run_id, lease.owner, lease.generation, now + ttl_s)

    def release_lease(self, lease: Lease) -> None:
        """Give up a lease; a stale one is ignored (someone else holds the run now)."""
        with self._transaction() as con:
            # The row stays, so the next acquire still bumps past this generation.
            con.execute(
                "UPDATE leases SET released = true WHERE run_id = ? AND generation = ?",
                [lease.run_id, lease.generation],
            )

    # ------------------------------------------------------------ recordings

    def put_recording(self, key: str, seq: int, response: Mapping[str, Any]) -> None:
        """Store (or replace) response ``seq`` of recording ``key``, credentials removed."""
        with self._transaction() as con:
            con.execute(
                "INSERT OR REPLACE INTO recordings VALUES (?, ?, ?, ?)",
                [key, seq, dumps(response), to_ts(time.time())],
            )

    def get_recordings(self, key: str) -> list[dict[str, Any]]:
        """The responses recorded under ``key``, ordered by seq."""
        with self._connection() as con:
            rows = con.execute(
                "SELECT response FROM recordings WHERE key = ? ORDER BY seq", [key]
            ).fetchall()
        return [json.loads(r[0]) for r in rows]

    # --------------------------------------------------------------- readers

    def runs(self, run_id: str | None = None) -> pd.DataFrame:
        """The runs table (one row per run) as a DataFrame."""
        return self._table("runs", run_id)

    def steps(self, run_id: str | None = None) -> pd.DataFrame:
        """Committed steps, ordered by run and step."""
        return self._table("steps", run_id)

    def attempts(self, run_id: str | None = None) -> pd.DataFrame:
        """Every provider HTTP attempt, failures included (``kind`` NULL on success)."""
        return self._table("attempts", run_id)

    def tool_calls(self, run_id: str | None = None) -> pd.DataFrame:
        """Tool calls with their status (intent/ok/error/refused/needs_reconciliation)."""
        return self._table("tool_calls", run_id)

    def stalls(self, run_id: str | None = None) -> pd.DataFrame:
        """Stall detections and the action taken (replan/stalled)."""
        return self._table("stalls", run_id)

    def markers(self, run_id: str | None = None) -> pd.DataFrame:
        """Resume/skipped/resolved/abandoned markers."""
        return self._table("markers", run_id)

    def sql(self, query: str, params: list[Any] | None = None) -> pd.DataFrame:
        """Run any SQL on the store and return a DataFrame (quote the column ``"at"``)."""
        with self._connection() as con, parallel(con):
            return _frame(con.execute(query, params or []))

    def failure_rates(self, by: tuple[str, ...] | str = ("provider", "kind")) -> pd.DataFrame:
        """How often attempts fail, per group, with Retry-After statistics.

        Without ``kind`` in ``by``: one row per group with ``attempts``, ``failures``
        (attempts with a kind), ``failure_rate`` = failures / attempts, and
        ``retry_after_s_mean``/``_p50``/``_max`` over the failures that carried one.

        With ``kind`` in ``by`` (the default ``("provider", "kind")``): one row per
        failure kind in each group of the other columns. ``attempts`` is that group's
        total (successes included), ``failures`` the attempts that failed with this
        kind, and ``failure_rate`` their share of all the group's attempts, so the
        rates of a provider add up to its overall failure rate. A group with no
        failure has one row with ``kind`` <NA> and 0 failures. Rows are sorted by the
        group, then most failures first.

        Raises:
            StoreError: ``query`` when ``by`` names a column outside ``FAILURE_GROUPS``.
        """
        groups = self._failure_groups(by)
        with self._connection() as con, parallel(con):
            return _frame(con.execute(_failure_sql(groups)))

    def _failure_groups(self, by: tuple[str, ...] | str) -> tuple[str, ...]:
        groups = (by,) if isinstance(by, str) else tuple(by)
        bad = [g for g in groups if g not in FAILURE_GROUPS]
        if bad or len(set(groups)) != len(groups):
            raise StoreError(
                f"failure_rates(by={by!r}): group by distinct names among {FAILURE_GROUPS}",
                kind="query",
                path=self.path,
            )
        return groups

    def _table(self, table: str, run_id: str | None) -> pd.DataFrame:
        where = "" if run_id is None else " WHERE run_id = ?"
        # The checkpoint (all messages so far) is for resume, not for a table view.
        columns = "* EXCLUDE (checkpoint)" if table == "steps" else "*"
        query = f"SELECT {columns} FROM {table}{where} ORDER BY {_ORDER[table]}"
        with self._connection() as con, parallel(con):
            return _frame(con.execute(query, [] if run_id is None else [run_id]))


# ------------------------------------------------------------------- helpers


def _rollback(con: duckdb.DuckDBPyConnection) -> None:
    # Suppressed: the failing statement may already have aborted the transaction.
    with contextlib.suppress(duckdb.Error):
        con.execute("ROLLBACK")


def _check_lease(con: duckdb.DuckDBPyConnection, run_id: str, lease: Lease | None) -> None:
    if lease is None:
        return
    held = con.execute(
        "SELECT owner, generation, released FROM leases WHERE run_id = ?", [run_id]
    ).fetchone()
    if held is None or int(held[1]) != lease.generation or held[2]:
        owner = None if held is None or held[2] else str(held[0])
        raise ConflictError(
            f"the lease of {lease.owner!r} on run {run_id!r} (generation {lease.generation}) "
            f"is no longer current" + (f": {owner!r} drives the run now" if owner else ""),
            run_id=run_id,
            owner=owner,
        )


def _delete_tool_rows(
    con: duckdb.DuckDBPyConnection, run_id: str, tools: list[tuple[Any, ...]]
) -> None:
    """Delete the rows that ``tools`` (tool_calls tuples) are about to replace."""
    for step, seq in {(t[1], t[2]) for t in tools}:
        con.execute(
            "DELETE FROM tool_calls WHERE run_id = ? AND step = ? AND seq = ?",
            [run_id, step, seq],
        )


def _lease_blocks(
    held: tuple[Any, ...],
    owner: str,
    now: float,
    owner_alive: Callable[[str], bool] | None,
) -> bool:
    """True when the held lease belongs to another live owner and has not expired."""
    holder, _generation, expires_at, released = held
    if released or holder == owner:
        return False
    if (from_ts(expires_at) or 0.0) <= now:
        return False
    return owner_alive is None or owner_alive(str(holder))


def _update_run(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    assignments: str,
    params: list[Any],
    *,
    lease: Lease | None = None,
) -> None:
    """Update the run row; with ``lease``, only while that lease is current."""
    if lease is None:
        sql = f"UPDATE runs SET {assignments} WHERE run_id = ?"
        args = [*params, run_id]
    else:
        sql = (
            f"UPDATE runs SET {assignments} WHERE run_id = ? AND EXISTS (SELECT 1 FROM leases "
            "WHERE leases.run_id = ? AND generation = ? AND NOT released)"
        )
        args = [*params, run_id, run_id, lease.generation]
    updated = con.execute(sql, args).fetchone()
    if not updated or updated[0] == 0:
        _check_lease(con, run_id, lease)  # a stale lease says so; else the run is missing
        raise StoreError(f"no run {run_id!r} in the store", kind="missing")


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _frame(result: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """The result as a DataFrame with nullable integers and booleans, whatever NULLs."""
    types = [str(d[1]) for d in result.description or []]
    frame = result.df()
    for i, kind in enumerate(types):
        if kind in _INT_TYPES:
            frame.isetitem(i, frame.iloc[:, i].astype("Int64").array)
        elif kind == "BOOLEAN":
            frame.isetitem(i, frame.iloc[:, i].astype("boolean").array)
    return frame


def _failure_sql(groups: tuple[str, ...]) -> str:
    """The aggregation behind ``failure_rates`` (``groups`` already validated)."""
    stats = (
        "avg(retry_after_s) AS retry_after_s_mean, "
        "quantile_cont(retry_after_s, 0.5) AS retry_after_s_p50, "
        "max(retry_after_s) AS retry_after_s_max"
    )
    quoted = [quote(g) for g in groups]
    if "kind" not in groups:
        cols = ", ".join(quoted)
        head, tail = (f"{cols}, ", f" GROUP BY {cols} ORDER BY {cols}") if cols else ("", "")
        return (
            f"SELECT {head}count(*) AS attempts, count(kind) AS failures, "
            f"count(kind) / count(*) AS failure_rate, {stats} FROM attempts{tail}"
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
        f"WITH t AS (SELECT {t_select}count(*) AS attempts FROM attempts{t_group}), "
        f"f AS (SELECT {t_select}kind, count(*) AS failures, {stats} FROM attempts "
        f"WHERE kind IS NOT NULL GROUP BY {t_select}kind) "
        f"SELECT {select}, t.attempts, coalesce(f.failures, 0) AS failures, "
        "coalesce(f.failures, 0) / t.attempts AS failure_rate, "
        "f.retry_after_s_mean, f.retry_after_s_p50, f.retry_after_s_max "
        f"FROM t LEFT JOIN f ON {join} ORDER BY {order}"
    )
