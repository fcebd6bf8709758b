"""kafka-python adapter against a real Kafka broker."""

from __future__ import annotations

from collections import defaultdict

import pytest
from fixtures.brokers import to_end
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

from tracehook import HEADER_MSG_ID, EventType, Status
from tracehook.adapters import HEADER_TAGS, kafka_python

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

N = 30


def _create_topic(bootstrap: str, topic: str, partitions: int = 3) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def _consumer(bootstrap: str, topic: str, group: str) -> KafkaConsumer:
    return KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                         enable_auto_commit=False, consumer_timeout_ms=5000)


def test_send_records_partition_offset_and_headers(kafka_bootstrap, capture, topic):
    _create_topic(kafka_bootstrap, topic)
    producer = kafka_python.TracedProducer(KafkaProducer(bootstrap_servers=kafka_bootstrap), capture.tracer)
    caller_headers = [(HEADER_TAGS, b"vip")]
    metas = [producer.send(topic, b"body-%d" % i, key=b"k%d" % i, headers=caller_headers).get(10)
             for i in range(N)]
    producer.close()
    assert caller_headers == [(HEADER_TAGS, b"vip")]  # the caller's list is not changed

    pubs = capture.of(EventType.PUB)
    assert len(pubs) == N
    by_key = {e.keys: e for e in pubs}
    for i, meta in enumerate(metas):
        event = by_key[f"k{i}"]
        assert (event.topic, event.queue, event.offset) == (topic, meta.partition, meta.offset)
        assert event.store_ms == meta.timestamp and event.status == Status.OK
        assert event.tags == "vip" and event.body_len == len(b"body-%d" % i)
    assert len({e.msg_id for e in pubs}) == N

    # the ids went into the records' headers, so a plain consumer sees them
    consumer = _consumer(kafka_bootstrap, topic, "plain")
    headers = [dict(r.headers) for r in to_end(consumer)]
    consumer.close()
    assert {h[HEADER_MSG_ID].decode() for h in headers} == {e.msg_id for e in pubs}
    assert all(h["traceparent"].decode().startswith("00-") for h in headers)


def test_two_groups_retrying_and_dead_lettering(kafka_bootstrap, capture, topic):
    _create_topic(kafka_bootstrap, topic)
    producer = kafka_python.TracedProducer(KafkaProducer(bootstrap_servers=kafka_bootstrap), capture.tracer)
    for i in range(N):
        producer.send(topic, b"m%d" % i, key=b"k%d" % i)
    producer.flush()
    failing = {f"k{i}" for i in range(0, N, 4)}   # group "retry" fails these once, then succeeds
    dead = {f"k{i}" for i in range(1, N, 5)}      # group "dlq" dead-letters these

    retry = kafka_python.TracedConsumer(_consumer(kafka_bootstrap, topic, "retry"), capture.tracer)
    failed_once: set[str] = set()
    handled = 0
    for record in to_end(retry):
        key = record.key.decode()
        if key in failing and key not in failed_once:
            failed_once.add(key)
            retry.fail(record, "downstream timeout")
            retry.seek(TopicPartition(record.topic, record.partition), record.offset)  # re-read it
            continue
        handled += 1
    retry.close()
    assert handled == N

    dlq = kafka_python.TracedConsumer(_consumer(kafka_bootstrap, topic, "dlq"), capture.tracer)
    for record in to_end(dlq):
        key = record.key.decode()
        if key in dead:
            msg_id = dict(record.headers)[HEADER_MSG_ID].decode()
            dlq.fail(record, "poison")
            capture.tracer.record_dead(topic, msg_id, "dlq", error="poison", keys=key,
                                       queue=record.partition, offset=record.offset)
    dlq.close()

    events = capture.events()
    pub = {e.msg_id: e for e in events if e.type == EventType.PUB}
    assert len(pub) == N
    outcomes: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    befores: dict[str, tuple] = {}
    for e in events:
        if e.type == EventType.SUB_BEFORE:
            befores[e.request_id] = e
        elif e.type == EventType.SUB_AFTER:
            assert e.request_id in befores
            assert (e.queue, e.offset, e.keys) == (pub[e.msg_id].queue, pub[e.msg_id].offset, pub[e.msg_id].keys)
            outcomes[(e.msg_id, e.group)].append(e.status)
    deads = {(e.msg_id, e.group) for e in events if e.type == EventType.DEAD}
    for msg_id, send in pub.items():
        expected_retry = [Status.FAILED, Status.OK] if send.keys in failing else [Status.OK]
        assert outcomes[(msg_id, "retry")] == expected_retry, send.keys
        expected_dlq = [Status.FAILED] if send.keys in dead else [Status.OK]
        assert outcomes[(msg_id, "dlq")] == expected_dlq, send.keys
        assert ((msg_id, "dlq") in deads) == (send.keys in dead)


