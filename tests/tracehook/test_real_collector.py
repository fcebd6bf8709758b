"""The library against the real collector (``python -m collector`` subprocess): what it logs is what we sent."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from fixtures.collector_process import CollectorProcess

from collector.log import file as tracelog
from tracehook import wire
from tracehook.wire import EventType

pytestmark = pytest.mark.slow
TOKEN = "ingest-secret"


class Collector(CollectorProcess):
    """A real collector process on a fixed port that can be stopped and started again."""

    def __init__(self, data_dir: str) -> None:
        super().__init__(data_dir, "--ingest-token", TOKEN, start=False)

    def events(self) -> list[wire.Event]:
        """Every event in the trace log, each (client_id, seq) once."""
        log_dir = os.path.join(self.data_dir, "log")
        seen: set[tuple[str, int]] = set()
        events: list[wire.Event] = []
        for name in sorted(n for n in os.listdir(log_dir) if n.endswith(tracelog.SEGMENT_SUFFIX)):
            for record in tracelog.scan_segment(os.path.join(log_dir, name)).records:
                if (record.client_id, record.seq) not in seen:
                    seen.add((record.client_id, record.seq))
                    events.extend(wire.decode_batch(record.payload).events)
        return events


@pytest.fixture
def collector(tmp_path) -> Iterator[Collector]:
    server = Collector(str(tmp_path / "data"))
    server.start()
    yield server
    server.stop()


def test_traffic_lands_in_the_trace_log_exactly_once(collector, make_tracer, accounted):
    tracer = make_tracer(collector.url, token=TOKEN, batch_events=500)
    sent = [tracer.record_send("orders", keys=f"order-{i}", queue=i % 4, offset=i) for i in range(2000)]
    for msg_id in sent[:100]:
        with tracer.consume("orders", msg_id, "billing"):
            pass
    tracer.record_dead("orders", sent[0], "billing", error="gave up")
    assert tracer.flush(30)
    stats = accounted(tracer.stats())
    assert stats["sent"] == 2201 and stats["dropped_total"] == 0
    collector.stop()  # a graceful stop: everything acknowledged is durable
    events = collector.events()
    assert len(events) == 2201
    assert sorted(e.msg_id for e in events if e.type == EventType.PUB) == sorted(sent)
    pairs = {}
    for e in events:
        if e.type in (EventType.SUB_BEFORE, EventType.SUB_AFTER):
            pairs.setdefault(e.request_id, []).append(e.type)
    assert len(pairs) == 100 and all(sorted(p) == [EventType.SUB_BEFORE, EventType.SUB_AFTER] for p in pairs.values())


def test_wrong_token_is_counted_as_rejected(collector, make_tracer, accounted):
    tracer = make_tracer(collector.url, token="wrong")
    tracer.record_send("orders", "m-1")
    assert tracer.flush(30)
    assert accounted(tracer.stats())["dropped"]["rejected"] == 1


def test_collector_restart_loses_nothing(collector, make_tracer, accounted):
    tracer = make_tracer(collector.url, token=TOKEN, max_retries=1000, failover_s=0.1)
    first = [tracer.record_send("orders") for _ in range(500)]
    assert tracer.flush(30)
    collector.stop()
    second = [tracer.record_send("orders") for _ in range(500)]
    assert not tracer.flush(0.5)
    collector.start()
    assert tracer.flush(30)
    stats = accounted(tracer.stats())
    assert stats["sent"] == 1000 and stats["dropped_total"] == 0
    collector.stop()
    assert sorted(e.msg_id for e in collector.events()) == sorted(first + second)
