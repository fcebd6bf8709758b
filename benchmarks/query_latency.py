"""Query latency over real HTTP: the embedded local store and real HBase side by side.

Loads ``--messages`` synthetic messages (each: a send and one consumer's
received/finished pair, one business key out of 1,000, spread over 24 hours)
into each store once (a re-run with the same count reuses them), starts a
collector subprocess on each store, and times sequential keep-alive requests:

    id      GET /v1/messages/{msg_id}                        a random message's full trace
    key     GET /v1/topics/bulk/messages?key=K&limit=20      newest 20 of the key's N/1000 messages
    time    GET /v1/topics/bulk/messages?begin=&end=&limit=20   a random 10-minute window
    qmq     GET /api/message?backupQuery={subject, window, len: 20}

Run::

    scripts/hbase start
    python benchmarks/query_latency.py                     # 1,000,000 messages, both stores
    python benchmarks/query_latency.py --messages 20000 --stores local
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root: tests.fixtures

from collector.cli.demo import free_port, start_collector, stop_collector
from collector.index.indexer import index_records
from collector.store import open_store
from collector.store.reader import TraceQuery
from tests.fixtures.sample import bulk

DEFAULT_MESSAGES = 1_000_000
DEFAULT_QUERIES = 500
DEFAULT_DATA_DIR = "data/bench-query"
DEFAULT_NAMESPACE = "benchquery"
TOPIC = "bulk"
SPAN_MS = 24 * 3_600_000
WINDOW_MS = 10 * 60_000
KEYS = 1000
WARMUP = 30
LOAD_CHUNK = 50_000
LOAD_BATCH = 5000
TARGETS_MS = {"id": 20, "key": 50, "time": 50, "qmq": 50}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def hbase_url(namespace: str) -> str | None:
    """The URL of the HBase that ``scripts/hbase start`` runs, or None when it is not running."""
    result = subprocess.run([os.path.join(ROOT, "scripts", "hbase"), "port"], capture_output=True, text=True)
    return f"hbase://127.0.0.1:{result.stdout.strip()}?namespace={namespace}" if result.returncode == 0 else None


def _loaded(store_url: str, marker: str, messages: int) -> int | None:
    """The load's anchor time when the store already holds exactly this data set."""
    if not os.path.exists(marker):
        return None
    with open(marker) as f:
        info = json.load(f)
    if info.get("messages") != messages:
        return None
    store = open_store(store_url)
    try:
        last = TraceQuery(store).get_trace(f"bulk-{messages - 1:09d}")
    finally:
        store.close()
    return info["now_ms"] if last is not None else None


