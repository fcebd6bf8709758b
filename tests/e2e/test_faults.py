"""Faults with real processes and real signals: collectors killed or stopped under load.

Producers are separate Python processes using the real tracehook library
(``fault_helpers.py``); collectors are ``tracehook collector`` subprocesses on
127.0.0.1 (``fixtures.collector_process``).  Each test checks, per producer,
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
from collector.store import keys, open_store, schema
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
        """A producer process; its JSON report goes to ``<tmp>/<prefix>.out``."""
        with open(self.tmp_path / f"{prefix}.out", "wb") as out, open(self.tmp_path / f"{prefix}.err", "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, PRODUCER, "--collectors", ",".join(urls), "--prefix", prefix, "--count", str(count),
                 "--rate", str(rate), "--queue-size", str(queue_size), *extra], stdout=out, stderr=err,
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


def check_index(store_url: str, expected: set[str], sample: int = 1000) -> int:
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
        index_sealed(log_dir, store_url)
    expected = logged_ids(batches)
    indexed = check_index(store_url, expected)
    assert indexed == len(expected)
    return indexed


def _between(samples: list[list[Any]], begin: float, end: float) -> list[list[Any]]:
    """The producer's samples taken in the wall-clock window [begin, end]."""
    return [s for s in samples if begin <= s[0] <= end]


def max_hook_ms(reports: list[dict[str, Any]], begin: float, end: float) -> float:
    """The slowest hook call any producer sampled in the wall-clock window [begin, end], in ms."""
    return round(max((s[7] for r in reports for s in _between(r["samples"], begin, end)), default=0.0) * 1000, 2)


@pytest.mark.timeout(900)  # indexing ~1M events takes minutes on a busy 2-core box
def test_sigkill_mid_stream_then_restart_loses_no_acknowledged_event(
    procs: Processes, tmp_path: pathlib.Path, index_url: str, figures: dict[str, Any]
) -> None:
    count, prefixes = 250_000, [f"k{n}" for n in range(4)]
    data_dir, port = tmp_path / "data", free_port()
    url, log_dir = f"http://127.0.0.1:{port}", str(tmp_path / "data" / "log")
    collector = procs.collector(data_dir, port)
    started = time.monotonic()
    producers = [procs.producer([url], p, count, rate=20_000, queue_size=50_000) for p in prefixes]
    at_kill = wait_for_events(url, 250_000, producers)

    down = time.time()
    collector.kill()  # SIGKILL with batches in flight
    collector.wait(timeout=30)
    assert all(p.poll() is None for p in producers), "the kill was not mid-stream"
    time.sleep(2.0)
    collector = procs.collector(data_dir, port)  # recovery cuts a torn tail; dedup window reloaded
    up = time.time()
    reports = [procs.report(p, prefix) for p, prefix in zip(producers, prefixes)]
    streamed = time.monotonic() - started
    answered_duplicate = collector_metric(url, "tracehook_collector_duplicate_batches_total")
    seal_log(url, log_dir)
    stop_collector(collector)

    batches, repeats = read_sealed_log(log_dir)
    tallies = [account(r, p, count, batches) for r, p in zip(reports, prefixes)]
    indexing = time.monotonic()
    indexed = index_and_check([log_dir], index_url, batches)
    total = {k: sum(t[k] for t in tallies) for k in tallies[0]}
    assert total["emitted"] == 1_000_000 and total["lost"] == 0
    assert indexed == total["acknowledged"]
    figures["collector_sigkill_restart"] = {
        **total, "indexed": indexed, "events_at_kill": at_kill, "repeated_records_in_log": repeats,
        "outage_s": round(up - down, 1), "max_hook_ms_in_outage": max_hook_ms(reports, down, up),
        "retries_answered_duplicate": answered_duplicate, "per_producer": tallies, "stream_s": round(streamed, 1),
        "index_and_check_s": round(time.monotonic() - indexing, 1),
    }
    print(json.dumps(figures["collector_sigkill_restart"]))