def test_instrument_is_idempotent_and_keeps_behaviour(kafka_bootstrap, capture, topic):
    _create_topic(kafka_bootstrap, topic, partitions=1)
    original_send = KafkaProducer.send
    kafka_python.instrument(capture.tracer)
    kafka_python.instrument(capture.tracer)
    try:
        assert kafka_python.is_instrumented()
        producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
        meta = producer.send(topic, b"x", key=b"a").get(10)
        # the client's own argument check still raises its own exception
        with pytest.raises(ValueError, match="key or value"):
            producer.send(topic)  # neither value nor key
        producer.close()
        consumer = _consumer(kafka_bootstrap, topic, "inst")
        records = list(to_end(consumer))
        consumer.close()
    finally:
        kafka_python.uninstrument()
        kafka_python.uninstrument()
    assert KafkaProducer.send is original_send and not kafka_python.is_instrumented()
    assert [(r.partition, r.offset) for r in records] == [(meta.partition, meta.offset)]
    types = sorted(e.type for e in capture.events())
    assert types == sorted([EventType.PUB, EventType.SUB_BEFORE, EventType.SUB_AFTER])


@pytest.mark.parametrize("how", ["wrapper", "instrument"])
def test_poll_ends_attempts_at_next_poll_and_close(kafka_bootstrap, capture, topic, how):
    _create_topic(kafka_bootstrap, topic)
    producer = kafka_python.TracedProducer(KafkaProducer(bootstrap_servers=kafka_bootstrap), capture.tracer)
    metas = {f"k{i}": producer.send(topic, b"m%d" % i, key=b"k%d" % i).get(10) for i in range(N)}
    producer.close()
    failing = {f"k{i}" for i in range(0, N, 7)}

    if how == "instrument":
        kafka_python.instrument(capture.tracer)
    try:
        plain = _consumer(kafka_bootstrap, topic, f"poll-{how}")
        consumer = kafka_python.TracedConsumer(plain, capture.tracer) if how == "wrapper" else plain
        polled: list[list] = []
        for _ in range(100):   # a hang guard, not a timing assertion
            if sum(map(len, polled)) >= N:
                break
            batch = [r for records in consumer.poll(timeout_ms=500, max_records=7).values() for r in records]
            if batch:
                # everything polled before is settled now, this batch is still open
                after = [e for e in capture.of(EventType.SUB_AFTER) if e.group == f"poll-{how}"]
                assert len(after) == sum(map(len, polled))
                polled.append(batch)
            for record in batch:
                if record.key.decode() in failing:
                    if how == "wrapper":
                        consumer.fail(record, "bad")
                    else:
                        kafka_python.fail(consumer, record, "bad")
        consumer.close()
    finally:
        kafka_python.uninstrument()
    assert len(polled) > 1 and sum(map(len, polled)) == N

    events = capture.events()
    pubs = {e.msg_id: e for e in events if e.type == EventType.PUB}
    befores = {e.request_id: e for e in events if e.type == EventType.SUB_BEFORE}
    afters = [e for e in events if e.type == EventType.SUB_AFTER]
    assert len(befores) == len(afters) == N                     # one attempt per record, none traced twice
    for e in afters:
        send = pubs[e.msg_id]                                   # the consume joins the send
        assert e.request_id in befores and e.group == f"poll-{how}"
        assert (e.queue, e.offset) == (metas[send.keys].partition, metas[send.keys].offset)
        assert e.status == (Status.FAILED if send.keys in failing else Status.OK), send.keys
