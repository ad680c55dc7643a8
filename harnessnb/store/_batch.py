"""Group commit: the writes of one process on one file, batched into one transaction.

Every DuckDB statement costs 0.3-0.9 ms here whatever its size, and a COMMIT about as
much again, so concurrent runs that each commit their own small transaction serialise
on statement overhead. A ``WriteOp`` describes one store write; ``Batch`` lets the
ops of one transaction defer their appends and their run-row updates so that the ops
of many runs become one append per table, one INSERT of step rows and one UPDATE per
kind of run change.

A lease is fenced without a statement of its own per step: while this process has the
file open no other process can write it (DuckDB's lock), and every lease write goes
through a batch on the shared connection, so a batch knows which leases were current
and unreleased at its connection's last commit (``Batch.leases``, kept by the
connection, emptied when it closes or is lent to any other use). A step under a lease
known current is a plain insert; the first under a lease not known carries the check
(``INSERT ... SELECT ... FROM leases WHERE``), and its commit makes the lease known.
A lease taken or given up in a batch is forgotten at once and known (or not) only once
that batch committed: a rolled-back batch leaves nothing known that was not true.

A batch must end as if its ops had run one after another. Ops that read or overwrite
(``direct``) flush what earlier ops deferred before they run; deferred ops of one
batch touch disjoint rows (a run's driver awaits each write before the next); and a
deferred lease check that passes at flush time passed at its place in the sequence,
because a lease generation that stops being current never becomes current again.
When a batch fails, the writer rolls it back and runs its ops one by one, so an op's
error (say ``ConflictError``) reaches only its own caller.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

import duckdb

from ..rules._errors import StoreError
from ._leases import Lease, acquire, check_lease
from ._schema import COLUMNS, quote

__all__ = [
    "APPEND_COLUMNS",
    "JOURNALED",
    "Batch",
    "BatchRetry",
    "Journal",
    "WriteOp",
    "append_rows",
    "run_update",
    "update_one",
]

# Columns of the tables written through appends (``COLUMNS`` plus the lease table).
APPEND_COLUMNS: Final[dict[str, tuple[str, ...]]] = {
    **COLUMNS,
    "leases": (
        "run_id", "owner", "generation", "acquired_at", "renewed_at", "expires_at", "released",
    ),
}  # fmt: skip

# Up to this many rows a VALUES insert beats an appender: VALUES costs ~100 us a row
# to bind, an appender ~0.3 ms once (reused) plus ~2 us a row (bench/store.py).
_VALUES_MAX_ROWS: Final = 2


# The tables whose rows of a step committed in this batch ride in its steps row's
# ``journal`` (schema 14, ``_journal``) instead of statements of their own.
JOURNALED: Final = ("attempts", "tool_calls")
# The steps row with its journal: the columns the writers fill, then ``journal``.
_JOURNAL_STEP: Final = (
    f"INSERT INTO steps ({','.join(quote(c) for c in (*COLUMNS['steps'], 'journal'))}) VALUES "
)


@dataclass
class Journal:
    """Rows committed in steps' journals and not yet in their tables (kept by the
    connection): the steps (run_id, step) and their rows per table."""

    keys: list[tuple[str, int]] = field(default_factory=list)
    rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.keys)

    def extend(self, other: Journal) -> None:
        self.keys.extend(other.keys)
        for table, rows in other.rows.items():
            self.rows.setdefault(table, []).extend(rows)

    def clear(self) -> None:
        self.keys.clear()
        self.rows.clear()


def _encode(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return value.isoformat()
    raise TypeError(f"no JSON for {type(value).__name__}")


class BatchRetry(Exception):
    """A merged statement of a batch did not apply to every op: rerun them one by one."""


T = TypeVar("T")


@dataclass(frozen=True)
class WriteOp(Generic[T]):
    """One store write: ``apply(con, batch)`` runs inside a transaction and returns
    the write's result (a ``Lease``, or None).

    ``direct`` ops execute statements that read or overwrite rows, so the batch is
    flushed before them; the others only defer work to ``batch``. ``fallback`` is run
    in a fresh transaction when this op alone fails with ``StoreError(duplicate)``.
    ``linger_s``: the writer may hold this op up to that long for company (a write
    that follows it within milliseconds) so both share one commit; 0 writes at once.
    """

    name: str
    apply: Callable[[duckdb.DuckDBPyConnection, Batch], T]
    direct: bool = True
    fallback: WriteOp[T] | None = None
    linger_s: float = 0.0


_Pending = tuple[tuple[Any, ...], int | None, str]


@dataclass(frozen=True)
class _RunUpdate:
    """A deferred UPDATE of run rows: ``SET {assign}`` with ``v.c0, v.c1...`` per run."""

    assign: str  # e.g. "outcome = v.c0, finished_at = v.c1"
    types: tuple[str, ...]  # SQL types of the per-run values c0, c1, ...


@dataclass
class Batch:
    """Work deferred by the ops of one transaction, applied by ``flush``."""

    appenders: dict[str, duckdb.Appender] = field(default_factory=dict)
    path: str | None = None  # the store's file, named by the errors an op raises
    # run_id -> the lease generation known current and unreleased at the connection's
    # last commit (kept by the connection, see the module docstring).
    leases: dict[str, int] = field(default_factory=dict)
    # What this batch learnt of leases, applied to ``leases`` once it committed:
    # run_id -> the generation now current, or None (released, or not known).
    _learnt: dict[str, int | None] = field(default_factory=dict)
    _appends: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)
    # update -> run_id -> (values, lease generation or None, lease holder)
    _updates: dict[_RunUpdate, dict[str, _Pending]] = field(default_factory=dict)
    _releases: list[tuple[str, int]] = field(default_factory=list)
    # step rows, each with its run's lease generation (or None) and lease holder
    _steps: list[_Pending] = field(default_factory=list)
    # The connection's rows waiting in journals (None: no journal on this connection),
    # and what this batch adds to it, once committed.
    journal: Journal | None = None
    _journaled: Journal = field(default_factory=Journal)

    def append(self, table: str, rows: list[tuple[Any, ...]]) -> None:
        """Defer appending ``rows`` (tuples in ``APPEND_COLUMNS[table]`` order)."""
        if rows:
            self._appends.setdefault(table, []).extend(rows)

    def update_run(
        self,
        con: duckdb.DuckDBPyConnection,
        update: _RunUpdate,
        run_id: str,
        values: tuple[Any, ...],
        generation: int | None,
        holder: str = "this process",
    ) -> None:
        """Defer an update of ``run_id``'s row, applied only while ``generation`` (if
        given) is its current, unreleased lease."""
        if self.lease_known(run_id, generation):
            generation = None  # no guard needed (see the module docstring)
        pending = self._updates.setdefault(update, {})
        if run_id in pending:  # the same run twice: keep the order, apply the first now
            self.flush(con)
            pending = self._updates.setdefault(update, {})
        pending[run_id] = (values, generation, holder)

    def insert_step(
        self, values: tuple[Any, ...], generation: int | None, holder: str = "this process"
    ) -> None:
        """Defer inserting a ``steps`` row (``APPEND_COLUMNS`` order), applied only while
        ``generation`` (if given) is its run's current, unreleased lease, or without one
        only when the run exists. The lease check rides on the insert: no extra statement.
        """
        self._steps.append((values, generation, holder))

    def release(self, run_id: str, generation: int) -> None:
        """Defer marking a lease released (after every update of this batch)."""
        self.lease_changed(run_id, None)
        self._releases.append((run_id, generation))

    def acquire(
        self,
        con: duckdb.DuckDBPyConnection,
        run_id: str,
        owner: str,
        ttl_s: float,
        now: float,
        owner_alive: Callable[[str], bool] | None,
    ) -> Lease:
        """``_leases.acquire`` in this batch: the lease forgotten, known once committed."""
        lease = acquire(con, run_id, owner, ttl_s, now, owner_alive)
        self.lease_changed(run_id, lease.generation)
        return lease

    def lease_known(self, run_id: str, generation: int | None) -> bool:
        """True when ``generation`` is known to be ``run_id``'s current, unreleased
        lease: it was at the connection's last commit and no op of this batch has
        touched that lease since (a guard on it would pass)."""
        return generation is not None and self.leases.get(run_id) == generation

    def lease_changed(self, run_id: str, generation: int | None) -> None:
        """An op of this batch took ``run_id``'s lease as ``generation`` (None: gave it
        up): forgotten now, known as that once the batch committed."""
        self.leases.pop(run_id, None)
        self._learnt[run_id] = generation

    def lease_checked(self, run_id: str, generation: int) -> None:
        """A guard of this batch found ``generation`` current: known once committed
        (unless an op of this batch changed that lease)."""
        self._learnt.setdefault(run_id, generation)

    def check_lease(self, con: duckdb.DuckDBPyConnection, run_id: str, lease: Lease | None) -> None:
        """Raise ``ConflictError`` unless ``lease`` (if any) is ``run_id``'s current one
        (``_leases.check_lease``; no statement for a lease known current)."""
        if lease is None or self.lease_known(run_id, lease.generation):
            return
        check_lease(con, run_id, lease.generation, lease.owner)
        self.lease_checked(run_id, lease.generation)

    def committed(self) -> None:
        """The batch's transaction committed: what it learnt of leases is known."""
        learnt, self._learnt = self._learnt, {}
        if self.journal is not None:
            self.journal.extend(self._journaled)
        self._journaled = Journal()
        for run_id, generation in learnt.items():
            if generation is None:
                self.leases.pop(run_id, None)
            else:
                self.leases[run_id] = generation

    def flush(self, con: duckdb.DuckDBPyConnection) -> None:
        """Apply the deferred work: appends, step rows, run updates, lease releases.

        Raises:
            BatchRetry: a merged update missed a run (stale lease or unknown run).
            ConflictError, StoreError: an op's check failed (its statement missed).
        """
        appends, self._appends = self._appends, {}
        updates, self._updates = self._updates, {}
        releases, self._releases = self._releases, []
        steps, self._steps = self._steps, []
        if (
            steps
            and self.journal is not None
            and all(self.lease_known(values[0], generation) for values, generation, _ in steps)
        ):
            self._journal_steps(con, steps, appends)
            steps = []
        for table, rows in appends.items():
            append_rows(con, table, rows, self.appenders)
        if steps:
            _insert_steps(con, steps, self)
        for update, runs in updates.items():
            _apply_updates(con, update, runs)
        if len(releases) == 1:
            con.execute(
                "UPDATE leases SET released = true WHERE run_id = ? AND generation = ?",
                list(releases[0]),
            )
        elif releases:
            derived, params = _unnest(("rid", "g"), _KEY_TYPES, releases)
            con.execute(
                f"UPDATE leases SET released = true FROM {derived} "
                "WHERE leases.run_id = v.rid AND leases.generation = v.g",
                params,
            )

    def _journal_steps(
        self,
        con: duckdb.DuckDBPyConnection,
        steps: list[_Pending],
        appends: dict[str, list[tuple[Any, ...]]],
    ) -> None:
        """Insert ``steps`` (every lease known current) each carrying its attempt and
        tool-call rows of ``appends`` as its ``journal``, taken out of ``appends``: one
        statement for the step's whole record. Committed, they wait in ``journal``."""
        carried: dict[tuple[str, int], dict[str, list[tuple[Any, ...]]]] = {
            (values[0], values[1]): {} for values, _, _ in steps
        }
        for table in JOURNALED:
            kept = []
            for values in appends.get(table, ()):
                found = carried.get((values[0], values[1]))
                if found is None:
                    kept.append(values)
                else:
                    found.setdefault(table, []).append(values)
                    self._journaled.rows.setdefault(table, []).append(values)
            if table in appends:
                appends[table] = kept
        rows = []
        for values, _, _ in steps:
            key = (values[0], values[1])
            own = carried[key]
            if own:
                self._journaled.keys.append(key)
            text = json.dumps(own, default=_encode, separators=(",", ":")) if own else None
            rows.append((*values, text))
        if len(rows) <= _VALUES_MAX_ROWS:
            marks = "(" + ",".join("?" * (len(COLUMNS["steps"]) + 1)) + ")"
            con.execute(_JOURNAL_STEP + ",".join([marks] * len(rows)), [v for r in rows for v in r])
            return
        columns = [*COLUMNS["steps"], "journal"]  # many runs' steps: an appender
        _append_with(con, self.appenders, "steps+journal", "steps", columns, rows)

    def discard(self) -> None:
        """Forget deferred work and buffered appender rows (after a rollback)."""
        self._journaled = Journal()
        self._appends.clear()
        self._updates.clear()
        self._releases.clear()
        self._steps.clear()
        self._learnt.clear()
        for appender in self.appenders.values():
            appender.clear()


