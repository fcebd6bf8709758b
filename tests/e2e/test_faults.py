"""Faults with real processes and real signals: collectors killed or stopped under load.

Producers are separate Python processes using the real tracehook library
(``fault_helpers.py``); collectors are ``tracehook collector`` subprocesses on
127.0.0.1 (``collector.demo.start_collector``).  Each test checks, per producer,
``emitted == sent + dropped + queued`` against the trace log itself: every batch the
dispatcher saw acknowledged is in the log, the log holds exactly the sent events, and
the events missing from it are exactly the counted drops.  The figures go to
``test-artifacts/reliability.json`` (the Reliability table in benchmarks/RESULTS.md).
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from fault_helpers import msg_id

from collector.demo import free_port, index_in_process, seal_log, start_collector, stop_collector
from collector.store import keys, open_store, schema
from collector.store.query import TraceQuery
from collector.tracelog import read_segment, sealed_segments
from tracehook.wire import Event, EventType, decode_batch

pytestmark = pytest.mark.slow

PRODUCER = str(pathlib.Path(__file__).with_name("fault_helpers.py"))

Batches = dict[tuple[str, int], list[Event]]


class Processes:
    """Every child a test starts; whatever is still running at the end is killed."""

    def __init__(self, tmp_path: pathlib.Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[subprocess.Popen[bytes]] = []

    def collector(self, data_dir: pathlib.Path, port: int) -> subprocess.Popen[bytes]:
        """A collector on ``port`` over ``data_dir`` (embedded store), ready to answer."""
        data_dir.mkdir(parents=True, exist_ok=True)
        proc = start_collector(str(data_dir), port)
        self.started.append(proc)
        return proc

    def producer(self, urls: list[str], prefix: str, count: int, rate: float, queue_size: int) -> subprocess.Popen[bytes]:
        """A producer process; its JSON report goes to ``<tmp>/<prefix>.out``."""
        with open(self.tmp_path / f"{prefix}.out", "wb") as out, open(self.tmp_path / f"{prefix}.err", "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, PRODUCER, "--collectors", ",".join(urls), "--prefix", prefix, "--count", str(count),
                 "--rate", str(rate), "--queue-size", str(queue_size)], stdout=out, stderr=err,
            )
        self.started.append(proc)
        return proc

    def report(self, proc: subprocess.Popen[bytes], prefix: str, timeout: float = 180) -> dict[str, Any]:
        """Wait for a producer and parse its report."""
        code = proc.wait(timeout=timeout)
        err = (self.tmp_path / f"{prefix}.err").read_text(errors="replace")
        assert code == 0, err[-3000:]
        return json.loads((self.tmp_path / f"{prefix}.out").read_text().splitlines()[-1])

    def kill_all(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)


@pytest.fixture
def procs(tmp_path: pathlib.Path) -> Iterator[Processes]:
    children = Processes(tmp_path)
    yield children
    children.kill_all()


@pytest.fixture(scope="module")
def figures(artifacts_dir: pathlib.Path) -> Iterator[dict[str, Any]]:
    """The measured figures per scenario, merged into ``test-artifacts/reliability.json``."""
    path = artifacts_dir / "reliability.json"
    found: dict[str, Any] = {}
    yield found
    saved = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**saved, **found}, indent=2) + "\n")


def collector_events(url: str) -> int:
    """``tracehook_collector_events_total`` from the collector's /metrics."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith("tracehook_collector_events_total "):
                return int(float(line.split()[1]))
    return 0


def wait_for_events(url: str, minimum: int, producers: list[subprocess.Popen[bytes]], timeout: float = 120) -> int:
    """Wait until the collector has acknowledged ``minimum`` events; fail if the producers ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        count = collector_events(url)
        if count >= minimum:
            return count
        assert all(p.poll() is None for p in producers), "the producers finished before the fault"
        time.sleep(0.1)
    raise AssertionError(f"the collector acknowledged fewer than {minimum} events in {timeout}s")


def read_sealed_log(log_dir: str) -> tuple[Batches, int]:
    """Every sealed batch by ``(client_id, seq)``, and how many records repeated one already read."""
    batches: Batches = {}
    repeats = 0
    for segment in sealed_segments(log_dir):
        for record in read_segment(segment.path):
            events = decode_batch(record.payload).events
            key = (record.client_id, record.seq)
            if key in batches:
                repeats += 1
                assert batches[key] == events, f"{key} logged twice with different events"
            batches[key] = events
    return batches, repeats


def account(report: dict[str, Any], prefix: str, count: int, batches: Batches) -> dict[str, int]:
    """Check one producer's counters against the log; returns its figures."""
    stats = report["stats"]
    assert stats["emitted"] == count, stats
    assert stats["emitted"] == stats["sent"] + stats["dropped_total"] + stats["queued"] + stats["in_flight"], stats
    assert report["flushed"] and stats["queued"] == stats["in_flight"] == 0, stats
    logged = {seq: events for (client, seq), events in batches.items() if client == stats["client_id"]}
    lost = sum(n for seq, n in report["acked"] if len(logged.get(seq, ())) != n)
    assert lost == 0, f"{prefix}: {lost} acknowledged events are not in the log"
    assert sum(n for _, n in report["acked"]) == stats["sent"]
    ids = [e.msg_id for events in logged.values() for e in events]
    emitted = {msg_id(prefix, i) for i in range(count)}
    assert len(ids) == len(set(ids)) and set(ids) <= emitted, f"{prefix}: unexpected or repeated events in the log"
    # Only acknowledged batches reach the log (no batch was given up), and what is missing was counted.
    assert len(ids) == stats["sent"], (len(ids), stats)
    assert count - len(ids) == stats["dropped_total"] == stats["dropped"]["queue_full"], stats
    return {"emitted": count, "acknowledged": stats["sent"], "dropped_counted": stats["dropped_total"],
            "retried": stats["retried"], "lost": lost}


