"""The store's tables, their ordered migrations, and the schema-version check.

Each migration is a list of DDL statements; ``ensure_schema`` applies the missing ones
in order inside one transaction, so a store is at one version or the previous one,
never between. Columns named ``at`` are quoted: ``AT`` is a keyword in DuckDB 2.

Since version 4 ``runs`` is a view: the writers fill ``run_rows`` (what a run is and
how it ended) and the view adds ``steps``, ``tokens`` and ``updated_at`` from the
committed step rows, so a step commit writes no run row and the counts cannot drift
from the steps, for a run in progress, finished or killed alike. Since version 6 it
adds ``cost_usd`` the same way, from the attempt rows; since version 7 it passes
``sweep_id`` through. Version 8 marks the attempts a cancel cut off (``cancelled``);
version 9 those whose tokens are estimated (``usage_estimated``). Version 10 adds
``scores``: one row per run and scorer of a sweep (``hn.sweep(scorers=...)``).
Version 11 adds ``sweep_runs`` (which slot of its sweep a run filled, and its sample)
and ``run_files`` (a sweep run's final workspace files, capped), for a sweep resumed
by its id and ``hn.rescore``.

A store file is data, never code: a file shared with a notebook is untrusted input, and
DuckDB runs what a file's views and macros say when a query names them. So a file must
hold exactly the objects these migrations make at its version (``check_catalog``: each
table and the ``runs`` view compared with the SQL of a reference built in memory), and
no view, macro, sequence, index or type besides; a table of the user's own under another
name is data and allowed. And every connection harnessnb opens is made with
``CONNECTION_CONFIG``: no external access (no file read, no network), no extension
installed or loaded on demand, so even a query a check missed reads nothing outside.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import TYPE_CHECKING, Final

from ..rules._errors import StoreError

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "COLUMNS",
    "CONNECTION_CONFIG",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "check_catalog",
    "check_catalog_table",
    "connect",
    "ensure_schema",
    "migrated_copy",
    "quote",
    "stored_version",
]

SCHEMA_VERSION: Final = 14

# Every connection harnessnb opens: no query reads a file or reaches the network
# (``read_text``, ``read_csv``, an http URL...) and no extension is fetched or loaded on
# demand. A connection that must ATTACH a file (``_combine``) opens without the first
# and turns it off (it cannot be turned back on) once its files are attached.
CONNECTION_CONFIG: Final[dict[str, str | bool | int | float | list[str]]] = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
}


def connect(
    path: str, *, read_only: bool = False, attach: bool = False
) -> duckdb.DuckDBPyConnection:
    """A connection made with ``CONNECTION_CONFIG`` (``attach``: external access stays
    on until the caller, having attached its files, turns it off) and no progress bar
    (a slow query on a loaded machine would print one into the caller's output)."""
    import duckdb

    config = {**CONNECTION_CONFIG, "enable_external_access": attach}
    con = duckdb.connect(path, read_only=read_only, config=config)
    try:
        con.execute("SET enable_progress_bar = false")
    except BaseException:
        con.close()
        raise
    return con


# Version 1: the tables of DESIGN.md "Store tables".
_V1: Final = [
    "CREATE TABLE schema_version (version INTEGER NOT NULL, applied_at TIMESTAMP NOT NULL)",
    """CREATE TABLE runs (
        run_id VARCHAR PRIMARY KEY, task VARCHAR, workspace VARCHAR, provider VARCHAR,
        model VARCHAR, started_at TIMESTAMP, finished_at TIMESTAMP, outcome VARCHAR,
        steps INTEGER NOT NULL DEFAULT 0, tokens BIGINT NOT NULL DEFAULT 0,
        schema_version INTEGER)""",
    """CREATE TABLE attempts (
        run_id VARCHAR NOT NULL, step INTEGER, attempt INTEGER, provider VARCHAR,
        model VARCHAR, kind VARCHAR, status INTEGER, retry_after_s DOUBLE,
        latency_ms DOUBLE, ttft_ms DOUBLE, input_tokens INTEGER, output_tokens INTEGER,
        request_id VARCHAR, fell_back BOOLEAN, error VARCHAR, started_at TIMESTAMP)""",
    """CREATE TABLE steps (
        run_id VARCHAR NOT NULL, step INTEGER NOT NULL, decision VARCHAR,
        tool_calls INTEGER, tokens INTEGER, changed_workspace BOOLEAN, provider VARCHAR,
        "at" TIMESTAMP, PRIMARY KEY (run_id, step))""",
    """CREATE TABLE tool_calls (
        run_id VARCHAR NOT NULL, step INTEGER NOT NULL, seq INTEGER NOT NULL,
        tool VARCHAR, effect VARCHAR, args VARCHAR, idempotency_key VARCHAR,
        status VARCHAR, error_name VARCHAR, error_code VARCHAR, output_bytes BIGINT,
        "at" TIMESTAMP, PRIMARY KEY (run_id, step, seq))""",
    """CREATE TABLE stalls (
        run_id VARCHAR NOT NULL, step INTEGER, signal VARCHAR, action VARCHAR,
        detail VARCHAR, "at" TIMESTAMP)""",
]

# Version 2: what durability needs (checkpoints, leases, recordings, markers) and the
# JSON columns resume reads back. The checkpoint is a column of its step row, not a
# table: one statement fewer per commit, and a step cannot exist without it.
_V2: Final = [
    "ALTER TABLE runs ADD COLUMN contract VARCHAR",
    "ALTER TABLE runs ADD COLUMN policy VARCHAR",
    "ALTER TABLE runs ADD COLUMN error VARCHAR",
    "ALTER TABLE runs ADD COLUMN extras VARCHAR",
    "ALTER TABLE runs ADD COLUMN updated_at TIMESTAMP",
    "ALTER TABLE tool_calls ADD COLUMN output VARCHAR",
    "ALTER TABLE attempts ADD COLUMN base_url VARCHAR",
    "ALTER TABLE steps ADD COLUMN checkpoint VARCHAR",
    """CREATE TABLE leases (
        run_id VARCHAR PRIMARY KEY, owner VARCHAR NOT NULL, generation BIGINT NOT NULL,
        acquired_at TIMESTAMP, renewed_at TIMESTAMP, expires_at TIMESTAMP,
        released BOOLEAN NOT NULL DEFAULT false)""",
    """CREATE TABLE recordings (
        key VARCHAR NOT NULL, seq INTEGER NOT NULL, response VARCHAR NOT NULL,
        recorded_at TIMESTAMP, PRIMARY KEY (key, seq))""",
    # The answer of a step whose tools began (written with its first intent), so a
    # resume finishes that step without asking the model again.
    """CREATE TABLE pending_steps (
        run_id VARCHAR NOT NULL, step INTEGER NOT NULL, answer VARCHAR NOT NULL,
        "at" TIMESTAMP, PRIMARY KEY (run_id, step))""",
    """CREATE TABLE markers (
        run_id VARCHAR NOT NULL, kind VARCHAR NOT NULL, detail VARCHAR,
        "at" TIMESTAMP)""",
]

# Version 3: named sessions of coding-agent CLIs (``hn.agents``): a name, per
# workspace, bound to the CLI that owns it and that CLI's native session id.
_V3: Final = [
    """CREATE TABLE agent_sessions (
        workspace VARCHAR NOT NULL, name VARCHAR NOT NULL, agent VARCHAR NOT NULL,
        session_id VARCHAR, run_id VARCHAR, updated_at TIMESTAMP,
        PRIMARY KEY (workspace, name))""",
]

# The columns of ``run_rows``: those of ``runs`` but the ones the view derives.
_RUN_ROW_COLUMNS: Final = (
    "run_id, task, workspace, provider, model, started_at, finished_at, outcome, "
    "schema_version, contract, policy, error, extras, updated_at"
)

# Version 4: ``runs`` becomes a view over ``run_rows`` (see the module docstring). The
# view keeps the v2 columns in their order, names and types; ``updated_at`` is the
# later of the run row's (start or end) and its last step's time.
_V4: Final = [
    """CREATE TABLE run_rows (
        run_id VARCHAR PRIMARY KEY, task VARCHAR, workspace VARCHAR, provider VARCHAR,
        model VARCHAR, started_at TIMESTAMP, finished_at TIMESTAMP, outcome VARCHAR,
        schema_version INTEGER, contract VARCHAR, policy VARCHAR, error VARCHAR,
        extras VARCHAR, updated_at TIMESTAMP)""",
    f"INSERT INTO run_rows ({_RUN_ROW_COLUMNS}) SELECT {_RUN_ROW_COLUMNS} FROM runs",
    "DROP TABLE runs",
    """CREATE VIEW runs AS SELECT
        r.run_id, r.task, r.workspace, r.provider, r.model, r.started_at, r.finished_at,
        r.outcome, coalesce(s.steps, 0)::INTEGER AS steps,
        coalesce(s.tokens, 0)::BIGINT AS tokens, r.schema_version, r.contract, r.policy,
        r.error, r.extras, greatest(r.updated_at, s.last_at) AS updated_at
    FROM run_rows r LEFT JOIN (
        SELECT run_id, count(*) AS steps, sum(tokens) AS tokens, max("at") AS last_at
        FROM steps GROUP BY run_id) s ON s.run_id = r.run_id""",
]

# Version 5: the sandbox backend a command ran in (``bubblewrap``, ``none``...), kept in
# its tool row rather than in the text the model sees (which a replay matches on).
# NULL for tools that run no command and for rows written before version 5.
_V5: Final = ["ALTER TABLE tool_calls ADD COLUMN sandbox VARCHAR"]

# Version 6: what each attempt cost (``providers/_prices.py``: NULL when it reported
# no usage or its model has no known price) and the run's sum in the view: NULL when
# any attempt that used tokens is unpriced (rows from before version 6 included), so a
# total is never short of an unknown part; 0 for a run with no attempt.
_V6: Final = [
    "ALTER TABLE attempts ADD COLUMN cost_usd DOUBLE",
    "DROP VIEW runs",
    """CREATE VIEW runs AS SELECT
        r.run_id, r.task, r.workspace, r.provider, r.model, r.started_at, r.finished_at,
        r.outcome, coalesce(s.steps, 0)::INTEGER AS steps,
        coalesce(s.tokens, 0)::BIGINT AS tokens, r.schema_version, r.contract, r.policy,
        r.error, r.extras, greatest(r.updated_at, s.last_at) AS updated_at,
        CASE WHEN a.run_id IS NULL THEN 0.0 ELSE a.cost_usd END AS cost_usd
    FROM run_rows r LEFT JOIN (
        SELECT run_id, count(*) AS steps, sum(tokens) AS tokens, max("at") AS last_at
        FROM steps GROUP BY run_id) s ON s.run_id = r.run_id
    LEFT JOIN (
        SELECT run_id, CASE WHEN bool_and(cost_usd IS NOT NULL OR (input_tokens IS NULL
            AND output_tokens IS NULL)) THEN coalesce(sum(cost_usd), 0.0) END AS cost_usd
        FROM attempts GROUP BY run_id) a ON a.run_id = r.run_id""",
]

# Version 7: the sweep a run belongs to (``hn.sweep``; NULL for a run of its own), in
# the run row and, last, in the view, so ``Store.runs(sweep=...)`` and a sweep's
# ``failure_rates`` select its runs.
_V7: Final = [
    "ALTER TABLE run_rows ADD COLUMN sweep_id VARCHAR",
    "DROP VIEW runs",
    """CREATE VIEW runs AS SELECT
        r.run_id, r.task, r.workspace, r.provider, r.model, r.started_at, r.finished_at,
        r.outcome, coalesce(s.steps, 0)::INTEGER AS steps,
        coalesce(s.tokens, 0)::BIGINT AS tokens, r.schema_version, r.contract, r.policy,
        r.error, r.extras, greatest(r.updated_at, s.last_at) AS updated_at,
        CASE WHEN a.run_id IS NULL THEN 0.0 ELSE a.cost_usd END AS cost_usd, r.sweep_id
    FROM run_rows r LEFT JOIN (
        SELECT run_id, count(*) AS steps, sum(tokens) AS tokens, max("at") AS last_at
        FROM steps GROUP BY run_id) s ON s.run_id = r.run_id
    LEFT JOIN (
        SELECT run_id, CASE WHEN bool_and(cost_usd IS NOT NULL OR (input_tokens IS NULL
            AND output_tokens IS NULL)) THEN coalesce(sum(cost_usd), 0.0) END AS cost_usd
        FROM attempts GROUP BY run_id) a ON a.run_id = r.run_id""",
]

# Version 8: an attempt a cancel cut off in flight (the server may have read and billed
# it) is a row with ``cancelled`` true and no kind, left out of every failure rate;
# every other row, those from before version 8 included, is false.
_V8: Final = ["ALTER TABLE attempts ADD COLUMN cancelled BOOLEAN DEFAULT false"]

# Version 9: an attempt whose answer reported no usage has estimated tokens (priced like
# reported ones, so a cost budget binds); this says which. NULL in older rows: reported.
_V9: Final = [
    "ALTER TABLE attempts ADD COLUMN usage_estimated BOOLEAN",
]

# Version 10: what each scorer of a sweep said of each run (``hn.sweep(scorers=...)``),
# keyed by run and scorer, tagged with the scorer's version: ``value`` in [0, 1] (NULL
# when not scored), ``error`` when the scorer raised, ``infra_failure`` (and the
# outcome or error kind as ``infra_kind``) for a run that ended for reasons of
# infrastructure and was not scored. The run's sample is kept here (``sample_id``).
# Timestamps naive UTC, as in every other table.
_V10: Final = [
    """CREATE TABLE scores (
        sweep_id VARCHAR, run_id VARCHAR NOT NULL, sample_id VARCHAR,
        scorer VARCHAR NOT NULL, scorer_version VARCHAR NOT NULL, value DOUBLE,
        explanation VARCHAR, error VARCHAR, infra_failure BOOLEAN NOT NULL,
        infra_kind VARCHAR, scored_at TIMESTAMP, PRIMARY KEY (run_id, scorer))""",
]

# Version 11: a sweep run's place in its sweep (sample, the sweep's name for its
# provider, repeat) and its sample as JSON (input, target, id, metadata), written when
# the run ends, so ``hn.sweep(sweep_id=...)`` again runs only the slots not finished
# and ``hn.rescore`` rebuilds each ``Sample``; ``files_cut`` lists what the caps left
# out. ``run_files``: the run's final workspace files (``content``; a symlink as its
# ``link`` target, never followed), for file and command scorers later.
_V11: Final = [
    """CREATE TABLE sweep_runs (
        sweep_id VARCHAR NOT NULL, run_id VARCHAR NOT NULL, sample_id VARCHAR NOT NULL,
        provider VARCHAR NOT NULL, repeat INTEGER NOT NULL, sample VARCHAR,
        files_cut VARCHAR, "at" TIMESTAMP, PRIMARY KEY (run_id))""",
    """CREATE TABLE run_files (
        run_id VARCHAR NOT NULL, path VARCHAR NOT NULL, link VARCHAR, content BLOB,
        size BIGINT, PRIMARY KEY (run_id, path))""",
]

# Version 12: MCP tool servers. A tool row names the server that served its tool
# (``server``; NULL for built-in and ``@hn.tool`` tools) and how an MCP call failed
# (``error_kind``: an ``MCPErrorKind``; NULL otherwise). ``mcp_servers``: what each
# server of a run offered, as a snapshot: its transport, the scrubbed command line or
# URL (``target``), the sandbox a stdio server ran under, its tools as JSON and their
# hash. Keyed by (run, server, tools_hash): a resume that finds the same tools writes
# nothing new (the first snapshot, its time, stays); one that finds them changed adds
# a snapshot beside the first, so the record shows that the tools changed mid-run and
# when, rather than the last list overwriting what the model saw before. ``at`` is
# naive UTC, as in every other table (the readers give it tz-aware).
_V12: Final = [
    "ALTER TABLE tool_calls ADD COLUMN server VARCHAR",
    "ALTER TABLE tool_calls ADD COLUMN error_kind VARCHAR",
    """CREATE TABLE mcp_servers (
        run_id VARCHAR NOT NULL, server VARCHAR NOT NULL, transport VARCHAR NOT NULL,
        target VARCHAR, sandbox VARCHAR, tools JSON, tools_hash VARCHAR NOT NULL,
        "at" TIMESTAMP, PRIMARY KEY (run_id, server, tools_hash))""",
]

# Version 13: typed answers (``TaskContract(output=T)``, ``hn.ask(output=T)``). An
# attempt of a typed call says the mode it asked in (``output_mode``: ``native``,
# ``tool``, ``prompted``; NULL for an untyped call and for rows from before version 13)
# and, when its answer came but could not be used (``kind`` one of ``OutputFailureKind``),
# that answer's raw text (``answer``: scrubbed, clipped to ``_rows.MAX_ANSWER_CHARS``).
# A run row says the mode the run ended in (``output_mode``) and its validated answer as
# JSON text (``output``: scrubbed; NULL when there is none, or when it was larger than
# ``_rows.MAX_OUTPUT_BYTES``, which an ``output_cut`` marker then says). Both are passed
# through the ``runs`` view, last.
_V13: Final = [
    "ALTER TABLE attempts ADD COLUMN output_mode VARCHAR",
    "ALTER TABLE attempts ADD COLUMN answer VARCHAR",
    "ALTER TABLE run_rows ADD COLUMN output_mode VARCHAR",
    "ALTER TABLE run_rows ADD COLUMN output VARCHAR",
    "DROP VIEW runs",
    """CREATE VIEW runs AS SELECT
        r.run_id, r.task, r.workspace, r.provider, r.model, r.started_at, r.finished_at,
        r.outcome, coalesce(s.steps, 0)::INTEGER AS steps,
        coalesce(s.tokens, 0)::BIGINT AS tokens, r.schema_version, r.contract, r.policy,
        r.error, r.extras, greatest(r.updated_at, s.last_at) AS updated_at,
        CASE WHEN a.run_id IS NULL THEN 0.0 ELSE a.cost_usd END AS cost_usd, r.sweep_id,
        r.output_mode, r.output
    FROM run_rows r LEFT JOIN (
        SELECT run_id, count(*) AS steps, sum(tokens) AS tokens, max("at") AS last_at
        FROM steps GROUP BY run_id) s ON s.run_id = r.run_id
    LEFT JOIN (
        SELECT run_id, CASE WHEN bool_and(cost_usd IS NOT NULL OR (input_tokens IS NULL
            AND output_tokens IS NULL)) THEN coalesce(sum(cost_usd), 0.0) END AS cost_usd
        FROM attempts GROUP BY run_id) a ON a.run_id = r.run_id""",
]

# Version 14: a committed step's attempt and tool-call rows ride in its steps row as
# JSON text (``journal``: one statement per step) until the writer moves them into their
# tables in a batch (``_journal``): before any read, when enough are pending, when idle,
# before the file is handed over and at close; a file left with journals by a killed
# process is settled by its next writer (a read-only opener reads a settled copy).
_V14: Final = ["ALTER TABLE steps ADD COLUMN journal VARCHAR"]

# version -> statements that take a store from version-1 to version. Append only.
MIGRATIONS: Final[dict[int, list[str]]] = {
    1: _V1, 2: _V2, 3: _V3, 4: _V4, 5: _V5, 6: _V6, 7: _V7, 8: _V8, 9: _V9, 10: _V10,
    11: _V11, 12: _V12, 13: _V13, 14: _V14,
}  # fmt: skip

# Column order of each table (and of the ``runs`` view) at SCHEMA_VERSION, as the
# writers fill them.
COLUMNS: Final[dict[str, tuple[str, ...]]] = {
    "runs": (
        "run_id", "task", "workspace", "provider", "model", "started_at", "finished_at",
        "outcome", "steps", "tokens", "schema_version", "contract", "policy", "error",
        "extras", "updated_at", "cost_usd", "sweep_id", "output_mode", "output",
    ),
    "run_rows": (
        *(c.strip() for c in _RUN_ROW_COLUMNS.split(",")), "sweep_id", "output_mode", "output",
    ),
    "attempts": (
        "run_id", "step", "attempt", "provider", "model", "kind", "status",
        "retry_after_s", "latency_ms", "ttft_ms", "input_tokens", "output_tokens",
        "request_id", "fell_back", "error", "started_at", "base_url", "cost_usd",
        "cancelled", "usage_estimated", "output_mode", "answer",
    ),
    "steps": (
        "run_id", "step", "decision", "tool_calls", "tokens", "changed_workspace",
        "provider", "at", "checkpoint",
    ),
    "tool_calls": (
        "run_id", "step", "seq", "tool", "effect", "args", "idempotency_key", "status",
        "error_name", "error_code", "output_bytes", "at", "output", "sandbox", "server",
        "error_kind",
    ),
    "stalls": ("run_id", "step", "signal", "action", "detail", "at"),
    "markers": ("run_id", "kind", "detail", "at"),
    "scores": (
        "sweep_id", "run_id", "sample_id", "scorer", "scorer_version", "value",
        "explanation", "error", "infra_failure", "infra_kind", "scored_at",
    ),
    "sweep_runs": (
        "sweep_id", "run_id", "sample_id", "provider", "repeat", "sample", "files_cut", "at",
    ),
    "run_files": ("run_id", "path", "link", "content", "size"),
    "mcp_servers": (
        "run_id", "server", "transport", "target", "sandbox", "tools", "tools_hash", "at",
    ),
}  # fmt: skip


def quote(name: str) -> str:
    """An identifier quoted for DuckDB (``at`` is a keyword)."""
    return '"' + name.replace('"', '""') + '"'


def ensure_schema(con: duckdb.DuckDBPyConnection, path: str, *, functions: bool = True) -> int:
    """Create or migrate the schema in one transaction; return the version found.

    Raises:
        StoreError: kind ``newer`` for a store written by a newer harnessnb, kind
            ``foreign`` for a database that is not a harnessnb store (see
            ``stored_version``).
    """
    found = stored_version(con, path, functions=functions)
    if found == SCHEMA_VERSION:
        return found
    con.execute("BEGIN TRANSACTION")
    try:
        # Re-read inside the transaction: the check above ran outside it.
        found = stored_version(con, path)
        now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        for version in range(found + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version]:
                con.execute(statement)
            con.execute("INSERT INTO schema_version VALUES (?, ?)", [version, now])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return found


# What makes a database a harnessnb store: the version table with its two columns,
# beside the attempts table version 1 made. Anything else holding a table or a view
# belongs to another program.
_MARKER_COLUMNS: Final = [("version",), ("applied_at",)]


def stored_version(con: duckdb.DuckDBPyConnection, path: str, *, functions: bool = True) -> int:
    """The schema version of the open database: 0 when it holds nothing yet.

    Reads only, so it may run on a read-only connection. Checks the catalog first
    (``check_catalog``): a file holding objects of its own is refused, its rows unread.

    Raises:
        StoreError: kind ``foreign`` for a database that holds tables or views but no
            harnessnb schema marker (it is left as it was); kind ``newer`` for a store
            written by a newer harnessnb.
    """
    names = {
        (row[0], row[1])
        for row in con.execute(
            "SELECT schema_name, table_name FROM duckdb_tables() "
            "WHERE database_name = current_database() AND NOT internal AND NOT temporary "
            "UNION ALL SELECT schema_name, view_name FROM duckdb_views() "
            "WHERE database_name = current_database() AND NOT internal AND NOT temporary"
        ).fetchall()
    }
    if not names:
        check_catalog(con, path, 0, functions=functions)  # no macro or sequence either
        return 0
    marker = con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() "
        "AND schema_name = 'main' AND table_name = 'schema_version' ORDER BY column_index"
    ).fetchall()
    if marker != _MARKER_COLUMNS or ("main", "attempts") not in names:
        raise StoreError(
            f"{path} is a DuckDB database but not a harnessnb store (it holds other "
            "tables and no harnessnb schema marker); it was left untouched: pass another "
            "path",
            kind="foreign",
            path=path,
        )
    check_catalog_table(con, path, None, "schema_version")
    row = con.execute("SELECT max(version) FROM schema_version").fetchone()
    found = int(row[0]) if row and row[0] is not None else 0
    if found > SCHEMA_VERSION:
        raise StoreError(
            f"the store {path} has schema version {found}, newer than the {SCHEMA_VERSION} "
            "this harnessnb understands; upgrade harnessnb to open it",
            kind="newer",
            path=path,
        )
    check_catalog(con, path, found, functions=functions)
    return found


