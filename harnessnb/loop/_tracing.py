"""Runs as OpenTelemetry traces: which tracer provider a run uses, the span its runs
nest under, and the export when it ends.

A run's spans are made from its stored rows (``store._traces.export_run``) once its end
is committed, and flushed then: a run costs nothing per step, a long run shows up in a
backend at its end, and the spans of a live run equal those exported from the store
later. harnessnb never sets OpenTelemetry's global provider (it can be set only once,
so a notebook cell setting it could not be run again): ``hn.set_tracer_provider``
keeps a process default of its own, which ``None`` clears. Without a provider nothing
of opentelemetry is imported. A failed export never fails a run: it is logged once
per provider, scrubbed.

A sweep's runs nest under its span: the sweep hands each run its provider and that
span as one value (``Nested``, given as the run's ``tracer_provider``), never as ambient
state (no context variable: a run started after the sweep, or beside it, is not nested).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

from ..rules._errors import ConfigError
from ..rules._secrets import scrub

if TYPE_CHECKING:
    from ..store._store import CombinedStore, Store

__all__ = [
    "Nested",
    "Tracing",
    "export_ended",
    "export_when_ended",
    "get_tracer_provider",
    "parent_carrier",
    "parent_from",
    "set_tracer_provider",
    "sweep_traced",
    "tracer_provider_of",
    "tracing",
    "worker_factory",
]

_log = logging.getLogger("harnessnb.tracing")

# A TracerProvider, or a callable that builds one (what a Dask worker is given).
TracerProviderLike = Any

_default: TracerProviderLike = None
_default_meter: Any = None  # the MeterProvider traced runs record their metrics with
_built: dict[Any, Any] = {}  # a factory's provider, built once per process
_warned: set[int] = set()  # providers whose failed export was logged


def set_tracer_provider(tracer_provider: TracerProviderLike, *, meter_provider: Any = None) -> None:
    """Trace every run of this process to ``tracer_provider`` (an OpenTelemetry SDK
    ``TracerProvider``, or a callable that builds one) unless a run is given its own;
    ``None`` stops it. Setting it again replaces it: the global OpenTelemetry provider
    is never touched, so a notebook cell that sets it can be run again.

    ``meter_provider`` (an SDK ``MeterProvider``): every traced run of this process,
    with this provider or its own, also records the GenAI client metrics of its
    attempts with it when its spans are exported; ``None`` records none."""
    global _default, _default_meter
    _check(tracer_provider)
    if meter_provider is not None and not hasattr(meter_provider, "get_meter"):
        raise ConfigError(
            f"meter_provider must be an OpenTelemetry MeterProvider, not "
            f"{type(meter_provider).__name__}"
        )
    _default, _default_meter = tracer_provider, meter_provider


def get_tracer_provider() -> TracerProviderLike:
    """The process default ``set_tracer_provider`` keeps (None: no tracing)."""
    return _default


def _check(given: TracerProviderLike) -> None:
    if given is not None and not hasattr(given, "get_tracer") and not callable(given):
        raise ConfigError(
            f"tracer_provider must be an OpenTelemetry TracerProvider or a callable "
            f"that builds one, not {type(given).__name__}"
        )


def tracer_provider_of(given: TracerProviderLike) -> Any:
    """The provider a run uses: ``given``, else the process default; a callable is
    called once per process (a Dask worker builds its own) and its provider kept."""
    chosen = given if given is not None else _default
    _check(chosen)
    if chosen is None or hasattr(chosen, "get_tracer"):
        return chosen
    factory: Callable[[], Any] = chosen
    key = _factory_key(factory)
    try:
        return _built[key]
    except KeyError:
        pass
    except TypeError:  # not hashable: built each time
        return factory()
    built = _built[key] = factory()
    return built


def _factory_key(factory: Callable[[], Any]) -> Any:
    """What identifies a factory across pickling: a function is itself again (pickled by
    reference), a ``functools.partial`` is a new object each time: its parts."""
    if isinstance(factory, functools.partial):
        return (factory.func, factory.args, tuple(sorted(factory.keywords.items())))
    return factory


@dataclasses.dataclass(frozen=True)
class Tracing:
    """How a run's spans are exported when it ends."""

    provider: Any
    include_content: bool = False
    parent: Any = None  # the OpenTelemetry Context its spans nest under (a sweep's)
    meter: Any = None  # the MeterProvider its attempts' metrics are recorded with


