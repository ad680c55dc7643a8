"""One run's rows as the traces read them: ``read_run`` (``_traces`` makes the spans).

Times are kept exactly as stored, as integer nanoseconds since the epoch (DuckDB keeps
microseconds; a float of Unix seconds would round them), so a span's start is its row's
time to the nanosecond. A step's checkpoint is read only where a span needs it: the
model's id of each tool call (``tool_call_ids``), and the conversation when content
is asked for (``conversations``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final, Protocol

from ..rules._errors import StoreError

if TYPE_CHECKING:
    import duckdb

__all__ = ["Reading", "RunRows", "conversations", "ns", "read_run", "tool_call_ids"]

_EPOCH: Final = dt.datetime(1970, 1, 1)  # naive UTC, as the store keeps times
_TIME_COLUMNS: Final = frozenset({"at", "started_at", "finished_at", "updated_at"})
# The columns one of stalls and markers has and the other has not (read in one statement).
_STALL_ONLY: Final = frozenset({"step", "signal", "action"})
_MARKER_ONLY: Final = frozenset({"kind"})

_ATTEMPTS: Final = (
    "step, attempt, provider, model, kind, status, retry_after_s, latency_ms, ttft_ms, "
    "input_tokens, output_tokens, request_id, fell_back, error, started_at, base_url, "
    "cost_usd, cancelled, usage_estimated, output_mode, answer"
)
_TOOL_CALLS: Final = (
    "step, seq, tool, effect, args, idempotency_key, status, error_name, error_code, "
    'output_bytes, "at", output, sandbox, server, error_kind'
)


class Reading(Protocol):
    """What the traces read a store through: a ``Store`` or a ``CombinedStore``."""

    def _connection(self) -> AbstractContextManager[duckdb.DuckDBPyConnection]: ...


@dataclasses.dataclass(frozen=True)
class RunRows:
    """A run's rows: the run (``runs`` view, JSON columns parsed) and its attempts,
    tool calls, stalls and markers in their order, times as ``*_ns`` integers."""

    run: dict[str, Any]
    attempts: list[dict[str, Any]]
    tool_calls: list[dict[str, Any]]
    stalls: list[dict[str, Any]]
    markers: list[dict[str, Any]]
    # step -> its checkpoint state (parsed JSON), for the steps read (see module doc).
    checkpoints: dict[int, dict[str, Any]]

    @property
    def end_ns(self) -> int:
        """When the run ended, or (one that never finished: killed, still running) the
        last time any of its rows says."""
        if self.run["finished_at_ns"] is not None:
            return int(self.run["finished_at_ns"])
        times = [self.run["started_at_ns"], self.run["updated_at_ns"]]
        times += [a["end_ns"] for a in self.attempts]
        times += [c["at_ns"] for c in self.tool_calls]
        times += [r["at_ns"] for r in (*self.stalls, *self.markers)]
        return max(int(t) for t in times if t is not None)


def ns(value: dt.datetime | None) -> int | None:
    """Nanoseconds since the epoch of a naive UTC time read from DuckDB, exactly."""
    if value is None:
        return None
    return (value.replace(tzinfo=None) - _EPOCH) // dt.timedelta(microseconds=1) * 1000


def read_run(reader: Reading, run_id: str, *, content: bool = False) -> RunRows:
    """The rows of ``run_id``; ``content`` also reads every step's checkpoint.

    Raises:
        StoreError: ``missing`` when the store holds no such run.
    """
    with reader._connection() as con:
        # The run's own row, not the ``runs`` view: the view's sums over steps and
        # attempts (``_as_the_view``) come from the rows read here anyway, at a fifth
        # of the view's cost for one run.
        run = _rows(con, "SELECT * FROM run_rows WHERE run_id = ?", run_id)
        if not run:
            raise StoreError(f"no run {run_id!r} in this store", kind="missing")
        # No ORDER BY: a sort in DuckDB cost as much as its scan; the few rows of one
        # run are put in order here.
        attempts = _rows(con, f"SELECT {_ATTEMPTS} FROM attempts WHERE run_id = ?", run_id)
        tools = _rows(con, f"SELECT {_TOOL_CALLS} FROM tool_calls WHERE run_id = ?", run_id)
        # Stalls and markers, mostly none, in one statement (each costs its round trip).
        noted = _rows(
            con,
            "SELECT 'stall' AS row_of, * FROM stalls WHERE run_id = $1 UNION ALL BY NAME "
            "SELECT 'marker' AS row_of, * FROM markers WHERE run_id = $1",
            run_id,
        )
        which = "true" if content else "tool_calls > 0"
        steps = con.execute(
            f'SELECT step, tokens, "at", CASE WHEN {which} THEN checkpoint END '
            "FROM steps WHERE run_id = ?",
            [run_id],
        ).fetchall()
    stalls = sorted(_only(noted, "stall", _MARKER_ONLY), key=lambda r: (_when(r), r["step"] or 0))
    markers = sorted(_only(noted, "marker", _STALL_ONLY), key=_when)
    _as_the_view(run[0], attempts, steps)
    row = run[0]
    # A row written without a time (none is now; an old or hand-made file may hold one)
    # is placed at the run's start rather than dropped.
    base = row["started_at_ns"] or row["updated_at_ns"] or 0
    row["started_at_ns"] = base
    for attempt in attempts:
        elapsed = attempt["latency_ms"]
        start = attempt["started_at_ns"] = attempt["started_at_ns"] or base
        attempt["end_ns"] = start if elapsed is None else start + max(0, round(elapsed * 1e6))
    for timed in (*tools, *stalls, *markers):
        timed["at_ns"] = timed["at_ns"] or base
    attempts.sort(key=lambda a: (a["started_at_ns"], a["attempt"] or 0))
    tools.sort(key=lambda t: (t["step"], t["seq"]))
    for key in ("contract", "error", "extras"):
        row[key] = _json(row[key])
    checkpoints = {int(step): json.loads(state) for step, _, _, state in steps if state}
    return RunRows(row, attempts, tools, stalls, markers, checkpoints)


def tool_call_ids(rows: RunRows) -> dict[tuple[int, int], str]:
    """(step, seq) -> the id the model gave the call, from the step's checkpoint: the
    last assistant message with tool calls among the step's messages."""
    out: dict[tuple[int, int], str] = {}
    for step, state in rows.checkpoints.items():
        messages = state.get("messages", state.get("messages_delta")) or []
        for message in reversed(messages):
            calls = message.get("tool_calls") if isinstance(message, dict) else None
            if message.get("role") == "assistant" and calls:
                for seq, call in enumerate(calls, start=1):
                    if isinstance(call, dict) and call.get("id"):
                        out[(step, seq)] = str(call["id"])
                break
    return out


