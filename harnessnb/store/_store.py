"""The run history in DuckDB: ``Store``, its DataFrame readers and SQL.

``Store`` is what users read: runs, steps, attempts, tool calls, stalls, markers,
failure rates, SQL, and shard files combined or merged. Its writes are the loop's, on
its ``StoreWriter`` (``_writer``: ``store_writer(store)``), each declared once in
``_writes``. Every statement of a process on one file goes through one shared
connection and lock (``_conn``), and every multi-row write is one transaction, so after
a crash a step is wholly present or wholly absent.

Timestamps are TIMESTAMP (naive UTC) in DuckDB and Unix seconds (float) in the dicts
that go in and come out; JSON-ish values are stored as JSON text, credentials removed.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final, TypeVar

import duckdb

from ..rules._errors import StoreError
from ._batch import WriteOp
from ._combine import merge_into, read_only_error, shard_paths, shards_as_one
from ._conn import MEMORY, SharedDb, acquire_shared, release_shared
from ._failures import failure_groups, failure_sql
from ._rows import from_ts
from ._schema import SCHEMA_VERSION
from ._threads import parallel
from ._writer import StoreWriter

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["SCHEMA_VERSION", "CombinedStore", "Store"]

T = TypeVar("T")

# What moved from ``Store`` to its writer (``_writer``): still found here, warning.
_MOVED: Final = frozenset(
    {
        "write", "submit", "awrite", "queued", "create_run", "start_run", "commit_step",
        "finish_run", "add_attempts", "add_marker", "record_intent", "keep_begun_step",
        "settle_tool_call", "acquire_lease", "renew_lease", "release_lease",
        "put_recording", "bind_agent_session", "last_checkpoint", "open_intents",
        "pending_step", "step_tool_calls", "unsettled_tool_calls", "get_recordings",
        "agent_session", "agent_sessions",
    }
)  # fmt: skip

_ORDER: Final = {
    "runs": "started_at, run_id",
    "steps": "run_id, step",
    "attempts": "run_id, step, attempt, started_at",
    "tool_calls": "run_id, step, seq",
    "stalls": 'run_id, step, "at"',
    "markers": 'run_id, "at"',
    "scores": "sweep_id, run_id, scorer",
    "mcp_servers": 'run_id, server, "at", tools_hash',
}


class Store:
    """The DuckDB store of runs, steps, attempts, tool calls, stalls and checkpoints.

    Args:
        path: A database file (created if missing) or ``":memory:"``.
        linger_s: Seconds the file stays open after the last operation, so bursts of
            commits reuse one connection while other processes get their turn between
            provider calls.
        busy_timeout_s: How long to wait for the file while other processes have
            their turn (``<store>.lock``, first come first served) before
            ``StoreError(kind="busy")`` (retryable; a run waits it out).

    A new path, or an empty file, becomes a store. An existing file is looked at
    read-only first: a DuckDB database of another program is refused and left byte
    for byte as it was. A file that cannot be written (read-only file or folder,
    read-only mount) opens read-only (``read_only`` is True): the readers, ``sql``
    and ``hn.replay`` work, writes raise ``StoreError(kind="read_only")``, and a store
    of an older schema is migrated in an in-memory copy, never in place.

    Raises:
        StoreError: ``corrupt`` (not a DuckDB file, or damaged; the file is left as it
            was), ``foreign`` (a DuckDB database that is not a harnessnb store; left
            as it was), ``newer`` (written by a newer harnessnb), ``busy``, ``io``;
            a write on a full disk ``full`` (retryable once space is freed).
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
        self._writer = StoreWriter(self)
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
        with self._shared().connection(self._busy_timeout_s) as con:
            yield con

    @property
    def read_only(self) -> bool:
        """True when the file could not be written and was opened read-only."""
        return self._shared().read_only

    def _shared(self) -> SharedDb:
        """The shared connection of this file; ``StoreError(closed)`` once closed."""
        if self._db is None:
            raise StoreError(f"the store {self.path} is closed", kind="closed", path=self.path)
        return self._db

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
    # The writes are the loop's: ``store_writer(store)`` (``_writer``) runs each op
    # through these two.

    def _write(self, op: WriteOp[T]) -> T:
        """Run ``op`` now, in the calling thread and its own transaction."""
        return self._shared().write(op, self._busy_timeout_s)

    def _submit(self, op: WriteOp[T]) -> Future[T]:
        """Queue ``op`` for the store's writer thread (group commit)."""
        return self._shared().submit(op, self._busy_timeout_s)

    if not TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any:
            # The writes (and resume's reads) were ``Store`` methods until 0.x: kept
            # for one release, warning; mypy sees only the readers.
            if name in _MOVED:
                warnings.warn(
                    f"Store.{name} is deprecated: the writes are internal "
                    f"(harnessnb.store._writer.store_writer(store).{name})",
                    DeprecationWarning,
                    stacklevel=2,
                )
                return getattr(self._writer, name)
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # ------------------------------------------------------ many files as one

    @staticmethod
    def combine(
        source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    ) -> Store:
        """Shard store files read as ONE read-only store (a sweep on a Dask cluster
        writes one per worker process).

        Args:
            source: A folder (every ``*.duckdb`` in it, sorted) or a list of store files.

        Returns:
            A store whose readers (``runs``, ``steps``, ``attempts``, ``tool_calls``,
            ``stalls``, ``markers``, ``sql``, ``failure_rates``, ``get_run``,
            ``checkpoints``...) answer as one store holding all the shards' runs. Each
            call reads the shards as they are then, each in its turn (a writer in
            another process is waited for, never broken). Its writes raise
            ``StoreError(read_only)``; ``merge`` writes the rows into one file.

        Raises:
            ConfigError: A missing folder or file, a folder with no ``*.duckdb``.
            StoreError: ``corrupt`` (not a DuckDB file), ``foreign``, ``newer``;
                ``query`` for a shard of an older schema (open it once as
                ``hn.Store(path)`` to migrate it); ``duplicate`` for a run id in two
                shards.
        """
        return CombinedStore(source)

    def merge(self, into: str | os.PathLike[str]) -> Store:
        """Write every row of this store (a combined one, or any) into the store file
        ``into``: a new file, or a harnessnb store holding none of these runs. One
        transaction: on any error nothing is written. Returns the store at ``into``.

        Raises:
            ConfigError: ``into`` is this store's own file (or one of its shards).
            StoreError: ``duplicate`` when ``into`` already holds one of the runs;
                ``foreign``/``corrupt`` when ``into`` is not a harnessnb store.
        """
        target = os.fspath(into)
        sources = [self.path, *getattr(self, "paths", ())]
        if target != MEMORY:
            Store(target).close()  # makes the schema, or refuses a file that is no store
        with self._connection() as con:
            merge_into(con, sources, target)
        return Store(target)

    # ------------------------------------------------------- reads for resume

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        """The runs row as a dict: JSON parsed (``contract``, ``policy``, ``error``, and
        a typed run's answer, ``output``), timestamps as Unix seconds, extras merged."""
        with self._connection() as con:
            cur = con.execute("SELECT * FROM runs WHERE run_id = ?", [run_id])
            names = [d[0] for d in cur.description or []]
            found = cur.fetchone()
        if found is None:
            return None
        out = dict(zip(names, found, strict=True))
        for key in ("started_at", "finished_at", "updated_at"):
            out[key] = from_ts(out[key])
        for key in ("contract", "policy", "error", "output"):
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

    # --------------------------------------------------------------- readers

    def runs(self, run_id: str | None = None, *, sweep: str | None = None) -> pd.DataFrame:
        """The runs table (one row per run) as a DataFrame; ``sweep`` keeps the runs of
        that sweep (``SweepResult.sweep_id``). A typed run's ``output_mode`` (the mode
        it ended in) and ``output`` (its answer as JSON text) are missing for others."""
        if sweep is None:
            return self._table("runs", run_id)
        where = "sweep_id = ?" + ("" if run_id is None else " AND run_id = ?")
        query = f"SELECT * FROM runs WHERE {where} ORDER BY {_ORDER['runs']}"
        with self._connection() as con, parallel(con):
            return frame(con.execute(query, [sweep] if run_id is None else [sweep, run_id]))

    def steps(self, run_id: str | None = None) -> pd.DataFrame:
        """Committed steps, ordered by run and step."""
        return self._table("steps", run_id)

    def attempts(self, run_id: str | None = None) -> pd.DataFrame:
        """Every provider HTTP attempt, failures included (``kind`` NULL on success);
        one a cancel cut off in flight has ``cancelled`` true and no ``kind``. A typed
        call's attempts have ``output_mode``; one whose answer came but could not be
        used has ``kind`` ``refusal``, ``truncated`` or ``schema_violation``, its raw
        text in ``answer`` (scrubbed, clipped) and the reason in ``error``."""
        return self._table("attempts", run_id)

    def tool_calls(self, run_id: str | None = None) -> pd.DataFrame:
        """Tool calls with their status (intent/ok/error/refused/needs_reconciliation)."""
        return self._table("tool_calls", run_id)

    def stalls(self, run_id: str | None = None) -> pd.DataFrame:
        """Stall detections and the action taken (replan/stalled)."""
        return self._table("stalls", run_id)

    def markers(self, run_id: str | None = None) -> pd.DataFrame:
        """Resume/skipped/resolved/abandoned markers, an approver's answer (``approval_granted``,
        ``approval_denied``), and ``output_cut`` (a typed answer
        too large to store: ``runs.output`` is NULL)."""
        return self._table("markers", run_id)

    def scores(self, sweep_id: str | None = None, run_id: str | None = None) -> pd.DataFrame:
        """What the scorers of sweeps said of their runs (``hn.sweep(scorers=...)``): one
        row per run and scorer (``sweep_id``, ``run_id``, ``sample_id``, ``scorer``,
        ``scorer_version``, ``value``, ``explanation``, ``error``, ``infra_failure``,
        ``infra_kind``, ``scored_at``); ``sweep_id``/``run_id`` keep one sweep's or
        one run's."""
        kept = {"sweep_id": sweep_id, "run_id": run_id}
        where = [f"{name} = ?" for name, value in kept.items() if value is not None]
        params = [value for value in kept.values() if value is not None]
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        query = f"SELECT * FROM scores{clause} ORDER BY {_ORDER['scores']}"
        with self._connection() as con, parallel(con):
            return frame(con.execute(query, params))

    def mcp_servers(self, run_id: str | None = None) -> pd.DataFrame:
        """What each MCP server offered each run (``hn.run(mcp=[...])``): one row per
        run and server (``run_id``, ``server``, ``transport``, ``target``: the
        scrubbed command line or URL, ``sandbox``: the backend a stdio server ran
        under, ``tools``: the list of its tools as dicts, ``tool_count``,
        ``tools_hash``, ``at``: when the list was first seen). A resumed run whose
        server offered a changed list has a row per list, oldest first."""
        where = "" if run_id is None else " WHERE run_id = ?"
        query = (
            "SELECT run_id, server, transport, target, sandbox, tools::VARCHAR AS tools, "
            'json_array_length(tools)::BIGINT AS tool_count, tools_hash, "at" '
            f"FROM mcp_servers{where} ORDER BY {_ORDER['mcp_servers']}"
        )
        with self._connection() as con, parallel(con):
            found = frame(con.execute(query, [] if run_id is None else [run_id]))
        found["tools"] = [[] if pd_isna(t) else json.loads(t) for t in found["tools"]]
        return found

    def sql(self, query: str, params: list[Any] | None = None) -> pd.DataFrame:
        """Run any SQL on the store and return a DataFrame.

        Quote the column ``"at"`` (a DuckDB keyword). ``runs`` is a view (its steps and
        tokens are counted from ``steps``), so it is read here, never written.
        """
        with self._connection() as con, parallel(con):
            return frame(con.execute(query, params or []))

    def failure_rates(
        self,
        by: tuple[str, ...] | str | None = None,
        *,
        of: str = "attempts",
        every: Any = None,
        sweep: str | None = None,
    ) -> pd.DataFrame:
        """How often attempts (or tool calls: ``of="tool_calls"``) fail, per group,
        with a 95% interval and Retry-After statistics.

        ``by`` defaults to ``("provider", "kind")`` (with ``of="tool_calls"``,
        ``("server", "kind")``).

        Without ``kind`` in ``by``: one row per group with ``attempts``, ``failures``
        (attempts with a kind), ``failure_rate`` = failures / attempts, and
        ``retry_after_s_mean``/``_p50``/``_max`` over the failures that carried one.

        With ``kind`` in ``by`` (the default ``("provider", "kind")``): one row per
        failure kind in each group of the other columns. ``attempts`` is that group's
        total (successes included), ``failures`` the attempts that failed with this
        kind, and ``failure_rate`` their share of all the group's attempts, so the
        rates of a provider add up to its overall failure rate. A group with no
        failure has one row with ``kind`` missing and 0 failures. Rows are sorted by
        the group, then most failures first.

        An attempt a cancel cut off in flight (``cancelled``: the run was cancelled,
        a Ctrl-C, while the server had the request) counts in no group: it is not in
        ``attempts``, ``failures`` nor the spend, since the provider neither answered
        nor failed it.

        ``failure_rate_low``/``failure_rate_high`` bound ``failure_rate`` with the 95%
        Wilson score interval (honest at small counts: 0 of 3 is 0 to 0.56).
        Spend, per group (with ``kind``: the group of the other columns, like
        ``attempts``): ``cost_usd``, the dollars of its priced attempts (missing when
        none was priced); ``cost_per_success_usd``, that over the attempts that
        succeeded (what one answer cost); ``unpriced_attempts``, attempts that used
        tokens at an unknown price, whose dollars ``cost_usd`` leaves out.

        A typed answer that came but could not be used is a failure too: ``kind``
        ``refusal``, ``truncated`` or ``schema_violation``. Group on ``output_mode``
        (``native``, ``tool``, ``prompted``; missing for an untyped call) to see who
        follows a schema in which mode: ``by=("provider", "output_mode", "kind")``.

        ``every`` (``"1h"``, ``"30min"``, ``"1D"``, a ``timedelta``) adds a first
        column ``period``: the UTC start of the time bucket each attempt started in,
        so failures over time is one call. ``sweep`` counts only the attempts of that
        sweep's runs (``SweepResult.failure_rates``).

        ``of="tool_calls"`` counts tool calls the same way: ``calls`` in place of
        ``attempts`` (no spend or Retry-After columns), groups among
        ``TOOL_FAILURE_GROUPS`` (``run_id``, ``step``, ``tool``, ``server``,
        ``effect``, ``sandbox``, ``kind``). A call's ``kind`` is how it failed: the MCP
        failure kind where there is one (``error_kind``: ``spawn``, ``exited``,
        ``timeout``, ``protocol``, ``tool_error``, ``unknown_tool``,
        ``connection_closed``, ``transport``), else its status for a call that failed
        (``error``, ``refused``), missing for one that worked. ``server`` is missing
        for harnessnb's own tools and ``@hn.tool`` ones. A call with no outcome yet
        (``intent``, ``needs_reconciliation``) counts in no group; ``every`` buckets
        by the call's ``at``.

        Raises:
            ConfigError: ``of`` is neither ``"attempts"`` nor ``"tool_calls"``.
            StoreError: ``query`` when ``by`` names a column ``of`` cannot group on
                (``FAILURE_GROUPS``, ``TOOL_FAILURE_GROUPS``), naming them, or
                ``every`` is not a positive duration.
        """
        if by is None:
            by = ("provider", "kind") if of == "attempts" else ("server", "kind")
        groups = failure_groups(by, self.path, of)
        every_us = None if every is None else bucket_us(every, self.path)
        query = failure_sql(groups, every_us, sweep=sweep is not None, of=of)
        params = {} if sweep is None else {"sweep": sweep}
        with self._connection() as con, parallel(con):
            return frame(con.execute(query, params))

    def export_traces(
        self,
        tracer_provider: Any,
        run_ids: Sequence[str] | None = None,
        sweep: str | None = None,
        include_content: bool = False,
        *,
        meter_provider: Any = None,
    ) -> int:
        """Emit the OpenTelemetry spans of stored runs, with their recorded times, to
        ``tracer_provider`` (an SDK ``TracerProvider`` and its exporter: OTLP to
        Phoenix, Jaeger, Langfuse...; harnessnb never sets the global one): the same
        spans a run traced live emits when it ends. Every run of the store (or of
        ``run_ids``; or ``sweep``'s, nested under one ``invoke_workflow sweep ID``
        span), a combined store of shards too. Returns how many runs were exported.

        ``include_content`` adds the messages, tool arguments and results (scrubbed);
        ``meter_provider`` also records the GenAI client metrics of every attempt.

        Raises:
            ConfigError: OpenTelemetry is not installed (``pip install 'harnessnb[otel]'``).
        """
        from ._traces import export_runs

        return export_runs(self, tracer_provider, run_ids=run_ids, sweep=sweep,
                           include_content=include_content,
                           meter_provider=meter_provider)  # fmt: skip

    def _table(self, table: str, run_id: str | None) -> pd.DataFrame:
        where = "" if run_id is None else " WHERE run_id = ?"
        # The checkpoint (all messages so far) is for resume, not for a table view.
        columns = "* EXCLUDE (checkpoint, journal)" if table == "steps" else "*"
        query = f"SELECT {columns} FROM {table}{where} ORDER BY {_ORDER[table]}"
        with self._connection() as con, parallel(con):
            return frame(con.execute(query, [] if run_id is None else [run_id]))


