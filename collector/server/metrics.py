"""The collector's metrics, rendered in the Prometheus text format on ``GET /metrics``.

Three small instrument types (counter, gauge, histogram) with optional labels; the
collector's own set is :class:`CollectorMetrics`::

    m = CollectorMetrics()
    m.batches.inc()
    m.rejected.inc(reason="bad_field")
    m.fsync_seconds.observe(0.002)
    text = m.render()
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable

MAX_REPORTING_CLIENTS = 10_000
"""Clients whose reported counters are remembered; the least recently heard from go first."""
DEFAULT_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

LabelKey = tuple[tuple[str, str], ...]


def _labels(key: LabelKey, extra: Iterable[tuple[str, str]] = ()) -> str:
    pairs = [*key, *extra]
    if not pairs:
        return ""
    escaped = (v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for _, v in pairs)
    return "{" + ",".join(f'{k}="{v}"' for (k, _), v in zip(pairs, escaped)) + "}"


def _num(value: float) -> str:
    return repr(float(value)) if isinstance(value, float) else str(value)


class Counter:
    """A monotonically increasing value per label set."""

    kind = "counter"

    def __init__(self, name: str, help_: str, *, labelled: bool = False) -> None:
        self.name, self.help, self.labelled = name, help_, labelled
        self._values: dict[LabelKey, float] = {}

    def inc(self, amount: float = 1, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        self._values[key] = self._values.get(key, 0) + amount

    def value(self, **labels: str) -> float:
        return self._values.get(tuple(sorted(labels.items())), 0)

    def samples(self) -> list[str]:
        if not self._values and not self.labelled:
            return [f"{self.name} 0"]  # scrapers should see an unlabelled counter from the start
        return [f"{self.name}{_labels(k)} {_num(v)}" for k, v in sorted(self._values.items())]


class Gauge:
    """A value read from a callback at render time (sizes, queue depths)."""

    kind = "gauge"

    def __init__(self, name: str, help_: str, read: Callable[[], dict[LabelKey, float] | float]) -> None:
        self.name, self.help, self._read = name, help_, read

    def samples(self) -> list[str]:
        value = self._read()
        items = value.items() if isinstance(value, dict) else [((), value)]
        return [f"{self.name}{_labels(k)} {_num(v)}" for k, v in sorted(items)]


class Histogram:
    """Cumulative buckets, sum and count, as Prometheus expects."""

    kind = "histogram"

    def __init__(self, name: str, help_: str, buckets: tuple[float, ...] = DEFAULT_LATENCY_BUCKETS) -> None:
        self.name, self.help, self.buckets = name, help_, buckets
        self._counts = [0] * (len(buckets) + 1)
        self._sum = 0.0

    def observe(self, value: float) -> None:
        self._counts[bisect.bisect_left(self.buckets, value)] += 1
        self._sum += value

    @property
    def count(self) -> int:
        return sum(self._counts)

    def samples(self) -> list[str]:
        out, running = [], 0
        for bound, n in zip([*map(str, self.buckets), "+Inf"], self._counts):
            running += n
            out.append(f"{self.name}_bucket{_labels((), [('le', bound)])} {running}")
        out.append(f"{self.name}_sum {_num(self._sum)}")
        out.append(f"{self.name}_count {running}")
        return out


Instrument = Counter | Gauge | Histogram


class CollectorMetrics:
    """Every metric the collector exposes; gauges are bound later by :meth:`add_gauge`."""

    def __init__(self) -> None:
        self.batches = Counter("tracehook_collector_batches_total", "Batches durably appended.")
        self.events = Counter("tracehook_collector_events_total", "Events in durably appended batches.")
        self.bytes = Counter("tracehook_collector_bytes_total", "Batch bytes durably appended.")
        self.duplicates = Counter(
            "tracehook_collector_duplicate_batches_total", "Retried batches acknowledged without a second append."
        )
        self.rejected = Counter("tracehook_collector_rejected_total", "Requests rejected, by reason.", labelled=True)
        self.append_seconds = Histogram(
            "tracehook_collector_append_seconds", "From a valid batch's arrival to its durable acknowledgement."
        )
        self.fsync_seconds = Histogram("tracehook_collector_fsync_seconds", "Duration of one group commit's sync.")
        self.group_batches = Histogram(
            "tracehook_collector_group_commit_batches", "Batches sharing one group commit.",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
        )
        self._client_stats: dict[str, dict[str, int]] = {}
        self._instruments: list[Instrument] = [
            self.batches, self.events, self.bytes, self.duplicates, self.rejected,
            self.append_seconds, self.fsync_seconds, self.group_batches,
            Gauge("tracehook_client_reported", "Counters clients report in their batches (e.g. drops by "
                  "reason), latest value per client summed over clients.", self._client_totals),
        ]

    def add(self, instrument: Instrument) -> Instrument:
        """Expose another instrument (a route's own counters); returns it."""
        self._instruments.append(instrument)
        return instrument

    def add_gauge(self, name: str, help_: str, read: Callable[[], dict[LabelKey, float] | float]) -> None:
        """Expose a value computed at scrape time."""
        self._instruments.append(Gauge(name, help_, read))

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

    def render(self) -> str:
        """The Prometheus text exposition of every metric."""
        lines: list[str] = []
        for inst in self._instruments:
            lines.append(f"# HELP {inst.name} {inst.help}")
            lines.append(f"# TYPE {inst.name} {inst.kind}")
            lines.extend(inst.samples())
        return "\n".join(lines) + "\n"
