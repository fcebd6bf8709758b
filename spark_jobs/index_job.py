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
import logging
import os
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from collector.tracelog import read_checkpoint, sealed_segments, write_checkpoint
from spark_jobs.errors import IndexJobError, LocalStoreOnClusterError, NoSparkError

DEFAULT_MASTER = "local[*]"
DEFAULT_DRIVER_MEMORY = "1g"
DEFAULT_BATCH_SIZE = 1000
DEFAULT_WRITERS = 1
"""Writer threads per task: one store connection per partition.  Two measured the same
(17.3k vs 17.6k events/s into HBase, benchmarks/RESULTS.md): building rows, not the put, is the limit."""
DEFAULT_PURGE_EVERY_S = 3600.0
"""How often ``--every`` mode deletes a ``local:`` store's expired cells (a full scan of each table)."""
APP_NAME = "tracehook-index"
LOG_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
"""Spark's log4j2 configuration in local mode: warnings and errors, no start-up banner."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IndexReport:
    """What one run indexed; ``bad`` counts what it could not index, by reason.

    Reasons: ``corrupt_records`` and ``corrupt_bytes`` (records and bytes in damaged frames,
    skipped up to the next frame that verifies), ``row_key_too_long`` (index rows left out),
    and :attr:`tracehook.wire.WireError.reason` of batches that do not decode.
    ``purged`` is the number of expired cells deleted, None when no purge ran.
    """

    segments: int = 0
    records: int = 0
    events: int = 0
    bad: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    purged: int | None = None

    @property
    def rate(self) -> float:
        """Events indexed per second."""
        return self.events / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        bad = ", ".join(f"{n} {why}" for why, n in sorted(self.bad.items())) or "none"
        purged = "" if self.purged is None else f"; purged {self.purged} expired cell(s)"
        return (f"{self.segments} segment(s), {self.records} record(s), {self.events} event(s) "
                f"in {self.seconds:.1f}s ({self.rate:,.0f} events/s); skipped: {bad}{purged}")


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
        # SPARK_LOCAL_IP also spares the "hostname resolves to a loopback address" warnings at JVM start.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        if not os.environ.get("SPARK_CONF_DIR"):  # a user's own Spark config wins
            builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}")
    spark = builder.getOrCreate()
    spark.dataSource.register(TraceLogSource)
    return spark


PartitionResult = tuple[int, int, dict[str, int], list[str]]
"""(records, events, bad counts by reason, damage descriptions) of one partition."""


def index_partition(store_url: str, batch_size: int,
                    writers: int = DEFAULT_WRITERS) -> Callable[[Iterator[Any]], Iterator[PartitionResult]]:
    """The per-partition work; captures only plain data (a URL and numbers) to ship to executors."""

    def run(rows: Iterator[Any]) -> Iterator[PartitionResult]:
        from collector.store import open_store
        from collector.store.indexer import index_records
        from tracehook.wire import WireError, decode_batch

        counts = {"records": 0}
        bad: Counter[str] = Counter()
        damage: list[str] = []

        def events() -> Iterator[Any]:
            for row in rows:
                if row.error is not None:
                    bad["corrupt_records"] += row.lost_records
                    bad["corrupt_bytes"] += row.skipped_bytes
                    damage.append(f"{row.error}: skipped {row.skipped_bytes} bytes, {row.lost_records} record(s)")
                    continue
                counts["records"] += 1
                try:
                    batch = decode_batch(bytes(row.payload))
                except WireError as exc:
                    bad[exc.reason] += 1
                    continue
                for event in batch.events:
                    yield batch.header, event

        # The driver created the tables (_prepare_store): tasks skip that round trip.
        store = open_store(store_url, create_tables=False)
        try:
            n = index_records(store, events(), batch_size, writers=writers, dropped=bad)
        finally:
            store.close()
        yield counts["records"], n, {k: v for k, v in bad.items() if v}, damage

    return run


def is_local_master(master: str) -> bool:
    """True for masters whose executors all run on this host (``local``, ``local[N]``, ``local-cluster[...]``)."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


def absolute_store_url(store_url: str) -> str:
    """``local:`` URLs with an absolute path: executors' working directories differ from the driver's."""
    if not store_url.startswith("local:"):
        return store_url
    path, sep, query = store_url[len("local:"):].partition("?")
    return f"local:{os.path.abspath(path)}{sep}{query}" if path else store_url