def run_update(assign: str, *types: str) -> _RunUpdate:
    """A kind of deferred run-row update (see ``Batch.update_run``)."""
    return _RunUpdate(assign, types)


def _apply_updates(
    con: duckdb.DuckDBPyConnection,
    update: _RunUpdate,
    runs: dict[str, _Pending],
) -> None:
    if len(runs) == 1:
        # One run: the plain statement, whose miss can say exactly what went wrong.
        ((run_id, (values, generation, holder)),) = runs.items()
        assign = update.assign
        for i in range(len(update.types)):
            assign = assign.replace(f"v.c{i}", "?")
        update_one(con, run_id, assign.replace("run_rows.", ""), list(values), generation, holder)
        return
    columns = tuple(f"c{i}" for i in range(len(update.types)))
    if all(gen is None for _, gen, _ in runs.values()):
        # No lease to check (say the step row of this transaction checked it): no
        # EXISTS, whose join over every lease made the statement 1.5x as slow.
        names: tuple[str, ...] = ("rid", *columns)
        types = (_KEY_TYPES[0], *update.types)
        table = [(rid, *vals) for rid, (vals, _, _) in runs.items()]
        guard = ""
    else:
        names = ("rid", "g", *columns)
        types = _KEY_TYPES + update.types
        table = [(rid, gen, *vals) for rid, (vals, gen, _) in runs.items()]
        guard = f" AND (v.g IS NULL OR {_lease_current('v.rid')})"
    derived, params = _unnest(names, types, table)
    found = con.execute(
        f"UPDATE run_rows SET {update.assign} FROM {derived} "
        f"WHERE run_rows.run_id = v.rid{guard} RETURNING run_rows.run_id",
        params,
    ).fetchall()
    if len(found) != len(runs):
        raise BatchRetry(f"{len(runs) - len(found)} of {len(runs)} run updates did not apply")


