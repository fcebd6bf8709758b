"""Faults with real processes and real signals: collectors killed or stopped under load.

Producers are separate Python processes using the real tracehook library
(``fault_helpers.py``); collectors are ``tracehook collector`` subprocesses on
127.0.0.1 (``fixtures.collector_process``).  Each test checks, per producer,
``emitted == sent + dropped + queued`` against the trace log itself: every batch the
dispatcher saw acknowledged is in the log, the log holds exactly the sent events, and
the events missing from it are exactly the counted drops; and the queue never held more
than its bound.  The counts go to ``test-artifacts/reliability.json`` (the Reliability
table in benchmarks/RESULTS.md); how fast hook calls are and how much memory a producer
holds during an outage is measured by benchmarks/outage.py, not here.
"""

from __future__ import annotations

import json
import os
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from fault_helpers import msg_id
from fixtures.collector_process import CollectorProcess
from fixtures.ports import free_port

from collector.cli.demo import stop_collector
from collector.log.file import read_segment, sealed_segments
from collector.store import codec, keys, open_store, schema
from collector.store.reader import TraceQuery
from tests.fixtures.indexing import index_sealed, seal_log
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
        proc = CollectorProcess(str(data_dir), "--durability", "os", store=None, port=port).proc
        self.started.append(proc)
        return proc

    def producer(
        self, urls: list[str], prefix: str, count: int, rate: float, queue_size: int, *extra: str
    ) -> subprocess.Popen[bytes]:
        """A producer process; its JSON lines go to ``<tmp>/<prefix>.out``, ``resume`` ends a pause."""
        with open(self.tmp_path / f"{prefix}.out", "wb") as out, open(self.tmp_path / f"{prefix}.err", "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, PRODUCER, "--collectors", ",".join(urls), "--prefix", prefix, "--count", str(count),
                 "--rate", str(rate), "--queue-size", str(queue_size), *extra],
                stdin=subprocess.PIPE, stdout=out, stderr=err,
            )
        self.started.append(proc)
        return proc

    def paused(self, proc: subprocess.Popen[bytes], prefix: str, nth: int, timeout: float = 120) -> dict[str, Any]:
        """Wait until a producer has stopped at its ``nth`` ``--pause-at`` and return what it printed there."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = (self.tmp_path / f"{prefix}.out").read_text().splitlines()
            pauses = [json.loads(line)["pause"] for line in lines if line.startswith('{"pause"')]
            if len(pauses) >= nth:
                return pauses[nth - 1]
            assert proc.poll() is None, (self.tmp_path / f"{prefix}.err").read_text(errors="replace")[-3000:]
            time.sleep(0.05)
        raise AssertionError(f"{prefix} did not reach pause {nth} in {timeout}s")

    @staticmethod
    def resume(proc: subprocess.Popen[bytes]) -> None:
        """Let a paused producer go on."""
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.flush()

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
            if proc.stdin is not None:
                proc.stdin.close()


@pytest.fixture
def procs(tmp_path: pathlib.Path) -> Iterator[Processes]:
    children = Processes(tmp_path)
    yield children
    children.kill_all()


@pytest.fixture
def index_url(tmp_path: pathlib.Path) -> Iterator[str]:
    """A fresh embedded store, on tmpfs when there is one (other sessions keep the disk busy)."""
    shm = "/dev/shm"
    where = tempfile.mkdtemp(prefix="tracehook-faults-", dir=shm) if os.path.isdir(shm) else str(tmp_path)
    yield f"local:{os.path.join(where, 'index.sqlite3')}"
    if where != str(tmp_path):
        shutil.rmtree(where, ignore_errors=True)


@pytest.fixture(scope="module")
def figures(artifacts_dir: pathlib.Path) -> Iterator[dict[str, Any]]:
    """The measured figures per scenario, merged into ``test-artifacts/reliability.json``."""
    path = artifacts_dir / "reliability.json"
    found: dict[str, Any] = {}
    yield found
    saved = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**saved, **found}, indent=2) + "\n")


def collector_metric(url: str, name: str = "tracehook_collector_events_total") -> int:
    """One unlabelled counter from the collector's /metrics (0 while absent)."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return int(float(line.split()[1]))
    return 0


