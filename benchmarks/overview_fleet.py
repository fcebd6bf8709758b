"""The overview over a fleet: 500 topics × 3 consumer groups over 24 hours, skewed.

A few busy topics (a message every ``BUSY_EVERY_S`` seconds) and many quiet ones (one every
``QUIET_EVERY_MIN`` minutes), each consumed by three groups: ``g-main`` consumes everything, ``g-audit``
fails or dead-letters a few, and ``g-batch`` stopped consuming some topics ``STALL_MIN`` minutes before
the end (it lags).  Loaded through ``index_records`` + ``finish_batch`` (the index job's driver
step, which writes the minute and hour rollups), in time order.

Then:

    api        GET /v1/overview?begin=&end= (problems first, 50 rows), median and p99 of sequential requests
    page       Chromium: navigation to /?begin=&end= until the table has rendered (median of 5, warm)
    in process overview() from hourly + edge-minute rollups (the first call, then warm: decoded rows are cached),
               next to the same from minute rollups only
    /metrics   series and scrape time (a cold computation, then a cached scrape)

Run through ``python benchmarks/overview.py --fleet [--store hbase://127.0.0.1:PORT]``.
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from unittest import mock

from collector.index import rollup_hours
from collector.index.indexer import finish_batch, index_records
from collector.index.rollup import MinuteBucket, read_minutes, topics
from collector.query import overview as ov
from collector.store import Store, open_store
from tests.fixtures.sample import BILLING_HEADER, PRODUCER, PRODUCER_HEADER, _event
from tracehook.wire import BatchHeader, Event, EventType, Status

TOPICS = 500
BUSY = 5
BUSY_EVERY_S = 10
QUIET_EVERY_MIN = 5
STALL_MIN = 30
SPAN_MS = 24 * 3_600_000
LOAD_CHUNK_MS = 20 * 60_000
"""Messages indexed and finished per chunk: 20 minutes of the whole fleet."""
Record = tuple[BatchHeader, Event]


def topic_name(i: int) -> str:
    return f"{'busy' if i < BUSY else 'quiet'}-{i:03d}.events"


def fleet(begin_ms: int, end_ms: int, first_ms: int) -> Iterator[Record]:
    """Every message of the fleet placed in ``[begin_ms, end_ms)`` (data starts at ``first_ms``)."""
    for i in range(TOPICS):
        topic = topic_name(i)
        every = BUSY_EVERY_S * 1000 if i < BUSY else QUIET_EVERY_MIN * 60_000
        offset = (i * 7_919) % every  # quiet topics spread over the minutes
        t = first_ms + offset + max(0, -(-(begin_ms - first_ms - offset) // every)) * every
        while t < end_ms:
            n = (t - first_ms) // every
            msg_id = f"{topic}-{n}"
            msg = dict(topic=topic, keys=f"k-{n % 100}", tags="t", broker="b", queue=n % 4, offset=n // 4,
                       born_ms=t - 1, store_ms=t)
            yield PRODUCER_HEADER, _event(EventType.PUB, t, PRODUCER, msg_id, **msg)
            latency = 5 + (n * 31 + i) % 300
            yield _after("g-main", msg_id, t + latency, msg, Status.OK)
            kind = (n + i) % 500
            yield _after("g-audit", msg_id, t + 2 * latency, msg, Status.FAILED if kind < 3 else Status.OK)
            if kind == 0:
                yield BILLING_HEADER, _event(EventType.DEAD, t + 2 * latency + 1, "g-audit", msg_id, **msg)
            stalled = i % 25 == 3 and t > first_ms + SPAN_MS - STALL_MIN * 60_000
            if not stalled:
                yield _after("g-batch", msg_id, t + 3 * latency, msg, Status.OK)
            t += every


def _after(group: str, msg_id: str, at: int, msg: dict, status: Status) -> Record:
    return BILLING_HEADER, _event(EventType.SUB_AFTER, at, group, msg_id, request_id=f"{msg_id}/{group}",
                                  status=int(status), cost_us=1000, **msg)


def ensure_fleet(data_dir: str, store_url: str) -> dict:
    """Load the fleet unless ``data_dir`` says this store holds it; returns the load's numbers."""
    marker = os.path.join(data_dir, "fleet-loaded.json")
    if os.path.exists(marker):
        with open(marker) as f:
            info = json.load(f)
        if info["store"] == store_url:
            return info
    now_ms = int(time.time() * 1000)
    first_ms = now_ms - SPAN_MS
    store = open_store(store_url)
    index_s = rollup_s = 0.0
    events = 0
    try:
        for begin in range(first_ms, now_ms, LOAD_CHUNK_MS):
            started = time.perf_counter()
            events += index_records(store, fleet(begin, min(begin + LOAD_CHUNK_MS, now_ms), first_ms), batch_size=5000)
            index_s += time.perf_counter() - started
            started = time.perf_counter()
            finish_batch(store)
            rollup_s += time.perf_counter() - started
            print(f"  loaded to {(begin - first_ms) / 3_600_000 + LOAD_CHUNK_MS / 3_600_000:.1f} h: {events:,} events, "
                  f"index {index_s:.0f} s, finish_batch {rollup_s:.0f} s", file=sys.stderr, flush=True)
    finally:
        store.close()
    info = {"store": store_url, "events": events, "now_ms": now_ms, "index_s": index_s, "rollup_s": rollup_s}
    with open(marker, "w") as f:
        json.dump(info, f)
    return info


def _median_ms(run: Callable[[], object], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def _minute_rows_only(store: Store, begin_ms: int, end_ms: int, *, topic: str | None = None, **_: object,
                      ) -> dict[str, list[MinuteBucket]]:
    """What :func:`collector.index.rollup_hours.read_window` answers, from every topic's minute rows only."""
    names = topics(store) if topic is None else [topic]
    return {name: found for name in names if (found := read_minutes(store, name, begin_ms, end_ms - 1))}


def in_process(store_url: str, end_ms: int, window_ms: int, repeats: int = 3) -> tuple[float, float, float, int]:
    """ms of overview() (every topic's totals, the first page's rows, no series) from hours + edge minutes: the
    first call (nothing decoded yet) and the median of the next ones; the median from minute rollups only; the rows."""
    store = open_store(store_url)
    try:
        args = (store, end_ms - window_ms, end_ms)
        query = ov.RowQuery()
        rollup_hours.clear_decoded()
        started = time.perf_counter()
        result = ov.overview(*args, now_ms=end_ms, rows=query, series=False)
        first = (time.perf_counter() - started) * 1000
        hours = _median_ms(lambda: ov.overview(*args, now_ms=end_ms, rows=query, series=False), repeats)
        with mock.patch.object(ov, "read_window", _minute_rows_only):
            minutes_only = _median_ms(lambda: ov.overview(*args, now_ms=end_ms, rows=query, series=False), 1)
        return first, hours, minutes_only, result.total_rows
    finally:
        store.close()


def scrape_metrics(port: int) -> tuple[float, float, int]:
    """ms of a cold ``/metrics`` scrape (computes the rollup families), of a cached one, and the series."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    times, body = [], b""
    try:
        for _ in range(2):
            started = time.perf_counter()
            conn.request("GET", "/metrics")
            body = conn.getresponse().read()
            times.append((time.perf_counter() - started) * 1000)
    finally:
        conn.close()
    series = sum(1 for line in body.decode().splitlines() if line and not line.startswith("#"))
    return times[0], times[1], series