_KEY_TYPES: Final = ("VARCHAR", "BIGINT")  # run_id, lease generation

# The SQL types of ``COLUMNS["steps"]``, for the merged insert's list parameters.
_STEP_TYPES: Final = (
    "VARCHAR", "INTEGER", "VARCHAR", "INTEGER", "INTEGER", "BOOLEAN", "VARCHAR", "TIMESTAMP",
    "VARCHAR",
)  # fmt: skip
_STEP_NAMES: Final = ",".join(quote(c) for c in COLUMNS["steps"])
_STEP_MARKS: Final = ",".join("?" * len(COLUMNS["steps"]))
# One step row, guarded by its lease or, without one, by its run row: a plain SELECT
# FROM the guard table beats an EXISTS (0.2 ms). The lease stands for the run: the run
# loop takes one only with the run row (start_run) or on a run it read (resume).
_STEP_BY_LEASE: Final = (
    f"INSERT INTO steps ({_STEP_NAMES}) SELECT {_STEP_MARKS} FROM leases "
    "WHERE run_id = ? AND generation = ? AND NOT released"
)
_STEP_BY_RUN: Final = (
    f"INSERT INTO steps ({_STEP_NAMES}) SELECT {_STEP_MARKS} FROM run_rows WHERE run_id = ?"
)


