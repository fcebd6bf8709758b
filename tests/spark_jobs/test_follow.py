"""``tracehook index --follow`` as real processes: a trace is queryable without sealing, and
SIGKILL mid-batch, collector restarts and retention running alongside leave every acknowledged
event exactly once in the store; a follower started before its collector waits for the log, and
SIGTERM or Ctrl-C stop a running one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
import requests
from fixtures.collector_process import CollectorProcess

import tracehook
from collector.log import state as logstate
from collector.store import open_store
from collector.store.reader import TraceQuery
from spark_jobs.stream import FAULT_PAUSE_BATCH_ENV, FAULT_PAUSE_ENV

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

TOKEN = "follow-token"
PER_ROUND = 40
WAIT_S = 240  # a bound for a loaded 2-core machine, not a speed assertion


def _collector(data_dir: str, store_url: str, segment_age_s: float) -> CollectorProcess:
    return CollectorProcess(data_dir, "--ingest-token", TOKEN, "--segment-age", str(segment_age_s),
                            "--retention", "0", store=store_url, ready_timeout_s=WAIT_S)


class _Follower:
    def __init__(self, log_dir: str, store_url: str, out_path: str, env: dict[str, str] | None = None) -> None:
        self.out_path = out_path
        with open(out_path, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "collector.cli.main", "index", "--follow", "--trigger", "0.5",
                 "--log-dir", log_dir, "--store", store_url, "--master", "local[1]"],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                start_new_session=True)  # its own group: SIGKILL takes its Spark JVM along

    def output(self) -> str:
        with open(self.out_path, encoding="utf-8", errors="replace") as f:
            return f.read()


def _get(url: str) -> int:
    try:
        return requests.get(url, timeout=5).status_code
    except requests.ConnectionError:
        return 0


def _until(check: Any, what: str, follower: _Follower | None = None) -> None:
    """Wait for ``check``; a follower that exits, or the time bound, fails with its output."""
    deadline = time.monotonic() + WAIT_S
    while not check():
        if follower is not None and follower.proc.poll() is not None:
            raise AssertionError(f"the follower exited ({follower.proc.returncode}) before: {what}\n"
                                 f"{follower.output()[-4000:]}")
        if time.monotonic() > deadline:
            tail = follower.output()[-4000:] if follower is not None else ""
            raise AssertionError(f"timed out waiting for: {what}\n{tail}")
        time.sleep(0.2)


def _send(url: str, prefix: str) -> list[str]:
    """PER_ROUND messages, each sent and consumed (3 events), acknowledged by the collector."""
    tracer = tracehook.Tracer(tracehook.TracerConfig(app="shop", collectors=(url,), token=TOKEN, linger_s=0.01))
    try:
        ids = []
        for i in range(PER_ROUND):
            msg_id = tracer.record_send("orders", msg_id=f"{prefix}-{i}", keys=f"k{i % 5}")
            with tracer.consume("orders", msg_id, "billing"):
                pass
            ids.append(msg_id)
        assert tracer.flush(timeout=60)
        assert tracer.stats()["dropped_total"] == 0
        return ids
    finally:
        tracer.close(timeout=10)


def _event_counts(store_url: str, ids: list[str]) -> dict[str, int]:
    store = open_store(store_url)
    try:
        query = TraceQuery(store)
        return {m: len(query._stored_events(m)) for m in ids}
    finally:
        store.close()


def test_follow_survives_sigkill_mid_batch_collector_restart_and_retention(tmp_path: Any, store_url: str) -> None:
    """Also a follower's life as a service.  The first follower starts before its collector, as systemd
    starts the two units in parallel: it waits for the log (saying so once), then indexes once the
    collector runs.  The last one is stopped as ``systemctl stop`` does on the local store (SIGTERM to
    the job only, as the unit's KillMode=mixed does: exit 0, no traceback) and with Ctrl-C on HBase
    (SIGINT to its process group: exit 130); the signal, not the store, decides the exit."""
    data_dir = str(tmp_path / "data")
    log_dir = os.path.join(data_dir, "log")
    paused = str(tmp_path / "paused")
    # Batch 0 completes; batch 1 writes its rows and then hangs before Spark commits it.
    job = _Follower(log_dir, store_url, str(tmp_path / "job1.out"),
                    {FAULT_PAUSE_ENV: paused, FAULT_PAUSE_BATCH_ENV: "1"})
    followers = [job]
    sigterm = store_url.startswith("local:")
    collector = None
    try:
        _until(lambda: "waiting for the trace log" in job.output(), "the follower says it waits", job)
        os.makedirs(data_dir)
        collector = _collector(data_dir, store_url, segment_age_s=3600)  # seals nothing
        first = _send(collector.url, "r1")
        # Queryable through the collector's API while its segment is still active.
        _until(lambda: all(_get(f"{collector.url}/v1/messages/{m}") == 200 for m in first[-3:]), "round 1 queryable",
               job)

        second = _send(collector.url, "r2")
        _until(lambda: os.path.exists(paused), "batch 1 written, not committed", job)
        os.killpg(job.proc.pid, signal.SIGKILL)
        job.proc.wait(timeout=60)

        job = _Follower(log_dir, store_url, str(tmp_path / "job2.out"))
        followers.append(job)
        third = _send(collector.url, "r3")
        assert collector.stop(timeout=60) == 0  # restart the collector while the job follows
        collector = _collector(data_dir, store_url, segment_age_s=2)  # seals, and retention deletes
        fourth = _send(collector.url, "r4")
        sent = first + second + third + fourth
        end = logstate.read_durable(log_dir)  # every acknowledged record is before it
        assert end is not None

        def all_committed() -> bool:
            done = logstate.committed_offset(log_dir)
            return done is not None and done >= end.offset

        # Spark has committed every batch that read an acknowledged record (the rows are written
        # first): no later micro-batch reads them again, so the counts below are final.
        _until(all_committed, "every acknowledged record indexed and committed", job)
        assert _event_counts(store_url, sent) == {m: 3 for m in sent}  # send + 2 consume events, once each
        # Retention runs alongside: the first segment goes once its records are committed (the
        # follower records each commit when Spark writes it, not when the next batch is planned).
        _until(lambda: not os.path.exists(os.path.join(log_dir, f"{0:020d}.log")), "retention of segment 0")
        assert " lag " in job.output()
    finally:
        for follower in followers:
            if follower.proc.poll() is None:
                if sigterm and follower is followers[-1]:
                    follower.proc.send_signal(signal.SIGTERM)  # the job only
                else:
                    os.killpg(follower.proc.pid, signal.SIGINT)
                try:
                    follower.proc.wait(timeout=120)
                finally:
                    if follower.proc.poll() is None:
                        os.killpg(follower.proc.pid, signal.SIGKILL)
                        follower.proc.wait(timeout=60)
        if collector is not None and collector.proc.poll() is None:
            assert collector.stop(timeout=60) == 0
    waited = followers[0].output()
    assert waited.count("waiting for the trace log") == 1
    assert " index: " in waited.split("waiting for the trace log")[1]  # then batch 0's progress line
    output = followers[-1].output()
    if sigterm:
        assert followers[-1].proc.returncode == 0, output
        assert "index: stopped by SIGTERM: " in output
        assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    else:
        assert followers[-1].proc.returncode == 130, output


def test_collector_index_flag_runs_a_follower_and_stops_it(tmp_path: Any) -> None:
    data_dir = str(tmp_path / "data")
    collector = CollectorProcess(data_dir, "--ingest-token", TOKEN, "--index", store=None, ready_timeout_s=WAIT_S)
    url = collector.url
    try:
        ids = _send(url, "embedded")
        _until(lambda: all(_get(f"{url}/v1/messages/{m}") == 200 for m in ids), "queryable via the embedded follower")
        # Rows land before the batch's progress line is printed: wait for it rather than race it.
        _until(lambda: " index: " in collector.output(), "a progress line of the follower")
    finally:
        code = collector.stop(timeout=120)
    output = collector.output()
    assert code == 0, output
    follower = int(output.split("index follower started (pid ")[1].split(")")[0])
    with pytest.raises(ProcessLookupError):  # stopped with the collector
        os.kill(follower, 0)
    assert " index: " in output  # the follower's progress lines go to the collector's output