def check_index(store_url: str, expected: set[str], sample: int = 2000) -> int:
    """Every expected message is indexed with exactly one PUB; returns the distinct messages indexed."""
    store = open_store(store_url)
    try:
        # One pass over the messages table (a Get per id costs 4x more on SQLite), then Gets on a sample.
        found: dict[str, list[tuple[int, str]]] = {}
        for row, columns in store.scan(schema.MESSAGES, b"", keys.STOP):
            events = (schema.decode_event_value(v).event for v in columns.values())
            found[str(keys.unpack(row)[1])] = [(e.type, e.msg_id) for e in events]
        wrong = [m for m in expected if found.get(m) != [(EventType.PUB, m)]]
        assert not wrong, f"{len(wrong)} messages not indexed exactly once, e.g. {wrong[:3]}"
        query = TraceQuery(store)  # the lookup the API serves
        for m in random.Random(7).sample(sorted(expected), min(sample, len(expected))):
            trace = query.get_trace(m)
            assert trace is not None and trace.send is not None and len(trace.events) == 1, m
        return len(found)
    finally:
        store.close()


def logged_ids(batches: Batches) -> set[str]:
    return {e.msg_id for events in batches.values() for e in events}


def index_and_check(log_dirs: list[str], store_url: str, batches: Batches) -> int:
    """Index every sealed segment of ``log_dirs`` into one store; check it against the log."""
    for log_dir in log_dirs:
        index_in_process(log_dir, store_url)
    expected = logged_ids(batches)
    indexed = check_index(store_url, expected)
    assert indexed == len(expected)
    return indexed


def test_sigkill_mid_stream_then_restart_loses_no_acknowledged_event(
    procs: Processes, tmp_path: pathlib.Path, figures: dict[str, Any]
) -> None:
    count, prefixes = 250_000, [f"k{n}" for n in range(4)]
    data_dir, port = tmp_path / "data", free_port()
    url, log_dir = f"http://127.0.0.1:{port}", str(tmp_path / "data" / "log")
    collector = procs.collector(data_dir, port)
    started = time.monotonic()
    producers = [procs.producer([url], p, count, rate=20_000, queue_size=50_000) for p in prefixes]
    at_kill = wait_for_events(url, 250_000, producers)

    collector.kill()  # SIGKILL with batches in flight
    collector.wait(timeout=30)
    assert all(p.poll() is None for p in producers), "the kill was not mid-stream"
    time.sleep(2.0)
    collector = procs.collector(data_dir, port)  # recovery cuts a torn tail; dedup window reloaded
    reports = [procs.report(p, prefix) for p, prefix in zip(producers, prefixes)]
    streamed = time.monotonic() - started
    seal_log(url, log_dir)
    stop_collector(collector)

    batches, repeats = read_sealed_log(log_dir)
    tallies = [account(r, p, count, batches) for r, p in zip(reports, prefixes)]
    indexing = time.monotonic()
    indexed = index_and_check([log_dir], f"local:{tmp_path / 'index.sqlite3'}", batches)
    total = {k: sum(t[k] for t in tallies) for k in tallies[0]}
    assert total["emitted"] == 1_000_000 and total["lost"] == 0
    assert indexed == total["acknowledged"]
    figures["collector_sigkill_restart"] = {
        **total, "indexed": indexed, "events_at_kill": at_kill, "repeated_records_in_log": repeats,
        "per_producer": tallies, "stream_s": round(streamed, 1), "index_and_check_s": round(time.monotonic() - indexing, 1),
    }
    print(json.dumps(figures["collector_sigkill_restart"]))
