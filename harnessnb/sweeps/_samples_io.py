"""``hn.samples``: a list of ``Sample`` from a CSV or JSONL file, a DataFrame or dicts.

The columns (a JSONL line's keys, a dict's keys):

- ``input`` (required): the task text.
- ``target``: what a scorer compares the answer with (an empty CSV cell: none).
- ``id``: the sample's id (default: derived from ``input``); ids are unique.
- ``metadata``: a JSON object (in a CSV cell, its JSON text).
- ``files``: relative path -> text, put in the run's workspace copy (JSONL and dicts
  only: a CSV cell is no place for files).
- any other column: kept in ``metadata`` under its name.

A CSV is read with the csv module, not pandas: every cell stays the text it was (pandas
would read a target ``007`` as the number 7, an empty cell as NaN), a line number is
known for each row (a quoted cell may span lines) and ``import harnessnb`` stays light.
A file is read a line at a time, no line longer than ``MAX_LINE_CHARS`` (1 Mi
characters: a longer one is refused naming it, not read whole; a CSV cell is also held
to the csv module's field limit, 128 KiB); JSON nested too deeply for the parser or an
integer of too many digits is refused naming its row, as bad JSON is.
An id or target given as a whole number (JSONL, a DataFrame column) is taken as its
decimal text; any other kind is refused rather than guessed at.
"""

from __future__ import annotations

import csv
import json
import numbers
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO, TypeAlias

from ..rules._errors import ConfigError
from ..rules._text import shorten
from ._sample import Sample

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["MAX_LINE_CHARS", "SampleSource", "samples"]

# What ``hn.samples`` reads: a file's path, a DataFrame, or rows as dicts.
SampleSource: TypeAlias = "str | os.PathLike[str] | pd.DataFrame | Iterable[Mapping[str, Any]]"

_COLUMNS = ("input", "target", "id", "metadata", "files")
_JSONL_SUFFIXES = (".jsonl", ".ndjson")
MAX_LINE_CHARS: Final = 1 << 20
"""The longest line of a samples file (characters): a longer one is refused naming it."""
# A row as read: where it stands ("line 3", "row 2") and its cells.
_Row = tuple[str, Mapping[str, Any]]


def samples(source: SampleSource) -> list[Sample]:
    """The samples of a CSV or JSONL file, a pandas DataFrame or an iterable of dicts.

    Args:
        source: A path to a ``.csv`` or ``.jsonl`` (``.ndjson``) file, a DataFrame, or
            dicts. Columns: ``input`` (required), ``target``, ``id``, ``metadata`` (a
            JSON object; in a CSV its JSON text), ``files`` (JSONL and dicts only:
            relative path -> text); any other column goes into ``metadata``.

    Returns:
        One ``Sample`` per row, in order.

    Raises:
        ConfigError: the file is missing, empty or of another kind; the ``input``
            column is missing (the columns found are named); a row is bad (its 1-based
            line in a file, its row otherwise, and what is wrong); two rows share an id
            (both named).
    """
    rows: Iterable[_Row]
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        rows, where = _file_rows(path), str(path)
    elif _is_frame(source):
        rows, where = _frame_rows(source), "the DataFrame"
    elif isinstance(source, Iterable) and not isinstance(source, (bytes, Mapping)):
        rows, where = _dict_rows(source), "the rows given"
    else:
        kind = type(source).__name__
        raise ConfigError(f"hn.samples: give a CSV or JSONL path, a DataFrame or dicts, not {kind}")
    found = _unique([(at, _sample(at, row)) for at, row in rows])
    if not found:
        raise ConfigError(f"hn.samples: {where} holds no samples")
    return found


def _is_frame(source: Any) -> bool:
    """A pandas DataFrame, known without importing pandas (``import harnessnb`` is light)."""
    return any(
        cls.__name__ == "DataFrame" and cls.__module__.startswith("pandas")
        for cls in type(source).__mro__
    )