def wait_for_events(url: str, minimum: int, producers: list[subprocess.Popen[bytes]], timeout: float = 120) -> int:
    """Wait until the collector has acknowledged ``minimum`` events; fail if the producers ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        count = collector_metric(url)
        if count >= minimum:
            return count
        assert all(p.poll() is None for p in producers), "the producers finished before the fault"
        time.sleep(0.1)
    raise AssertionError(f"the collector acknowledged fewer than {minimum} events in {timeout}s")


def read_sealed_log(*log_dirs: str) -> tuple[Batches, int]:
    """Every sealed batch of ``log_dirs`` by ``(client_id, seq)``, and how many records repeated one."""
    batches: Batches = {}
    repeats = 0
    for log_dir in log_dirs:
        for segment in sealed_segments(log_dir):
            for record in read_segment(segment.path):
                events = decode_batch(record.payload).events
                key = (record.client_id, record.seq)
                if key in batches:
                    repeats += 1
                    assert batches[key] == events, f"{key} logged twice with different events"
                batches[key] = events
    return batches, repeats


def account(report: dict[str, Any], prefix: str, count: int, queue_size: int, batches: Batches) -> dict[str, int]:
    """Check one producer's counters against the log and its queue bound; returns its figures."""
    stats = report["stats"]
    assert stats["emitted"] == count, stats
    assert stats["emitted"] == stats["sent"] + stats["dropped_total"] + stats["queued"] + stats["in_flight"], stats
    assert report["flushed"] and stats["queued"] == stats["in_flight"] == 0, stats
    assert report["max_queued"] <= queue_size, f"{prefix}: {report['max_queued']} events queued at once"
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


def check_index(store_url: str, expected: set[str], sample: int = 1000) -> int:
    """Every expected message is indexed with exactly one PUB; returns the distinct messages indexed."""
    store = open_store(store_url)
    try:
        # One pass over the messages table (a Get per id costs 4x more on SQLite), then Gets on a sample.
        found: dict[str, list[tuple[int, str]]] = {}
        for row, columns in store.scan(schema.MESSAGES, b"", keys.STOP):
            msg_id = str(keys.unpack(row)[1])
            events = (codec.decode_event_value(msg_id, v).event for v in columns.values())
            found[msg_id] = [(e.type, e.msg_id) for e in events]
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
        index_sealed(log_dir, store_url)
    expected = logged_ids(batches)
    indexed = check_index(store_url, expected)
    assert indexed == len(expected)
    return indexed


