"""Cluster safety: paths made absolute before they reach executors, a SQLite store refused on a
cluster master, and a real ``local-cluster`` run (executor JVMs, Python workers with their own cwd)."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from collector.log.file import TraceLog
from collector.log.state import committed_offset, readable_end
from collector.store import absolute_store_url, open_store, schema
from spark_jobs import add_arguments, check_store_for_master, index_once, run
from spark_jobs.errors import LocalStoreOnClusterError
from tracehook.wire import BatchHeader, EventType, encode_batch, make_event

T0 = 1_790_000_000_000


def _write_log(log_dir: str, segments: int = 3, per_segment: int = 40) -> None:
    header = BatchHeader("client-1", 1, "shop", "host-a", T0, {})
    log = TraceLog.open(log_dir, durability="os")
    try:
        for s in range(segments):
            events = [make_event(EventType.PUB, T0 + i, "", "orders", f"m{s}-{i}", keys=f"k{i % 5}", queue=s, offset=i)
                      for i in range(per_segment)]
            log.append([(T0, "client-1", s, encode_batch(header, events))])
            log.roll()
    finally:
        log.close()


def _dump(url: str) -> dict[str, list[Any]]:
    store = open_store(url)
    try:
        return {t.name: list(store.scan(t.name, b"", b"\xff")) for t in schema.TABLES}
    finally:
        store.close()


@pytest.mark.parametrize("master", ["spark://h:7077", "yarn", "k8s://https://h:6443", "mesos://h:5050", "localhost"])
def test_local_store_is_refused_with_a_cluster_master(master: str) -> None:
    with pytest.raises(LocalStoreOnClusterError, match="SQLite file on one host"):
        check_store_for_master(master, "local:/data/index.sqlite3")
    check_store_for_master(master, "hbase://hbase-1:9090?namespace=t")  # reachable from executors: fine


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local-cluster[2,1,1024]"])
def test_local_store_is_allowed_with_a_local_master(master: str) -> None:
    check_store_for_master(master, "local:/data/index.sqlite3")


def test_local_store_urls_become_absolute(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_store_url("local:index.sqlite3?ttl_days=2") == f"local:{tmp_path}/index.sqlite3?ttl_days=2"
    assert absolute_store_url("local:/a/b.sqlite3") == "local:/a/b.sqlite3"
    assert absolute_store_url("hbase://h:9090?namespace=t") == "hbase://h:9090?namespace=t"


def test_cli_refuses_a_local_store_on_a_cluster_before_starting_spark(tmp_path: Any,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--log-dir", str(tmp_path), "--store", "local:i.sqlite3", "--master", "spark://h:7077"])
    assert run(args) == 2
    assert "SQLite file on one host" in capsys.readouterr().err


@pytest.mark.spark
def test_relative_paths_work_when_the_cwd_is_not_the_executors(spark: Any, tmp_path: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # The local[2] session's Python workers keep the cwd the JVM started in, not this one.
    _write_log(str(tmp_path / "log"), segments=2, per_segment=5)
    monkeypatch.chdir(tmp_path)

    report = index_once(spark, "log", "local:index.sqlite3")

    assert (report.segments, report.events, report.bad) == (2, 10, {})
    assert (tmp_path / "index.sqlite3").exists()
    assert committed_offset("log") == readable_end("log").offset


_CLUSTER_DRIVER = textwrap.dedent("""
    import os, sys
    from spark_jobs import index_once, spark_session
    spark = spark_session("local-cluster[2,1,1024]", "1g")
    try:
        print("APP", spark.sparkContext.applicationId, flush=True)
        for url in sys.argv[1:]:
            report = index_once(spark, "log", url)
            print("REPORT", url, report.segments, report.records, report.events, sorted(report.bad.items()))
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
        cwds = set(spark.sparkContext.parallelize(range(4), 4).map(lambda _: os.getcwd()).collect())
        print("EXECUTORS", executors, "OTHER_CWD", os.getcwd() not in cwds)
    finally:
        spark.stop()
""")


def _remove_executor_dirs(stdout: str) -> None:
    """local-cluster workers run in <pyspark>/work/<app> (SPARK_WORKER_DIR is not read there)."""
    import pyspark

    for line in stdout.splitlines():
        if line.startswith("APP "):
            shutil.rmtree(os.path.join(os.path.dirname(pyspark.__file__), "work", line.split()[1]),
                          ignore_errors=True)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.hbase
def test_local_cluster_from_a_relative_log_dir_gives_the_local_mode_index(
    spark: Any, tmp_path: Any, ready_hbase_url: Callable[[], str]
) -> None:
    """One ``local-cluster`` driver (two executor JVMs, Python workers in another cwd) indexes a relative
    log dir into a relative ``local:`` SQLite file and into HBase (tables created ahead), one store after the
    other: each store gets exactly the index local mode gives.  One cluster for both stores, since starting
    it is what costs; each store has its own checkpoint, so each run reads the whole log."""
    work = tmp_path / "cluster"
    _write_log(str(work / "log"))
    shutil.copytree(work / "log", tmp_path / "reference-log")
    stores = {  # the URL the driver gets -> (where its cells are read back, the local-mode reference)
        "local:index.sqlite3": (f"local:{work / 'index.sqlite3'}", f"local:{tmp_path / 'reference.sqlite3'}"),
    }
    hbase_url, hbase_reference = ready_hbase_url(), ready_hbase_url()
    stores[hbase_url] = (hbase_url, hbase_reference)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}

    try:
        done = subprocess.run([sys.executable, "-c", _CLUSTER_DRIVER, *stores], cwd=work, env=env,
                              capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or b""
        _remove_executor_dirs(out.decode() if isinstance(out, bytes) else out)
        raise
    _remove_executor_dirs(done.stdout)

    assert done.returncode == 0, done.stderr[-3000:]
    assert "EXECUTORS 2 OTHER_CWD True" in done.stdout  # two executor JVMs, workers not in the driver's cwd
    for url, (cluster_url, reference) in stores.items():
        assert f"REPORT {url} 3 3 120 []" in done.stdout
        assert index_once(spark, str(tmp_path / "reference-log"), reference).events == 120
        assert _dump(cluster_url) == _dump(reference), url
    assert committed_offset(str(work / "log")) == readable_end(str(work / "log")).offset  # both checkpoints