def _unique(found: list[tuple[str, Sample]]) -> list[Sample]:
    first: dict[str, str] = {}
    for at, sample in found:
        if sample.id in first:
            raise ConfigError(
                f"hn.samples: {at} has id {sample.id!r}, as {first[sample.id]} does "
                "(ids must be unique; a sample given no id takes one from its input)"
            )
        first[sample.id] = at
    return [sample for _, sample in found]


# ------------------------------------------------------------------ reading rows


def _file_rows(path: Path) -> list[_Row]:
    suffix = path.suffix.lower()
    if suffix != ".csv" and suffix not in _JSONL_SUFFIXES:
        raise ConfigError(f"hn.samples: {path} is not a .csv, .jsonl or .ndjson file")
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # a FIFO would block, a device not end
            raise ConfigError(f"hn.samples: {path} is not a regular file")
        # -sig: a spreadsheet's BOM dropped. A CSV's lines end at \n, \r or \r\n
        # (str.splitlines would also cut at U+2028, \x1c...); a JSON line at \n only
        # (U+2028 and \x85 may stand raw in a JSON string).
        newline = "" if suffix == ".csv" else "\n"
        with path.open(encoding="utf-8-sig", newline=newline) as handle:
            lines = _capped_lines(handle, path)
            return _csv_rows(lines, path) if suffix == ".csv" else _jsonl_rows(lines, path)
    except FileNotFoundError as exc:
        raise ConfigError(f"hn.samples: no such file: {path}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"hn.samples: {path} is not UTF-8 text: {exc.reason}") from exc
    except OSError as exc:
        raise ConfigError(f"hn.samples: cannot read {path}: {exc.strerror or exc}") from exc


def _capped_lines(handle: TextIO, path: Path) -> Iterator[str]:
    """The file's lines as read, none held longer than ``MAX_LINE_CHARS``: a longer one
    (a 1 GB file with no line end) is refused naming its line, not read whole."""
    number = 0
    while line := handle.readline(MAX_LINE_CHARS + 1):
        number += 1
        if len(line.rstrip("\r\n")) > MAX_LINE_CHARS:
            raise ConfigError(
                f"hn.samples: {path} line {number} is longer than {MAX_LINE_CHARS} "
                "characters (the cap on a line)"
            )
        yield line


def _csv_rows(lines: Iterator[str], path: Path) -> list[_Row]:
    reader = csv.reader(lines)
    rows: list[_Row] = []
    header: list[str] | None = None
    line = 1
    try:
        for cells in reader:
            at, line = f"{path} line {line}", reader.line_num + 1
            if not any(cell.strip() for cell in cells):
                continue  # a blank line
            if header is None:
                header = _header(cells, path)
            elif len(cells) != len(header):
                raise ConfigError(
                    f"hn.samples: {at}: {len(cells)} cells, the header has {len(header)}"
                )
            else:
                rows.append((at, _csv_cells(at, dict(zip(header, cells, strict=True)))))
    except csv.Error as exc:
        raise ConfigError(f"hn.samples: {path} line {reader.line_num}: {exc}") from exc
    if header is None:
        raise ConfigError(f"hn.samples: {path} is empty")
    return rows


def _header(cells: list[str], path: Path) -> list[str]:
    names = [cell.strip() for cell in cells]
    doubled = sorted({n for n in names if names.count(n) > 1})
    if doubled:
        raise ConfigError(f"hn.samples: {path}: the header names {doubled} more than once")
    if "input" not in names:
        raise ConfigError(f"hn.samples: {path} has no 'input' column (columns: {names})")
    if "files" in names:
        raise ConfigError(
            f"hn.samples: {path}: a CSV cannot carry 'files' (use JSONL or a list of dicts)"
        )
    return names


def _csv_cells(at: str, cells: dict[str, str]) -> dict[str, Any]:
    """A CSV row's cells: an empty target, id or metadata is none; metadata is JSON text."""
    row: dict[str, Any] = {k: v for k, v in cells.items() if k not in _COLUMNS[1:] or v.strip()}
    if "metadata" in row:
        row["metadata"] = _json(at, "metadata is not JSON", row["metadata"])
    return row


def _jsonl_rows(lines: Iterator[str], path: Path) -> list[_Row]:
    rows: list[_Row] = []
    blank = True
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        at, blank = f"{path} line {number}", False
        row = _json(at, "not JSON", line)
        if not isinstance(row, dict):
            raise ConfigError(f"hn.samples: {at}: a JSON object, not {_json_kind(row)}")
        rows.append((at, row))
    if blank:
        raise ConfigError(f"hn.samples: {path} is empty")
    return rows


def _json(at: str, what: str, text: str) -> Any:
    """``text`` parsed, or a ``ConfigError`` naming the row: bad JSON, nesting too deep
    for the parser (``RecursionError``), an integer of too many digits (``ValueError``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"hn.samples: {at}: {what}: {exc}") from exc
    except RecursionError as exc:
        raise ConfigError(f"hn.samples: {at}: {what}: nested too deeply") from exc
    except ValueError as exc:
        raise ConfigError(f"hn.samples: {at}: {what}: {exc}") from exc


def _frame_rows(frame: Any) -> list[_Row]:
    names = [str(c) for c in frame.columns]
    if "input" not in names:
        raise ConfigError(f"hn.samples: the DataFrame has no 'input' column (columns: {names})")
    import pandas as pd  # the caller has a DataFrame: pandas is there already

    def missing(value: Any) -> bool:  # None, NaN, pd.NA, NaT (not a list or dict cell)
        return value is None or (pd.api.types.is_scalar(value) and bool(pd.isna(value)))

    rows: list[_Row] = []
    for i, record in enumerate(frame.to_dict("records"), start=1):
        # A missing cell is no value: left out (of metadata too), as a JSONL line leaves it.
        kept = {str(k): v for k, v in record.items() if not missing(v)}
        rows.append((f"row {i}", {"input": None, **kept}))
    return rows


def _dict_rows(source: Iterable[Any]) -> Iterator[_Row]:
    for i, row in enumerate(source, start=1):
        if not isinstance(row, Mapping):
            raise ConfigError(f"hn.samples: row {i}: a dict, not {type(row).__name__}")
        yield f"row {i}", row


def _json_kind(value: Any) -> str:
    return {list: "an array", str: "a string", type(None): "null"}.get(type(value), "a number")


# ------------------------------------------------------------------ one row


def _sample(at: str, row: Mapping[str, Any]) -> Sample:
    if "input" not in row:
        raise ConfigError(f"hn.samples: {at}: no 'input' (keys: {sorted(map(str, row))})")
    metadata = row.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, Mapping):
        kind = type(metadata).__name__
        raise ConfigError(f"hn.samples: {at}: metadata must be a JSON object, not {kind}")
    extra = {str(k): v for k, v in row.items() if k not in _COLUMNS}
    both = sorted(set(extra) & set(map(str, metadata)))
    if both:
        raise ConfigError(f"hn.samples: {at}: {both} both a column and a key of metadata")
    files = row.get("files")
    if files is not None and not isinstance(files, Mapping):
        kind = type(files).__name__
        raise ConfigError(f"hn.samples: {at}: files must map relative paths to text, not {kind}")
    if files is not None and any("\x00" in str(name) for name in files):
        raise ConfigError(f"hn.samples: {at}: a file's path holds a NUL byte")
    input_ = _text(at, "input", row["input"])
    if input_ is None:
        raise ConfigError(f"hn.samples: {at}: input is empty")
    target, id_ = _text(at, "target", row.get("target")), _text(at, "id", row.get("id"))
    try:
        return Sample(input_, target, id=id_, metadata={**metadata, **extra}, files=files)
    except ConfigError as exc:
        raise ConfigError(f"hn.samples: {at}: {exc.message}") from exc


def _text(at: str, column: str, value: Any) -> str | None:
    """A cell as text: text as it is, a whole number as its digits, none as None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))  # an id 7, a target 42 (NumPy's integers too)
    shown = shorten(repr(value), 40)
    raise ConfigError(
        f"hn.samples: {at}: {column} must be text, not {type(value).__name__} {shown} "
        "(give it as a string)"
    )
