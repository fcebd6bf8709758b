"""``tracehook index``: index sealed trace-log segments into the store with PySpark.

The driver lists sealed segments not in the checkpoint (``indexed.json``) and hands
their paths to :class:`spark_jobs.datasource.TraceLogSource` (one partition per
segment).  Each partition decodes its batches, writes every index row with
:func:`collector.store.indexer.index_records` over one store connection, and returns
counts.  Only when every partition has succeeded does the driver add the segments
to the checkpoint, so a failed run (store down, say) is simply retried next time;
re-indexing a segment rewrites identical cells.

Example::

    tracehook index --log-dir /data/log --store hbase://127.0.0.1:9090?namespace=trace --master local[2]
    tracehook index --log-dir /data/log --store local:/data/index.sqlite3 --every 60
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from collector.tracelog import read_checkpoint, sealed_segments, write_checkpoint
from spark_jobs.errors import IndexJobError, NoSparkError

DEFAULT_MASTER = "local[*]"
DEFAULT_DRIVER_MEMORY = "1g"
DEFAULT_BATCH_SIZE = 1000
APP_NAME = "tracehook-index"


@dataclass(frozen=True)
class IndexReport:
    """What one run indexed; ``bad`` counts corrupt frames and rejected batches by reason."""

    segments: int = 0
    records: int = 0
    events: int = 0
    bad: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        """Events indexed per second."""
        return self.events / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        bad = ", ".join(f"{n} {why}" for why, n in sorted(self.bad.items())) or "none"
        return (f"{self.segments} segment(s), {self.records} record(s), {self.events} event(s) "
                f"in {self.seconds:.1f}s ({self.rate:,.0f} events/s); skipped: {bad}")


def spark_session(master: str = DEFAULT_MASTER, driver_memory: str = DEFAULT_DRIVER_MEMORY) -> Any:
    """A SparkSession with the trace-log data source registered."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise NoSparkError(f"PySpark is not installed: {exc}") from exc
    from spark_jobs.datasource import TraceLogSource

    builder = (SparkSession.builder.master(master).appName(APP_NAME)
               .config("spark.driver.memory", driver_memory)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))  # our own progress line instead
    if master.startswith("local"):  # keep a local run on loopback; a cluster needs a reachable driver
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    spark = builder.getOrCreate()
    spark.dataSource.register(TraceLogSource)
    return spark


def index_partition(store_url: str, batch_size: int) -> Callable[[Iterator[Any]], Iterator[tuple[int, int, dict[str, int]]]]:
    """The per-partition work; captures only plain data (a URL and a number) to ship to executors."""

    def run(rows: Iterator[Any]) -> Iterator[tuple[int, int, dict[str, int]]]:
        from collector.store import open_store
        from collector.store.indexer import index_records
        from tracehook.wire import WireError, decode_batch

        counts = {"records": 0}
        bad: Counter[str] = Counter()

        def events() -> Iterator[Any]:
            for row in rows:
                if row.error is not None:
                    bad["corrupt_segment"] += 1
                    continue
                counts["records"] += 1
                try:
                    batch = decode_batch(bytes(row.payload))
                except WireError as exc:
                    bad[exc.reason] += 1
                    continue
                for event in batch.events:
                    yield batch.header, event

        store = open_store(store_url)
        try:
            n = index_records(store, events(), batch_size)
        finally:
            store.close()
        yield counts["records"], n, dict(bad)

    return run


def _prepare_store(store_url: str) -> None:
    """Open the store once on the driver: its tables get created here, not by racing tasks."""
    from collector.store import StoreError, open_store

    try:
        open_store(store_url).close()
    except (StoreError, OSError) as exc:
        raise IndexJobError(f"store {store_url} unavailable; checkpoint not advanced: {exc}") from exc


def index_once(spark: Any, log_dir: str, store_url: str, batch_size: int = DEFAULT_BATCH_SIZE) -> IndexReport:
    """Index every sealed segment not yet in the checkpoint, then advance the checkpoint."""
    from spark_jobs.datasource import FORMAT_NAME

    started = time.monotonic()
    done = read_checkpoint(log_dir)
    todo = [s for s in sealed_segments(log_dir) if s.base not in done]
    if not todo:
        return IndexReport(seconds=time.monotonic() - started)
    _prepare_store(store_url)
    df = (spark.read.format(FORMAT_NAME)
          .option("segments", json.dumps([[s.base, s.path] for s in todo]))
          .load())
    try:
        results = df.rdd.mapPartitions(index_partition(store_url, batch_size)).collect()
    except Exception as exc:  # Py4J/Spark wrap task errors in their own types
        raise IndexJobError(f"indexing {len(todo)} segment(s) failed; checkpoint not advanced: {exc}") from exc
    bad: Counter[str] = Counter()
    for _, _, reasons in results:
        bad.update(reasons)
    write_checkpoint(log_dir, done | {s.base for s in todo})
    return IndexReport(segments=len(todo), records=sum(r[0] for r in results), events=sum(r[1] for r in results),
                       bad=dict(bad), seconds=time.monotonic() - started)


def run_index(log_dir: str, store_url: str, master: str = DEFAULT_MASTER,
              batch_size: int = DEFAULT_BATCH_SIZE) -> IndexReport:
    """Run the index job once (Python API); the SparkSession is reused if one is active."""
    return index_once(spark_session(master), log_dir, store_url, batch_size)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tracehook index``."""
    parser.add_argument("--log-dir", required=True, help="trace-log directory (shared by every executor on a cluster)")
    parser.add_argument("--store", required=True, help="local:PATH or hbase://HOST:PORT?namespace=NS")
    parser.add_argument("--every", type=float, default=None, metavar="SECONDS",
                        help="keep running, indexing new sealed segments every SECONDS")
    parser.add_argument("--master", default=DEFAULT_MASTER, help="Spark master (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="rows per store put")
    parser.add_argument("--driver-memory", default=DEFAULT_DRIVER_MEMORY, help="spark.driver.memory")


def run(args: argparse.Namespace) -> int:
    """Run once, or every ``--every`` seconds until interrupted; prints one progress line per run."""
    spark = spark_session(args.master, args.driver_memory)
    total_events = 0
    try:
        while True:
            try:
                report = index_once(spark, args.log_dir, args.store, args.batch_size)
            except IndexJobError as exc:
                print(f"index: {exc}", file=sys.stderr)
                if args.every is None:
                    return 1
            else:
                total_events += report.events
                stamp = time.strftime("%H:%M:%S")
                print(f"{stamp} index: {report} (total {total_events} events)", flush=True)
            if args.every is None:
                return 0
            time.sleep(args.every)
    except KeyboardInterrupt:
        return 130
    finally:
        spark.stop()
