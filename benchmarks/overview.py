"""The overview (console start page) over a large store: rollups vs scanning messages.

Loads ``--messages`` synthetic messages (default 10^6) over the last 24 hours into an embedded
store through the indexer API (no Spark): 4 topics, 2 consumer groups each, a mix of outcomes
(consumed, retried, failed, dead, pending, never received).  Every chunk of
``LOAD_CHUNK`` messages is indexed and then finished as the index job finishes a batch
(:func:`collector.index.indexer.finish_batch`, which recomputes the rollups), and both are timed.

Then, against a warm collector subprocess on that store, for windows W ending where the data ends
(``begin=end-W&end=...``, the custom-window path; a re-run reuses the loaded store):

    api      GET /v1/overview?begin=&end=         from the rollups (median and p99 of sequential requests)
    naive    the same counts by scanning every message of the window (TraceQuery.by_time pages of
             1,000, in process: no HTTP, so a lower bound of what a scanning overview would cost)
    page     Chromium: navigation to /?begin=&end= until the overview's table has rendered (median of 5, warm)

``--fleet`` loads a fleet instead (:mod:`benchmarks.overview_fleet`): 500 topics × 3 groups over
24 hours, skewed (a few busy topics, many quiet ones); it adds the overview computed in process
from hourly + edge-minute rollups next to minute rollups only, and ``/metrics`` (series, scrape time).

Run::

    python benchmarks/overview.py                        # 10^6 messages (loads once, then reuses)
    python benchmarks/overview.py --messages 20000 --naive-windows 15m,1h,24h
    python benchmarks/overview.py --fleet                # 500 topics x 3 groups, 24 h, skewed
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root: tests.fixtures

from benchmarks import overview_fleet
from collector.cli.demo import free_port, start_collector, stop_collector
from collector.index.indexer import finish_batch, index_records
from collector.index.rollup import topics
from collector.query.timeparse import parse_duration
from collector.store import open_store
from collector.store.reader import TraceQuery
from tests.fixtures.sample import BILLING_HEADER, PRODUCER, PRODUCER_HEADER, SHIPPING_HEADER, _event
from tracehook.wire import BatchHeader, Event, EventType, Status

DEFAULT_MESSAGES = 1_000_000
DEFAULT_DATA_DIR = "data/bench-overview"
TOPICS = ("orders", "payments", "refunds", "audit-log")
SPAN_MS = 24 * 3_600_000
LOAD_CHUNK = 50_000
WINDOWS = ("15m", "1h", "24h")
API_REQUESTS = 20
PAGE_LOADS = 5
PAGE_TARGET_MS = 1000
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]

Record = tuple[BatchHeader, Event]


def messages(first: int, count: int, total: int, now_ms: int) -> Iterator[Record]:
    """Message ``n``: a send, then "billing" (mostly consumed, some retried, failed, dead or pending) and
    "indexer" (consumes 4 in 5, and nothing in the last 10 minutes: it lags)."""
    step = max(SPAN_MS // total, 1)
    start = now_ms - SPAN_MS
    for n in range(first, first + count):
        t = start + n * step
        topic = TOPICS[n % len(TOPICS)]
        msg_id = f"ov-{n:09d}"
        msg = dict(topic=topic, keys=f"k-{n % 1000}", tags="t", broker="b", queue=n % 8, offset=n // 8,
                   born_ms=t - 1, store_ms=t)
        yield PRODUCER_HEADER, _event(EventType.PUB, t, PRODUCER, msg_id, **msg)
        kind = n % 200
        latency = 5 + (n * 7919) % 400
        if kind == 0:  # dead after one failed attempt
            yield _after(BILLING_HEADER, "billing", msg_id, t + latency, msg, Status.FAILED, 0)
            yield BILLING_HEADER, _event(EventType.DEAD, t + latency + 1, "billing", msg_id, **msg)
        elif kind == 1:  # received, not finished
            yield BILLING_HEADER, _event(EventType.SUB_BEFORE, t + latency, "billing", msg_id,
                                         request_id=f"{msg_id}/0", **msg)
        elif kind < 6:  # failed once, consumed on the retry
            yield _after(BILLING_HEADER, "billing", msg_id, t + latency, msg, Status.FAILED, 0)
            yield _after(BILLING_HEADER, "billing", msg_id, t + latency + 1000, msg, Status.OK, 1)
        elif kind == 6:
            yield _after(BILLING_HEADER, "billing", msg_id, t + latency, msg, Status.FAILED, 0)
        else:
            yield _after(BILLING_HEADER, "billing", msg_id, t + latency, msg, Status.OK, 0)
        if n % 5 and t < now_ms - 10 * 60_000:
            yield _after(SHIPPING_HEADER, "indexer", msg_id, t + 2 * latency, msg, Status.OK, 0)


def _after(header: BatchHeader, group: str, msg_id: str, at: int, msg: dict, status: Status, retry: int) -> Record:
    return header, _event(EventType.SUB_AFTER, at, group, msg_id, retry=retry, request_id=f"{msg_id}/{retry}",
                                  status=int(status), cost_us=1000, **msg)


def ensure_loaded(data_dir: str, total: int) -> dict:
    """Index the data set unless the directory already holds it; returns the load's numbers."""
    marker = os.path.join(data_dir, "loaded.json")
    if os.path.exists(marker):
        with open(marker) as f:
            info = json.load(f)
        if info["messages"] == total:
            return info
    store_path = os.path.join(data_dir, "index.sqlite3")
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(store_path + suffix):
            os.remove(store_path + suffix)
    now_ms = int(time.time() * 1000)
    store = open_store(f"local:{store_path}")
    index_s = rollup_s = 0.0
    events = 0
    try:
        for first in range(0, total, LOAD_CHUNK):
            count = min(LOAD_CHUNK, total - first)
            started = time.perf_counter()
            events += index_records(store, messages(first, count, total, now_ms), batch_size=5000)
            index_s += time.perf_counter() - started
            started = time.perf_counter()
            finish_batch(store)
            rollup_s += time.perf_counter() - started
            print(f"  loaded {first + count:,}/{total:,}: index {index_s:.0f} s, finish_batch {rollup_s:.0f} s",
                  file=sys.stderr, flush=True)
    finally:
        store.close()
    info = {"messages": total, "events": events, "now_ms": now_ms, "index_s": index_s, "rollup_s": rollup_s}
    with open(marker, "w") as f:
        json.dump(info, f)
    return info