# Every object a database holds that a query could run or name: its tables, views,
# indexes, sequences, macros, types and schemas, each as (kind, schema, name) -> SQL.
# Reading the catalog binds nothing, so it runs none of the file's SQL.
_CATALOG: Final = """
    SELECT 'table', schema_name, table_name, sql FROM duckdb_tables()
        WHERE database_name = $db AND NOT internal AND NOT temporary
    UNION ALL SELECT 'view', schema_name, view_name, sql FROM duckdb_views()
        WHERE database_name = $db AND NOT internal AND NOT temporary
    UNION ALL SELECT 'index', schema_name, index_name, sql FROM duckdb_indexes()
        WHERE database_name = $db
    UNION ALL SELECT 'sequence', schema_name, sequence_name, sql FROM duckdb_sequences()
        WHERE database_name = $db
    UNION ALL SELECT 'schema', schema_name, schema_name, sql FROM duckdb_schemas()
        WHERE database_name = $db AND NOT internal
"""
# Macros (which shadow built-in functions of the same name: a macro ``sum`` in the file
# would change what our ``runs`` view computes) and types. Listing them scans every
# built-in function (20-60 ms), so a caller that checked this file already may skip it.
_FUNCTIONS: Final = """
    UNION ALL SELECT function_type, schema_name, function_name, macro_definition
        FROM duckdb_functions() WHERE database_name = $db AND NOT internal
    UNION ALL SELECT 'type', schema_name, type_name, NULL FROM duckdb_types()
        WHERE database_name = $db AND NOT internal
"""