def _insert_steps(con: duckdb.DuckDBPyConnection, steps: list[_Pending], batch: Batch) -> None:
    known = [batch.lease_known(values[0], generation) for values, generation, _ in steps]
    if all(known):
        # Every lease known current: plain rows, no guard (see the module docstring).
        append_rows(con, "steps", [values for values, _, _ in steps], batch.appenders)
        return
    if len(steps) == 1:
        # One step: the plain statement, whose miss can say exactly what went wrong.
        ((values, generation, holder),) = steps
        run_id = values[0]
        if generation is None:
            found = con.execute(_STEP_BY_RUN, [*values, run_id]).fetchone()
        else:
            found = con.execute(_STEP_BY_LEASE, [*values, run_id, generation]).fetchone()
        if not found or found[0] == 0:
            raise _missed(con, run_id, generation, holder)
        if generation is not None:
            batch.lease_checked(run_id, generation)
        return
    names = tuple(f"c{i}" for i in range(len(_STEP_TYPES)))
    table = [(*values, generation) for values, generation, _ in steps]
    if all(generation is not None for _, generation, _ in steps):
        # Every step under a lease (the run loop's case): a join, 25% cheaper than
        # the EXISTS of either guard.
        guard = "JOIN leases l ON l.run_id = v.c0 AND l.generation = v.g AND NOT l.released"
    else:
        guard = (
            "WHERE CASE WHEN v.g IS NULL THEN EXISTS (SELECT 1 FROM run_rows r WHERE "
            f"r.run_id = v.c0) ELSE {_lease_current('v.c0')} END"
        )
    derived, params = _unnest((*names, "g"), (*_STEP_TYPES, "BIGINT"), table)
    found = con.execute(
        f"INSERT INTO steps ({_STEP_NAMES}) SELECT {', '.join(f'v.{n}' for n in names)} "
        f"FROM {derived} {guard}",
        params,
    ).fetchone()
    if not found or found[0] != len(steps):
        raise BatchRetry(
            f"{len(steps) - (found[0] if found else 0)} of {len(steps)} steps did not apply"
        )
    for values, generation, _ in steps:
        if generation is not None:
            batch.lease_checked(values[0], generation)


