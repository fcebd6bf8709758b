"""Query p99 as the index grows: by id, key page and time page at 10^5, 10^6 and 10^7 events.

One store per backend is filled in stages (each stage adds messages after the previous
ones, one millisecond apart, as time goes on), and after each stage the three lookups
people run are timed in-process through ``TraceQuery`` (no HTTP, so the curve is the
store's):

    id      ``get_trace(msg_id)``                    a random indexed message's whole trace
    key     ``by_key(topic, key, ..., limit=20)``    newest 20 of a random key's messages
                                                     (1,000 keys: 100 .. 10,000 messages each)
    time    ``by_time(topic, begin, begin+60 s, 20)`` newest 20 of a random one-minute window

Each event is one send (PUB) of topic ``bulk`` (``tests.fixtures.sample.bulk`` without consumers),
written through the indexer (``index_records``), not through Spark, so generation is fast.
Target: every p99 within 2x from the smallest to the largest volume.  Prints a table (and
the ratio), writes a PNG (matplotlib, the ``bench`` extra) of p99 against volume::

    scripts/hbase start
    python benchmarks/scaling_query.py                    # local 1e5, 1e6, 1e7; HBase 1e5, 1e6
    python benchmarks/scaling_query.py --hbase-max 10000000
    python benchmarks/scaling_query.py --stores hbase --hbase-max 10000000 \
        --hbase-options "salt_buckets=8&thrift2=127.0.0.1:$(scripts/hbase thrift2-start)"   # pre-split tables
    python benchmarks/scaling_query.py --quick            # 1e5, 3e5, 1e6 local; HBase to 3e5: a few minutes

The SQLite file goes under ``--data-dir`` (deleted at the end unless ``--keep``); the HBase
namespace is fresh and dropped at the end.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import random
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from collector.index.indexer import index_records
from collector.store import Store, StoreError, open_store
from collector.store.reader import TraceQuery
from tests.fixtures.sample import bulk

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOPIC = "bulk"
KEYS = 1000
STEP_MS = 1
WINDOW_MS = 60_000
LIMIT = 20
WARMUP = 100
SETTLE_S = 5.0
"""Pause after each load stage: background flushes (HBase memstores, SQLite's WAL) settle first."""
LOAD_CHUNK = 50_000
KINDS = ("id", "key", "time")
TARGET_RATIO = 2.0
SIZES = (100_000, 1_000_000, 10_000_000)
QUICK_SIZES = (100_000, 300_000, 1_000_000)


def hbase_port() -> int | None:
    """The Thrift port of ``scripts/hbase start``'s HBase, or None when it is not running."""
    found = subprocess.run([os.path.join(ROOT, "scripts", "hbase"), "port"], capture_output=True, text=True)
    return int(found.stdout.strip()) if found.returncode == 0 else None


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def load(store: Store, first: int, count: int, total: int, anchor_ms: int) -> float:
    """Index messages ``first .. first+count-1`` of the final ``total``; the seconds it took."""
    started = time.monotonic()
    for start in range(first, first + count, LOAD_CHUNK):
        n = min(LOAD_CHUNK, first + count - start)
        index_records(store, bulk(n, anchor_ms, first=start, total=total, topic=TOPIC,
                                  span_ms=total * STEP_MS, consumers=()), batch_size=5000)
        done = start + n
        print(f"  {store.url}: {done:,} indexed ({(done - first) / (time.monotonic() - started):,.0f}/s)",
              file=sys.stderr, flush=True)
    return time.monotonic() - started


def lookups(query: TraceQuery, kind: str, indexed: int, total: int, anchor_ms: int,
            rng: random.Random) -> Callable[[], None]:
    """One random lookup of ``kind`` over the first ``indexed`` messages (checked, so a miss is not timed as fast)."""
    t0 = anchor_ms - total * STEP_MS  # message n is at t0 + n * STEP_MS
    last = t0 + (indexed - 1) * STEP_MS

    def by_id() -> None:
        n = rng.randrange(indexed)
        trace = query.get_trace(f"bulk-{n:09d}")
        assert trace is not None, n

    def by_key() -> None:
        page = query.by_key(TOPIC, f"key-{rng.randrange(KEYS):04d}", t0, last + 1, LIMIT)
        assert len(page.items) == LIMIT, len(page.items)

    def by_time() -> None:
        begin = t0 + rng.randrange(max(1, indexed * STEP_MS - WINDOW_MS))
        page = query.by_time(TOPIC, begin, begin + WINDOW_MS, LIMIT)
        assert len(page.items) == LIMIT, len(page.items)

    return {"id": by_id, "key": by_key, "time": by_time}[kind]


def time_kind(call: Callable[[], None], queries: int) -> float:
    """p99 milliseconds of ``queries`` calls after WARMUP untimed ones."""
    for _ in range(WARMUP):
        call()
    gc.collect()
    samples = []
    for _ in range(queries):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return percentile(samples, 99)


def bench_store(name: str, url: str, sizes: list[int], queries: int,
                settle_s: float = SETTLE_S) -> dict[int, dict[str, float]]:
    """Fill the store stage by stage and time the lookups after each; ``{size: {kind: p99 ms, "load_s": s}}``.

    A stage whose store stops answering (a lookup times out) ends the run: it is reported
    as failed (NaN p99s) and the stages before it are kept.
    """
    total = sizes[-1]
    anchor_ms = int(time.time() * 1000) - 60_000
    results: dict[int, dict[str, float]] = {}
    store = open_store(url)
    try:
        query = TraceQuery(store)
        indexed = 0
        for size in sizes:
            load_s = load(store, indexed, size - indexed, total, anchor_ms)
            indexed = size
            time.sleep(settle_s)
            rng = random.Random(size)
            results[size] = {"load_s": load_s}
            try:
                for kind in KINDS:
                    results[size][kind] = time_kind(lookups(query, kind, indexed, total, anchor_ms, rng), queries)
            except StoreError as exc:
                results[size].update({k: math.nan for k in KINDS})
                print(f"{name} {size:,}: failed: {exc}", file=sys.stderr, flush=True)
                break
            print(f"{name} {size:,}: " + ", ".join(f"{k} p99 {results[size][k]:.2f} ms" for k in KINDS),
                  file=sys.stderr, flush=True)
    finally:
        try:
            if name == "hbase":
                store.drop_tables()
            store.close()
        except StoreError as exc:
            print(f"{name}: tables not dropped ({exc}); scripts/hbase clean removes them", file=sys.stderr)
    return results


def plot(results: dict[str, dict[int, dict[str, float]]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for store, by_size in results.items():
        sizes = sorted(by_size)
        for kind in KINDS:
            ax.plot(sizes, [by_size[s][kind] for s in sizes], marker="o",
                    linestyle="-" if store == "local" else "--", label=f"{store} {kind}")
    ax.set_xscale("log")
    ax.set_xlabel("indexed events")
    ax.set_ylabel("p99 latency (ms)")
    ax.set_ylim(bottom=0)
    ax.set_title("Query p99 against index volume (TraceQuery, in-process)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="small", ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=None, help="comma list of volumes (default 1e5,1e6,1e7)")
    parser.add_argument("--hbase-max", type=int, default=1_000_000, help="largest volume HBase is filled to")
    parser.add_argument("--stores", default="local,hbase", help="comma list of local, hbase")
    parser.add_argument("--hbase-options", default="",
                        help="more HBase URL options, e.g. 'salt_buckets=8&thrift2=127.0.0.1:PORT' (pre-split tables)")
    parser.add_argument("--queries", type=int, default=500, help="timed lookups per kind and volume")
    parser.add_argument("--quick", action="store_true", help="1e5, 3e5, 1e6 (HBase to 3e5), 200 lookups")
    parser.add_argument("--data-dir", default=os.path.join(ROOT, "data", "bench-scaling"))
    parser.add_argument("--plot", default=os.path.join(ROOT, "benchmarks", "plots", "scaling_query.png"))
    parser.add_argument("--keep", action="store_true", help="keep the SQLite file")
    parser.add_argument("--settle", type=float, default=SETTLE_S, help="seconds to wait after each load stage")
    args = parser.parse_args(argv)
    sizes = sorted(int(float(s)) for s in args.sizes.split(",")) if args.sizes else list(SIZES)
    if args.quick:
        sizes, args.queries, args.hbase_max = list(QUICK_SIZES), 200, 300_000

    results: dict[str, dict[int, dict[str, float]]] = {}
    for name in args.stores.split(","):
        if name == "local":
            os.makedirs(args.data_dir, exist_ok=True)
            path = os.path.join(args.data_dir, "index.sqlite3")
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.remove(path + suffix)
            try:
                results[name] = bench_store(name, f"local:{path}", sizes, args.queries, args.settle)
            finally:
                if not args.keep:
                    shutil.rmtree(args.data_dir, ignore_errors=True)
        elif name == "hbase":
            port = hbase_port()
            if port is None:
                print("HBase is not running (scripts/hbase start); skipping it", file=sys.stderr)
                continue
            url = f"hbase://127.0.0.1:{port}?namespace=bscale{uuid.uuid4().hex[:6]}"
            if args.hbase_options:
                url += "&" + args.hbase_options.lstrip("&")
            results[name] = bench_store(name, url, [s for s in sizes if s <= args.hbase_max], args.queries,
                                        args.settle)
        else:
            parser.error(f"unknown store {name!r}")

    print(f"\nquery p99 (ms) by volume, {args.queries} lookups per kind, TraceQuery in-process, page of {LIMIT}")
    header = ["store", "events", *[f"{k} p99" for k in KINDS], "load (s)"]
    rows = [header]
    for store, by_size in results.items():
        for size in sorted(by_size):
            r = by_size[size]
            rows.append([store, f"{size:,}", *[f"{r[k]:.2f}" for k in KINDS], f"{r['load_s']:.0f}"])
        lo, hi = min(by_size), max(by_size)
        ratios = [by_size[hi][k] / by_size[lo][k] for k in KINDS]
        rows.append([store, f"ratio {hi:,.0e}/{lo:,.0e}", *[f"{x:.2f}x" for x in ratios],
                     "largest stage failed" if any(math.isnan(x) for x in ratios)
                     else "ok" if max(ratios) <= TARGET_RATIO else f"target <= {TARGET_RATIO}x missed"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for i, row in enumerate(rows):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |")
        if i == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    if results:
        os.makedirs(os.path.dirname(args.plot), exist_ok=True)
        plot(results, args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
