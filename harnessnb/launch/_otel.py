"""``--otel-endpoint URL`` (run, resume and sweep, on both faces): the run's spans sent
over OTLP/HTTP to ``URL`` (Phoenix's ``http://127.0.0.1:6006/v1/traces``) when it ends.

The option names a factory (``tracer_provider_from``: ``otlp_provider`` with the URL),
not a provider, so a sweep on a Dask cluster can pickle it to its workers; each process
builds one provider per endpoint (a ``BatchSpanProcessor`` over the official exporter)
and keeps it, so the magics' runs across cells share it.
"""

from __future__ import annotations

import argparse
import functools
import threading
import urllib.parse
from typing import Any

from ..rules._errors import ConfigError

__all__ = ["OTEL_INSTALL", "otlp_provider", "otlp_url", "tracer_provider_from"]

OTEL_INSTALL = "pip install 'harnessnb[otel]' opentelemetry-exporter-otlp-proto-http"

_built: dict[str, Any] = {}
_lock = threading.Lock()


def otlp_url(text: str) -> str:
    """An argparse type: an ``http(s)://host[:port]/path`` URL to send spans to."""
    parts = urllib.parse.urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an http(s) URL; e.g. http://127.0.0.1:6006/v1/traces"
        )
    return text.strip()


def otlp_provider(endpoint: str) -> Any:
    """The process's ``TracerProvider`` batching spans to ``endpoint`` over OTLP/HTTP
    (built once per endpoint).

    Raises:
        ConfigError: the OpenTelemetry SDK or its OTLP/HTTP exporter is not installed.
    """
    with _lock:
        if endpoint in _built:
            return _built[endpoint]
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError:
            raise ConfigError(f"--otel-endpoint needs OpenTelemetry: {OTEL_INSTALL}") from None
        provider = TracerProvider(resource=Resource.create({"service.name": "harnessnb"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        _built[endpoint] = provider
        return provider


def tracer_provider_from(args: argparse.Namespace) -> Any:
    """The run's ``tracer_provider=`` from ``--otel-endpoint``: a factory (picklable:
    a sweep's Dask workers build their own), or None without the option."""
    endpoint = getattr(args, "otel_endpoint", None)
    return None if endpoint is None else functools.partial(otlp_provider, endpoint)
