"""The collector's metrics on ``GET /metrics``, through ``prometheus_client``.

One :class:`CollectorMetrics` per application, with a registry of its own (never the
process-wide default: several collectors in one process must not clash).  It holds the
collector's counters and histograms, the process metrics ``prometheus_client`` gives
(CPU, memory, open files, GC), gauges read at scrape time, and renders the Prometheus text
format or OpenMetrics, whichever the scraper's ``Accept`` header asks for::

    m = CollectorMetrics()
    m.batches.inc()
    m.rejected.labels(reason="bad_field").inc()
    m.fsync_seconds.observe(0.002)
    body, content_type = m.exposition(request.headers.get("Accept", ""))
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, GCCollector, Histogram, PlatformCollector, ProcessCollector
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

MAX_REPORTING_CLIENTS = 10_000
"""Clients whose reported counters are remembered; the least recently heard from go first."""
DEFAULT_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

LabelKey = tuple[tuple[str, str], ...]
GaugeRead = Callable[[], "dict[LabelKey, float] | float"]


def gauge_family(name: str, help_: str, values: dict[LabelKey, float] | float) -> Metric:
    """A gauge family from one value or ``{((label, value), ...): value}``."""
    family = Metric(name, help_, "gauge")
    items = values.items() if isinstance(values, dict) else [((), values)]
    for key, value in sorted(items):
        family.add_sample(name, dict(key), float(value))
    return family


class CallbackGauge(Collector):
    """A gauge whose value (or labelled values) is read from ``read`` at scrape time."""

    def __init__(self, name: str, help_: str, read: GaugeRead) -> None:
        self.name, self.help, self._read = name, help_, read

    def describe(self) -> list[Metric]:
        return [Metric(self.name, self.help, "gauge")]  # lets the registry refuse a second use of the name

    def collect(self) -> Iterator[Metric]:
        yield gauge_family(self.name, self.help, self._read())


class _Families(Collector):
    """Families collected by several collectors, rendered as one exposition."""

    def __init__(self, collectors: Sequence[Collector], extra: Iterable[Metric]) -> None:
        self._collectors, self._extra = collectors, extra

    def collect(self) -> Iterator[Metric]:
        for collector in self._collectors:
            yield from collector.collect()
        yield from self._extra


class CollectorMetrics:
    """Every metric the collector exposes; gauges are bound later by :meth:`add_gauge`."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.batches = Counter("tracehook_collector_batches", "Batches durably appended.", registry=r)
        self.events = Counter("tracehook_collector_events", "Events in durably appended batches.", registry=r)
        self.bytes = Counter("tracehook_collector_bytes", "Batch bytes durably appended.", registry=r)
        self.duplicates = Counter("tracehook_collector_duplicate_batches",
                                  "Retried batches acknowledged without a second append.", registry=r)
        self.rejected = Counter("tracehook_collector_rejected", "Requests rejected, by reason.", ["reason"],
                                registry=r)
        self.append_seconds = Histogram(
            "tracehook_collector_append_seconds", "From a valid batch's arrival to its durable acknowledgement.",
            buckets=DEFAULT_LATENCY_BUCKETS, registry=r)
        self.fsync_seconds = Histogram("tracehook_collector_fsync_seconds", "Duration of one group commit's sync.",
                                       buckets=DEFAULT_LATENCY_BUCKETS, registry=r)
        self.group_batches = Histogram("tracehook_collector_group_commit_batches", "Batches sharing one group commit.",
                                       buckets=(1, 2, 4, 8, 16, 32, 64, 128), registry=r)
        self._client_stats: dict[str, dict[str, int]] = {}
        self.add_gauge("tracehook_client_reported", "Counters clients report in their batches (e.g. drops by "
                       "reason), latest value per client summed over clients.", self._client_totals)

    def counter(self, name: str, help_: str, labelnames: Sequence[str] = ()) -> Counter:
        """A new counter in this registry (``name`` without ``_total``: the library adds it)."""
        return Counter(name, help_, labelnames, registry=self.registry)

    def add_gauge(self, name: str, help_: str, read: GaugeRead) -> None:
        """Expose a value computed at scrape time: a number, or ``{label pairs: number}``."""
        self.registry.register(CallbackGauge(name, help_, read))

    def register(self, collector: Collector) -> None:
        """Expose a ``prometheus_client`` collector (several families computed together)."""
        self.registry.register(collector)

    def client_reported(self, client_id: str, stats: dict[str, int]) -> None:
        """Remember a client's latest counters (they are cumulative on the client)."""
        if stats:
            self._client_stats.pop(client_id, None)
            self._client_stats[client_id] = stats
            if len(self._client_stats) > MAX_REPORTING_CLIENTS:
                del self._client_stats[next(iter(self._client_stats))]

    def _client_totals(self) -> dict[LabelKey, float]:
        totals: dict[LabelKey, float] = {}
        for stats in self._client_stats.values():
            for name, value in stats.items():
                key = (("counter", name),)
                totals[key] = totals.get(key, 0) + value
        return totals

    def exposition(self, accept: str, extra: Iterable[Metric] = ()) -> tuple[bytes, str]:
        """``(body, content type)``: every metric plus ``extra`` families, in OpenMetrics when
        ``accept`` asks for it, else in the Prometheus text format 0.0.4."""
        encode, content_type = choose_encoder(accept)
        return encode(_Families([self.registry], extra)), content_type
