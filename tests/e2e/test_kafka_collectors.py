"""Three stateless collectors over one Kafka trace topic: one SIGKILLed mid-run, the broker bounced.

Producers (the real library, in their own processes: tests/e2e/fault_helpers.py) spread over the
three collectors' list; the busiest collector is SIGKILLed while they send, then the Kafka broker
is restarted (``scripts/kafka restart``: same port, same data).  The broker is this test's own
(``private_kafka``): bouncing the session's shared one would fail whatever else used it meanwhile.
Afterwards every producer's ``emitted == acknowledged + counted drops``, every acknowledged batch
is in the topic, and after ``tracehook index --source kafka://`` every acknowledged event is in the
index exactly once (batches retried through another collector may be in the topic twice).
"""

from __future__ import annotations

import json
import pathlib
import random
import subprocess
import sys
import time
import uuid
from typing import Any

import pytest
from fault_helpers import msg_id
from fixtures.brokers import PrivateKafka
from kafka_log_helpers import run_index, start_collector

from collector.store import codec, keys, open_store, schema
from collector.store.reader import TraceQuery
from tracehook.wire import EventType, decode_batch

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

PRODUCER = str(pathlib.Path(__file__).with_name("fault_helpers.py"))
# 3,000 events a producer at 300/s: each fault still lands mid-run (the kill after about a fifth of
# the events, the bounce right after), with a tenth of the events to check and index.
COUNT, RATE, PRODUCERS = 3_000, 300, 3
KILL_AFTER_EVENTS = 2_000


def events_acknowledged(url: str) -> int:
    import requests

    try:
        text = requests.get(url + "/metrics", timeout=2).text
    except requests.ConnectionError:
        return 0
    return next((int(float(line.split()[1])) for line in text.splitlines()
                 if line.startswith("tracehook_collector_events_total ")), 0)


def topic_batches(bootstrap: str, topic: str) -> tuple[dict[tuple[str, int], list[str]], int]:
    """Every record of the topic as {(client id, seq): msg ids}, and how many records repeated a batch.

    Read up to each partition's end offset, taken first (the producers are done: nothing comes after;
    the collectors' idempotent producer writes no transaction markers, so the last record is at end - 1)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    batches: dict[tuple[str, int], list[str]] = {}
    repeats = 0
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        left = {p for p, end in ends.items() if end > 0}
        empty = 0
        while left and empty < 240:  # 240 empty polls in a row (2 min): a hang guard, not a timing assertion
            msg = consumer.poll(0.5)
            if msg is None:
                empty += 1
                continue
            empty = 0
            assert msg.error() is None, msg.error()
            batch = decode_batch(msg.value())
            key = (batch.header.client_id, batch.header.seq)
            repeats += key in batches
            batches[key] = [e.msg_id for e in batch.events]
            if msg.offset() + 1 >= ends[msg.partition()]:
                left.discard(msg.partition())
        assert not left, f"partitions {sorted(left)} not read to their end offsets {ends}"
    finally:
        consumer.close()
    return batches, repeats


def check_index(store_url: str, expected: set[str]) -> int:
    """Every expected message has exactly one PUB in the index; the trace lookup agrees on a sample."""
    store = open_store(store_url)
    try:
        found: dict[str, list[tuple[int, str]]] = {}
        for row, columns in store.scan(schema.MESSAGES, b"", keys.STOP):
            msg_id = str(keys.unpack(row)[1])
            events = (codec.decode_event_value(msg_id, v).event for v in columns.values())
            found[msg_id] = [(e.type, e.msg_id) for e in events]
        wrong = [m for m in expected if found.get(m) != [(EventType.PUB, m)]]
        assert not wrong, f"{len(wrong)} acknowledged messages not indexed exactly once, e.g. {wrong[:3]}"
        query = TraceQuery(store)
        for m in random.Random(7).sample(sorted(expected), min(500, len(expected))):
            trace = query.get_trace(m)
            assert trace is not None and trace.send is not None and len(trace.events) == 1, m
        return len(found)
    finally:
        store.close()


@pytest.mark.timeout(900)
def test_three_collectors_one_killed_broker_bounced_every_acknowledged_event_once(
    tmp_path: pathlib.Path, private_kafka: PrivateKafka
) -> None:
    kafka_bootstrap = private_kafka.bootstrap
    topic = f"trace-{uuid.uuid4().hex[:8]}"
    source = f"kafka://{kafka_bootstrap}/{topic}"
    collectors = [start_collector(tmp_path / f"c{i}", source) for i in range(3)]
    urls = [url for _, url in collectors]
    prefixes = [f"p{i}" for i in range(PRODUCERS)]
    producers = []
    for prefix in prefixes:
        with open(tmp_path / f"{prefix}.out", "wb") as out, open(tmp_path / f"{prefix}.err", "wb") as err:
            producers.append(subprocess.Popen(
                [sys.executable, PRODUCER, "--collectors", ",".join(urls), "--prefix", prefix, "--count", str(COUNT),
                 "--rate", str(RATE), "--queue-size", str(COUNT), "--flush-timeout", "120"],
                stdout=out, stderr=err))
    try:
        for _ in range(1200):  # a hang guard, not a timing assertion
            served = [events_acknowledged(u) for u in urls]
            if sum(served) >= KILL_AFTER_EVENTS:
                break
            assert all(p.poll() is None for p in producers), "the producers finished before the faults"
            time.sleep(0.1)
        else:
            pytest.fail(f"the collectors acknowledged {sum(served)} events, never {KILL_AFTER_EVENTS}: "
                        "no fault was injected")
        busiest = max(range(3), key=lambda i: served[i])
        collectors[busiest][0].kill()  # SIGKILL, batches in flight
        collectors[busiest][0].wait(timeout=30)
        assert all(p.poll() is None for p in producers), "the kill was not mid-run"
        private_kafka.restart()
        reports: list[dict[str, Any]] = []
        for proc, prefix in zip(producers, prefixes):
            proc.wait(timeout=300)
            reports.append(json.loads((tmp_path / f"{prefix}.out").read_text().strip().splitlines()[-1]))
    finally:
        for proc in producers:
            if proc.poll() is None:
                proc.kill()
        for proc, _ in collectors:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)

    batches, repeats = topic_batches(kafka_bootstrap, topic)
    acknowledged: set[str] = set()
    for report, prefix in zip(reports, prefixes):
        stats = report["stats"]
        assert report["flushed"] and stats["queued"] == stats["in_flight"] == 0, stats
        assert stats["emitted"] == COUNT == stats["sent"] + stats["dropped_total"], stats
        assert sum(n for _, n in report["acked"]) == stats["sent"]
        for seq, n in report["acked"]:  # an acknowledged batch is in the topic, whole
            ids = batches.get((stats["client_id"], seq))
            assert ids is not None and len(ids) == n, (prefix, seq)
            acknowledged.update(ids)
        assert len({i for i in acknowledged if i.startswith(prefix + "-")}) == stats["sent"]
    assert acknowledged <= {msg_id(p, i) for p in prefixes for i in range(COUNT)}

    store_url = f"local:{tmp_path / 'index.sqlite3'}"
    run_index(tmp_path, "--source", source, "--store", store_url)
    indexed = check_index(store_url, acknowledged)
    print(json.dumps({"served_before_kill": served, "killed": busiest, "records_repeated": repeats,
                      "acknowledged": len(acknowledged), "indexed": indexed,
                      "dropped": sum(r["stats"]["dropped_total"] for r in reports),
                      "refused": [r["stats"]["refused"] for r in reports]}))