def test_collector_down_30s_hooks_never_block_queue_stays_bounded_delivery_resumes(
    procs: Processes, tmp_path: pathlib.Path, index_url: str, figures: dict[str, Any]
) -> None:
    rate, queue_size, outage_s = 2_000, 8_000, 30.0
    count = int(rate * 55)  # ~4 s before, 30 s down, >= 15 s after the comeback
    data_dir, port = tmp_path / "data", free_port()
    url, log_dir = f"http://127.0.0.1:{port}", str(tmp_path / "data" / "log")
    collector = procs.collector(data_dir, port)
    producer = procs.producer([url], "down", count, rate=rate, queue_size=queue_size)
    wait_for_events(url, 4_000, [producer])

    down = time.time()
    stop_collector(collector)
    time.sleep(outage_s)
    collector = procs.collector(data_dir, port)
    up = time.time()
    assert producer.poll() is None, "the producer finished before the collector came back"
    report = procs.report(producer, "down")
    seal_log(url, log_dir)
    stop_collector(collector)

    samples = report["samples"]
    during, after = _between(samples, down, up), _between(samples, up, float("inf"))
    assert len(during) >= outage_s / 0.25 * 0.5 and after, "too few samples around the outage"
    # Never blocks: the producer kept its pace through the outage (a blocking hook would stall it).
    emitted_during = during[-1][1] - during[0][1]
    assert emitted_during >= 0.5 * rate * (during[-1][0] - during[0][0])
    max_hook_s = max(s[7] for s in during)
    assert max_hook_s < 1.0  # a sanity bound only: a hook never waits for the network
    # Bounded: the queue filled up to its size and no further; memory stopped growing with it.
    assert max(s[2] for s in samples) <= queue_size
    assert max(s[2] for s in during) >= 0.9 * queue_size
    rss_before, rss_peak = during[0][6], max(s[6] for s in during)
    # ~330 B per queued PUB; also keeping the ~50,000 dropped events would add ~16 MiB.
    assert rss_peak - rss_before <= queue_size + 4096  # KiB: 1 KiB per queue slot + 4 MiB
    # Resumed by itself: more was sent after the comeback than before it, before the final flush.
    assert after[-1][4] > during[-1][4]

    batches, repeats = read_sealed_log(log_dir)
    tally = account(report, "down", count, batches)
    assert tally["dropped_counted"] > 0  # the bound was hit, and every drop is counted
    outage_ids = [int(m.split("-")[1]) for m in logged_ids(batches)]
    assert any(during[0][1] < i < during[-1][1] for i in outage_ids), "nothing recorded in the outage arrived"
    indexed = index_and_check([log_dir], index_url, batches)
    figures["collector_down_30s"] = {
        **tally, "indexed": indexed, "repeated_records_in_log": repeats, "outage_s": round(up - down, 1),
        "max_hook_ms_in_outage": round(max_hook_s * 1000, 2), "emitted_in_outage": emitted_during,
        "queue_size": queue_size, "max_queued": max(s[2] for s in samples),
        "rss_kb_at_outage_start": rss_before, "rss_kb_peak_in_outage": rss_peak,
    }
    print(json.dumps(figures["collector_down_30s"]))


def test_two_collectors_one_sigkilled_fails_over_without_loss(
    procs: Processes, tmp_path: pathlib.Path, index_url: str, figures: dict[str, Any]
) -> None:
    count, prefixes = 50_000, ["f0", "f1"]
    dirs, ports = [tmp_path / "a", tmp_path / "b"], [free_port(), free_port()]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    collectors = [procs.collector(d, p) for d, p in zip(dirs, ports)]
    producers = [procs.producer(urls, p, count, 10_000, 50_000, "--start-at-first") for p in prefixes]
    at_kill = wait_for_events(urls[0], 20_000, producers)  # both dispatchers start on the first one

    killed = time.time()
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
    tallies = [account(r, p, count, batches) for r, p in zip(reports, prefixes)]
    total = {k: sum(t[k] for t in tallies) for k in tallies[0]}
    indexed = index_and_check(log_dirs, index_url, batches)
    assert indexed == total["acknowledged"] and total["lost"] == 0
    figures["two_collectors_one_sigkilled"] = {
        **total, "indexed": indexed, "events_at_kill": at_kill, "batches_in_both_logs": repeats,
        "max_hook_ms_after_kill": max_hook_ms(reports, killed, float("inf")),
        "events_per_log": [sum(len(e) for e in log.values()) for log in per_log],
    }
    print(json.dumps(figures["two_collectors_one_sigkilled"]))
