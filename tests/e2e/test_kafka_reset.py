"""kafka-reset and the replay helper on a real Kafka, with targets from the real index.

Messages with known broker timestamps over three partitions; a group consumes and commits
everything; then ``tracehook kafka-reset --time T`` (dry run, then --apply) must move the
group's committed offsets so that it re-reads exactly the records stored at or after T.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

import tracehook
from collector.demo import (
    free_port,
    index_in_process,
    seal_log,
    start_collector,
    stop_collector,
)
from tracehook.adapters import kafka_python
from tracehook.adapters.kafka_reset import committed_offsets, replay
from tracehook.cli import main as cli_main

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

N, STEP_MS, GROUP = 30, 1000, "ledger"


def _read_all(bootstrap: str, topic: str, commit: bool) -> list[Any]:
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=GROUP, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=4000)
    records = list(consumer)
    if commit:
        consumer.commit()
    consumer.close()
    return records


@pytest.fixture(scope="module")
def indexed(kafka_bootstrap, tmp_path_factory) -> dict[str, Any]:
    data_dir = tmp_path_factory.mktemp("reset")
    topic = f"reset-{free_port()}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(topic, 3, 1)])
    admin.close()
    port = free_port()
    proc = start_collector(str(data_dir), port)
    base = int(time.time() * 1000) - 3_600_000
    try:
        tracer = tracehook.Tracer(tracehook.TracerConfig(app="shop", collectors=(f"http://127.0.0.1:{port}",),
                                                         linger_s=0.02))
        producer = kafka_python.TracedProducer(KafkaProducer(bootstrap_servers=kafka_bootstrap), tracer)
        metas = [producer.send(topic, b"m%d" % i, key=b"k%d" % i, partition=i % 3,
                               timestamp_ms=base + i * STEP_MS).get(10) for i in range(N)]
        producer.close()
        assert len(_read_all(kafka_bootstrap, topic, commit=True)) == N
        assert tracer.flush(10)
        tracer.close()
        seal_log(f"http://127.0.0.1:{port}", str(data_dir / "log"))
    finally:
        stop_collector(proc)
    store = f"local:{data_dir / 'index.sqlite3'}"
    index_in_process(str(data_dir / "log"), store)
    return {"topic": topic, "store": store, "metas": metas, "base": base}


def _reset(bootstrap: str, indexed: dict[str, Any], time_ms: int, *extra: str) -> int:
    return cli_main(["kafka-reset", "--bootstrap", bootstrap, "--group", GROUP, "--topic", indexed["topic"],
                     "--time", str(time_ms), "--store", indexed["store"], *extra])


def test_reset_rewinds_to_exactly_the_records_after_t(kafka_bootstrap, indexed, capsys):
    topic, metas = indexed["topic"], indexed["metas"]
    end = committed_offsets(kafka_bootstrap, GROUP, topic)
    assert end == {p: sum(1 for m in metas if m.partition == p) for p in range(3)}

    t = indexed["base"] + 17 * STEP_MS + 500  # between two messages
    assert _reset(kafka_bootstrap, indexed, t) == 0   # dry run
    assert "rewind" in capsys.readouterr().out
    assert committed_offsets(kafka_bootstrap, GROUP, topic) == end

    assert _reset(kafka_bootstrap, indexed, t, "--apply") == 0
    expected = sorted((m.partition, m.offset) for m in metas if m.timestamp >= t)
    reread = sorted((r.partition, r.offset) for r in _read_all(kafka_bootstrap, topic, commit=True))
    assert reread == expected and expected


def test_rewind_only_keeps_positions_unless_forced(kafka_bootstrap, indexed):
    topic, metas = indexed["topic"], indexed["metas"]
    early = indexed["base"] + 5 * STEP_MS
    assert _reset(kafka_bootstrap, indexed, early, "--apply") == 0
    at_early = committed_offsets(kafka_bootstrap, GROUP, topic)
    later = indexed["base"] + 20 * STEP_MS
    assert _reset(kafka_bootstrap, indexed, later, "--apply") == 0        # forward: not without --force
    assert committed_offsets(kafka_bootstrap, GROUP, topic) == at_early
    assert _reset(kafka_bootstrap, indexed, later, "--apply", "--force") == 0
    assert committed_offsets(kafka_bootstrap, GROUP, topic) == {
        p: min(m.offset for m in metas if m.partition == p and m.timestamp >= later) for p in range(3)}


def test_replay_reads_exactly_the_listed_offsets(kafka_bootstrap, indexed):
    metas = indexed["metas"]
    wanted = [(metas[i].partition, metas[i].offset) for i in (3, 11, 28)]
    got: list[Any] = []
    assert replay(kafka_bootstrap, indexed["topic"], wanted, got.append) == 3
    assert sorted((r.partition, r.offset, r.key) for r in got) == sorted(
        (metas[i].partition, metas[i].offset, b"k%d" % i) for i in (3, 11, 28))
