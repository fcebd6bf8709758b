"""The OTLP → wire event mapping (collector.server.otlp): both generations of the messaging conventions."""

from __future__ import annotations

import gzip
import json

import pytest
from google.protobuf import json_format
from otlp_helpers import CONSUMER, INTERNAL, PRODUCER, T0_NS, TRACE_ID, request, span

from collector.server import otlp
from collector.server.errors import BadOtlpRequest, UnsupportedMediaType
from tracehook.wire import (
    INT_RANGES,
    MAX_INT,
    MAX_TIME_MS,
    BatchHeader,
    Event,
    EventType,
    Status,
    decode_batch,
    encode_batch,
)

T0_MS = T0_NS // 1_000_000
RESOURCE = {"service.name": "billing", "service.instance.id": "i-7", "host.name": "h1"}


def events(s) -> list[Event]:  # type: ignore[no-untyped-def]
    mapped = otlp.map_span(s, RESOURCE)
    assert not isinstance(mapped, str), mapped
    # Every mapped event must survive the wire format exactly as the index job reads it.
    return decode_batch(encode_batch(BatchHeader("c", 1), mapped)).events


def test_derived_msg_id_format_is_pinned() -> None:
    # The library's tracehook.context.derived_msg_id must give exactly this; both sides join on it.
    assert otlp.derived_msg_id("orders", 3, 1017) == "kafka:orders/3/1017"


def test_current_conventions_kafka_publish_and_process() -> None:
    common = {"messaging.system": "kafka", "messaging.destination.name": "orders",
              "messaging.destination.partition.id": "3", "messaging.kafka.offset": 1017,
              "messaging.kafka.message.key": "order-42", "server.address": "b1", "server.port": 9092,
              "messaging.message.body.size": 120}
    [pub] = events(span("send orders", PRODUCER, {**common, "messaging.operation.type": "send"}, span_id=5))
    assert (pub.type, pub.topic, pub.msg_id, pub.queue, pub.offset, pub.keys) == (
        EventType.PUB, "orders", "kafka:orders/3/1017", 3, 1017, "order-42")
    assert (pub.broker, pub.body_len, pub.born_ms, pub.time_ms, pub.cost_us, pub.status) == (
        "b1:9092", 120, T0_MS, T0_MS + 2, 2500, Status.OK)
    assert (pub.trace_id, pub.span_id, pub.props) == (TRACE_ID.hex(), "0000000000000005", None)

    before, after = events(span("process orders", CONSUMER, {
        **common, "messaging.operation.type": "process", "messaging.consumer.group.name": "billing-g"}, span_id=9))
    assert (before.type, after.type) == (EventType.SUB_BEFORE, EventType.SUB_AFTER)
    assert before.msg_id == after.msg_id == "kafka:orders/3/1017"
    assert before.group == after.group == "billing-g"
    assert before.request_id == after.request_id == "0000000000000009"
    assert (before.time_ms, after.time_ms, after.cost_us, after.status) == (T0_MS, T0_MS + 2, 2500, Status.OK)


def test_older_conventions_as_todays_instrumentations_emit_them() -> None:
    # kafka-python / confluent-kafka: messaging.destination, messaging.kafka.partition, messaging.operation.
    [before] = events(span("orders receive", CONSUMER, {
        "messaging.system": "kafka", "messaging.destination": "orders", "messaging.kafka.partition": 2,
        "messaging.kafka.message.offset": 40, "messaging.kafka.message_key": "k", "messaging.operation": "receive",
        "messaging.kafka.consumer_group": "old-g"}))
    assert (before.type, before.msg_id, before.queue, before.offset, before.keys, before.group) == (
        EventType.SUB_BEFORE, "kafka:orders/2/40", 2, 40, "k", "old-g")
    # 1.2x names: messaging.kafka.destination.partition, messaging.kafka.consumer.group, "deliver".
    before, after = events(span("orders deliver", CONSUMER, {
        "messaging.system": "kafka", "messaging.destination.name": "orders",
        "messaging.kafka.destination.partition": 1, "messaging.kafka.message.offset": 7,
        "messaging.operation": "deliver", "messaging.kafka.consumer.group": "g12"}))
    assert (after.type, after.msg_id, after.group) == (EventType.SUB_AFTER, "kafka:orders/1/7", "g12")
    # RabbitMQ with a message id (old messaging.message_id) and the routing key as the key.
    [pub] = events(span("orders publish", PRODUCER, {
        "messaging.system": "rabbitmq", "messaging.destination": "orders", "messaging.message_id": "m-1",
        "messaging.rabbitmq.routing_key": "eu.orders", "messaging.operation": "publish"}))
    assert (pub.type, pub.msg_id, pub.keys, pub.queue, pub.offset) == (EventType.PUB, "m-1", "eu.orders", -1, -1)


