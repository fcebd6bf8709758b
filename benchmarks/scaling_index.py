"""Index seconds per million events as the volume grows: the real Spark index job, local mode.

For each volume a fresh trace log is written (sealed segments of ``--segment-events``
events each, so a bigger volume is more segments, as a log that rolls by size) and the
index job (``spark_jobs.index_once``: the file-log data source, decode, index
per partition) indexes it into a fresh store, in one SparkSession started (and warmed up
on a small log) beforehand.  The events are index_throughput.py's (a send plus a
consume pair per message).  Target: linear, i.e. the same seconds per million at every
volume.  Prints a table and writes a PNG (matplotlib, the ``bench`` extra)::

    python benchmarks/scaling_index.py                       # 0.25M, 0.5M, 1M into SQLite, local[2]
    scripts/hbase start
    python benchmarks/scaling_index.py --store hbase --port "$(scripts/hbase port)"
    python benchmarks/scaling_index.py --quick               # 50k, 100k, 200k: a few minutes
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from index_spark import EVENTS_PER_BATCH, part_events
from index_throughput import events

from collector.log.file import TraceLog
from collector.store import open_store
from spark_jobs import index_once, spark_session
from tracehook.wire import encode_batch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = (250_000, 500_000, 1_000_000)
QUICK_SIZES = (50_000, 100_000, 200_000)
TARGET_SPREAD = 1.25
"""Linear: the largest seconds per million at most this many times the smallest."""


def write_log(log_dir: str, n: int, segment_events: int) -> None:
    """``n`` benchmark events as batches of EVENTS_PER_BATCH, a sealed segment every ``segment_events``."""
    records = events(n)
    log = TraceLog.open(log_dir, durability="os")
    try:
        for s in range(0, len(records), segment_events):
            chunk = records[s:s + segment_events]
            entries = [(0, "bench", s + b, encode_batch(chunk[b][0], part_events(chunk[b:b + EVENTS_PER_BATCH])))
                       for b in range(0, len(chunk), EVENTS_PER_BATCH)]
            log.append(entries)
            log.roll()
    finally:
        log.close()


def store_url(kind: str, work: str, tag: str, port: int | None) -> str:
    if kind == "hbase":
        return f"hbase://127.0.0.1:{port}?namespace=bidx{uuid.uuid4().hex[:8]}"
    return f"local:{os.path.join(work, tag + '.sqlite3')}"


def drop(url: str) -> None:
    if url.startswith("hbase://"):
        store = open_store(url)
        try:
            store.drop_tables()
        finally:
            store.close()


def plot(rows: list[tuple[int, float]], label: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8))
    sizes = [n for n, _ in rows]
    left.plot(sizes, [s for _, s in rows], marker="o")
    left.plot([0, sizes[-1]], [0, rows[-1][1]], linestyle=":", color="grey", label="linear through the largest")
    left.set_xlabel("events")
    left.set_ylabel("index seconds")
    left.legend(fontsize="small")
    right.plot(sizes, [s / (n / 1e6) for n, s in rows], marker="o")
    right.set_xlabel("events")
    right.set_ylabel("seconds per million events")
    right.set_ylim(bottom=0)
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
    fig.suptitle(f"Spark index job ({label}): time against volume")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=None, help="comma list of volumes (default 250000,500000,1000000)")
    parser.add_argument("--quick", action="store_true", help="50k, 100k, 200k events")
    parser.add_argument("--segment-events", type=int, default=125_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--store", choices=("local", "hbase"), default="local")
    parser.add_argument("--port", type=int, default=None, help="HBase Thrift port (with --store hbase)")
    parser.add_argument("--plot", default=os.path.join(ROOT, "benchmarks", "plots", "scaling_index.png"))
    args = parser.parse_args(argv)
    if args.store == "hbase" and args.port is None:
        parser.error("--store hbase needs --port (scripts/hbase port)")
    sizes = sorted(int(float(s)) for s in args.sizes.split(",")) if args.sizes else list(SIZES)
    if args.quick:
        sizes, args.segment_events = list(QUICK_SIZES), 25_000

    work = tempfile.mkdtemp(prefix="scaling-index-")
    rows: list[tuple[int, float]] = []
    try:
        spark = spark_session(args.master)
        warm_log = os.path.join(work, "warm-log")
        write_log(warm_log, 20_000, 10_000)
        url = store_url(args.store, work, "warm", args.port)
        index_once(spark, warm_log, url)  # JVM, Python workers and imports warm before timing
        drop(url)
        for n in sizes:
            log_dir = os.path.join(work, f"log-{n}")
            write_log(log_dir, n, args.segment_events)
            url = store_url(args.store, work, f"index-{n}", args.port)
            started = time.perf_counter()
            report = index_once(spark, log_dir, url)
            seconds = time.perf_counter() - started
            assert report.events == n, (report.events, n)
            rows.append((n, seconds))
            print(f"  {n:,} events: {seconds:.1f} s", file=sys.stderr, flush=True)
            drop(url)
            shutil.rmtree(log_dir, ignore_errors=True)
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    label = f"{args.master} -> {args.store}"
    print(f"\nindex job, {label}, segments of {args.segment_events:,} events")
    print("| events | seconds | s per 1M events | events/s |")
    print("|---:|---:|---:|---:|")
    for n, s in rows:
        print(f"| {n:,} | {s:.1f} | {s / (n / 1e6):.1f} | {n / s:,.0f} |")
    per_million = [s / (n / 1e6) for n, s in rows]
    spread = max(per_million) / min(per_million)
    verdict = "linear: ok" if spread <= TARGET_SPREAD else f"target <= {TARGET_SPREAD}x missed"
    print(f"largest / smallest seconds per million: {spread:.2f}x ({verdict})")
    os.makedirs(os.path.dirname(args.plot), exist_ok=True)
    plot(rows, label, args.plot)
    print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