def test_sigkill_mid_stream_then_restart_loses_no_acknowledged_event(
    procs: Processes, tmp_path: pathlib.Path, index_url: str, figures: dict[str, Any]
) -> None:
    # The producers outpace the queue during the outage (2,500/s for ~4 s into 5,000 slots), so
    # drops are counted as well as retries answered; 80,000 events in all.
    count, rate, queue_size, prefixes = 20_000, 2_500, 5_000, [f"k{n}" for n in range(4)]
    data_dir, port = tmp_path / "data", free_port()
    url, log_dir = f"http://127.0.0.1:{port}", str(tmp_path / "data" / "log")
    collector = procs.collector(data_dir, port)
    producers = [procs.producer([url], p, count, rate, queue_size) for p in prefixes]
    at_kill = wait_for_events(url, len(prefixes) * count // 4, producers)  # mid-stream: a quarter in

    down = time.time()
    collector.kill()  # SIGKILL with batches in flight
    collector.wait(timeout=30)
    assert all(p.poll() is None for p in producers), "the kill was not mid-stream"
    time.sleep(2.0)  # a scenario, not a wait for something: the producers go on recording meanwhile
    collector = procs.collector(data_dir, port)  # recovery cuts a torn tail; dedup window reloaded
    up = time.time()
    reports = [procs.report(p, prefix) for p, prefix in zip(producers, prefixes)]
    answered_duplicate = collector_metric(url, "tracehook_collector_duplicate_batches_total")
    seal_log(url, log_dir)
    stop_collector(collector)

    batches, repeats = read_sealed_log(log_dir)
    tallies = [account(r, p, count, queue_size, batches) for r, p in zip(reports, prefixes)]
    indexed = index_and_check([log_dir], index_url, batches)
    total = {k: sum(t[k] for t in tallies) for k in tallies[0]}
    assert total["emitted"] == len(prefixes) * count and total["lost"] == 0
    assert indexed == total["acknowledged"]
    figures["collector_sigkill_restart"] = {
        **total, "indexed": indexed, "events_at_kill": at_kill, "repeated_records_in_log": repeats,
        "outage_s": round(up - down, 1), "retries_answered_duplicate": answered_duplicate, "per_producer": tallies,
    }
    print(json.dumps(figures["collector_sigkill_restart"]))


def test_collector_down_hooks_never_block_queue_stays_bounded_delivery_resumes(
    procs: Processes, tmp_path: pathlib.Path, index_url: str, figures: dict[str, Any]
) -> None:
    # The producer pauses at two known events: the test stops the collector at the first and
    # starts it again at the second, so every call in between is made while it is down.
    before, during, after, queue_size = 4_000, 20_000, 4_000, 8_000
    count = before + during + after
    data_dir, port = tmp_path / "data", free_port()
    url, log_dir = f"http://127.0.0.1:{port}", str(tmp_path / "data" / "log")
    collector = procs.collector(data_dir, port)
    producer = procs.producer([url], "down", count, 0, queue_size,
                              "--pause-at", str(before), "--pause-at", str(before + during))
    procs.paused(producer, "down", 1)
    wait_for_events(url, before, [producer])  # everything recorded so far was delivered
    stop_collector(collector)

    procs.resume(producer)
    outage = procs.paused(producer, "down", 2)
    stats = outage["stats"]
    # Never blocks: every hook call of the outage returned (the producer is past them all).
    assert outage["returned"] == stats["emitted"] == before + during, outage
    assert stats["sent"] <= before, outage  # nothing was delivered meanwhile: the collector was down
    # Bounded: the queue filled up to its size and no further; what did not fit was dropped and counted.
    assert outage["max_queued"] <= queue_size and stats["queued"] == queue_size, outage
    assert stats["dropped"]["queue_full"] == stats["dropped_total"] > 0, outage
    kept = during - stats["dropped_total"]  # queued or in flight (nothing was dropped before the outage)

    collector = procs.collector(data_dir, port)
    # Resumed by itself: the restarted collector receives what was queued while the producer
    # is still paused, before it records or flushes anything more.
    wait_for_events(url, kept, [producer])
    procs.resume(producer)
    report = procs.report(producer, "down")
    seal_log(url, log_dir)
    stop_collector(collector)

    batches, repeats = read_sealed_log(log_dir)
    tally = account(report, "down", count, queue_size, batches)
    # The oldest events of the outage were kept (the queue refuses new ones when full), all delivered.
    outage_ids = sorted(i for i in (int(m.split("-")[1]) for m in logged_ids(batches)) if before <= i < before + during)
    assert outage_ids == list(range(before, before + kept))
    indexed = index_and_check([log_dir], index_url, batches)
    figures["collector_down"] = {
        **tally, "indexed": indexed, "repeated_records_in_log": repeats, "calls_while_down": during,
        "kept_from_outage": kept, "dropped_in_outage": during - kept, "queue_size": queue_size,
        "max_queued": report["max_queued"],
    }
    print(json.dumps(figures["collector_down"]))


def test_two_collectors_one_sigkilled_fails_over_without_loss(
    procs: Processes, tmp_path: pathlib.Path, index_url: str, figures: dict[str, Any]
) -> None:
    count, queue_size, prefixes = 50_000, 50_000, ["f0", "f1"]
    dirs, ports = [tmp_path / "a", tmp_path / "b"], [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    collectors = [procs.collector(d, p) for d, p in zip(dirs, ports)]
    producers = [procs.producer(urls, p, count, 10_000, queue_size, "--start-at-first") for p in prefixes]
    at_kill = wait_for_events(urls[0], 20_000, producers)  # both dispatchers start on the first one

    collectors[0].kill()
    collectors[0].wait(timeout=30)
    assert all(p.poll() is None for p in producers), "the kill was not mid-stream"
    reports = [procs.report(p, prefix) for p, prefix in zip(producers, prefixes)]
    collectors[0] = procs.collector(dirs[0], ports[0])  # recovery, so its log can be sealed and read
    log_dirs = [str(d / "log") for d in dirs]
    for url, log_dir, proc in zip(urls, log_dirs, collectors):
        seal_log(url, log_dir)
        stop_collector(proc)

    per_log = [read_sealed_log(d)[0] for d in log_dirs]
    for report in reports:  # both collectors served every producer: the failover happened
        assert all(any(c == report["stats"]["client_id"] for c, _ in log) for log in per_log)
    batches, repeats = read_sealed_log(*log_dirs)  # the union, deduplicated by (client_id, seq)
    tallies = [account(r, p, count, queue_size, batches) for r, p in zip(reports, prefixes)]
    total = {k: sum(t[k] for t in tallies) for k in tallies[0]}
    indexed = index_and_check(log_dirs, index_url, batches)
    assert indexed == total["acknowledged"] and total["lost"] == 0
    figures["two_collectors_one_sigkilled"] = {
        **total, "indexed": indexed, "events_at_kill": at_kill, "batches_in_both_logs": repeats,
        "events_per_log": [sum(len(e) for e in log.values()) for log in per_log],
    }
    print(json.dumps(figures["two_collectors_one_sigkilled"]))
