"""Every write of the store, each declared once as a function that builds a ``WriteOp``.

A write's arguments are checked here, when the op is built (rows converted, credentials
removed, times taken); its statements run later, inside a transaction: at once in the
calling thread (``StoreWriter.write``, and its blocking methods such as
``StoreWriter.commit_step``), or queued for group commit (``StoreWriter.submit``, and
from asyncio ``await store_writer(store).queued.commit_step(...)``); ``_writer`` runs
each function here, one written-out method each, and mypy checks every call. Rows are
the TypedDicts of ``_row_types``.

Timestamps go in as Unix seconds (float); JSON-ish values are stored as JSON text.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from ..rules._errors import StoreError
from ..rules._text import clip
from ._batch import Batch, WriteOp, append_rows, run_update
from ._leases import LEASE_TTL_S, Lease, renew
from ._row_types import (
    AttemptRow,
    Finish,
    MarkerRow,
    MCPServerRow,
    RunFileRow,
    RunRow,
    ScoreRow,
    StallRow,
    StepRow,
    SweepRunRow,
    ToolCallRow,
)
from ._rows import dumps, output_of, row, safe_value, scrub_text, to_ts
from ._schema import COLUMNS, SCHEMA_VERSION

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "acquire_lease",
    "add_attempts",
    "add_marker",
    "add_scores",
    "add_sweep_run",
    "bind_agent_session",
    "commit_step",
    "create_run",
    "finish_run",
    "keep_begun_step",
    "put_recording",
    "record_intent",
    "record_mcp_servers",
    "release_lease",
    "renew_lease",
    "settle_tool_call",
    "start_run",
]

_EFFECT: Final = COLUMNS["tool_calls"].index("effect")


# How a finished run changes its run row (see ``Batch.update_run``). A typed run's
# mode and answer are set when given, else the row keeps what it had (the mode chosen
# at the start; NULL for an untyped run).
_FINISHED: Final = run_update(
    "outcome = v.c0, finished_at = v.c1, error = v.c2, updated_at = v.c3, "
    "output_mode = coalesce(v.c4, run_rows.output_mode), "
    "output = coalesce(v.c5, run_rows.output)",
    *("VARCHAR", "TIMESTAMP", "VARCHAR", "TIMESTAMP", "VARCHAR", "VARCHAR"),
)

# ------------------------------------------------------------------------ runs


def create_run(run: RunRow) -> WriteOp[None]:
    """Insert a run row (what else the run keeps, in its ``extras``).

    Raises:
        StoreError: ``duplicate`` when the run exists.
    """
    values, cut = _run_row(run)

    def apply(con: duckdb.DuckDBPyConnection, batch: Batch) -> None:
        batch.append("run_rows", [values])
        batch.append("markers", cut)

    return WriteOp("create_run", apply, False)


def start_run(
    run: RunRow,
    owner: str,
    *,
    ttl_s: float = LEASE_TTL_S,
    now: float | None = None,
    owner_alive: Callable[[str], bool] | None = None,
) -> WriteOp[Lease]:
    """``create_run`` and ``acquire_lease`` in one transaction: the run row and its
    first lease land together or not at all.

    Raises:
        StoreError: ``duplicate`` when the run exists.
        ConflictError: a lease on this run id is held by another live owner.
    """
    values, cut = _run_row(run)
    run_id = str(run["run_id"])
    at = time.time() if now is None else now

    def careful(con: duckdb.DuckDBPyConnection, batch: Batch) -> Lease:
        append_rows(con, "run_rows", [values])
        append_rows(con, "markers", cut)
        return batch.acquire(con, run_id, owner, ttl_s, at, owner_alive)

    def apply(con: duckdb.DuckDBPyConnection, batch: Batch) -> Lease:
        # A new run has no lease row: a plain append of generation 1 (no SELECT, no
        # upsert). A row already there (the run, a stray lease) fails the append; the
        # careful path then says which (``duplicate``, ``ConflictError``) or takes over.
        batch.append("run_rows", [values])
        batch.append("markers", cut)
        batch.append("leases", [(run_id, owner, 1, to_ts(at), to_ts(at),
                                 to_ts(at + ttl_s), False)])  # fmt: skip
        batch.lease_changed(run_id, 1)
        return Lease(run_id, owner, 1, at + ttl_s)

    return WriteOp("start_run", apply, direct=False, fallback=WriteOp("start_run", careful))


def commit_step(
    run_id: str,
    step: StepRow,
    *,
    attempts: Sequence[AttemptRow],
    tool_calls: Sequence[ToolCallRow],
    stalls: Sequence[StallRow],
    checkpoint: Mapping[str, Any],
    lease: Lease | None = None,
    finish: Finish | None = None,
) -> WriteOp[None]:
    """Commit one step whole: its row, attempts, tool calls, stalls and checkpoint.

    ``attempts`` is for a caller whose one attempt ends with its one step (a
    coding-agent CLI's run); the run loop passes none, its attempts were written as
    they ended (``add_attempts``), so no attempt row can be written twice.

    Tool rows replace rows with the same (run_id, step, seq), such as the intent row
    of a WRITE tool. ``runs.steps`` grows by one and ``runs.tokens`` by the step's
    (the ``runs`` view counts step rows: no run row is written).
    ``finish`` (``outcome``, ``finished_at``, ``error``, and a typed run's
    ``output_mode`` and ``output``, as for ``finish_run``) ends the run with its last
    step in the same transaction and releases ``lease``.

    Raises:
        ConflictError: ``lease`` is no longer current (another owner took the run);
            nothing is written.
        StoreError: ``missing`` for an unknown run (without ``lease``; with one, the
            current lease is the guard), ``duplicate`` for a step already committed.
    """
    tools = [row("tool_calls", t, run_id=run_id) for t in tool_calls]
    rows = {
        # Tool rows first: a clash with an intent row fails before the rest.
        "tool_calls": tools,
        "attempts": [_attempt_row(run_id, a) for a in attempts],
        "stalls": [row("stalls", s, run_id=run_id) for s in stalls],
    }
    step_row = row("steps", step, run_id=run_id, checkpoint=checkpoint)
    ended = None
    if finish is not None:
        ended, cut = _ended(run_id, **finish)
        rows["markers"] = cut
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


def finish_run(
    run_id: str,
    *,
    outcome: str,
    finished_at: float,
    error: Mapping[str, Any] | None = None,
    stalls: Sequence[StallRow] | None = None,
    lease: Lease | None = None,
    release: bool = False,
    output_mode: str | None = None,
    output: str | None = None,
) -> WriteOp[None]:
    """Set the run's outcome, end time and error, with its last stalls.

    Its attempts are not written here: each was written when it ended (``add_attempts``).

    With ``release`` the ``lease`` is given up in the same transaction (as
    ``release_lease`` would), so ending a run is one commit.

    A typed run (``TaskContract(output=T)``) also sets the mode it ended in
    (``output_mode``: ``native``, ``tool``, ``prompted``) and its validated answer as
    JSON text (``output``), in the same transaction; None leaves the row's value (the
    mode chosen at the start; NULL for an untyped run). The answer's strings are
    scrubbed (``_rows.stored_output``); one larger than ``MAX_OUTPUT_BYTES`` is not
    stored (``output`` NULL) and an ``output_cut`` marker row says how large it was.

    Raises:
        ConflictError: ``lease`` is stale; nothing is written.
        StoreError: ``missing`` for an unknown run; ``query`` for an ``output`` that
            is not JSON text (raised here, before anything is written).
    """
    stall_rows = [row("stalls", s, run_id=run_id) for s in stalls or []]
    ended, cut = _ended(run_id, outcome, finished_at, error, output_mode, output)
    generation = None if lease is None else lease.generation
    holder = "" if lease is None else lease.owner

    def apply(con: duckdb.DuckDBPyConnection, batch: Batch) -> None:
        batch.append("stalls", stall_rows)
        batch.append("markers", cut)
        batch.update_run(con, _FINISHED, run_id, ended, generation, holder)
        if release and generation is not None:
            batch.release(run_id, generation)

    return WriteOp("finish_run", apply, direct=False)


def add_attempts(
    run_id: str, attempts: Sequence[AttemptRow], *, linger_s: float = 0.0
) -> WriteOp[None]:
    """Append the rows of attempts that just ended (the run loop writes each attempt
    this way, when it ends, and in no other write), merged into the batch's one append.

    No lease or run check: an attempt a server saw is a fact whoever drives the run.
    ``linger_s`` lets the writer hold the rows that long for the step commit that
    follows a successful call, so both share one commit (``WriteOp.linger_s``).
    """
    rows = [_attempt_row(run_id, a) for a in attempts]

    def apply(con: duckdb.DuckDBPyConnection, batch: Batch) -> None:
        batch.append("attempts", rows)

    return WriteOp("add_attempts", apply, direct=False, linger_s=linger_s)


def _attempt_row(run_id: str, attempt: AttemptRow) -> tuple[Any, ...]:
    # ``cancelled`` is never missing: false unless a cancel cut the attempt off.
    return row("attempts", attempt, run_id=run_id, cancelled=bool(attempt.get("cancelled")))


def add_marker(run_id: str, kind: str, detail: str, at: float) -> WriteOp[None]:
    """Append a resume/skipped/resolved/abandoned marker row."""
    values = row("markers", MarkerRow(run_id=run_id, kind=kind, detail=detail, at=at))
    return WriteOp("add_marker", lambda con, batch: batch.append("markers", [values]), False)


# ------------------------------------------------------------------ tool calls


def record_intent(
    run_id: str,
    tool_call: ToolCallRow,
    *,
    lease: Lease | None = None,
    pending: Mapping[str, Any] | None = None,
) -> WriteOp[None]:
    """Commit a WRITE tool's intent row on its own, before the tool runs.

    ``pending`` (the step's answer and attempts, given with the step's first
    intent) is kept in the same transaction for ``pending_step``.
    """
    values = row("tool_calls", tool_call, run_id=run_id, status="intent")
    answer = None
    if pending is not None:
        answer = [run_id, tool_call["step"], dumps(pending, text=False),
                  to_ts(tool_call.get("at") or time.time())]  # fmt: skip

    def apply(con: duckdb.DuckDBPyConnection, batch: Batch) -> None:
        batch.check_lease(con, run_id, lease)
        # The intent replaces a row left at its place (step, seq) by an earlier try.
        con.execute(
            "DELETE FROM tool_calls WHERE run_id = ? AND step = ? AND seq = ?",
            [run_id, values[1], values[2]],
        )
        append_rows(con, "tool_calls", [values])
        if answer is not None:
            con.execute("INSERT OR REPLACE INTO pending_steps VALUES (?, ?, ?, ?)", answer)

    return WriteOp("record_intent", apply)


def keep_begun_step(
    run_id: str,
    step: int,
    pending: Mapping[str, Any],
    tool_calls: Sequence[ToolCallRow],
    *,
    lease: Lease | None = None,
) -> WriteOp[None]:
    """Keep a step that stopped before its end (a call waits for a person's approval)
    as begun, not committed: ``pending`` (its answer) for ``pending_step`` and the rows
    of its calls so far, which replace the step's rows (its intents, settled since).
    A resume finishes the step without asking the model again (``loop._durable``).

    Raises:
        ConflictError: ``lease`` is no longer current; nothing is written.
    """
    rows = [row("tool_calls", t, run_id=run_id) for t in tool_calls]
    answer = [run_id, step, dumps(pending, text=False), to_ts(time.time())]

    def apply(con: duckdb.DuckDBPyConnection, batch: Batch) -> None:
        batch.check_lease(con, run_id, lease)
        con.execute("DELETE FROM tool_calls WHERE run_id = ? AND step = ?", [run_id, step])
        append_rows(con, "tool_calls", rows)
        con.execute("INSERT OR REPLACE INTO pending_steps VALUES (?, ?, ?, ?)", answer)

    return WriteOp("keep_begun_step", apply)


def settle_tool_call(
    run_id: str,
    step: int,
    seq: int,
    *,
    status: str,
    output: str | None = None,
    sandbox: str | None = None,
) -> WriteOp[None]:
    """Set the status (and output, and the sandbox backend a command ran in) of a tool
    row, e.g. an intent resolved by a person.

    Raises:
        StoreError: ``missing`` when there is no such tool row.
    """
    output = None if output is None else safe_value("output", output)
    size = None if output is None else len(output.encode("utf-8"))

    def apply(con: duckdb.DuckDBPyConnection, batch: Batch) -> None:
        updated = con.execute(
            "UPDATE tool_calls SET status = ?, output = coalesce(?, output), "
            "output_bytes = coalesce(?, output_bytes), sandbox = coalesce(?, sandbox) "
            "WHERE run_id = ? AND step = ? AND seq = ?",
            [status, output, size, sandbox, run_id, step, seq],
        ).fetchone()
        if not updated or updated[0] == 0:
            raise StoreError(
                f"run {run_id!r} has no tool call at step {step} seq {seq}",
                kind="missing",
                path=batch.path,
            )

    return WriteOp("settle_tool_call", apply)


# ---------------------------------------------------------------------- leases


def acquire_lease(
    run_id: str,
    owner: str,
    *,
    ttl_s: float = LEASE_TTL_S,
    now: float | None = None,
    owner_alive: Callable[[str], bool] | None = None,
) -> WriteOp[Lease]:
    """Take the right to drive ``run_id``; every acquire bumps the generation.

    A lease held by another owner is taken over at once when it has expired or
    ``owner_alive(owner)`` says its process is gone; otherwise ``ConflictError``.
    The previous holder's next commit then fails with ``ConflictError``.
    """
    at = time.time() if now is None else now

    return WriteOp(
        "acquire_lease",
        lambda con, batch: batch.acquire(con, run_id, owner, ttl_s, at, owner_alive),
    )


def renew_lease(lease: Lease, *, ttl_s: float = LEASE_TTL_S) -> WriteOp[Lease]:
    """Extend a current lease. Raises ``ConflictError`` when it was taken over."""
    now = time.time()
    return WriteOp("renew_lease", lambda con, batch: renew(con, lease, ttl_s, now))


def release_lease(lease: Lease) -> WriteOp[None]:
    """Give up a lease; a stale one is ignored (someone else holds the run now)."""
    # The row stays, so the next acquire still bumps past this generation.
    return WriteOp(
        "release_lease", lambda con, batch: batch.release(lease.run_id, lease.generation), False
    )


# ------------------------------------------------------ recordings and sessions


def put_recording(key: str, seq: int, response: Mapping[str, Any]) -> WriteOp[None]:
    """Store (or replace) response ``seq`` of recording ``key``, credentials removed."""
    values = [key, seq, dumps(response), to_ts(time.time())]
    return WriteOp("put_recording", lambda con, batch: _upsert(con, "recordings", values))


def bind_agent_session(
    workspace: str, name: str, *, agent: str, session_id: str | None, run_id: str
) -> WriteOp[None]:
    """Bind session ``name`` in ``workspace`` to ``agent``'s native ``session_id``."""
    values = [workspace, name, agent, session_id, run_id, to_ts(time.time())]
    return WriteOp("bind_agent_session", lambda con, batch: _upsert(con, "agent_sessions", values))


# --------------------------------------------------------------------- helpers


def _upsert(con: duckdb.DuckDBPyConnection, table: str, values: list[Any]) -> None:
    marks = ", ".join("?" * len(values))
    con.execute(f"INSERT OR REPLACE INTO {table} VALUES ({marks})", values)


def _ended(
    run_id: str,
    outcome: Any,
    finished_at: float,
    error: Any,
    output_mode: Any = None,
    output: Any = None,
) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
    """(outcome, finished_at, error, updated_at, output_mode, output) of a run that
    ends, and the marker rows that go with it (an answer too large to store)."""
    text, cut = output_of(run_id, output, finished_at)
    mode = safe_value("output_mode", getattr(output_mode, "value", output_mode))
    return (getattr(outcome, "value", outcome), to_ts(finished_at), dumps(error),
            to_ts(finished_at), mode, text), cut  # fmt: skip


def _run_row(run: RunRow) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
    """The ``run_rows`` row of a new run (not yet finished, at this schema version),
    and the marker rows that go with it (an ``output`` too large to store)."""
    extras = run.get("extras")
    started = run.get("started_at") or time.time()
    text, cut = output_of(str(run.get("run_id")), run.get("output"), started)
    values = row(
        "run_rows",
        run,
        outcome=None,
        finished_at=None,
        schema_version=SCHEMA_VERSION,
        extras=extras or None,
        updated_at=started,
        output=text,
    )
    return values, cut


# ---------------------------------------------------------------------- scores

# A scorer's explanation is kept to this many characters (head and tail, ``clip``).
MAX_EXPLANATION: Final = 16_000


def add_scores(scores: Sequence[ScoreRow]) -> WriteOp[None]:
    """Write what the scorers of a sweep said of a run: one row per (run, scorer),
    replacing the row of that run and scorer if there is one (scored again). The
    explanation and error are scrubbed (``rules._secrets``) and clipped (``clip``);
    ``scored_at`` defaults to now."""
    now = time.time()
    rows = [
        row(
            "scores",
            score,
            explanation=clip(scrub_text(score.get("explanation") or ""), MAX_EXPLANATION),
            scored_at=score.get("scored_at") or now,
        )
        for score in scores
    ]

    def replace(con: duckdb.DuckDBPyConnection, batch: Batch) -> None:
        if rows:
            marks = ", ".join(["(" + ", ".join("?" * len(rows[0])) + ")"] * len(rows))
            params = [v for values in rows for v in values]
            con.execute(f"INSERT OR REPLACE INTO scores VALUES {marks}", params)

    # Appended with other runs' writes (group commit); a row already there (scored
    # again) makes the append fail, and this op alone then replaces.
    replacing = WriteOp("add_scores", replace)
    return WriteOp(
        "add_scores", lambda con, batch: batch.append("scores", rows), False, fallback=replacing
    )


# ------------------------------------------------------------------ sweep runs


def add_sweep_run(slot: SweepRunRow, files: Sequence[RunFileRow]) -> WriteOp[None]:
    """Write which slot of its sweep a run filled, its sample (verbatim but for known
    secret values, as a contract's task) and its final workspace files (``run_files``, the
    bytes the run left), in one transaction, replacing what that run had (written again)."""
    slot_row = row("sweep_runs", slot, at=slot.get("at") or time.time())
    run_id = str(slot["run_id"])
    file_rows = [row("run_files", f, run_id=run_id) for f in files]

    def replace(con: duckdb.DuckDBPyConnection, batch: Batch) -> None:
        con.execute("DELETE FROM run_files WHERE run_id = ?", [run_id])
        marks = ", ".join("?" * len(slot_row))
        con.execute(f"INSERT OR REPLACE INTO sweep_runs VALUES ({marks})", list(slot_row))
        for values in file_rows:  # one at a time: each may be a MiB
            con.execute("INSERT INTO run_files VALUES (?, ?, ?, ?, ?)", list(values))

    def append(con: duckdb.DuckDBPyConnection, batch: Batch) -> None:
        batch.append("sweep_runs", [slot_row])
        batch.append("run_files", file_rows)

    # Appended with other writes (group commit); a run written again clashes on
    # sweep_runs' key, and this op alone then replaces (a DELETE, an upsert, a row a file).
    return WriteOp("add_sweep_run", append, False, fallback=WriteOp("add_sweep_run", replace))


# ----------------------------------------------------------------- MCP servers

# The transports an ``mcp_servers`` row may name (``MCPServer.transport``).
MCP_TRANSPORTS: Final = ("stdio", "http")


def record_mcp_servers(run_id: str, rows: Sequence[MCPServerRow]) -> WriteOp[None]:
    """Write what each MCP server offered run ``run_id`` (one row per server), in one
    transaction. ``target`` goes through the one scrubber, ``tools`` too (as JSON:
    descriptions and schemas are a third party's text); ``tools_hash`` defaults to the
    SHA-256 of that JSON, ``at`` to now. A row whose (run, server, tools_hash) is there
    already is left as it was: writing the same snapshot again (a resume that found the
    same tools) changes nothing, and a changed list is a new snapshot beside the first.

    Raises:
        StoreError: ``query`` for a row without ``server`` or with a ``transport``
            other than ``stdio``/``http``, or a key that is no column; nothing is written.
    """
    now = time.time()
    values = [_mcp_server_row(run_id, r, now) for r in rows]

    def keeping(con: duckdb.DuckDBPyConnection, batch: Batch) -> None:
        marks = ", ".join("?" * len(COLUMNS["mcp_servers"]))
        for value in values:
            con.execute(f"INSERT OR IGNORE INTO mcp_servers VALUES ({marks})", list(value))

    # Appended with other runs' writes (group commit); a snapshot already there makes
    # the append fail, and this op alone then inserts what is new.
    return WriteOp(
        "record_mcp_servers",
        lambda con, batch: batch.append("mcp_servers", values),
        False,
        fallback=WriteOp("record_mcp_servers", keeping),
    )


def _mcp_server_row(run_id: str, server: MCPServerRow, now: float) -> tuple[Any, ...]:
    transport = server.get("transport")
    if transport not in MCP_TRANSPORTS:
        raise StoreError(
            f"an mcp_servers row's transport is one of {', '.join(MCP_TRANSPORTS)}, "
            f"not {transport!r}",
            kind="query",
        )
    tools = dumps(server.get("tools") or [])  # scrubbed, token shapes included
    target = server.get("target")
    return row(
        "mcp_servers",
        server,
        run_id=run_id,
        target=None if target is None else scrub_text(target),
        tools=tools,
        tools_hash=server.get("tools_hash") or _tools_hash(tools),
        at=server.get("at") or now,
    )


def _tools_hash(tools: str | None) -> str:
    return hashlib.sha256((tools or "[]").encode("utf-8")).hexdigest()
