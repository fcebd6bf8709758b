"""Backtracking queries against the obvious alternatives, embedded store and real HBase side by side.

Loads ``--messages`` messages over 24 hours on 8 queues; group ``billing`` consumed
them with a known share failed, never received and dead-lettered.  Then times:

    offsets      offsets_at(T), all queues: the queue index  vs  scanning every queue-index row (brute force)
    plan         reset_plan(T, billing): offsets + the group's positions from its consume records
    replay 1h    iter_replay over one hour  vs  every message of the hour by time + its full trace (naive)

and counts what a RocketMQ-style rewind of that hour re-consumes against the replay list.

Run::

    python benchmarks/backtrack.py                         # 100,000 messages, local and (if running) HBase
    python benchmarks/backtrack.py --messages 20000 --stores local
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root: tests.fixtures

from collector.index.indexer import index_records
from collector.query import backtrack
from collector.store import keys, open_store, schema
from collector.store.reader import MAX_LIMIT, TraceQuery
from tests.fixtures.sample import BILLING_HEADER, Record, consume, send
from tracehook.wire import Event, EventType, Status, make_event

DEFAULT_MESSAGES = 100_000
DEFAULT_REPEATS = 20
TOPIC, GROUP, QUEUES = "bt-bench", "billing", 8
NEVER_TOPIC = "bt-never"
"""A topic whose messages ``GROUP`` never received: its replay list is every message (paging row)."""
DEFAULT_NEVER = 20_000
SPAN_MS, WINDOW_MS = 24 * 3_600_000, 3_600_000
FAILED_EVERY, NEVER_EVERY, DEAD_EVERY = 100, 200, 500  # 1 % failed, 0.5 % never received, 0.2 % dead
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def records(messages: int, start_ms: int, never: int = 0) -> Iterator[Record]:
    """``messages`` on TOPIC with the shares above, and ``never`` messages on NEVER_TOPIC nobody consumed."""
    for n in range(never):
        t = start_ms + n * (SPAN_MS // max(never, 1))
        yield send(f"nv-{n:09d}", t, dict(topic=NEVER_TOPIC, keys=f"n{n}", queue=n % QUEUES, offset=n // QUEUES,
                                         born_ms=t - 1, store_ms=t))
    step = SPAN_MS // messages
    for n in range(messages):
        t = start_ms + n * step
        msg_id = f"bt-{n:09d}"
        fields = dict(keys=f"k{n}", queue=n % QUEUES, offset=n // QUEUES, born_ms=t - 1, store_ms=t)
        m = dict(fields, topic=TOPIC)
        yield send(msg_id, t, m)
        if n % NEVER_EVERY == 1:
            continue
        if n % DEAD_EVERY == 3:
            yield from consume(BILLING_HEADER, GROUP, msg_id, t + 5, m, status=Status.FAILED)
            dead = make_event(EventType.DEAD, t + 50, GROUP, TOPIC, msg_id, error="max retries", **fields)
            yield BILLING_HEADER, Event._make(dead)
            continue
        yield from consume(BILLING_HEADER, GROUP, msg_id, t + 5, m,
                           status=Status.FAILED if n % FAILED_EVERY == 7 else Status.OK)


def brute_offsets(query: TraceQuery, time_ms: int) -> dict[int, int]:
    """Read every queue-index row of the topic: what a store without the (queue, time) key would do."""
    start, stop = keys.prefix_range((TOPIC,))
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for row, _ in query.store.scan(schema.QUEUEIDX, start, stop):
        _, queue, t, offset = keys.unpack(row)
        last[queue] = max(last.get(queue, -1), offset)
        if t >= time_ms and offset < first.get(queue, 2**63):
            first[queue] = offset
    return {q: first.get(q, last[q] + 1) for q in last}


def naive_replay(query: TraceQuery, begin: int, end: int) -> list[str]:
    """Every message of the window by time, then its full trace: one Get per message."""
    out, cursor = [], None
    while True:
        page = query.by_time(TOPIC, begin, end, MAX_LIMIT, cursor, newest_first=False)
        for summary in page.items:
            trace = query.get_trace(summary.msg_id)
            if trace is not None and backtrack.group_outcome(trace, GROUP) is not None:
                out.append(summary.msg_id)
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Median milliseconds of ``repeats`` calls, and the last result."""
    samples, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        samples.append((time.perf_counter() - started) * 1000)
    return sorted(samples)[len(samples) // 2], result


def bench(store_url: str, args: argparse.Namespace) -> dict[str, str]:
    store = open_store(store_url)
    query = TraceQuery(store)
    start_ms = int(time.time() * 1000) - SPAN_MS - 60_000
    started = time.monotonic()
    index_records(store, records(args.messages, start_ms, args.never_consumed), batch_size=5000)
    load_s = time.monotonic() - started
    rng = random.Random(7)
    probe = start_ms + rng.randrange(SPAN_MS - WINDOW_MS)
    out: dict[str, str] = {"load (s)": f"{load_s:.0f}"}
    try:
        fast_ms, fast = timed(lambda: backtrack.offsets_at(query, TOPIC, probe), args.repeats)
        slow_ms, slow = timed(lambda: brute_offsets(query, probe), 3)
        assert fast == slow, (fast, slow)
        out["offsets: index (ms)"], out["offsets: brute scan (ms)"] = f"{fast_ms:.1f}", f"{slow_ms:.0f}"
        plan_ms, _ = timed(lambda: backtrack.reset_plan(query, TOPIC, GROUP, probe), args.repeats)
        out["reset plan (ms)"] = f"{plan_ms:.1f}"
        end = probe + WINDOW_MS
        ours_ms, ours = timed(lambda: [i.msg_id for i in backtrack.iter_replay(query, TOPIC, GROUP, probe, end)], 3)
        naive_ms, naive = timed(lambda: naive_replay(query, probe, end), 3)
        assert ours == naive, (len(ours), len(naive))
        out["replay 1h: ours (ms)"], out["replay 1h: naive (ms)"] = f"{ours_ms:.0f}", f"{naive_ms:.0f}"
        pages = replay_page_times(query, start_ms, start_ms + SPAN_MS, REPLAY_PAGE)
        out[f"replay pages of {REPLAY_PAGE} ({args.never_consumed:,} items)"] = f"{len(pages)}"
        out[f"replay page of {REPLAY_PAGE}: median (ms)"] = f"{pages[len(pages) // 2]:.1f}"
        out[f"replay page of {REPLAY_PAGE}: p99 (ms)"] = f"{pages[min(len(pages) - 1, len(pages) * 99 // 100)]:.1f}"
        in_window = sum(1 for _ in iter_window(query, probe, end))
        out["1h rewind re-consumes"] = f"{in_window:,}"
        out["1h replay list"] = f"{len(ours):,}"
    finally:
        drop = getattr(store, "drop_tables", None)  # HBase: leave no benchmark tables behind
        if drop is not None:
            drop()
        store.close()
        if store_url.startswith("local:"):
            os.remove(store_url[len("local:"):])
    return out


REPLAY_PAGE = 50
"""The page size of the replay-list paging row: what the web page and the API page by."""


def replay_page_times(query: TraceQuery, begin: int, end: int, size: int) -> list[float]:
    """Milliseconds per page while paging the whole replay list ``size`` items at a time, sorted."""
    samples, cursor = [], None
    while True:
        started = time.perf_counter()
        page = backtrack.replay_list(query, NEVER_TOPIC, GROUP, begin, end, size, cursor)
        samples.append((time.perf_counter() - started) * 1000)
        if page.next_cursor is None:
            return sorted(samples)
        cursor = page.next_cursor


def iter_window(query: TraceQuery, begin: int, end: int) -> Iterator[str]:
    cursor = None
    while True:
        page = query.by_time(TOPIC, begin, end, MAX_LIMIT, cursor)
        yield from (s.msg_id for s in page.items)
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


def store_urls(names: list[str], data_dir: str) -> dict[str, str]:
    urls = {}
    for name in names:
        if name == "local":
            path = os.path.join(data_dir, f"backtrack-{time.time_ns()}.sqlite3")
            urls[name] = f"local:{path}"
        elif name == "hbase":
            port = subprocess.run([os.path.join(ROOT, "scripts", "hbase"), "port"], capture_output=True, text=True)
            if port.returncode != 0:
                print("HBase is not running (scripts/hbase start); skipping it", file=sys.stderr)
                continue
            urls[name] = f"hbase://127.0.0.1:{port.stdout.strip()}?namespace=bt{time.time_ns() % 10**8}"
    return urls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES)
    parser.add_argument("--repeats", type=int, default=DEFAULT_REPEATS)
    parser.add_argument("--never-consumed", type=int, default=DEFAULT_NEVER,
                        help="messages of a second topic nobody consumed: the replay-list paging row")
    parser.add_argument("--stores", default="local,hbase")
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "data", "bench-backtrack"))
    args = parser.parse_args(argv)
    os.makedirs(args.data_dir, exist_ok=True)
    results = {name: bench(url, args) for name, url in store_urls(args.stores.split(","), args.data_dir).items()}
    names = list(results)
    print(f"\nbacktracking, {args.messages:,} messages over 24 h on {QUEUES} queues (median of runs)")
    rows = [["measure", *names]] + [[k, *(results[n][k] for n in names)] for k in results[names[0]]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for i, row in enumerate(rows):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return 0


if __name__ == "__main__":
    sys.exit(main())
