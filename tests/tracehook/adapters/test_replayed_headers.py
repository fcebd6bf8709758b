"""A record ``tracehook replay`` re-published is consumed as its original: the headers that say so."""

from __future__ import annotations

from types import SimpleNamespace

import tracehook
from tracehook.adapters._common import Replayed, replayed_from
from tracehook.adapters.kafka_python import ConsumeTracker


def headers(place: str, retry: str = "2", ts: str = "1795341600000") -> list[tuple[str, bytes]]:
    return [("tracehook-msg-id", b"m-1"), ("tracehook-replay-of", place.encode()),
            ("tracehook-replay-retry", retry.encode()), ("tracehook-original-timestamp", ts.encode())]


def test_the_headers_name_the_original() -> None:
    assert replayed_from(headers("orders.eu/3/1017")) == Replayed("orders.eu", 3, 1017, 2, 1795341600000)
    assert replayed_from([("tracehook-msg-id", b"m-1")]) is None
    assert replayed_from(None) is None
    assert replayed_from(headers("orders/x/1")) is None  # malformed: consumed as the record it is
    assert replayed_from(headers("orders/1/2", retry="")) == Replayed("orders", 1, 2, 0, 1795341600000)


def test_the_adapter_records_the_consume_at_the_originals_place(monkeypatch) -> None:
    calls = []

    class FakeTracer:
        config = tracehook.TracerConfig()

        def start_consume(self, topic, msg_id, group, **fields):
            calls.append((topic, group, fields["queue"], fields["offset"], fields["retry"], fields["store_ms"]))
            return tracehook.hooks.ConsumeSpan(self)  # type: ignore[arg-type]

    tracker = ConsumeTracker(FakeTracer(), "sms", "k:9092")  # type: ignore[arg-type]
    copy = SimpleNamespace(topic="orders.sms-replay", partition=0, offset=5, timestamp=1795349999999, key=b"k",
                           headers=headers("orders/3/1017"), serialized_value_size=3)
    plain = SimpleNamespace(topic="orders", partition=1, offset=9, timestamp=1795341600001, key=None, headers=[],
                            serialized_value_size=3)
    tracker.start(copy)
    tracker.start(plain)
    assert calls == [("orders", "sms", 3, 1017, 2, 1795341600000), ("orders", "sms", 1, 9, 0, 1795341600001)]
