"""Spark index job throughput: events/s from sealed trace-log segments into a store,
next to the in-process indexer on the same events in the same run.

Both paths read the same segments and write a fresh namespace (HBase) or file (local):

* ``spark job``: ``spark_jobs.index_once`` (data source, decode, index per partition);
* ``in-process``: read + ``decode_batch`` + ``index_records`` in this one process (the
  demo's fallback), i.e. what the job adds parallelism over.

    scripts/hbase start
    python benchmarks/index_spark.py --events 1000000 --port "$(scripts/hbase port)" --master 'local[2]'
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

from index_throughput import events

from collector.index.indexer import index_records
from collector.log.file import TraceLog, read_segment, sealed_segments
from collector.store import open_store
from spark_jobs import index_once, spark_session
from tracehook.wire import decode_batch, encode_batch

EVENTS_PER_BATCH = 500


def write_log(log_dir: str, n: int, segments: int) -> None:
    """``n`` benchmark events as batches of EVENTS_PER_BATCH, split over ``segments`` sealed segments."""
    records = events(n)
    per_segment = -(-len(records) // segments)
    log = TraceLog.open(log_dir, durability="os")
    try:
        for s in range(0, len(records), per_segment):
            chunk = records[s:s + per_segment]
            entries = []
            for b in range(0, len(chunk), EVENTS_PER_BATCH):
                part = chunk[b:b + EVENTS_PER_BATCH]
                entries.append((0, "bench", s + b, encode_batch(part[0][0], part_events(part))))
            log.append(entries)
            log.roll()
    finally:
        log.close()


def part_events(part: list) -> list[tuple]:
    return [tuple(event) for _, event in part]


def in_process(log_dir: str, url: str) -> int:
    store = open_store(url)
    try:
        batches = (decode_batch(r.payload) for s in sealed_segments(log_dir) for r in read_segment(s.path))
        return index_records(store, ((b.header, e) for b in batches for e in b.events))
    finally:
        store.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--segments", type=int, default=4)
    parser.add_argument("--port", type=int, default=None, help="HBase Thrift port (omit: local store only)")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)

    work = tempfile.mkdtemp(prefix="index-spark-")
    try:
        log_dir = os.path.join(work, "log")
        write_log(log_dir, args.events, args.segments)
        targets = [("local", lambda tag: f"local:{os.path.join(work, tag + '.sqlite3')}")]
        if args.port:
            targets.insert(0, ("HBase", lambda tag: f"hbase://127.0.0.1:{args.port}?namespace=b{uuid.uuid4().hex[:8]}"))
        spark = spark_session(args.master)
        print(f"{args.events:,} events, {args.segments} segments, master {args.master}")
        print(f"| {'path':<28} | {'seconds':>8} | {'events/s':>10} |")
        print(f"|{'-' * 30}|{'-' * 10}|{'-' * 12}|")
        for name, make_url in targets:
            for path in ("spark job", "in-process"):
                url = make_url(path.replace(" ", "-"))
                started = time.perf_counter()
                n = index_once(spark, log_dir, url).events if path == "spark job" else in_process(log_dir, url)
                seconds = time.perf_counter() - started
                print(f"| {path + ' -> ' + name:<28} | {seconds:>8.1f} | {n / seconds:>10,.0f} |", flush=True)
                if url.startswith("hbase://"):  # leave no benchmark tables behind in the shared HBase
                    store = open_store(url)
                    store.drop_tables()  # type: ignore[attr-defined]
                    store.close()
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