def test_aio_pika_exchange_comma_routing_key_destinations() -> None:
    base = {"messaging.system": "rabbitmq", "messaging.message.id": "m"}
    [pub] = events(span(",orders send", PRODUCER, {**base, "messaging.destination": ",orders"}))
    assert (pub.topic, pub.keys) == ("orders", "")  # the default exchange: the routing key names the queue
    [pub] = events(span("shop,eu.orders send", PRODUCER, {**base, "messaging.destination": "shop,eu.orders"}))
    assert (pub.topic, pub.keys) == ("shop", "eu.orders")


def test_operation_from_the_span_name_or_kind_when_no_attribute_says() -> None:
    base = {"messaging.system": "rabbitmq", "messaging.destination": "orders", "messaging.message.id": "m"}
    assert events(span("orders send", PRODUCER, base))[0].type == EventType.PUB  # pika's publish span
    assert [e.type for e in events(span("process orders", INTERNAL, base))] == [EventType.SUB_BEFORE,
                                                                                 EventType.SUB_AFTER]
    assert [e.type for e in events(span("handle", CONSUMER, base))] == [EventType.SUB_BEFORE]
    assert otlp.map_span(span("handle", INTERNAL, base), RESOURCE) == otlp.NO_OPERATION
    assert events(span("x", CONSUMER, {**base, "messaging.operation.type": "create"}))[0].type == EventType.PUB
    assert len(events(span("x", CONSUMER, {**base, "messaging.operation.type": "settle"}))) == 2


def test_errors_and_exception_events_become_status_and_error_text() -> None:
    base = {"messaging.system": "rabbitmq", "messaging.destination.name": "orders", "messaging.message.id": "m",
            "messaging.operation.type": "process"}
    _, after = events(span("p", CONSUMER, base, exception=("ValueError", "bad order"), error="ValueError"))
    assert (after.status, after.error) == (Status.EXCEPTION, "ValueError: bad order")
    _, after = events(span("p", CONSUMER, base, error="nacked"))
    assert (after.status, after.error) == (Status.FAILED, "nacked")
    # A receive span that failed ends the attempt: SUB_BEFORE + a failed SUB_AFTER.
    receive = {**base, "messaging.operation.type": "receive"}
    assert [e.status for e in events(span("r", CONSUMER, receive, error="boom"))] == [Status.OK, Status.FAILED]
    [pub] = events(span("s", PRODUCER, {**base, "messaging.operation.type": "publish"},
                        exception=("KafkaTimeoutError", "")))
    assert (pub.status, pub.error) == (Status.FAILED, "KafkaTimeoutError")


def test_kafka_ids_synthetic_ids_are_replaced_real_ones_kept() -> None:
    base = {"messaging.system": "kafka", "messaging.destination.name": "t", "messaging.destination.partition.id": "0",
            "messaging.kafka.offset": 5, "messaging.operation.type": "receive"}
    # aiokafka / confluent-kafka render topic.partition.offset as the id: the derived form wins.
    assert events(span("r", CONSUMER, {**base, "messaging.message.id": "t.0.5"}))[0].msg_id == "kafka:t/0/5"
    assert events(span("r", CONSUMER, {**base, "messaging.message.id": "order-9"}))[0].msg_id == "order-9"
    # confluent-kafka's process span: partition, and the offset only inside that id.
    before, _ = events(span("t process", CONSUMER, {
        "messaging.system": "kafka", "messaging.destination": "t", "messaging.kafka.partition": 1,
        "messaging.operation": "process", "messaging.message.id": "t.1.42"}))
    assert (before.msg_id, before.queue, before.offset) == ("kafka:t/1/42", 1, 42)


def test_group_falls_back_to_the_service_name() -> None:
    [before] = events(span("r", CONSUMER, {"messaging.system": "rabbitmq", "messaging.destination": "q",
                                           "messaging.message.id": "m", "messaging.operation": "receive"}))
    assert before.group == "billing"


@pytest.mark.parametrize(("name", "kind", "attrs", "reason"), [
    ("GET /", INTERNAL, {"http.method": "GET"}, otlp.NOT_MESSAGING),
    ("send", PRODUCER, {"messaging.system": "kafka"}, otlp.NO_DESTINATION),
    # kafka-python's send span: partition but no offset (the span ends before the broker answers).
    ("t send", PRODUCER, {"messaging.system": "kafka", "messaging.destination": "t", "messaging.kafka.partition": 0},
     otlp.NO_MESSAGE_ID),
    ("t receive", CONSUMER, {"messaging.system": "kafka", "messaging.destination.name": "t",
                             "messaging.batch.message_count": 12}, otlp.BATCH_SPAN),
])
def test_spans_that_cannot_be_placed_say_why(name: str, kind: int, attrs: dict, reason: str) -> None:
    assert otlp.map_span(span(name, kind, attrs), RESOURCE) == reason


