"""The row each store write takes: one TypedDict per written table, beside ``_schema``.

Each is field for field its table's columns in ``_schema.COLUMNS``
(``tests/test_store_rows.py`` holds them to the columns and to the column types). A
TypedDict is a dict at run time, so the write path builds no object, and mypy sees
every field a caller writes; ``_rows.row`` refuses a key that is no column, or a
required one missing, naming it (``StoreError(kind="query")``). ``run_id`` (and what a
write sets itself: a step's ``checkpoint``, an intent's ``status``...) is filled in by
the write. Timestamps are Unix seconds; JSON columns take values.
"""

# No ``from __future__ import annotations``: the runtime needs ``Required`` evaluated
# to know each row's required keys (``__required_keys__``, which ``row`` checks).
from collections.abc import Mapping, Sequence
from typing import Any, Final, NotRequired, Required, TypedDict

__all__ = [
    "ROW_TYPES",
    "AttemptRow",
    "Finish",
    "MCPServerRow",
    "MarkerRow",
    "RunFileRow",
    "RunRow",
    "ScoreRow",
    "StallRow",
    "StepRow",
    "SweepRunRow",
    "ToolCallRow",
]


class RunRow(TypedDict, total=False):
    """A ``run_rows`` row (``create_run``, ``start_run``; what else a run keeps goes
    in ``extras``, merged back by ``Store.get_run``). ``output_mode`` is the typed
    answer's mode chosen at the start (``finish_run`` sets the one it ended in);
    ``output``, the validated answer as JSON text, is ``finish_run``'s to write."""

    run_id: Required[str]
    task: str | None
    workspace: str | None
    provider: str | None
    model: str | None
    started_at: float | None
    finished_at: float | None
    outcome: str | None
    schema_version: int | None
    contract: Mapping[str, Any] | None
    policy: Mapping[str, Any] | None
    error: Mapping[str, Any] | None
    extras: Mapping[str, Any] | None
    updated_at: float | None
    sweep_id: str | None
    output_mode: str | None
    output: str | None


class AttemptRow(TypedDict, total=False):
    """An ``attempts`` row (``add_attempts``; a CLI run's with its step). A typed
    call's rows carry its ``output_mode`` (``native``, ``tool``, ``prompted``); one
    whose answer came but cannot be used has ``kind`` ``refusal``, ``truncated`` or
    ``schema_violation``, its raw text as ``answer`` (scrubbed and clipped to
    ``_rows.MAX_ANSWER_CHARS`` by the write) and the reason as ``error``."""

    run_id: str
    step: int | None
    attempt: int | None
    provider: str | None
    model: str | None
    kind: str | None
    status: int | None
    retry_after_s: float | None
    latency_ms: float | None
    ttft_ms: float | None
    input_tokens: int | None
    output_tokens: int | None
    request_id: str | None
    fell_back: bool | None
    error: str | Mapping[str, Any] | None
    started_at: float | None
    base_url: str | None
    cost_usd: float | None
    cancelled: bool | None
    usage_estimated: bool | None
    output_mode: str | None
    answer: str | None


class StepRow(TypedDict, total=False):
    """A ``steps`` row (``commit_step``, whose ``checkpoint`` argument fills its own)."""

    run_id: str
    step: Required[int]
    decision: str | None
    tool_calls: int | None
    tokens: int | None
    changed_workspace: bool | None
    provider: str | None
    at: float | None
    checkpoint: Mapping[str, Any] | None


class ToolCallRow(TypedDict, total=False):
    """A ``tool_calls`` row (``commit_step``, ``record_intent``, ``keep_begun_step``)."""

    run_id: str
    step: Required[int]
    seq: Required[int]
    tool: str | None
    effect: str | None
    args: Mapping[str, Any] | None
    idempotency_key: str | None
    status: str | None
    error_name: str | None
    error_code: str | None
    output_bytes: int | None
    at: float | None
    output: str | None
    sandbox: str | None
    server: str | None
    error_kind: str | None


class StallRow(TypedDict, total=False):
    """A ``stalls`` row (``commit_step``, ``finish_run``)."""

    run_id: str
    step: int | None
    signal: Required[str]
    action: Required[str]
    detail: str | None
    at: float | None


class MarkerRow(TypedDict, total=False):
    """A ``markers`` row (``add_marker`` builds it from its arguments)."""

    run_id: str
    kind: Required[str]
    detail: str | None
    at: float | None


class ScoreRow(TypedDict, total=False):
    """A ``scores`` row (``add_scores``): one scorer's verdict on one run of a sweep."""

    sweep_id: str | None
    run_id: Required[str]
    sample_id: str | None
    scorer: Required[str]
    scorer_version: Required[str]
    value: float | None
    explanation: str | None
    error: str | None
    infra_failure: Required[bool]
    infra_kind: str | None
    scored_at: float | None


class SweepRunRow(TypedDict, total=False):
    """A ``sweep_runs`` row (``add_sweep_run``): the slot of its sweep a run filled
    (sample, the sweep's name for its provider, repeat), its sample (input, target, id,
    metadata) and the paths the file caps left out."""

    sweep_id: Required[str]
    run_id: Required[str]
    sample_id: Required[str]
    provider: Required[str]
    repeat: Required[int]
    sample: Mapping[str, Any] | None
    files_cut: Mapping[str, Any] | None
    at: float | None


class RunFileRow(TypedDict, total=False):
    """A ``run_files`` row (``add_sweep_run``): one file of a sweep run's final
    workspace, by its relative path: its bytes, or a symlink's target (``link``)."""

    run_id: str
    path: Required[str]
    link: str | None
    content: bytes | None
    size: int | None


class MCPServerRow(TypedDict, total=False):
    """An ``mcp_servers`` row (``record_mcp_servers``): what one MCP server offered a
    run. ``target`` is the command line or URL as ``MCPServer.describe()`` gives it
    (scrubbed again by the write); ``tools`` the list of tools (``name``,
    ``offered_as``, ``description``, ``input_schema``, ``annotations``, ``effect``),
    stored as JSON with secrets scrubbed; ``tools_hash`` is filled in by the write (the
    SHA-256 of the stored JSON) when not given."""

    run_id: str
    server: Required[str]
    transport: Required[str]
    target: str | None
    sandbox: str | None
    tools: Sequence[Mapping[str, Any]] | None
    tools_hash: str | None
    at: float | None


class Finish(TypedDict):
    """How a run ends: what ``commit_step`` sets in the run row to end the run with its
    last step (``finish_run`` takes the same as its arguments). A typed run adds the
    mode it ended in (``output_mode``) and its validated answer as JSON text
    (``output``)."""

    outcome: str
    finished_at: float
    error: Mapping[str, Any] | None
    output_mode: NotRequired[str | None]
    output: NotRequired[str | None]


# The row type of each written table.
ROW_TYPES: Final[dict[str, Any]] = {
    "run_rows": RunRow,
    "attempts": AttemptRow,
    "steps": StepRow,
    "tool_calls": ToolCallRow,
    "stalls": StallRow,
    "markers": MarkerRow,
    "scores": ScoreRow,
    "sweep_runs": SweepRunRow,
    "run_files": RunFileRow,
    "mcp_servers": MCPServerRow,
}