def _unnest(
    names: tuple[str, ...], types: tuple[str, ...], table: list[tuple[Any, ...]]
) -> tuple[str, list[list[Any]]]:
    """A derived table ``v`` of ``table``'s rows and its parameters, one list per column:
    binding a list costs a few us a value where a VALUES row costs ~70 us
    (bench/RESULTS-store.md)."""
    columns = ", ".join(f"unnest(?::{t}[]) AS {n}" for n, t in zip(names, types, strict=True))
    return f"(SELECT {columns}) v", [list(column) for column in zip(*table, strict=True)]


def _lease_current(run_id: str) -> str:
    """SQL: the lease generation ``v.g`` is the current, unreleased one of ``run_id``."""
    return (
        f"EXISTS (SELECT 1 FROM leases l WHERE l.run_id = {run_id} AND l.generation = v.g "
        "AND NOT l.released)"
    )


def update_one(
    con: duckdb.DuckDBPyConnection,
    run_id: str,
    assignments: str,
    params: list[Any],
    generation: int | None,
    holder: str = "this process",
) -> None:
    """Update one run row; with ``generation``, only while that lease is current."""
    if generation is None:
        sql = f"UPDATE run_rows SET {assignments} WHERE run_id = ?"
        args = [*params, run_id]
    else:
        sql = (
            f"UPDATE run_rows SET {assignments} WHERE run_id = ? AND EXISTS (SELECT 1 FROM leases "
            "WHERE leases.run_id = ? AND generation = ? AND NOT released)"
        )
        args = [*params, run_id, run_id, generation]
    updated = con.execute(sql, args).fetchone()
    if not updated or updated[0] == 0:
        raise _missed(con, run_id, generation, holder)


def _missed(
    con: duckdb.DuckDBPyConnection, run_id: str, generation: int | None, holder: str
) -> StoreError:
    """Why a guarded statement on ``run_id`` missed: a stale lease raises
    ``ConflictError`` here; otherwise the run is missing (returned, to raise)."""
    check_lease(con, run_id, generation, holder)
    return StoreError(f"no run {run_id!r} in the store", kind="missing")


@functools.lru_cache(maxsize=64)
def _values_sql(table: str, n: int) -> str:
    columns = APPEND_COLUMNS[table]
    marks = "(" + ",".join("?" * len(columns)) + ")"
    names = ",".join(quote(c) for c in columns)
    return f"INSERT INTO {table} ({names}) VALUES " + ",".join([marks] * n)


def append_rows(
    con: duckdb.DuckDBPyConnection,
    table: str,
    rows: list[tuple[Any, ...]],
    appenders: dict[str, duckdb.Appender] | None = None,
) -> None:
    """Append ``rows`` in one statement: VALUES for one or two rows, else an appender
    (kept in ``appenders`` for reuse on the same connection)."""
    if not rows:
        return
    if len(rows) <= _VALUES_MAX_ROWS or appenders is None:
        con.execute(_values_sql(table, len(rows)), [v for r in rows for v in r])
        return
    _append_with(con, appenders, table, table, list(APPEND_COLUMNS[table]), rows)


def _append_with(
    con: duckdb.DuckDBPyConnection,
    appenders: dict[str, duckdb.Appender],
    key: str,
    table: str,
    columns: list[str],
    rows: list[tuple[Any, ...]],
) -> None:
    """``rows`` through the appender kept as ``appenders[key]`` (made on first use),
    flushed now; one that failed is left empty for its next use."""
    appender = appenders.get(key)
    if appender is None:
        appender = con.appender(table, columns=columns)
        appenders[key] = appender
    try:
        appender.append_rows(rows)
        appender.flush()
    except BaseException:
        appender.clear()
        raise
