"""The index job on a real standalone Spark cluster (scripts/spark: a master and a worker on
loopback) reads the Kafka trace topic with Spark's Kafka source and writes, into real HBase,
exactly the index of the same batches indexed in process.

In-process indexing is the reference that tests/e2e/test_kafka_index.py holds the local-mode
run from Kafka to, so the cluster's index equals a local-mode run's without a second JVM here.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fixtures.spark_cluster import ROOT, driver_env
from kafka_log_helpers import dump, index_command, post, start_collector, traffic_batch

from collector.index.indexer import finish_batch, index_payloads
from collector.store import open_store
from spark_jobs import APP_NAME

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.hbase, pytest.mark.kafka]


def _completed_apps() -> list[dict[str, Any]]:
    """Applications the standalone master ran to the end (from its web UI's JSON page)."""
    run = Path(os.environ.get("SPARK_RUN_DIR", ROOT / ".run" / "spark"))
    ui = (run / "ui.port").read_text().strip()
    with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=10) as response:
        doc = json.load(response)
    return list(doc.get("completedapps", []))


def _reference(bodies: list[bytes], url: str) -> None:
    store = open_store(url)
    try:
        index_payloads(store, bodies)
        finish_batch(store)
    finally:
        store.close()


def test_the_standalone_cluster_indexes_the_kafka_topic(
    spark_master: str, kafka_bootstrap: str, make_hbase_url: Callable[..., str], tmp_path: Path
) -> None:
    source = f"kafka://{kafka_bootstrap}/trace-{uuid.uuid4().hex[:8]}"
    base_ms = int(time.time() * 1000) - 60_000
    bodies = [traffic_batch(f"c{c}", s, (c * 10 + s) * 4, 4, base_ms) for c in range(3) for s in range(4)]
    collector, url = start_collector(tmp_path / "collector", source)
    try:
        for body in bodies:
            assert post(url, body).status_code == 200
    finally:
        collector.terminate()
        collector.wait(timeout=60)

    store_url = make_hbase_url(salt_buckets="4")  # a count other than the default: the executors must use it
    runs_before = [a["name"] for a in _completed_apps()].count(APP_NAME)
    env = {**driver_env(spark_master), "TRACEHOOK_INDEX_CHECKPOINTS": str(tmp_path / "checkpoints")}
    done = subprocess.run(
        [*index_command("--source", source, "--store", store_url), "--master", spark_master, "--driver-memory", "512m"],
        capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{len(bodies)} record(s), {3 * 4 * len(bodies)} event(s)" in done.stdout, done.stdout

    assert [a["name"] for a in _completed_apps()].count(APP_NAME) == runs_before + 1  # it ran on the master
    reference = f"local:{tmp_path / 'reference.sqlite3'}?salt_buckets=4"
    _reference(bodies, reference)
    expected = dump(reference)
    assert sum(map(len, expected.values())) > 0
    assert dump(store_url) == expected
