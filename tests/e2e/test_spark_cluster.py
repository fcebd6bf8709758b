"""The index job on a real standalone Spark cluster (scripts/spark: a master and a worker on
loopback) writes, into real HBase, exactly the index a local-mode run writes from the same
trace log: a log made by the tracehook library through a collector subprocess."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from fixtures.spark_cluster import ROOT, driver_env

import tracehook
from collector.log.file import sealed_segments
from collector.store import open_store, schema
from spark_jobs.index_job import APP_NAME

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.hbase]

TOKEN = "cluster-token"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _traced_log(data_dir: Path) -> Path:
    """A collector's log dir with two sealed segments of library traffic (sends and some consumes)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    with open(data_dir / "collector.out", "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "collector", "--data-dir", str(data_dir), "--port", str(port), "--store", "none",
             "--ingest-token", TOKEN, "--segment-age", "3600"], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "collector did not become healthy"
            try:
                if requests.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                time.sleep(0.1)
        tracer = tracehook.Tracer(tracehook.TracerConfig(app="shop", collectors=(url,), token=TOKEN, linger_s=0.01))
        try:
            for round_ in range(2):
                for i in range(150):
                    topic = ("orders", "payments")[i % 2]
                    msg_id = tracer.record_send(topic, keys=f"key-{i % 7}", queue=i % 4, offset=round_ * 150 + i)
                    if i % 3 == 0:
                        with tracer.consume(topic, msg_id, "billing", keys=f"key-{i % 7}"):
                            pass
                assert tracer.flush(timeout=30)
                rolled = requests.post(url + "/v1/admin/roll", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
                assert rolled.status_code < 300
        finally:
            tracer.close(timeout=10)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    log_dir = data_dir / "log"
    assert len(sealed_segments(str(log_dir))) == 2
    return log_dir


def _index(log_dir: Path, store_url: str, master: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "collector.cli", "index", "--log-dir", str(log_dir), "--store", store_url,
         "--master", master, "--driver-memory", "512m"],
        capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _dump_and_drop(url: str) -> dict[str, list[Any]]:
    """Every row of the store, whose tables are then dropped (the suite shares one HBase)."""
    store = open_store(url)
    try:
        return {t.name: list(store.scan(t.name, b"", b"\xff")) for t in schema.TABLES}
    finally:
        try:
            store.drop_tables()
        finally:
            store.close()


def _completed_apps(master: str) -> list[dict[str, Any]]:
    """Applications the standalone master ran to the end (from its web UI's JSON page)."""
    run = ROOT / ".run" / "spark"
    ui = (Path(os.environ.get("SPARK_RUN_DIR", run)) / "ui.port").read_text().strip()
    with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=10) as response:
        doc = json.load(response)
    return list(doc.get("completedapps", []))


def test_the_standalone_cluster_indexes_what_local_mode_does(
    spark_master: str, make_hbase_url: Callable[..., str], tmp_path: Path
) -> None:
    (tmp_path / "collector").mkdir()
    log_dir = _traced_log(tmp_path / "collector")
    cluster_log, local_log = tmp_path / "cluster-log", tmp_path / "local-log"  # each run keeps its own checkpoint
    shutil.copytree(log_dir, cluster_log)
    shutil.copytree(log_dir, local_log)
    cluster_url = make_hbase_url(salt_buckets="4")  # a count other than the default: the executors must use it
    local_url = make_hbase_url(salt_buckets="4")
    runs_before = [a["name"] for a in _completed_apps(spark_master)].count(APP_NAME)

    _index(cluster_log, cluster_url, spark_master, driver_env(spark_master))
    _index(local_log, local_url, "local[1]", {**os.environ, "PYTHONPATH": str(ROOT)})

    runs = [a["name"] for a in _completed_apps(spark_master)].count(APP_NAME)
    assert runs == runs_before + 1  # the cluster run really ran on the standalone master
    cluster, local = _dump_and_drop(cluster_url), _dump_and_drop(local_url)
    assert len(cluster[schema.MESSAGES]) == 300
    assert cluster == local