_Catalog = dict[tuple[str, str, str], str | None]


def _catalog(con: duckdb.DuckDBPyConnection, database: str, functions: bool = True) -> _Catalog:
    query = _CATALOG + (_FUNCTIONS if functions else "")
    rows = con.execute(query, {"db": database}).fetchall()
    return {(str(kind), str(schema), str(name)): sql for kind, schema, name, sql in rows}


@functools.cache
def _reference(version: int) -> _Catalog:
    """The catalog the migrations make up to ``version``, built in memory."""
    con = connect(":memory:")
    try:
        for step in range(1, version + 1):
            for statement in MIGRATIONS[step]:
                con.execute(statement)
        return _catalog(con, "memory")
    finally:
        con.close()


def check_catalog(
    con: duckdb.DuckDBPyConnection,
    path: str,
    version: int,
    database: str | None = None,
    *,
    functions: bool = True,
) -> None:
    """Refuse a database whose objects are not exactly those of a harnessnb store at
    ``version``: a view, macro, sequence, index or type of its own, or a table or view
    of ours whose SQL differs (a generated column, a default, a rewritten ``runs``).
    ``database`` is an attached database's name (the current one by default);
    ``functions=False`` skips macros and types (for a file this process checked whole).

    Raises:
        StoreError: kind ``foreign``, naming the object; nothing of the file was read.
    """
    if database is None:
        row = con.execute("SELECT current_database()").fetchone()
        database = str(row[0]) if row else "memory"
    expected = _reference(version)
    ours = {(schema, name) for _, schema, name in expected}
    found = _catalog(con, database, functions)
    for key, sql in sorted(found.items()):
        kind, schema, name = key
        if key in expected and sql == expected[key]:
            continue
        if kind == "table" and (schema, name) not in ours:
            continue  # a table of the user's own: data, which no query of ours names
        what = "is not the one harnessnb makes" if key in expected else "is not harnessnb's"
        raise _hostile(path, f"its {kind.replace('_', ' ')} {schema}.{name} {what}")
    missing = sorted(set(expected) - set(found))
    if missing:
        kind, schema, name = missing[0]
        raise _hostile(path, f"it lacks the {kind} {schema}.{name}")


