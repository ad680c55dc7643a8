"""OpenTelemetry traces of stored runs: ``export_run``, ``sweep_span``, ``export_runs``.

One mapping, rows to spans: a run's spans are made from its stored rows (``_trace_rows``
reads them, ``_trace_attrs`` names their attributes), with the recorded times, by
``export_run``. The live path calls it when a run ends (its rows are committed then),
so the spans of a run traced live and of the same run exported later from the store
are equal but for their ids; a run costs nothing per step; a run killed mid-way is
exported later from its file. Spans appear when a run ends (a long run shows up at its
end), flushed then (``force_flush``: a notebook's kernel never exits to flush them).

Span tree: ``invoke_agent {agent}`` (INTERNAL) > ``chat {model}`` (CLIENT, one per
HTTP attempt, failed ones included) and ``execute_tool {tool}`` (INTERNAL, one per
tool call); events for retries and fallbacks (on the failed attempt), stalls and
markers (on the run), refusals and deferred approvals (on the tool call). A sweep's
runs nest under ``invoke_workflow sweep {sweep_id}``. With a meter provider,
``gen_ai.client.operation.duration``, ``gen_ai.client.token.usage`` and
``gen_ai.client.operation.time_to_first_chunk`` are recorded per attempt (when
exported: a metric has no time of its own to give).

``opentelemetry`` (the ``harnessnb[otel]`` extra) is imported only inside these
functions, never by ``import harnessnb``; harnessnb never sets the global provider.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from ..rules._errors import ConfigError, StoreError
from ..rules._secrets import scrubber
from ._trace_attrs import SpanSpec, chat_attributes, run_spans
from ._trace_rows import Reading, RunRows, read_run

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Tracer, TracerProvider

__all__ = ["SCOPE", "export_run", "export_runs", "sweep_span"]

SCOPE: Final = "harnessnb"  # the instrumentation scope of every span and metric
# The conventions' advised histogram buckets (seconds; tokens).
_DURATION_BUCKETS: Final = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12,
                            10.24, 20.48, 40.96, 81.92]  # fmt: skip
_TOKEN_BUCKETS: Final = [4.0**i for i in range(14)]


def export_run(
    reader: Reading,
    run_id: str,
    tracer_provider: TracerProvider,
    *,
    parent: Context | None = None,
    include_content: bool = False,
    meter_provider: MeterProvider | None = None,
) -> None:
    """Emit the spans of one stored run (``invoke_agent`` > ``chat`` per attempt,
    ``execute_tool`` per tool call; events for retries, stalls, approvals) under
    ``parent`` (an OpenTelemetry ``Context``, or None for a trace of its own), then
    ``tracer_provider.force_flush()``. ``reader`` is a ``Store`` or ``CombinedStore``.

    ``include_content``: the messages, tool arguments and results, the task and a typed
    answer too (``gen_ai.input.messages``...), scrubbed of every secret harnessnb knows.
    ``meter_provider``: also record the GenAI client metrics of each attempt.

    Raises:
        StoreError: ``missing`` for a run the store does not hold.
        ConfigError: ``opentelemetry`` is not installed (``pip install 'harnessnb[otel]'``).
    """
    _otel()
    rows, spec = _prepared(reader, run_id, include_content)
    _publish(tracer_provider, rows, spec, parent, meter_provider)


@contextmanager
def sweep_span(
    tracer_provider: TracerProvider,
    sweep_id: str,
    *,
    started_at: float | None = None,
    ended_at: float | None = None,
) -> Iterator[Context]:
    """The span ``invoke_workflow sweep {sweep_id}`` (INTERNAL; ``gen_ai.workflow.name``
    ``sweep {sweep_id}``) open while the block runs; yields the ``Context`` the sweep's
    runs are exported under. It starts at ``started_at`` (Unix seconds; default now)
    and ends at ``ended_at`` (default: when the block ends), then is flushed."""
    start = None if started_at is None else round(started_at * 1e9)
    end = None if ended_at is None else round(ended_at * 1e9)
    with _workflow(tracer_provider, sweep_id, start, end) as context:
        yield context


@contextmanager
def _workflow(
    tracer_provider: TracerProvider, sweep_id: str, start_ns: int | None, end_ns: int | None
) -> Iterator[Context]:
    trace = _otel()
    tracer = tracer_provider.get_tracer(SCOPE, _version())
    name = f"sweep {sweep_id}"
    attributes = {"gen_ai.operation.name": "invoke_workflow", "gen_ai.workflow.name": name,
                  "harnessnb.sweep_id": sweep_id}  # fmt: skip
    span = tracer.start_span(f"invoke_workflow {name}", kind=trace.SpanKind.INTERNAL,
                             attributes=attributes, start_time=start_ns)  # fmt: skip
    try:
        yield trace.set_span_in_context(span)
    except BaseException as exc:
        span.set_attribute("error.type", type(exc).__name__)
        span.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
        raise
    finally:
        span.end(end_time=end_ns)
        _flush(tracer_provider)


def export_runs(
    reader: Reading,
    tracer_provider: TracerProvider,
    *,
    run_ids: Sequence[str] | None = None,
    sweep: str | None = None,
    include_content: bool = False,
    meter_provider: MeterProvider | None = None,
) -> int:
    """``Store.export_traces``: every run of ``reader`` in start order (or ``run_ids``;
    or ``sweep``'s runs, nested under one workflow span from its first run's start to
    its last run's end); returns how many runs were exported.

    Raises:
        StoreError: ``missing`` naming the ``run_ids`` the store (or the sweep) lacks.
    """
    _otel()
    ids = _chosen(reader, sweep)
    if run_ids is not None:
        wanted, known = list(dict.fromkeys(run_ids)), set(ids)
        lacking = [r for r in wanted if r not in known]
        if lacking:
            where = "this store" if sweep is None else f"sweep {sweep!r}"
            raise StoreError(f"no run {', '.join(map(repr, lacking))} in {where}", kind="missing")
        ids = wanted
    if sweep is None:
        for run_id in ids:
            export_run(reader, run_id, tracer_provider, include_content=include_content,
                       meter_provider=meter_provider)  # fmt: skip
        return len(ids)
    prepared = [_prepared(reader, run_id, include_content) for run_id in ids]
    start = min((spec.start_ns for _, spec in prepared), default=None)
    end = max((spec.end_ns for _, spec in prepared), default=None)
    with _workflow(tracer_provider, sweep, start, end) as context:
        for rows, spec in prepared:
            _publish(tracer_provider, rows, spec, context, meter_provider)
    return len(ids)


def _chosen(reader: Reading, sweep: str | None) -> list[str]:
    """The store's run ids (or a sweep's) in start order."""
    clause, params = ("", []) if sweep is None else (" WHERE sweep_id = ?", [sweep])
    with reader._connection() as con:
        found = con.execute(
            f"SELECT run_id FROM runs{clause} ORDER BY started_at, run_id", params
        ).fetchall()
    return [str(run_id) for (run_id,) in found]


def _prepared(reader: Reading, run_id: str, include_content: bool) -> tuple[RunRows, SpanSpec]:
    rows = read_run(reader, run_id, content=include_content)
    return rows, run_spans(rows, content=include_content, clean=scrubber())


def _publish(
    tracer_provider: TracerProvider,
    rows: RunRows,
    spec: SpanSpec,
    parent: Context | None,
    meter_provider: MeterProvider | None,
) -> None:
    """Emit a run's spans (and metrics), then flush."""
    tracer = tracer_provider.get_tracer(SCOPE, _version())
    _emit(tracer, spec, parent, _otel())
    if meter_provider is not None:
        _record_metrics(meter_provider, rows)
    _flush(tracer_provider)