def window_query(window: str, end_ms: int) -> str:
    """The query string of a window ending at ``end_ms`` (the end of the loaded data, not the clock)."""
    return f"begin={end_ms - parse_duration(window)}&end={end_ms}"


def time_api(port: int, window: str, end_ms: int, extra: str = "") -> tuple[float, float, int, float]:
    """Median and p99 ms of ``API_REQUESTS`` sequential overview requests (after 3 warm-ups), the body size, and
    the ms of the first request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    samples, size, first = [], 0, 0.0
    try:
        for i in range(3 + API_REQUESTS):
            started = time.perf_counter()
            conn.request("GET", f"/v1/overview?{window_query(window, end_ms)}{extra}")
            response = conn.getresponse()
            body = response.read()
            json.loads(body)
            if response.status != 200:
                raise RuntimeError(f"overview {window} -> {response.status}: {body[:200]!r}")
            if i >= 3:
                samples.append((time.perf_counter() - started) * 1000)
            elif i == 0:
                first = (time.perf_counter() - started) * 1000
            size = len(body)
    finally:
        conn.close()
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(0.99 * len(samples)))], size, first


def naive_scan(store_url: str, window: str, end_ms: int) -> tuple[float, int]:
    """Seconds to count outcomes per topic and group by paging through every message of the window."""
    store = open_store(store_url)
    try:
        query = TraceQuery(store)
        now = end_ms
        begin = now - parse_duration(window)
        counts: Counter[tuple[str, str, str]] = Counter()
        seen = 0
        started = time.perf_counter()
        for topic in topics(store):
            cursor = None
            while True:
                page = query.by_time(topic, begin, now, 1000, cursor=cursor)
                for item in page.items:
                    seen += 1
                    for group, outcome in item.groups.items():
                        counts[(topic, group, outcome.outcome)] += 1
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
        return time.perf_counter() - started, seen
    finally:
        store.close()


def time_page(url: str, windows: tuple[str, ...], end_ms: int) -> dict[str, float]:
    """Median ms from navigation to a rendered overview, per window, in a warm Chromium."""
    from playwright.sync_api import sync_playwright

    out = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        for window in windows:
            samples = []
            for i in range(1 + PAGE_LOADS):
                started = time.perf_counter()
                page.goto(f"{url}/?{window_query(window, end_ms)}")
                page.wait_for_selector("#overview[data-loaded]:not([aria-busy]) #ov-table tr.ov-row", timeout=120_000)
                if i:
                    samples.append((time.perf_counter() - started) * 1000)
            out[window] = statistics.median(samples)
        browser.close()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES)
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    parser.add_argument("--naive-windows", default="15m,1h",
                        help="windows to also time by scanning messages (24h at 10^6 takes minutes)")
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--fleet", action="store_true", help="500 topics x 3 groups over 24 h, skewed")
    parser.add_argument("--store", help="with --fleet: a store URL (default: local: in --data-dir)")
    args = parser.parse_args(argv)
    data_dir = os.path.abspath(args.data_dir)
    os.makedirs(data_dir, exist_ok=True)
    if args.fleet:
        return run_fleet(data_dir, args.store or f"local:{os.path.join(data_dir, 'fleet.sqlite3')}", args.no_browser)
    load = ensure_loaded(data_dir, args.messages)
    store_url = f"local:{os.path.join(data_dir, 'index.sqlite3')}"
    port = free_port()
    proc = start_collector(data_dir, port)
    try:
        api = {w: time_api(port, w, load["now_ms"]) for w in WINDOWS}
        page = {} if args.no_browser else time_page(f"http://127.0.0.1:{port}", WINDOWS, load["now_ms"])
    finally:
        stop_collector(proc)
    naive = {w: naive_scan(store_url, w, load["now_ms"]) for w in args.naive_windows.split(",") if w}

    print(f"\noverview over {args.messages:,} messages ({load['events']:,} events, 24 h, {len(TOPICS)} topics "
          f"x 2 groups), embedded store")
    print(f"load: index_records {load['index_s']:.0f} s, finish_batch (rollups) {load['rollup_s']:.0f} s "
          f"in chunks of {LOAD_CHUNK:,} messages")
    rows = [["window", "messages in window", "api p50 ms", "api p99 ms", "body KB", "page ms (<= 1000)",
             "naive scan ms"]]
    for w in WINDOWS:
        p50, p99, size, _ = api[w]
        scan = naive.get(w)
        rows.append([w, f"{scan[1]:,}" if scan else "", f"{p50:.1f}", f"{p99:.1f}", f"{size / 1024:.0f}",
                     f"{page[w]:.0f}" if w in page else "", f"{scan[0] * 1000:,.0f}" if scan else "(not run)"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("| " + " | ".join(c.ljust(width) for c, width in zip(row, widths)) + " |")
    slow = [w for w, ms in page.items() if ms > PAGE_TARGET_MS]
    if slow:
        print(f"page render over {PAGE_TARGET_MS} ms for: {', '.join(slow)}")
    return 0


def run_fleet(data_dir: str, store_url: str, no_browser: bool) -> int:
    """The fleet rows: API, page, in-process hours vs minutes, /metrics (see benchmarks/overview_fleet.py)."""
    load = overview_fleet.ensure_fleet(data_dir, store_url)
    end_ms = load["now_ms"]
    windows = ("1h", "24h")
    port = free_port()
    proc = start_collector(data_dir, port, store_url=store_url)
    try:
        api = {w: time_api(port, w, end_ms, "&series=0") for w in windows}  # what the page asks; first: cold
        metrics = overview_fleet.scrape_metrics(port)
        with_series = {w: time_api(port, w, end_ms) for w in windows}
        page = {} if no_browser else time_page(f"http://127.0.0.1:{port}", windows, end_ms)
    finally:
        stop_collector(proc)
    local = {w: overview_fleet.in_process(store_url, end_ms, parse_duration(w)) for w in windows}
    print(f"\noverview over a fleet: {overview_fleet.TOPICS} topics x 3 groups, 24 h, {load['events']:,} events, "
          f"store {store_url.split(':', 1)[0]}")
    print(f"load: index_records {load['index_s']:.0f} s, finish_batch (minute + hour rollups) {load['rollup_s']:.0f} s")
    rows = [["window", "rows", "api first ms", "api p50 ms", "api p99 ms (<= 1000)", "body KB",
             "api with 50 topics' series p50 / p99 ms", "page ms (<= 1500)", "in process: first / warm ms",
             "minutes only ms"]]
    for w in windows:
        p50, p99, size, first = api[w]
        s50, s99, _, _ = with_series[w]
        cold, warm, minutes, total = local[w]
        rows.append([w, f"{total:,}", f"{first:.0f}", f"{p50:.0f}", f"{p99:.0f}", f"{size / 1024:.0f}",
                     f"{s50:.0f} / {s99:.0f}", f"{page[w]:.0f}" if w in page else "", f"{cold:.0f} / {warm:.0f}",
                     f"{minutes:.0f}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("| " + " | ".join(c.ljust(width) for c, width in zip(row, widths)) + " |")
    cold, cached, series = metrics
    print(f"/metrics: {series:,} series; scrape {cold:.0f} ms computing the rollup families, {cached:.0f} ms cached")
    return 0


if __name__ == "__main__":
    sys.exit(main())