def test_map_request_groups_by_resource_and_counts_skips() -> None:
    ok = {"messaging.system": "rabbitmq", "messaging.destination": "q", "messaging.message.id": "m"}
    req = request(span("q send", PRODUCER, ok), span("GET", INTERNAL, {"http.method": "GET"}),
                  span("t send", PRODUCER, {"messaging.system": "kafka", "messaging.destination": "t"}))
    mapped = otlp.map_request(req)
    [resource] = mapped.resources
    assert (resource.client_id, resource.app, resource.host, len(resource.events)) == ("otel:shop/i-1", "shop",
                                                                                       "web-1", 1)
    assert (mapped.spans, mapped.mapped_spans, dict(mapped.skipped)) == (
        3, 1, {otlp.NOT_MESSAGING: 1, otlp.NO_MESSAGE_ID: 1})
    assert mapped.rejected == 1  # the HTTP span is ignored, not rejected
    assert mapped.error_message == "messaging spans tracehook cannot place: 1 no_message_id"
    assert otlp.client_id_for({"service.name": "s", "host.name": "h", "process.pid": 12}) == "otel:s/h:12"


def test_a_send_span_nested_in_a_send_of_the_same_message_is_one_send() -> None:
    attrs = {"messaging.system": "rabbitmq", "messaging.destination": "q", "messaging.message.id": "m"}
    outer = span("q send", PRODUCER, attrs, span_id=1)
    inner = span("q send", PRODUCER, attrs, span_id=2)
    inner.parent_span_id = outer.span_id
    other = span("q send", PRODUCER, {**attrs, "messaging.message.id": "m2"}, span_id=3)
    other.parent_span_id = outer.span_id  # a different message sent inside a send: kept
    mapped = otlp.map_request(request(inner, outer, other))
    assert [e[4] for e in mapped.resources[0].events] == ["m", "m2"]
    assert (mapped.mapped_spans, dict(mapped.skipped), mapped.rejected) == (2, {otlp.NESTED_SEND: 1}, 0)


def test_decode_protobuf_and_json_with_hex_ids() -> None:
    req = request(span("q send", PRODUCER, {"messaging.system": "rabbitmq", "messaging.destination": "q",
                                            "messaging.message.id": "m"}))
    assert otlp.decode_request(req.SerializeToString(), otlp.PROTOBUF) == req
    doc = json_format.MessageToDict(req)
    for s in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:  # OTLP/JSON ids are hex, not base64
        s["traceId"], s["spanId"] = TRACE_ID.hex(), "0000000000000001"
        s["kind"] = PRODUCER  # and enums are integers
    assert otlp.decode_request(json.dumps(doc).encode(), otlp.JSON) == req
    with pytest.raises(BadOtlpRequest) as bad:
        otlp.decode_request(b"\xff\xff\xff", otlp.PROTOBUF)
    assert bad.value.reason == "bad_protobuf"
    for body in (b"{", b"[]", b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}'):
        with pytest.raises(BadOtlpRequest) as bad:
            otlp.decode_request(body, otlp.JSON)
        assert bad.value.reason == "bad_json"
    with pytest.raises(UnsupportedMediaType):
        otlp.decode_request(gzip.compress(b"x"), "text/plain")


def test_extreme_span_values_map_to_events_the_wire_format_accepts() -> None:
    """Issue 41: whatever a span holds, its events are ones the collector indexes (prepare checks every
    batch it makes; a refusal there would be a 500)."""
    attrs = {"messaging.system": "kafka", "messaging.destination.name": "orders", "messaging.operation.type": "process",
             "messaging.destination.partition.id": MAX_INT, "messaging.kafka.offset": MAX_INT,
             "messaging.message.body.size": MAX_INT, "tracehook.store_time_ms": MAX_INT}
    for store_time, expected in ((MAX_INT, 0), (MAX_TIME_MS + 1, 0), (MAX_TIME_MS, MAX_TIME_MS)):
        for start_ns, duration_ns in ((0, 0), (2**64 - 1, 0), (0, 2**64 - 1)):
            mapped = events(span("process orders", CONSUMER, {**attrs, "tracehook.store_time_ms": store_time},
                                 start_ns=start_ns, duration_ns=duration_ns))
            assert decode_batch(encode_batch(BatchHeader("c", 1), mapped)).events == mapped
            for event in mapped:
                assert event.store_ms == expected and (event.queue, event.offset) == (MAX_INT, MAX_INT)
                assert all(lo <= getattr(event, f) <= hi for f, (lo, hi) in INT_RANGES.items())