def check_catalog_table(
    con: duckdb.DuckDBPyConnection, path: str, database: str | None, table: str
) -> None:
    """Refuse the database unless its table ``main.<table>`` is exactly harnessnb's
    (no generated column or default of its own): checked before it is first read."""
    found = con.execute(
        "SELECT sql FROM duckdb_tables() WHERE database_name = coalesce($db, current_database()) "
        "AND schema_name = 'main' AND table_name = $table",
        {"db": database, "table": table},
    ).fetchone()
    if found is None or found[0] != _reference(SCHEMA_VERSION)[("table", "main", table)]:
        raise _hostile(path, f"its table main.{table} is not the one harnessnb makes")


def _hostile(path: str, why: str) -> StoreError:
    return StoreError(
        f"{path} is not a harnessnb store as harnessnb writes it ({why}); a store file "
        "is data, so it was refused and nothing of it was read: use a store harnessnb "
        "made, or copy its tables into a new one",
        kind="foreign",
        path=path,
    )


def migrated_copy(path: str) -> duckdb.DuckDBPyConnection:
    """An in-memory copy of the read-only store at ``path``, migrated to this schema."""
    con = connect(":memory:", attach=True)
    try:
        con.execute("SET threads = 1")
        literal = "'" + path.replace("'", "''") + "'"
        con.execute(f"ATTACH {literal} AS harnessnb_source (READ_ONLY)")
        con.execute("SET enable_external_access = false")  # for good: it cannot come back
        check_catalog_table(con, path, "harnessnb_source", "schema_version")
        row = con.execute("SELECT max(version) FROM harnessnb_source.schema_version").fetchone()
        check_catalog(
            con, path, int(row[0]) if row and row[0] is not None else 0, "harnessnb_source"
        )
        con.execute("COPY FROM DATABASE harnessnb_source TO memory")
        con.execute("DETACH harnessnb_source")
        ensure_schema(con, path)
    except BaseException:
        con.close()
        raise
    return con
