"""Apps traced only by OpenTelemetry: an SDK tracer provider exporting OTLP/HTTP (gzip) to a collector."""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Iterator
from typing import Any

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


@contextlib.contextmanager
def otel_provider(collector_url: str, service: str) -> Iterator[TracerProvider]:
    """A tracer provider for ``service`` whose spans reach ``collector_url``'s /v1/traces; flushed on exit.

    Pass it to an instrumentor's ``instrument(tracer_provider=...)``: the global provider is never set.
    """
    provider = TracerProvider(resource=Resource.create({"service.name": service,
                                                        "service.instance.id": f"{service}-1"}))
    exporter = OTLPSpanExporter(endpoint=f"{collector_url}/v1/traces", compression=Compression.Gzip, timeout=10)
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    try:
        yield provider
    finally:
        assert provider.force_flush(10_000)
        provider.shutdown()


@contextlib.contextmanager
def instrumented(instrumentor: Any, provider: TracerProvider, **options: Any) -> Iterator[None]:
    """``instrumentor`` instrumenting with ``provider`` inside the block, uninstrumented after it."""
    instrumentor.instrument(tracer_provider=provider, **options)
    try:
        yield
    finally:
        instrumentor.uninstrument()


def metric(collector_url: str, sample: str) -> float:
    """The value of one ``/metrics`` sample (name plus labels, as rendered), 0 when absent."""
    with urllib.request.urlopen(f"{collector_url}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(sample + " "):
                return float(line.split()[-1])
    return 0.0