def conversations(rows: RunRows) -> dict[int, list[dict[str, Any]]]:
    """step -> the whole conversation after that step, rebuilt from the checkpoints
    (a full copy, or the messages from an index on): as ``loop/_conversation.py``'s
    ``replay_conversation`` reads them, step by step."""
    out: dict[int, list[dict[str, Any]]] = {}
    messages: list[dict[str, Any]] = []
    for step in sorted(rows.checkpoints):
        state = rows.checkpoints[step]
        if "messages" in state:
            messages = list(state["messages"])
        else:
            start = int(state.get("messages_from", len(messages)))
            messages = messages[:start] + list(state.get("messages_delta") or [])
        out[step] = messages
    return out


def _only(rows: list[dict[str, Any]], which: str, others: frozenset[str]) -> list[dict[str, Any]]:
    """The rows of ``which`` table among a ``UNION ALL BY NAME``'s, without the other
    table's columns (NULL in these rows)."""
    kept = [r for r in rows if r.get("row_of") == which]
    for r in kept:
        for column in (*others, "row_of"):
            r.pop(column, None)
    return kept


def _when(row: dict[str, Any]) -> tuple[bool, dt.datetime]:
    """A row's time as SQL orders it: one without a time last."""
    return row["at"] is None, row["at"] or _EPOCH


def _as_the_view(
    run: dict[str, Any], attempts: list[dict[str, Any]], steps: list[tuple[Any, ...]]
) -> None:
    """Give ``run`` (its ``run_rows`` row) the ``runs`` view's columns made from other
    tables, by the view's rules (store/_schema.py; a test holds them equal): ``steps``
    and ``tokens`` over its step rows, ``updated_at`` the later of its own and its last
    step's, ``cost_usd`` the attempts' sum (0.0 with none; NULL when one that used
    tokens is unpriced, so a total is never short of an unknown part)."""
    run["steps"] = len(steps)
    run["tokens"] = sum(tokens or 0 for _, tokens, _, _ in steps)
    times = [t for t in (run["updated_at"], *(at for _, _, at, _ in steps)) if t is not None]
    run["updated_at"] = max(times) if times else None
    run["updated_at_ns"] = ns(run["updated_at"])
    priced = all(
        a["cost_usd"] is not None or (a["input_tokens"] is None and a["output_tokens"] is None)
        for a in attempts
    )
    costs = [a["cost_usd"] for a in attempts if a["cost_usd"] is not None]
    run["cost_usd"] = (sum(costs) if costs else 0.0) if priced else None


def _rows(con: duckdb.DuckDBPyConnection, query: str, run_id: str) -> list[dict[str, Any]]:
    """The rows as dicts, each time column also as ``<name>_ns``."""
    cur = con.execute(query, [run_id])
    names = [d[0] for d in cur.description or []]
    timed = [(i, f"{name}_ns") for i, name in enumerate(names) if name in _TIME_COLUMNS]
    out = []
    for found in cur.fetchall():
        row = dict(zip(names, found, strict=True))
        for i, key in timed:
            row[key] = ns(found[i])
        out.append(row)
    return out


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)