class CombinedStore(Store):
    """Shard store files read as one store (``Store.combine``): every reader, no write.

    ``paths`` are the shard files; ``path`` the folder (or the first file of a list).
    Each reader call attaches the shards anew (``_combine.shards_as_one``).
    """

    def __init__(
        self,
        source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        busy_timeout_s: float = 30.0,
    ) -> None:
        self.paths: tuple[str, ...] = tuple(shard_paths(source))
        whole = source if isinstance(source, str | os.PathLike) else self.paths[0]
        self.path, self._busy_timeout_s, self._linger_s = os.fspath(whole), busy_timeout_s, 0.0
        self._db, self._closed, self._writer = None, False, StoreWriter(self)
        with self._connection():  # a bad shard fails here, not at the first read
            pass

    @contextmanager
    def _connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        if self._closed:
            raise StoreError(f"the store {self.path} is closed", kind="closed", path=self.path)
        with shards_as_one(self.paths, self._busy_timeout_s, self.path) as con:
            yield con

    @property
    def read_only(self) -> bool:
        return True

    def close(self) -> None:
        self._closed = True

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"CombinedStore({self.path!r}, {len(self.paths)} shards, {state})"

    def _write(self, op: WriteOp[T]) -> T:
        raise read_only_error(len(self.paths), self.path)

    def _submit(self, op: WriteOp[T]) -> Future[T]:
        raise read_only_error(len(self.paths), self.path)


# ------------------------------------------------------------------- helpers


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def pd_isna(value: Any) -> bool:
    """Whether a frame's cell is missing (``pd.NA``), without importing pandas here."""
    return value is None or type(value).__name__ == "NAType"


# The readers' DataFrames come from ``_frames``, which imports pandas: loaded on the
# first read, so a run (which only writes) never pays pandas' import.


def frame(result: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    from ._frames import frame as to_frame

    return to_frame(result)


def bucket_us(every: Any, path: str) -> int:
    from ._frames import bucket_us as to_us

    return to_us(every, path)
