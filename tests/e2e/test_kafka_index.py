"""The index job on the Kafka trace topic (Spark's own Kafka source): the same index as from the file log.

Batches go through a collector with ``--log kafka://`` and, byte for byte the same, through a
file-log collector; ``tracehook index --source kafka://`` (one-shot, a --from/--to window,
follow mode into HBase) must leave exactly the cells indexing the file log leaves.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid

import pytest
from kafka_log_helpers import ROOT, dump, index_command, index_env, post, run_index, start_collector, traffic_batch

from tests.fixtures.indexing import index_sealed, seal_log

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(timeout=60)


def test_kafka_source_indexes_what_the_file_log_indexes(tmp_path, kafka_bootstrap, ready_hbase_url) -> None:
    """Also the progress line: it counts every partition of the topic, those no record came from too
    (5 partitions, the early batches from 3 clients, each client's batches keyed to one partition)."""
    topic = f"trace-{uuid.uuid4().hex[:8]}"
    source = f"kafka://{kafka_bootstrap}/{topic}"
    _create_topic(kafka_bootstrap, topic, partitions=5)
    kafka_store = f"local:{tmp_path / 'kafka.sqlite3'}"
    kafka_proc, kafka_url = start_collector(tmp_path / "kafka-collector", source)
    file_proc, file_url = start_collector(tmp_path / "file-collector")
    base_ms = int(time.time() * 1000) - 60_000
    early = [traffic_batch(f"c{c}", s, (c * 10 + s) * 4, 4, base_ms) for c in range(3) for s in range(3)]
    late = [traffic_batch("c9", s, 1000 + s * 4, 4, base_ms) for s in range(5)]
    try:
        for body in early:
            assert post(kafka_url, body).status_code == 200 and post(file_url, body).status_code == 200
        out = run_index(tmp_path, "--source", source, "--store", kafka_store)  # one-shot (AvailableNow)
        counts = rf"\b5 partition\(s\), {len(early)} record\(s\), {3 * 4 * len(early)} event\(s\)"
        assert re.search(counts, out), out
        window_from = int(time.time() * 1000)  # record timestamps are the collectors' receive times
        for body in late:
            assert post(kafka_url, body).status_code == 200 and post(file_url, body).status_code == 200
        seal_log(file_url, str(tmp_path / "file-collector" / "log"))
    finally:
        for proc in (kafka_proc, file_proc):
            proc.terminate()
            proc.wait(timeout=60)

    # The next one-shot run starts at the checkpoint's offsets: only the late batches.
    out = run_index(tmp_path, "--source", source, "--store", kafka_store)
    assert re.search(rf"\b{len(late)} record\(s\), {3 * 4 * len(late)} event\(s\)", out), out
    # The reference: the file log's records through the same indexer, in process (the Spark job on the
    # file log writes the same cells: tests/spark_jobs).
    file_store = f"local:{tmp_path / 'file.sqlite3'}"
    index_sealed(str(tmp_path / "file-collector" / "log"), file_store)
    expected = dump(file_store)
    assert sum(map(len, expected.values())) > 0
    assert dump(kafka_store) == expected

    # Re-index a window: only the late batches are read, and the index does not change.
    out = run_index(tmp_path, "--source", source, "--store", kafka_store, f"--from={window_from}",
                    f"--to={int(time.time() * 1000) + 1000}")
    assert re.search(rf"\b{len(late)} record\(s\), {3 * 4 * len(late)} event\(s\)", out), out
    assert dump(kafka_store) == expected

    # Follow mode into HBase, a few records per micro-batch: the same cells again.
    hbase_store = ready_hbase_url()  # its tables exist already: the job's tasks do not create them
    follower = subprocess.Popen(index_command("--source", source, "--store", hbase_store, "--follow",
                                              "--max-offsets-per-trigger", "3", "--trigger", "0.5"),
                                cwd=ROOT, env=index_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    try:
        lines: list[str] = []
        for line in follower.stdout:  # type: ignore[union-attr]  # a hang guard is the test timeout
            lines.append(line)
            if sum(int(n) for n in re.findall(r"(\d+) record\(s\)", "".join(lines))) >= len(early) + len(late):
                break
        # maxOffsetsPerTrigger 3 (Spark splits it over the partitions, rounding): many small micro-batches.
        assert len(lines) >= 4 and max(int(n) for n in re.findall(r"(\d+) record\(s\)", "".join(lines))) <= 4
        assert dump(hbase_store) == expected
    finally:
        follower.terminate()
        follower.communicate(timeout=120)