@dataclasses.dataclass(frozen=True)
class Nested:
    """A run's ``tracer_provider`` (a provider or a factory) with the span its spans nest
    under: how a sweep hands its span to each of its runs, as a value."""

    provider: TracerProviderLike
    parent: Any  # an OpenTelemetry Context (None: not nested)


def tracing(given: TracerProviderLike, include_content: bool) -> Tracing | None:
    """The run's ``Tracing`` (None: not traced); ``given`` a ``Nested``, under its span."""
    parent = None
    if isinstance(given, Nested):
        given, parent = given.provider, given.parent
    provider = tracer_provider_of(given)
    if provider is None:
        return None
    return Tracing(provider, include_content=include_content, parent=parent, meter=_default_meter)


def parent_carrier(parent: Any) -> dict[str, str]:
    """``parent`` as W3C trace-context headers: how it crosses to a Dask worker."""
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=parent)
    return carrier


def parent_from(carrier: dict[str, str]) -> Any:
    """The Context ``parent_carrier`` wrote (None for an empty carrier)."""
    if not carrier:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract(carrier)


def export_ended(store: Store | CombinedStore, run_id: str, traced: Tracing | None) -> None:
    """Export the ended run's spans from ``store``; a failure is logged (once per
    provider, scrubbed), never raised."""
    if traced is None:
        return
    try:
        from ..store._traces import export_run

        export_run(
            store,
            run_id,
            traced.provider,
            parent=traced.parent,
            include_content=traced.include_content,
            meter_provider=traced.meter,
        )
    except Exception as exc:  # a backend's trouble must not fail the run
        if id(traced.provider) not in _warned:
            _warned.add(id(traced.provider))
            _log.warning(
                "run %s: its spans could not be exported (%s: %s); later failures of "
                "this tracer provider are not logged",
                run_id,
                type(exc).__name__,
                scrub(str(exc)),
            )


async def export_when_ended(
    store: Store | CombinedStore, run_id: str, traced: Tracing | None
) -> None:
    """``export_ended`` off the event loop (it reads the store)."""
    if traced is not None:
        await asyncio.to_thread(export_ended, store, run_id, traced)


@contextlib.asynccontextmanager
async def sweep_traced(provider: Any, sweep_id: str) -> AsyncIterator[Any]:
    """With a provider: the sweep's span, open while its runs go (each handed it as a
    ``Nested``); yields its Context (None without a provider). The span is
    ended and flushed off the event loop (a flush waits on the exporter)."""
    if provider is None:
        yield None
        return
    from ..store._traces import sweep_span

    span = sweep_span(provider, sweep_id)
    parent = span.__enter__()
    try:
        yield parent
    except BaseException as exc:  # the span records it (ERROR) and it goes on
        await asyncio.to_thread(span.__exit__, type(exc), exc, exc.__traceback__)
        raise
    await asyncio.to_thread(span.__exit__, None, None, None)


def worker_factory(given: TracerProviderLike) -> TracerProviderLike:
    """What a Dask worker is given to build its provider: a callable (``given``, else
    the process default); a provider object cannot cross to another process."""
    chosen = given if given is not None else _default
    _check(chosen)
    if chosen is not None and hasattr(chosen, "get_tracer"):
        raise ConfigError(
            "sweep: with executor=, tracer_provider (else hn.set_tracer_provider's "
            "default) must be a callable that builds a TracerProvider (pickled to each "
            "worker, called once per worker process), not a provider: its exporter's "
            "threads and sockets do not cross processes"
        )
    return chosen