def ensure_loaded(store_url: str, marker: str, messages: int) -> tuple[int, float]:
    """Index the data set unless present; returns (anchor time ms, load seconds; 0 when reused)."""
    anchor = _loaded(store_url, marker, messages)
    if anchor is not None:
        return anchor, 0.0
    now_ms = int(time.time() * 1000)
    store = open_store(store_url)
    started = time.monotonic()
    try:
        for first in range(0, messages, LOAD_CHUNK):
            count = min(LOAD_CHUNK, messages - first)
            records = bulk(count, now_ms, first=first, total=messages, topic=TOPIC, span_ms=SPAN_MS)
            index_records(store, records, batch_size=LOAD_BATCH)
            done = first + count
            print(f"  loading {store_url}: {done:,}/{messages:,} ({done / (time.monotonic() - started):,.0f} msg/s)",
                  file=sys.stderr, flush=True)
    finally:
        store.close()
    with open(marker, "w") as f:
        json.dump({"messages": messages, "now_ms": now_ms, "store_url": store_url}, f)
    return now_ms, time.monotonic() - started


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def time_requests(port: int, paths: list[str]) -> list[float]:
    """Milliseconds per request (send, full response read and JSON-decoded), one keep-alive connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    samples = []
    try:
        for path in paths:
            started = time.perf_counter()
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read()
            json.loads(body)
            elapsed = (time.perf_counter() - started) * 1000
            if response.status != 200:
                raise RuntimeError(f"GET {path} -> {response.status}: {body[:200]!r}")
            samples.append(elapsed)
    finally:
        conn.close()
    return samples


def query_paths(kind: str, count: int, messages: int, anchor_ms: int, rng: random.Random) -> list[str]:
    """``count`` random request paths of one kind."""
    begin_of_data = anchor_ms - SPAN_MS

    def window() -> tuple[int, int]:
        begin = begin_of_data + rng.randrange(SPAN_MS - WINDOW_MS)
        return begin, begin + WINDOW_MS

    makers: dict[str, Callable[[], str]] = {
        "id": lambda: f"/v1/messages/bulk-{rng.randrange(messages):09d}",
        "key": lambda: f"/v1/topics/{TOPIC}/messages?key=key-{rng.randrange(KEYS):04d}&limit=20",
        "time": lambda: "/v1/topics/{}/messages?begin={}&end={}&limit=20".format(TOPIC, *window()),
        "qmq": lambda: "/api/message?backupQuery=" + urllib.parse.quote(json.dumps(dict(
            zip(("msgCreateTimeBegin", "msgCreateTimeEnd"), window()), subject=TOPIC, isDelay=False, len=20))),
    }
    return [makers[kind]() for _ in range(count)]


def bench_store(name: str, store_url: str, args: argparse.Namespace) -> dict[str, object]:
    """Load (if needed), serve and time one store."""
    data_dir = os.path.abspath(os.path.join(args.data_dir, name))
    os.makedirs(data_dir, exist_ok=True)
    anchor, load_s = ensure_loaded(store_url, os.path.join(data_dir, "loaded.json"), args.messages)
    collector_dir = os.path.join(data_dir, "collector")
    os.makedirs(collector_dir, exist_ok=True)
    port = free_port()
    proc = start_collector(collector_dir, port, store_url=store_url)
    rng = random.Random(42)
    result: dict[str, object] = {"load_s": load_s}
    try:
        for kind in TARGETS_MS:
            time_requests(port, query_paths(kind, WARMUP, args.messages, anchor, rng))
            samples = time_requests(port, query_paths(kind, args.queries, args.messages, anchor, rng))
            result[kind] = (percentile(samples, 50), percentile(samples, 99))
    finally:
        stop_collector(proc)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES)
    parser.add_argument("--queries", type=int, default=DEFAULT_QUERIES, help="timed requests per query kind")
    parser.add_argument("--stores", default="local,hbase", help="comma list of local, hbase")
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR)
    parser.add_argument("--hbase-namespace", default=DEFAULT_NAMESPACE)
    args = parser.parse_args(argv)
    stores: dict[str, str] = {}
    for name in args.stores.split(","):
        if name == "local":
            stores[name] = f"local:{os.path.abspath(os.path.join(args.data_dir, 'local', 'index.sqlite3'))}"
        elif name == "hbase":
            url = hbase_url(args.hbase_namespace)
            if url is None:
                print("HBase is not running (scripts/hbase start); skipping it", file=sys.stderr)
                continue
            stores[name] = url
        else:
            parser.error(f"unknown store {name!r}")
    results = {name: bench_store(name, url, args) for name, url in stores.items()}
    names = list(results)
    print(f"\nquery latency over HTTP, {args.messages:,} indexed messages, {args.queries} requests per kind "
          f"(sequential, keep-alive), ms")
    header = ["query", *[f"{n} {p}" for n in names for p in ("p50", "p99")], "target p99"]
    rows = [header]
    for kind, target in TARGETS_MS.items():
        cells = [f"{results[n][kind][i]:.2f}" for n in names for i in (0, 1)]
        rows.append([kind, *cells, f"<= {target}"])
    rows.append(["load (s)", *[c for n in names for c in (f"{results[n]['load_s']:.0f}", "")], ""])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
