"""The run history in DuckDB: transactional step commits, leases, DataFrame readers.

``Store`` is the one object the loop, resume and users touch. All methods are
synchronous and thread-safe; every statement of a process on one file goes through
one shared connection and lock (``_store_conn``), and every multi-row write is one
transaction, so after a crash a step is wholly present or wholly absent.

Timestamps are TIMESTAMP (naive UTC) in DuckDB and Unix seconds (float) in the dicts
that go in and come out; JSON-ish values are stored as JSON text, credentials removed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import duckdb

from ..rules._errors import StoreError
from ._batch import Batch, WriteOp, append_rows, run_update
from ._conn import SharedDb, acquire_shared, parallel, release_shared
from ._failures import failure_groups, failure_sql
from ._leases import Lease, acquire, check_lease_of, renew
from ._rows import dumps, from_ts, insert_records, row, to_ts
from ._schema import COLUMNS, SCHEMA_VERSION

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["SCHEMA_VERSION", "WRITE_METHODS", "Store"]

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

# The methods ``Store.submit`` queues for group commit (every write of the store).
WRITE_METHODS: Final = frozenset({
    "create_run", "start_run", "commit_step", "record_intent", "add_attempts", "finish_run",
    "settle_tool_call", "add_marker", "acquire_lease", "renew_lease", "release_lease",
    "put_recording", "bind_agent_session",
})  # fmt: skip

# How a finished run changes its run row (see ``Batch.update_run``).
_FINISHED: Final = run_update(
    "outcome = v.c0, finished_at = v.c1, error = v.c2, updated_at = v.c3",
    "VARCHAR",
    "TIMESTAMP",
    "VARCHAR",
    "TIMESTAMP",
)


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
    #
    # Each write is a ``WriteOp`` (built by ``_<name>_op``): the blocking methods run it
    # in their own transaction at once; ``submit`` queues it for group commit.

    def submit(self, method: str, /, *args: Any, **kwargs: Any) -> Future[Any]:
        """Queue the write ``method(*args, **kwargs)`` for the store's writer thread.

        The writer commits every write queued while its previous transaction ran in ONE
        transaction (group commit), so concurrent runs of a process share statements
        and commits. The future holds what ``method`` returns or raises; an error of
        one write (say ``ConflictError``) fails only that write. Await it from asyncio
        with ``asyncio.wrap_future``.

        Raises:
            ValueError: ``method`` is not one of ``WRITE_METHODS``.
        """
        if method not in WRITE_METHODS:
            raise ValueError(f"{method!r} is not a store write; expected one of {WRITE_METHODS}")
        op: WriteOp = getattr(self, f"_{method}_op")(*args, **kwargs)
        return self._shared().submit(op, self._busy_timeout_s)

    def _write(self, op: WriteOp) -> Any:
        return self._shared().write(op, self._busy_timeout_s)

    def _shared(self) -> SharedDb:
        if self._db is None:
            raise StoreError(f"the store {self.path} is closed", kind="closed", path=self.path)
        return self._db

    def create_run(self, run: Mapping[str, Any]) -> None:
        """Insert a run row; keys outside the ``runs`` columns are kept in ``extras``."""
        self._write(self._create_run_op(run))

    def _create_run_op(self, run: Mapping[str, Any]) -> WriteOp:
        values = _run_row(run)
        return WriteOp("create_run", lambda con, batch: batch.append("run_rows", [values]), False)

    def start_run(
        self,
        run: Mapping[str, Any],
        owner: str,
        *,
        ttl_s: float = 30.0,
        now: float | None = None,
        owner_alive: Callable[[str], bool] | None = None,
    ) -> Lease:
        """``create_run`` and ``acquire_lease`` in one transaction: the run row and its
        first lease land together or not at all.

        Raises:
            StoreError: ``duplicate`` when the run exists.
            ConflictError: a lease on this run id is held by another live owner.
        """
        op = self._start_run_op(run, owner, ttl_s=ttl_s, now=now, owner_alive=owner_alive)
        lease: Lease = self._write(op)
        return lease

    def _start_run_op(
        self,
        run: Mapping[str, Any],
        owner: str,
        *,
        ttl_s: float = 30.0,
        now: float | None = None,
        owner_alive: Callable[[str], bool] | None = None,
    ) -> WriteOp:
        values = _run_row(run)
        run_id = str(run["run_id"])
        at = time.time() if now is None else now

        def apply(con: duckdb.DuckDBPyConnection, batch: Batch) -> Lease:
            if batch.single:
                append_rows(con, "run_rows", [values])
                return acquire(con, run_id, owner, ttl_s, at, owner_alive)
            # A new run has no lease row: a plain append of generation 1. A stray row
            # makes the batch fail, and this op alone then takes the path above.
            batch.append("run_rows", [values])
            batch.append("leases", [(run_id, owner, 1, to_ts(at), to_ts(at),
                                     to_ts(at + ttl_s), False)])  # fmt: skip
            return Lease(run_id, owner, 1, at + ttl_s)

        return WriteOp("start_run", apply, direct=False)

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
        finish: Mapping[str, Any] | None = None,
    ) -> None:
        """Commit one step whole: its row, attempts, tool calls, stalls and checkpoint.

        Tool rows replace rows with the same (run_id, step, seq), such as the intent row
        of a WRITE tool. ``runs.steps`` grows by one and ``runs.tokens`` by the step's
        (the ``runs`` view counts step rows: no run row is written).
        ``finish`` (``outcome``, ``finished_at``, ``error`` as for ``finish_run``) ends
        the run with its last step in the same transaction and releases ``lease``.

        Raises:
            ConflictError: ``lease`` is no longer current (another owner took the run);
                nothing is written.
            StoreError: ``missing`` for an unknown run (without ``lease``; with one, the
                current lease is the guard), ``duplicate`` for a step already committed.
        """
        op = self._commit_step_op(run_id, step, attempts=attempts, tool_calls=tool_calls,
                                  stalls=stalls, checkpoint=checkpoint, lease=lease,
                                  finish=finish)  # fmt: skip
        self._write(op)

    def _commit_step_op(
        self,
        run_id: str,
        step: Mapping[str, Any],
        *,
        attempts: list[dict[str, Any]],
        tool_calls: list[dict[str, Any]],
        stalls: list[dict[str, Any]],
        checkpoint: Mapping[str, Any],
        lease: Lease | None = None,
        finish: Mapping[str, Any] | None = None,
    ) -> WriteOp:
        tools = [row("tool_calls", t, run_id=run_id) for t in tool_calls]
        rows = {
            # Tool rows first: a clash with an intent row fails before the rest.
            "tool_calls": tools,
            "attempts": [row("attempts", a, run_id=run_id) for a in attempts],
            "stalls": [row("stalls", s, run_id=run_id) for s in stalls],
        }
        step_row = row("steps", step, run_id=run_id, checkpoint=checkpoint)
        ended = None
        if finish is not None:
            ended = _ended(finish["outcome"], finish["finished_at"], finish.get("error"))
        generation = None if lease is None else lease.generation
        holder = "" if lease is None else lease.owner

        def append(con: duckdb.DuckDBPyConnection, batch: Batch) -> None:
            for table, values in rows.items():
                batch.append(table, values)
            # The step row carries the lease check; ``runs`` counts it (a view).
            batch.insert_step(step_row, generation, holder)
            if ended is not None:
                # No lease check of its own: the step row's, in this transaction, holds.
                batch.update_run(con, _FINISHED, run_id, ended, None)
                if generation is not None:
                    batch.release(run_id, generation)

        def replace(con: duckdb.DuckDBPyConnection, batch: Batch) -> None:
            # DELETE+INSERT beats an upsert 3x, and DuckDB 2 allows both in one transaction.
            if tools:
                con.execute(
                    "DELETE FROM tool_calls WHERE run_id = ? AND step = ?", [run_id, tools[0][1]]
                )
            append(con, batch)

        replacing = WriteOp("commit_step", replace)
        # Only an effectful call can have an intent row to replace: decide up front;
        # a clash all the same (a READ row left by a crash) redoes it, replacing.
        if any(t[_EFFECT] != "read" for t in tools):
            return replacing
        return WriteOp("commit_step", append, direct=False, fallback=replacing)

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
        self._write(self._record_intent_op(run_id, tool_call, lease=lease, pending=pending))

    def _record_intent_op(
        self,
        run_id: str,
        tool_call: Mapping[str, Any],
        *,
        lease: Lease | None = None,
        pending: Mapping[str, Any] | None = None,
    ) -> WriteOp:
        values = row("tool_calls", tool_call, run_id=run_id, status="intent")
        answer = None
        if pending is not None:
            answer = [run_id, tool_call["step"], dumps(pending, text=False),
                      to_ts(tool_call.get("at") or time.time())]  # fmt: skip

        def apply(con: duckdb.DuckDBPyConnection, batch: Batch) -> None:
            check_lease_of(con, run_id, lease)
            _delete_tool_rows(con, run_id, [values])
            append_rows(con, "tool_calls", [values])
            if answer is not None:
                con.execute("INSERT OR REPLACE INTO pending_steps VALUES (?, ?, ?, ?)", answer)

        return WriteOp("record_intent", apply)

    def add_attempts(self, run_id: str, attempts: list[dict[str, Any]]) -> None:
        """Append attempt rows outside a step (a call that ended the run), in one batch."""
        self._write(self._add_attempts_op(run_id, attempts))

    def _add_attempts_op(self, run_id: str, attempts: list[dict[str, Any]]) -> WriteOp:
        return WriteOp(
            "add_attempts",
            lambda con, batch: insert_records(con, "attempts", attempts, run_id=run_id),
        )

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
        release: bool = False,
    ) -> None:
        """Set the run's outcome, end time and error, with its last attempts and stalls.

        With ``release`` the ``lease`` is given up in the same transaction (as
        ``release_lease`` would), so ending a run is one commit.

        Raises:
            ConflictError: ``lease`` is stale; nothing is written.
            StoreError: ``missing`` for an unknown run.
        """
        self._write(self._finish_run_op(run_id, outcome=outcome, finished_at=finished_at,
                                        error=error, attempts=attempts, stalls=stalls,
                                        lease=lease, release=release))  # fmt: skip

    def _finish_run_op(
        self,
        run_id: str,
        *,
        outcome: str,
        finished_at: float,
        error: dict[str, Any] | None = None,
        attempts: list[dict[str, Any]] | None = None,
        stalls: list[dict[str, Any]] | None = None,
        lease: Lease | None = None,
        release: bool = False,
    ) -> WriteOp:
        attempt_rows = [row("attempts", a, run_id=run_id) for a in attempts or []]
        stall_rows = [row("stalls", s, run_id=run_id) for s in stalls or []]
        ended = _ended(outcome, finished_at, error)
        generation = None if lease is None else lease.generation
        holder = "" if lease is None else lease.owner

        def apply(con: duckdb.DuckDBPyConnection, batch: Batch) -> None:
            batch.append("attempts", attempt_rows)
            batch.append("stalls", stall_rows)
            batch.update_run(con, _FINISHED, run_id, ended, generation, holder)
            if release and generation is not None:
                batch.release(run_id, generation)

        return WriteOp("finish_run", apply, direct=False)

    def settle_tool_call(
        self, run_id: str, step: int, seq: int, *, status: str, output: str | None = None
    ) -> None:
        """Set the status (and output) of a tool row, e.g. an intent resolved by a person.

        Raises:
            StoreError: ``missing`` when there is no such tool row.
        """
        self._write(self._settle_tool_call_op(run_id, step, seq, status=status, output=output))

    def _settle_tool_call_op(
        self, run_id: str, step: int, seq: int, *, status: str, output: str | None = None
    ) -> WriteOp:
        size = None if output is None else len(output.encode("utf-8"))

        def apply(con: duckdb.DuckDBPyConnection, batch: Batch) -> None:
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

        return WriteOp("settle_tool_call", apply)

    def add_marker(self, run_id: str, kind: str, detail: str, at: float) -> None:
        """Append a resume/skipped/resolved/abandoned marker row."""
        self._write(self._add_marker_op(run_id, kind, detail, at))

    def _add_marker_op(self, run_id: str, kind: str, detail: str, at: float) -> WriteOp:
        values = row("markers", {}, run_id=run_id, kind=kind, detail=detail, at=at)
        return WriteOp("add_marker", lambda con, batch: batch.append("markers", [values]), False)

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
        op = self._acquire_lease_op(run_id, owner, ttl_s=ttl_s, now=now, owner_alive=owner_alive)
        lease: Lease = self._write(op)
        return lease

    def _acquire_lease_op(
        self,
        run_id: str,
        owner: str,
        *,
        ttl_s: float = 30.0,
        now: float | None = None,
        owner_alive: Callable[[str], bool] | None = None,
    ) -> WriteOp:
        at = time.time() if now is None else now
        return WriteOp(
            "acquire_lease", lambda con, batch: acquire(con, run_id, owner, ttl_s, at, owner_alive)
        )

    def renew_lease(self, lease: Lease, *, ttl_s: float = 30.0) -> Lease:
        """Extend a current lease. Raises ``ConflictError`` when it was taken over."""
        renewed: Lease = self._write(self._renew_lease_op(lease, ttl_s=ttl_s))
        return renewed

    def _renew_lease_op(self, lease: Lease, *, ttl_s: float = 30.0) -> WriteOp:
        now = time.time()

        return WriteOp("renew_lease", lambda con, batch: renew(con, lease, ttl_s, now))

    def release_lease(self, lease: Lease) -> None:
        """Give up a lease; a stale one is ignored (someone else holds the run now)."""
        self._write(self._release_lease_op(lease))

    def _release_lease_op(self, lease: Lease) -> WriteOp:
        # The row stays, so the next acquire still bumps past this generation.
        return WriteOp(
            "release_lease", lambda con, batch: batch.release(lease.run_id, lease.generation), False
        )

    # ------------------------------------------------------------ recordings

    def put_recording(self, key: str, seq: int, response: Mapping[str, Any]) -> None:
        """Store (or replace) response ``seq`` of recording ``key``, credentials removed."""
        self._write(self._put_recording_op(key, seq, response))

    def _put_recording_op(self, key: str, seq: int, response: Mapping[str, Any]) -> WriteOp:
        values = [key, seq, dumps(response), to_ts(time.time())]
        return WriteOp(
            "put_recording",
            lambda con, batch: con.execute(
                "INSERT OR REPLACE INTO recordings VALUES (?, ?, ?, ?)", values
            ),
        )

    def get_recordings(self, key: str) -> list[dict[str, Any]]:
        """The responses recorded under ``key``, ordered by seq."""
        with self._connection() as con:
            rows = con.execute(
                "SELECT response FROM recordings WHERE key = ? ORDER BY seq", [key]
            ).fetchall()
        return [json.loads(r[0]) for r in rows]

    # -------------------------------------------------------- agent sessions

    def agent_session(self, workspace: str, name: str) -> dict[str, Any] | None:
        """The binding of session ``name`` in ``workspace``: agent, session_id, run_id."""
        with self._connection() as con:
            found = con.execute(
                "SELECT agent, session_id, run_id, updated_at FROM agent_sessions "
                "WHERE workspace = ? AND name = ?",
                [workspace, name],
            ).fetchone()
        if found is None:
            return None
        agent, session_id, run_id, updated_at = found
        return {"workspace": workspace, "name": name, "agent": agent, "session_id": session_id,
                "run_id": run_id, "updated_at": from_ts(updated_at)}  # fmt: skip

    def bind_agent_session(
        self, workspace: str, name: str, *, agent: str, session_id: str | None, run_id: str
    ) -> None:
        """Bind session ``name`` in ``workspace`` to ``agent``'s native ``session_id``."""
        self._write(self._bind_agent_session_op(
            workspace, name, agent=agent, session_id=session_id, run_id=run_id))  # fmt: skip

    def _bind_agent_session_op(
        self, workspace: str, name: str, *, agent: str, session_id: str | None, run_id: str
    ) -> WriteOp:
        values = [workspace, name, agent, session_id, run_id, to_ts(time.time())]
        return WriteOp(
            "bind_agent_session",
            lambda con, batch: con.execute(
                "INSERT OR REPLACE INTO agent_sessions VALUES (?, ?, ?, ?, ?, ?)", values
            ),
        )

    def agent_sessions(self) -> pd.DataFrame:
        """Every named agent session and the CLI session it continues."""
        with self._connection() as con, parallel(con):
            return _frame(con.execute("SELECT * FROM agent_sessions ORDER BY workspace, name"))

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
        """Run any SQL on the store and return a DataFrame.

        Quote the column ``"at"`` (a DuckDB keyword). ``runs`` is a view (its steps and
        tokens are counted from ``steps``), so it is read here, never written.
        """
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
        query = failure_sql(failure_groups(by, self.path))
        with self._connection() as con, parallel(con):
            return _frame(con.execute(query))

    def _table(self, table: str, run_id: str | None) -> pd.DataFrame:
        where = "" if run_id is None else " WHERE run_id = ?"
        # The checkpoint (all messages so far) is for resume, not for a table view.
        columns = "* EXCLUDE (checkpoint)" if table == "steps" else "*"
        query = f"SELECT {columns} FROM {table}{where} ORDER BY {_ORDER[table]}"
        with self._connection() as con, parallel(con):
            return _frame(con.execute(query, [] if run_id is None else [run_id]))


# ------------------------------------------------------------------- helpers


def _ended(outcome: Any, finished_at: float, error: Any) -> tuple[Any, ...]:
    """(outcome, finished_at, error, updated_at) of a run that ends."""
    return (getattr(outcome, "value", outcome), to_ts(finished_at), dumps(error),
            to_ts(finished_at))  # fmt: skip


def _run_row(run: Mapping[str, Any]) -> tuple[Any, ...]:
    """The ``run_rows`` row of a new run; keys outside the columns go to ``extras``."""
    extras = {k: v for k, v in run.items() if k not in _RUN_FIELDS}
    return row(
        "run_rows",
        run,
        outcome=None,
        finished_at=None,
        schema_version=SCHEMA_VERSION,
        extras=extras or None,
        updated_at=run.get("started_at") or time.time(),
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
