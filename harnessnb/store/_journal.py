"""The step journal (schema 14): a step's record in one statement, settled in batches.

A committed step is one INSERT: its steps row carries its attempt and tool-call rows
as JSON text (``steps.journal``, written by ``Batch``), because DuckDB charges
0.3-0.9 ms a statement whatever its size. The connection keeps those rows in memory
too (``Journal``) and ``settle`` moves them into their tables, many steps at once, in
one transaction that also clears the journals: when enough steps wait
(``JOURNAL_MAX``), when the writer has been idle ``JOURNAL_IDLE_S``, before any read
of the file by this process (every reader borrows the connection), before an op that
reads or overwrites rows, before the file is handed to another process and at close.

A process killed before it settled leaves journals in the file: whoever next opens it
for writing settles them first (``recover``: parsed from the file, so every row lands
exactly once: clearing a journal commits with its rows); a read-only opener reads a
settled in-memory copy (``journal_left`` tells it to). The tables and their readers
never show a journal.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Final

import duckdb

from ..rules._errors import StoreError
from ._batch import APPEND_COLUMNS, JOURNALED, Journal, append_rows

__all__ = ["JOURNAL_IDLE_S", "JOURNAL_MAX", "journal_left", "materialize", "recover", "settle"]

# Steps waiting in journals before a write settles them (in its own transaction).
JOURNAL_MAX: Final = 32
# The writer idle this long with steps waiting settles them (off the critical path).
JOURNAL_IDLE_S: Final = 0.05
# The columns stored as TIMESTAMP among the journaled tables' (JSON carries them as text).
_TIMES: Final = frozenset({"at", "started_at"})


def materialize(
    con: duckdb.DuckDBPyConnection,
    journal: Journal,
    appenders: dict[str, duckdb.Appender] | None = None,
) -> None:
    """Move ``journal``'s rows into their tables and clear those steps' journals, in
    the caller's transaction (``journal`` itself is left for the caller to clear once
    that committed). A step's tool-call rows replace any the table holds for that step
    (an intent row, or rows left by a step begun before a crash), as its commit would."""
    if not journal:
        return
    tools = journal.rows.get("tool_calls")
    if tools:
        runs, steps = zip(*sorted({(values[0], values[1]) for values in tools}), strict=True)
        con.execute(
            "DELETE FROM tool_calls USING (SELECT unnest(?::VARCHAR[]) AS rid, unnest(?::"
            "INTEGER[]) AS s) v WHERE tool_calls.run_id = v.rid AND tool_calls.step = v.s",
            [list(runs), list(steps)],
        )
    for table, rows in journal.rows.items():
        append_rows(con, table, rows, appenders)
    runs, steps = zip(*journal.keys, strict=True)
    con.execute(
        "UPDATE steps SET journal = NULL FROM (SELECT unnest(?::VARCHAR[]) AS rid, "
        "unnest(?::INTEGER[]) AS s) v WHERE steps.run_id = v.rid AND steps.step = v.s",
        [list(runs), list(steps)],
    )


def settle(
    con: duckdb.DuckDBPyConnection,
    journal: Journal,
    appenders: dict[str, duckdb.Appender] | None = None,
) -> None:
    """``materialize`` in a transaction of its own; ``journal`` emptied once committed."""
    if not journal:
        return
    con.execute("BEGIN TRANSACTION")
    try:
        materialize(con, journal, appenders)
        con.execute("COMMIT")
    except BaseException:
        if appenders:
            for appender in appenders.values():
                appender.clear()
        con.execute("ROLLBACK")
        raise
    journal.clear()


def journal_left(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the file holds journals no writer settled (a process killed first)."""
    return (
        con.execute("SELECT 1 FROM steps WHERE journal IS NOT NULL LIMIT 1").fetchone() is not None
    )


def recover(con: duckdb.DuckDBPyConnection, path: str) -> int:
    """Settle the journals left in the file; return how many steps had one.

    Raises:
        StoreError: ``foreign`` for a journal harnessnb did not write (nothing written).
    """
    found = con.execute(
        "SELECT run_id, step, journal FROM steps WHERE journal IS NOT NULL"
    ).fetchall()
    journal = Journal()
    for run_id, step, text in found:
        journal.keys.append((run_id, step))
        try:
            for table, rows in json.loads(text).items():
                if table in JOURNALED:
                    journal.rows.setdefault(table, []).extend(_decode(table, r) for r in rows)
        except (ValueError, TypeError, AttributeError, RecursionError) as exc:
            raise StoreError(
                f"the store {path} is not as harnessnb writes it (the journal of run "
                f"{run_id!r} step {step} is not one harnessnb wrote: {type(exc).__name__}); "
                "it was left as it is",
                kind="foreign",
                path=path,
            ) from exc
    settle(con, journal)
    return len(found)


def _decode(table: str, values: list[Any]) -> tuple[Any, ...]:
    """A journaled row as its table's tuple: times parsed, later columns NULL."""
    columns = APPEND_COLUMNS[table]
    if not isinstance(values, list) or len(values) > len(columns):
        raise TypeError(f"a {table} row is a list of at most {len(columns)} values")
    values = values + [None] * (len(columns) - len(values))
    return tuple(
        dt.datetime.fromisoformat(v) if c in _TIMES and isinstance(v, str) else v
        for c, v in zip(columns, values, strict=True)
    )
