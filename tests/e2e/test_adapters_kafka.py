"""Kafka through the whole chain: kafka-python adapter -> collector -> sealed trace log -> index -> trace.

N keyed messages over 3 partitions; group "retry" fails some messages once and re-reads
them, group "dlq" dead-letters others.  Each message's indexed trace must show the send
with the broker's partition/offset and exactly both groups' outcomes.
"""

from __future__ import annotations

from typing import Any

import pytest
from adapter_helpers import collect_and_index, trace_query
from fixtures.brokers import to_end
from fixtures.ports import free_port
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

import tracehook
from tracehook import HEADER_MSG_ID
from tracehook.adapters import kafka_python

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

N = 24
FAILING = {f"k{i}" for i in range(0, N, 4)}
DEAD = {f"k{i}" for i in range(1, N, 5)}


def _consume(bootstrap: str, topic: str, group: str, tracer: tracehook.Tracer, handle: Any) -> None:
    consumer = kafka_python.TracedConsumer(
        KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=5000), tracer)
    for record in to_end(consumer):
        handle(consumer, record)
    consumer.close()


def test_trace_shows_send_and_both_groups(kafka_bootstrap, tmp_path):
    topic = f"e2e-{free_port()}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(topic, 3, 1)])
    admin.close()
    metas = {}

    def run(tracer: tracehook.Tracer) -> None:
        producer = kafka_python.TracedProducer(KafkaProducer(bootstrap_servers=kafka_bootstrap), tracer)
        metas.update({f"k{i}": producer.send(topic, b"m%d" % i, key=b"k%d" % i).get(10) for i in range(N)})
        producer.close()

        failed_once: set[str] = set()

        def retrying(consumer: Any, record: Any) -> None:
            key = record.key.decode()
            if key in FAILING and key not in failed_once:
                failed_once.add(key)
                consumer.fail(record, "downstream timeout")
                consumer.seek(TopicPartition(record.topic, record.partition), record.offset)

        def dead_lettering(consumer: Any, record: Any) -> None:
            key = record.key.decode()
            if key in DEAD:
                consumer.fail(record, "poison")
                tracer.record_dead(topic, dict(record.headers)[HEADER_MSG_ID].decode(), "dlq", error="poison",
                                   keys=key, queue=record.partition, offset=record.offset)

        _consume(kafka_bootstrap, topic, "retry", tracer, retrying)
        _consume(kafka_bootstrap, topic, "dlq", tracer, dead_lettering)

    with trace_query(collect_and_index(tmp_path, run)) as query:
        # the consumers saw the ids the producer wrote; find each message through its key
        ids = {}
        for e in (query.by_key(topic, f"k{i}", 0, 2**62, 10).items for i in range(N)):
            assert len(e) == 1
            ids[e[0].keys] = e[0].msg_id
        for key, msg_id in ids.items():
            trace = query.get_trace(msg_id)
            assert trace is not None
            meta = metas[key]
            assert (trace.topic, trace.queue, trace.offset, trace.keys) == (topic, meta.partition, meta.offset, key)
            assert trace.send is not None and trace.store_ms == meta.timestamp
            statuses = {group: [a["status_name"] for a in attempts] for group, attempts in trace.consumes.items()}
            assert statuses == {
                "retry": ["FAILED", "OK"] if key in FAILING else ["OK"],
                "dlq": ["FAILED"] if key in DEAD else ["OK"],
            }, key
            assert [d["group"] for d in trace.dead] == (["dlq"] if key in DEAD else [])