def check_store_for_master(master: str, store_url: str) -> None:
    """Refuse a ``local:`` store with a master whose executors may run on other hosts."""
    if store_url.startswith("local:") and not is_local_master(master):
        raise LocalStoreOnClusterError(
            f"store {store_url} is a SQLite file on one host, but master {master!r} runs executors on other "
            "hosts (each would write its own file); use an hbase:// store or a local[...] master")


def purge_expired(store_url: str) -> int | None:
    """Delete a ``local:`` store's expired cells; None for HBase, whose compactions drop them.

    A failure is logged, not raised: the run's index and checkpoint are already written.
    """
    if not store_url.startswith("local:"):
        return None
    from collector.store import StoreError, open_store

    try:
        store = open_store(store_url)
        try:
            return store.purge_expired()
        finally:
            store.close()
    except (StoreError, OSError, sqlite3.Error) as exc:
        log.warning("purging expired cells from %s failed (retried next time): %s", store_url, exc)
        return None


def _prepare_store(store_url: str) -> None:
    """Open the store once on the driver: its tables get created here, not by racing tasks."""
    from collector.store import StoreError, open_store

    try:
        open_store(store_url).close()
    except (StoreError, OSError) as exc:
        raise IndexJobError(f"store {store_url} unavailable; checkpoint not advanced: {exc}") from exc


def _finish_batch(store_url: str) -> None:
    """Run :func:`collector.store.indexer.finish_batch` on the driver once the batch's partitions are written."""
    from collector.store import StoreError, open_store
    from collector.store.indexer import finish_batch

    try:
        store = open_store(store_url, create_tables=False)
        try:
            finish_batch(store)
        finally:
            store.close()
    except (StoreError, OSError) as exc:
        raise IndexJobError(f"store {store_url} unavailable; checkpoint not advanced: {exc}") from exc


def index_once(spark: Any, log_dir: str, store_url: str, batch_size: int = DEFAULT_BATCH_SIZE, *,
               writers: int = DEFAULT_WRITERS, purge: bool = False) -> IndexReport:
    """Index every sealed segment not yet in the checkpoint, then advance the checkpoint.

    Damaged frames are skipped up to the next frame that verifies and counted in ``bad``
    (their bytes cannot be read again, so the segment is checkpointed all the same).
    The checkpoint keeps only bases still in the manifest.  ``purge`` deletes a ``local:``
    store's expired cells afterwards.
    """
    from spark_jobs.datasource import FORMAT_NAME

    started = time.monotonic()
    log_dir = os.path.abspath(log_dir)  # segment paths go to executors, whose cwd differs
    store_url = absolute_store_url(store_url)
    check_store_for_master(spark.sparkContext.master, store_url)
    done = read_checkpoint(log_dir)
    sealed = sealed_segments(log_dir)
    present = {s.base for s in sealed}
    todo = [s for s in sealed if s.base not in done]
    if not todo:
        if done - present:  # retention deleted indexed segments: forget them
            write_checkpoint(log_dir, done & present)
        return IndexReport(seconds=time.monotonic() - started,
                           purged=purge_expired(store_url) if purge else None)
    _prepare_store(store_url)
    df = (spark.read.format(FORMAT_NAME)
          .option("segments", json.dumps([[s.base, s.path, s.records] for s in todo]))
          .load())
    try:
        results = df.rdd.mapPartitions(index_partition(store_url, batch_size, writers)).collect()
    except Exception as exc:  # Py4J/Spark wrap task errors in their own types
        raise IndexJobError(f"indexing {len(todo)} segment(s) failed; checkpoint not advanced: {exc}") from exc
    _finish_batch(store_url)
    bad: Counter[str] = Counter()
    for _, _, reasons, damage in results:
        bad.update(reasons)
        for what in damage:
            log.warning("index: %s (counted in corrupt_records/corrupt_bytes)", what)
    write_checkpoint(log_dir, (done & present) | {s.base for s in todo})
    return IndexReport(segments=len(todo), records=sum(r[0] for r in results), events=sum(r[1] for r in results),
                       bad=dict(bad), seconds=time.monotonic() - started,
                       purged=purge_expired(store_url) if purge else None)


