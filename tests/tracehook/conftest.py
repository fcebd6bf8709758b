"""Fixtures for the library tests: a scripted stub collector and tracers with fast test timings."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from stub_collector import StubCollector

import tracehook


@pytest.fixture
def stub() -> Iterator[StubCollector]:
    server = StubCollector()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def make_tracer() -> Iterator[Any]:
    """Build tracers with fast test timings; all are closed at the end."""
    made: list[tracehook.Tracer] = []

    def make(*collectors: str, **options: Any) -> tracehook.Tracer:
        settings: dict[str, Any] = dict(app="test", linger_s=0.01, backoff_s=0.01, max_backoff_s=0.05,
                                        failover_s=0.2, timeout_s=5.0, flush_at_exit=False)
        settings.update(options)
        tracer = tracehook.Tracer(tracehook.TracerConfig(collectors=collectors, **settings))
        made.append(tracer)
        return tracer

    yield make
    for tracer in made:
        tracer.close(timeout=1.0)


@pytest.fixture
def accounted() -> Any:
    """Check the invariant on a stats() snapshot: every emitted event is sent, dropped, queued or in flight."""

    def check(stats: dict[str, Any]) -> dict[str, Any]:
        total = stats["sent"] + stats["dropped_total"] + stats["queued"] + stats["in_flight"]
        assert stats["emitted"] == total, stats
        return stats

    return check