def _emit(tracer: Tracer, spec: SpanSpec, parent: Context | None, trace: Any) -> None:
    """Start ``spec``'s span under ``parent``, its children under it, end them in turn."""
    kind = trace.SpanKind.CLIENT if spec.client else trace.SpanKind.INTERNAL
    span = tracer.start_span(spec.name, context=parent, kind=kind,
                             attributes=spec.attributes, start_time=spec.start_ns)  # fmt: skip
    for event in spec.events:
        span.add_event(event.name, event.attributes, timestamp=event.at_ns)
    if spec.error is not None:
        span.set_status(trace.Status(trace.StatusCode.ERROR, spec.error))
    inside = trace.set_span_in_context(span, parent)
    for child in spec.children:
        _emit(tracer, child, inside, trace)
    span.end(end_time=max(spec.end_ns, spec.start_ns))


def _record_metrics(meter_provider: MeterProvider, rows: RunRows) -> None:
    """The GenAI client metrics of each attempt a provider answered or failed (one a
    cancel cut off is neither)."""
    meter = meter_provider.get_meter(SCOPE, _version())
    duration = meter.create_histogram(
        "gen_ai.client.operation.duration", unit="s", description="GenAI operation duration",
        explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
    )  # fmt: skip
    tokens = meter.create_histogram(
        "gen_ai.client.token.usage", unit="{token}", description="Tokens used",
        explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
    )  # fmt: skip
    first = meter.create_histogram(
        "gen_ai.client.operation.time_to_first_chunk", unit="s",
        description="Time to the first chunk of a streamed answer",
        explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
    )  # fmt: skip
    for attempt in rows.attempts:
        if attempt.get("cancelled"):
            continue
        attrs = chat_attributes(attempt)
        duration.record((attempt["end_ns"] - attempt["started_at_ns"]) / 1e9, attrs)
        if attempt.get("ttft_ms") is not None:
            first.record(float(attempt["ttft_ms"]) / 1000, attrs)
        for kind in ("input", "output"):
            count = attempt.get(f"{kind}_tokens")
            if count is not None:
                tokens.record(int(count), {**attrs, "gen_ai.token.type": kind})


def _otel() -> Any:
    """``opentelemetry.trace``, or a ``ConfigError`` that says how to install it."""
    try:
        from opentelemetry import trace
    except ImportError as exc:
        raise ConfigError(
            "tracing needs OpenTelemetry: pip install 'harnessnb[otel]' "
            "(opentelemetry-sdk, and an exporter such as opentelemetry-exporter-otlp)"
        ) from exc
    return trace


def _flush(tracer_provider: TracerProvider) -> None:
    """``force_flush`` (the SDK's provider has it; the API's no-op one has not)."""
    flush = getattr(tracer_provider, "force_flush", None)
    if callable(flush):
        flush()


@functools.cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("harnessnb")
    except PackageNotFoundError:
        return "0"