def run_index(log_dir: str, store_url: str, master: str = DEFAULT_MASTER,
              batch_size: int = DEFAULT_BATCH_SIZE, *, purge: bool = False) -> IndexReport:
    """Run the index job once (Python API); the SparkSession is reused if one is active."""
    return index_once(spark_session(master), log_dir, store_url, batch_size, purge=purge)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tracehook index``."""
    parser.add_argument("--log-dir", required=True, help="trace-log directory (shared by every executor on a cluster)")
    parser.add_argument("--store", required=True, help="local:PATH or hbase://HOST:PORT?namespace=NS")
    parser.add_argument("--every", type=float, default=None, metavar="SECONDS",
                        help="keep running, indexing new sealed segments every SECONDS")
    parser.add_argument("--master", default=DEFAULT_MASTER, help="Spark master (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE, help="rows per store put")
    parser.add_argument("--driver-memory", default=DEFAULT_DRIVER_MEMORY, help="spark.driver.memory")
    parser.add_argument("--writers", type=int, default=DEFAULT_WRITERS,
                        help="writer threads (store connections) per task (default: %(default)s)")
    parser.add_argument("--purge-every", type=float, default=DEFAULT_PURGE_EVERY_S, metavar="SECONDS",
                        help="with --every: delete a local: store's expired cells after the first run and then "
                             "every SECONDS (0: never; default: %(default)s)")
    parser.add_argument("--purge", action="store_true",
                        help="without --every: delete a local: store's expired cells after the run")


def check_arguments(args: argparse.Namespace) -> None:
    """Raise :class:`IndexJobError` (or ValueError) for arguments that cannot work, before Spark starts."""
    from collector.logformat import MANIFEST, SEGMENT_SUFFIX
    from collector.store import resolve_store_url

    if args.writers < 1:
        raise ValueError("--writers must be >= 1")
    if args.batch_size < 1:
        raise ValueError("--batch-size must be >= 1")
    if args.every is not None and args.every <= 0:
        raise ValueError("--every must be a positive number of seconds")
    if not os.path.isdir(args.log_dir):
        raise IndexJobError(f"no trace log at {args.log_dir}: pass the collector's DATA_DIR/log")
    names = os.listdir(args.log_dir)
    # An empty directory is a log the collector has not written yet; anything else must look like one.
    if names and MANIFEST not in names and not any(n.endswith(SEGMENT_SUFFIX) for n in names):
        inner = os.path.join(args.log_dir, "log")
        hint = f"; did you mean --log-dir {inner}?" if os.path.isdir(inner) else ": pass the collector's DATA_DIR/log"
        raise IndexJobError(f"{args.log_dir} holds no trace log{hint}")
    if not args.store.startswith(("local:", "hbase://")):
        raise ValueError(f"unknown store URL {args.store!r}: use local:PATH or hbase://HOST:PORT?namespace=NS")
    args.store = resolve_store_url(args.store)
    check_store_for_master(args.master, absolute_store_url(args.store))


def _print_waiting(log_dir: str) -> None:
    """After a run that found no sealed segment: say what the active segment holds and when it seals."""
    from collector.pending import pending

    p = pending(log_dir)
    if p.active_records:
        print(f"index: nothing sealed to index yet; the active segment holds {p.active_records} record(s), "
              f"which the collector seals in about {p.seals_in_s:.0f} s (or at once with POST /v1/admin/roll); "
              "run again then, or keep it running with --every 10", flush=True)


def run(args: argparse.Namespace) -> int:
    """Run once, or every ``--every`` seconds until interrupted; prints one progress line per run."""
    # Refused before Spark starts: bad numbers, a log dir with no trace log, a cluster master with a local: store.
    try:
        check_arguments(args)
    except (IndexJobError, ValueError) as exc:
        print(f"index: {exc}", file=sys.stderr)
        return 2
    try:
        spark = spark_session(args.master, args.driver_memory)
    except NoSparkError as exc:
        print(f"index: {exc} (install it with: pip install 'tracehook[spark]')", file=sys.stderr)
        return 2
    total_events = 0
    last_purge: float | None = None
    try:
        while True:
            now = time.monotonic()
            if args.every is None:
                purge = args.purge
            else:
                purge = args.purge_every > 0 and (last_purge is None or now - last_purge >= args.purge_every)
            try:
                report = index_once(spark, args.log_dir, args.store, args.batch_size,
                                    writers=args.writers, purge=purge)
            except IndexJobError as exc:
                print(f"index: {exc}", file=sys.stderr)
                if args.every is None:
                    return 1
            else:
                if report.purged is not None:
                    last_purge = now
                total_events += report.events
                stamp = time.strftime("%H:%M:%S")
                print(f"{stamp} index: {report} (total {total_events} events)", flush=True)
                if report.segments == 0 and args.every is None:
                    _print_waiting(args.log_dir)
            if args.every is None:
                return 0
            time.sleep(args.every)
    except KeyboardInterrupt:
        return 130
    finally:
        spark.stop()
