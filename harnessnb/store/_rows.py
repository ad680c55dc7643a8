"""Row building for the store: timestamps, JSON without secrets, batch inserts.

Everything here is pure except ``insert_rows``, which runs one INSERT for a batch.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from ..rules._errors import MAX_MESSAGE, StoreError
from ..rules._secrets import scrub, scrub_values, scrubber
from ..rules._text import clip, shorten
from ._row_types import ROW_TYPES
from ._schema import COLUMNS, quote

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_OUTPUT_BYTES",
    "OUTPUT_CUT",
    "SECRET_KEYS",
    "dumps",
    "from_ts",
    "insert_rows",
    "output_of",
    "row",
    "safe_value",
    "sanitize",
    "scrub_text",
    "stored_output",
    "to_ts",
]

# Header and field names whose values are credentials (compared lower-cased).
SECRET_KEYS: Final = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "api_key", "apikey"}
)

# An unusable answer's raw text (``attempts.answer``) is kept to this many characters
# (head and tail, ``clip``): enough to see why it failed, never a whole transcript.
MAX_ANSWER_CHARS: Final = 4_000
# A run's typed answer (``runs.output``, JSON text) is kept whole up to this many bytes
# of UTF-8; a larger one is not stored at all (a JSON text cut short is no longer JSON,
# and half an answer read back as the answer would be worse than none): the column is
# NULL and an ``output_cut`` marker says how large it was. The caller's
# ``result.output`` still has it.
MAX_OUTPUT_BYTES: Final = 1 << 20
# The marker kind that says so.
OUTPUT_CUT: Final = "output_cut"

# Up to this many rows a multi-row VALUES insert beats registering a DataFrame
# (measured in bench/store.py: a DataFrame costs ~1 ms to build and scan).
_VALUES_MAX_ROWS: Final = 64


def sanitize(value: Any, *, text: bool = True) -> Any:
    """A copy of ``value`` without credential keys at any depth.

    With ``text`` (errors, recordings) strings go through the one scrubber
    (``rules._secrets.scrub``); without it (checkpoints, tool arguments) only known
    secret values are removed (``scrub_values``) and the rest is kept verbatim, because
    resume must hand the model back what it saw. The set of secrets is read once for
    the whole value.
    """
    return _sanitize(value, scrubber(shapes=text))


def _sanitize(value: Any, clean: Callable[[str], str]) -> Any:
    # Leaves first, by exact type: most values are, and an ABC isinstance is slow.
    kind = type(value)
    if kind is str:
        return clean(value)
    if value is None or kind is int or kind is float or kind is bool:
        return value
    if kind is dict:  # the common containers by exact type: an ABC isinstance is slow
        return {
            k if type(k) is str else str(k): _sanitize(v, clean)
            for k, v in value.items()
            if (k if type(k) is str else str(k)).lower() not in SECRET_KEYS
        }
    if kind is list:
        return [_sanitize(v, clean) for v in value]
    if isinstance(value, Mapping):
        return {
            str(k): _sanitize(v, clean)
            for k, v in value.items()
            if str(k).lower() not in SECRET_KEYS
        }
    if isinstance(value, list | tuple):
        return [_sanitize(v, clean) for v in value]
    if isinstance(value, str):
        return clean(value)
    return value


def scrub_text(text: str) -> str:
    """``text`` through the one scrubber: secret values and token shapes ``[redacted]``."""
    return scrub(text)


def dumps(value: Any, *, text: bool = True) -> str | None:
    """JSON text of ``value`` with secrets removed (see ``sanitize``); None stays NULL.

    Text with a lone surrogate (``"\\ud800"`` in a server's JSON) is written with
    ASCII escapes instead: DuckDB holds only UTF-8, and the escapes read back exactly.
    """
    if value is None:
        return None
    clean = sanitize(value, text=text)
    out = json.dumps(clean, default=str, ensure_ascii=False)
    if not out.isascii() and _SURROGATE.search(out):
        out = json.dumps(clean, default=str, ensure_ascii=True)
    return out


# Code points UTF-8 cannot encode: half of a surrogate pair, alone.
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
# Integer columns and the range DuckDB holds in each (INTEGER unless named BIGINT).
_INT_COLUMNS: Final = frozenset(
    {"step", "attempt", "status", "input_tokens", "output_tokens", "tool_calls", "tokens",
     "seq", "schema_version"}
)  # fmt: skip
_BIGINT_COLUMNS: Final = frozenset({"output_bytes", "generation"})
_INT32: Final = 2**31
_INT64: Final = 2**63


def safe_value(column: str, value: Any) -> Any:
    """``value`` as DuckDB can hold it in ``column``: a lone surrogate in text becomes
    U+FFFD, and an integer past its column's range is NULL (unknown, not a wrong
    number). A provider's answer must never make a step's write fail."""
    kind = type(value)
    if kind is str:
        return _SURROGATE.sub("\ufffd", value) if not value.isascii() else value
    if kind is int:
        bound = _INT32 if column in _INT_COLUMNS else _INT64
        return value if -bound <= value < bound else None
    return value


def to_ts(value: Any) -> dt.datetime | None:
    """A naive UTC datetime (DuckDB TIMESTAMP) from Unix seconds or a datetime."""
    if value is None:
        return None
    if type(value).__name__ == "datetime64":  # numpy's (a frame's column ``.to_numpy()``)
        value = value.astype("datetime64[us]").item()  # naive, as stored; NaT: None
        if value is None:
            return None
    if isinstance(value, dt.datetime):
        stamp: dt.datetime = value
        if stamp.tzinfo is not None:
            stamp = stamp.astimezone(dt.UTC).replace(tzinfo=None)
        return stamp
    return dt.datetime.fromtimestamp(float(value), dt.UTC).replace(tzinfo=None)


def from_ts(value: dt.datetime | None) -> float | None:
    """Unix seconds from a naive UTC datetime read back from DuckDB."""
    if value is None:
        return None
    return value.replace(tzinfo=dt.UTC).timestamp()


# Per-column conversion from the caller's value to the stored one.
_JSON_COLUMNS: Final = frozenset(
    {"args", "contract", "policy", "extras", "checkpoint", "sample", "files_cut", "tools"}
)
_TS_COLUMNS: Final = frozenset({"at", "started_at", "finished_at", "updated_at", "scored_at"})


def _convert(table: str, column: str, value: Any) -> Any:
    if value is None or _missing(value):
        return None
    return _converter(column, table)(column, value)


def _error(column: str, value: Any) -> Any:
    if isinstance(value, str):  # an attempt's message: kept to a few KB like any error
        return safe_value(column, clip(scrub_text(value), MAX_MESSAGE))
    return safe_value(column, dumps(value))


def _json(column: str, value: Any) -> Any:
    return safe_value(column, value) if isinstance(value, str) else dumps(value, text=False)


def _plain(column: str, value: Any) -> Any:
    if isinstance(value, bytes):  # a BLOB (a kept file's content) as it is
        return value
    if not isinstance(value, str | int | float | bool):
        # Enums (ProviderErrorKind, Effect) and the like are stored by value.
        return safe_value(column, getattr(value, "value", str(value)))
    return safe_value(column, value)


def _answer(column: str, value: Any) -> Any:
    # An unusable answer's raw text: a model's words, scrubbed, then clipped.
    text = value if isinstance(value, str) else str(value)
    return safe_value(column, clip(scrub_text(text), MAX_ANSWER_CHARS))


def _output(column: str, value: Any) -> Any:
    return stored_output(value)[0]


def stored_output(value: Any) -> tuple[str | None, int]:
    """A run's typed answer as ``runs.output`` holds it, and its size in bytes.

    ``value`` is JSON text (what ``finish_run(output=...)`` takes), or a value JSON
    can encode (a dict, a list...). Its strings, keys included, go through the one
    scrubber (token shapes too: the answer is a model's text); text nothing was
    scrubbed from is kept exactly as given. The stored text is None when the answer is
    larger than ``MAX_OUTPUT_BYTES`` (the size says by how much).

    Raises:
        StoreError: ``query`` when ``value`` is text that is not JSON (or nested past
            what the parser takes), or a value JSON cannot encode; nothing is written.
    """
    try:
        if isinstance(value, str):
            text = value
            parsed = json.loads(value)
        else:
            text = json.dumps(value, ensure_ascii=False)
            parsed = json.loads(text)
        clean = _scrub_json(parsed, scrubber(shapes=True))
        if clean != parsed:
            text = json.dumps(clean, ensure_ascii=False)
    except (ValueError, TypeError, RecursionError) as exc:
        raise StoreError(
            "a run's output is its typed answer as JSON text; this is not JSON "
            f"({type(exc).__name__}: {shorten(str(exc), 200)}), so nothing was written",
            kind="query",
        ) from exc
    text = safe_value("output", text)
    size = len(text.encode("utf-8"))
    return (text if size <= MAX_OUTPUT_BYTES else None), size


def output_of(run_id: str, output: Any, at: float) -> tuple[str | None, list[tuple[Any, ...]]]:
    """A run's typed answer as stored (``stored_output``; None stays None) and, when it
    was too large to store, the ``markers`` row (``OUTPUT_CUT``) that says so."""
    if output is None:
        return None, []
    text, size = stored_output(output)
    if text is not None:
        return text, []
    detail = (
        f"the run's typed answer was {size:,} bytes of JSON, over the {MAX_OUTPUT_BYTES:,} "
        "the store keeps: runs.output is NULL (the run's result.output has it)"
    )
    return None, [row("markers", {"run_id": run_id, "kind": OUTPUT_CUT, "detail": detail,
                                  "at": at})]  # fmt: skip


def _scrub_json(value: Any, clean: Callable[[str], str]) -> Any:
    """A parsed JSON value with every string (keys too) through ``clean``."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {clean(k): _scrub_json(v, clean) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub_json(v, clean) for v in value]
    return value


def _task(column: str, value: Any) -> Any:
    # The task as the contract column keeps it: known secret values out, the rest verbatim.
    return safe_value(column, scrub_values(value) if isinstance(value, str) else str(value))


def _converter(column: str, table: str) -> Callable[[str, Any], Any]:
    if column in _TS_COLUMNS:
        return lambda _, value: to_ts(value)
    if column == "error":
        return _error
    if column == "task":
        return _task
    if column == "answer":
        return _answer
    if column == "output" and table == "run_rows":
        return _output  # a tool call's output is kept verbatim (the model saw it)
    return _json if column in _JSON_COLUMNS else _plain


# Per table: (column, its converter) in column order, chosen once.
_CONVERTERS: Final = {
    table: tuple((c, _converter(c, table)) for c in columns) for table, columns in COLUMNS.items()
}


def row(table: str, values: Mapping[str, Any], **fixed: Any) -> tuple[Any, ...]:
    """The tuple for ``table`` in column order, from ``values`` then ``fixed`` overrides.

    Raises:
        StoreError: ``query`` naming a key of ``values`` that is no column of ``table``
            (a misspelling would otherwise be a NULL), or a required one (its row
            type's, ``_row_types``) that neither ``values`` nor ``fixed`` gives.
    """
    if not values.keys() <= _KNOWN[table] or not _REQUIRED[table] <= values.keys():
        _refuse(table, values, fixed)
    out: list[Any] = []
    for column, convert in _CONVERTERS[table]:
        value = fixed[column] if column in fixed else values.get(column)
        if value is None or (type(value) not in _PRESENT and _missing(value)):
            out.append(None)
        else:
            out.append(convert(column, value))
    return tuple(out)


# Types no value of which is missing (the common case, checked first).
_PRESENT: Final = frozenset({str, int, bool, dict, list})
# pandas' missing values by their types' names (pandas itself is not imported here).
_MISSING_TYPES: Final = frozenset({"NAType", "NaTType"})
# numpy's scalars that may be NaN or NaT (a frame's column ``.to_numpy()``), by name.
_NAN_TYPES: Final = frozenset({"float16", "float32", "float64", "longdouble", "datetime64"})


def _missing(value: Any) -> bool:
    """Whether ``value`` is a missing-value marker: a float NaN (numpy's too), ``pd.NA``,
    ``pd.NaT`` or numpy's ``NaT``.

    A row built from a DataFrame (``df.to_dict("records")``) has NaN where a value is
    missing, whatever the column; stored as it is, a text column would hold ``'nan'``
    (a failure kind ``nan`` in ``failure_rates``) and an integer column would refuse
    the row. Missing is NULL in every column.
    """
    kind = type(value)
    if kind is float or kind.__name__ in _NAN_TYPES:
        return bool(value != value)
    return kind.__name__ in _MISSING_TYPES


# The columns a row of each table may name, and those it must (``fixed`` aside).
_KNOWN: Final = {table: frozenset(columns) for table, columns in COLUMNS.items()}
_REQUIRED: Final = {
    table: frozenset(ROW_TYPES[table].__required_keys__) if table in ROW_TYPES else frozenset()
    for table in COLUMNS
}


def _refuse(table: str, values: Mapping[str, Any], fixed: Mapping[str, Any]) -> None:
    """Raise for the first key of ``values`` that is no column of ``table``, else for
    the first required column missing (unless ``fixed`` gives it)."""
    unknown = [str(k) for k in values if k not in _KNOWN[table]]
    if unknown:
        raise StoreError(
            f"{table} has no column {unknown[0]!r} (columns: {', '.join(COLUMNS[table])})",
            kind="query",
        )
    missing = sorted(_REQUIRED[table] - values.keys() - fixed.keys())
    if missing:
        raise StoreError(f"a {table} row needs its column {missing[0]!r}", kind="query")


@functools.lru_cache(maxsize=256)
def _values_sql(table: str, columns: tuple[str, ...], n: int) -> str:
    marks = "(" + ",".join("?" * len(columns)) + ")"
    return f"INSERT INTO {table} ({','.join(quote(c) for c in columns)}) VALUES " + ",".join(
        [marks] * n
    )


def insert_rows(
    con: duckdb.DuckDBPyConnection, table: str, rows: Sequence[tuple[Any, ...]]
) -> None:
    """Append ``rows`` (tuples in ``COLUMNS[table]`` order) in one statement.

    Small batches go as one multi-row VALUES statement; large ones as a DataFrame
    scanned by DuckDB, which is what makes 100k rows take milliseconds, not minutes.
    """
    if not rows:
        return
    columns = COLUMNS[table]
    if len(rows) <= _VALUES_MAX_ROWS:
        sql = _values_sql(table, columns, len(rows))
        con.execute(sql, [v for r in rows for v in r])
        return
    _insert_frame(con, table, columns, {c: [r[i] for r in rows] for i, c in enumerate(columns)})


def _insert_frame(
    con: duckdb.DuckDBPyConnection,
    table: str,
    columns: tuple[str, ...],
    data: Mapping[str, Any],
) -> None:
    import pandas as pd

    frame = pd.DataFrame(data)
    # Object columns that are all None scan as NULL, which casts to any column type.
    name = "_harnessnb_batch"
    con.register(name, frame)
    try:
        cols = ",".join(quote(c) for c in columns)
        con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {name}")
    finally:
        con.unregister(name)
