"""A stored run as OpenTelemetry spans (STAND-IN on branch p30-faces).

This is a minimal stand-in with the agreed signatures, so the faces' plumbing
(``tracer_provider=`` on every entry point) can be tested before the ``spans``
branch lands; at the merge that branch's module replaces this one whole. It emits
only the run's ``invoke_agent`` span (the run id as ``gen_ai.conversation.id``, the
recorded start and end) and the sweep's span. opentelemetry is imported only inside
these functions.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["export_run", "sweep_span"]


def _ns(seconds: float | None) -> int | None:
    return None if seconds is None else int(seconds * 1e9)


def export_run(
    reader: Any,
    run_id: str,
    tracer_provider: Any,
    *,
    parent: Any = None,
    include_content: bool = False,
) -> None:
    """Emit the spans of one stored run under ``parent`` (an OTel Context or None),
    then ``tracer_provider.force_flush()``. ``reader`` is a Store or CombinedStore."""
    del include_content  # the stand-in emits no content
    row = reader.get_run(run_id)
    if row is None:
        return
    tracer = tracer_provider.get_tracer("harnessnb")
    span = tracer.start_span(
        "invoke_agent harnessnb",
        context=parent,
        start_time=_ns(row.get("started_at")),
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.conversation.id": run_id,
            "harnessnb.outcome": str(row.get("outcome") or ""),
        },
    )
    span.end(end_time=_ns(row.get("finished_at") or row.get("updated_at")))
    tracer_provider.force_flush()


@contextlib.contextmanager
def sweep_span(
    tracer_provider: Any, sweep_id: str, *, started_at: float | None = None
) -> Iterator[Any]:
    """The span ``invoke_workflow sweep {sweep_id}``; yields the Context a sweep's runs
    are exported under."""
    from opentelemetry import trace

    tracer = tracer_provider.get_tracer("harnessnb")
    span = tracer.start_span(
        f"invoke_workflow sweep {sweep_id}",
        start_time=_ns(started_at if started_at is not None else time.time()),
        attributes={"gen_ai.operation.name": "invoke_workflow", "harnessnb.sweep_id": sweep_id},
    )
    try:
        yield trace.set_span_in_context(span)
    finally:
        span.end()
        tracer_provider.force_flush()
