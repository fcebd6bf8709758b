"""The index job as a service, before Spark starts: a follower waits for its trace log, a stop
by SIGTERM is a success, and the Kafka connector's jars come from a setting, not a checkout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from collector.log.errors import NotATraceLogError
from collector.log.file import TraceLog
from spark_jobs import kafka_source
from spark_jobs.errors import IndexJobError
from spark_jobs.lifecycle import LOG_POLL_S, log_present

WAITING = "index: waiting for the trace log at"


def _index(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "collector.cli.main", "index", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_follower_waits_for_its_log_saying_so_once_and_sigterm_stops_it_with_0(
        tmp_path: Any, log_format: str) -> None:
    log_dir = str(tmp_path / "data" / "log")  # not even the data dir exists yet
    proc = _index("--follow", "--log-dir", log_dir, "--store", f"local:{tmp_path / 'index.sqlite3'}",
                  "--log-format", log_format)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    time.sleep(3 * LOG_POLL_S)  # a few polls: still waiting, and said only once
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    rest, err = proc.stdout.read(), proc.stderr.read()
    text = json.loads(first)["message"] if log_format == "json" else first
    assert text.startswith(f"{WAITING} {log_dir}")
    assert WAITING not in rest and err == ""


def test_a_one_shot_run_without_a_log_still_fails_at_once(tmp_path: Any) -> None:
    proc = _index("--log-dir", str(tmp_path / "missing"), "--store", f"local:{tmp_path / 'index.sqlite3'}",
                  "--log-format", "json")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    error = json.loads(err)
    assert error["level"] == "error" and error["message"].startswith(f"index: no trace log at {tmp_path / 'missing'}")


def test_the_log_is_present_once_the_collector_created_it(tmp_path: Any) -> None:
    log_dir = str(tmp_path / "log")
    assert not log_present(log_dir)
    os.makedirs(log_dir)
    assert not log_present(log_dir)
    TraceLog.open(log_dir, durability="os").close()
    assert log_present(log_dir)


def test_segments_without_a_log_id_are_refused_not_waited_for(tmp_path: Any) -> None:
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    (log_dir / "00000000000000000000.log").write_bytes(b"")
    with pytest.raises(NotATraceLogError):
        log_present(str(log_dir))


def _no_checkout(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """As after a plain pip install: no scripts/spark-kafka next to the package."""
    monkeypatch.setattr(kafka_source, "FETCH_SCRIPT", tmp_path / "no-checkout" / "scripts" / "spark-kafka")
    monkeypatch.delenv(kafka_source.JARS_ENV, raising=False)


def test_kafka_jars_come_from_a_directory_setting_without_a_checkout(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    _no_checkout(monkeypatch, tmp_path)
    jars_dir = tmp_path / "spark-kafka"
    jars_dir.mkdir()
    names = ["spark-sql-kafka-0-10_2.13-4.2.0.jar", "kafka-clients-3.9.2.jar", "commons-pool2-2.13.1.jar"]
    for name in names:
        (jars_dir / name).write_bytes(b"PK")
    (jars_dir / "README").write_text("not a jar")
    expected = sorted(str(jars_dir / n) for n in names)
    assert kafka_source.kafka_jars(str(jars_dir)) == expected  # --kafka-jars
    monkeypatch.setenv(kafka_source.JARS_ENV, f"{jars_dir},")
    assert kafka_source.kafka_jars() == expected  # the environment variable
    extra = tmp_path / "extra.jar"
    extra.write_bytes(b"PK")
    assert kafka_source.kafka_jars(f"{jars_dir / names[0]},{extra}") == [str(jars_dir / names[0]), str(extra)]


def test_kafka_jars_unknown_or_missing_is_one_line_naming_the_setting(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    _no_checkout(monkeypatch, tmp_path)
    with pytest.raises(IndexJobError, match=f"--kafka-jars or set {kafka_source.JARS_ENV}"):
        kafka_source.kafka_jars()
    (tmp_path / "empty").mkdir()
    with pytest.raises(IndexJobError, match="no Spark Kafka connector jars in"):
        kafka_source.kafka_jars(str(tmp_path / "empty"))
    with pytest.raises(IndexJobError, match="jar missing: .*gone.jar"):
        kafka_source.kafka_jars(str(tmp_path / "gone.jar"))


def test_the_command_refuses_a_kafka_jars_setting_that_names_no_jars(tmp_path: Any) -> None:
    proc = _index("--source", "kafka://127.0.0.1:9/traces", "--store", f"local:{tmp_path / 'index.sqlite3'}",
                  "--kafka-jars", str(tmp_path / "nothing-here"), "--follow")
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err.strip()) == (2, f"index: Spark Kafka connector jar missing: {tmp_path / 'nothing-here'}")
