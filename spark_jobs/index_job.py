"""``tracehook index``: index the trace log into the store with one PySpark Structured Streaming query.

The source is :class:`spark_jobs.datasource.TraceLogSource` read as a stream: offsets are
trace-log record offsets, each micro-batch reads up to the collector's durable end (the
active segment included), one partition per segment slice.  ``foreachBatch`` runs
``mapPartitions`` over the batch: each partition decodes its batches and writes every index
row with :func:`collector.store.indexer.index_records` over one store connection; then the
driver runs :func:`collector.store.indexer.finish_batch`.  Spark's checkpoint (one per
(log, store): ``<log-dir>/index-checkpoints/<hash of the store URL>/`` unless ``--checkpoint``)
holds the offsets; a batch that failed or was killed is run again with the same offsets and
rewrites identical cells.  Each commit is also recorded in ``<log-dir>/index-commits/`` for
the collector's retention and lag metrics.

``--follow`` keeps the query running with a processing-time trigger (default 1 s); one-shot
runs and ``--every`` use ``Trigger.AvailableNow`` over the same source and checkpoint.

The source is either the file trace log (``--log-dir``) or the collectors' Kafka topic
(``--source kafka://HOST:PORT/TOPIC``, read with Spark's own Kafka source,
:mod:`spark_jobs.kafka_source`); both feed the same ``index_partition``.  With Kafka,
``--max-offsets-per-trigger`` caps a micro-batch and ``--from/--to`` re-index a time window
(a batch read by record timestamp, no checkpoint).

Example::

    tracehook index --log-dir /data/log --store local:/data/index.sqlite3 --follow
    tracehook index --source kafka://k1:9092/traces --store hbase://127.0.0.1:9090 --follow
    tracehook index --source kafka://k1:9092/traces --store hbase://127.0.0.1:9090 --from -2h --to -1h
    tracehook index --log-dir /data/log --store hbase://127.0.0.1:9090?namespace=trace --master local[2]
    tracehook index --log-dir /data/log --store local:/data/index.sqlite3 --every 60
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sqlite3
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from collector.store import absolute_store_url
from spark_jobs.checkpoint import (
    claim_checkpoint,
    commit_key,
    default_checkpoint,
    drop_legacy_checkpoint,
    lag_after,
    protect_from_retention,
    sync_commit,
)
from spark_jobs.errors import (
    CheckpointMismatchError,
    IndexJobError,
    LocalStoreOnClusterError,
    LogInputError,
    NoSparkError,
)

if TYPE_CHECKING:
    from collector.log.url import KafkaTopic
    from collector.store.rollup import MessageParts

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
DEFAULT_TRIGGER_S = 1.0
"""``--follow``'s processing-time trigger: a trace is queryable about this long after it is durable."""
FAULT_PAUSE_ENV = "TRACEHOOK_INDEX_FAULT_PAUSE"
"""Tests only: a file path; the job writes it and hangs after a batch's rows are written, before
Spark commits the batch (so a test can SIGKILL it there)."""
FAULT_PAUSE_BATCH_ENV = "TRACEHOOK_INDEX_FAULT_PAUSE_BATCH"
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_BAD_INPUT = 3

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
    unit: str = "segment"
    """What ``segments`` counts: trace-log segments, or ``partition`` for a Kafka source."""

    @property
    def rate(self) -> float:
        """Events indexed per second."""
        return self.events / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        bad = ", ".join(f"{n} {why}" for why, n in sorted(self.bad.items())) or "none"
        purged = "" if self.purged is None else f"; purged {self.purged} expired cell(s)"
        return (f"{self.segments} {self.unit}(s), {self.records} record(s), {self.events} event(s) "
                f"in {self.seconds:.1f}s ({self.rate:,.0f} events/s); skipped: {bad}{purged}")


def spark_session(master: str = DEFAULT_MASTER, driver_memory: str = DEFAULT_DRIVER_MEMORY,
                  jars: list[str] | tuple[str, ...] = ()) -> Any:
    """A SparkSession with the trace-log data source registered; ``jars`` go to ``spark.jars``
    (the Kafka connector's, :func:`spark_jobs.kafka_source.kafka_jars`)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as exc:
        raise NoSparkError(f"PySpark is not installed: {exc}") from exc
    from spark_jobs.datasource import TraceLogSource

    builder = (SparkSession.builder.master(master).appName(APP_NAME)
               .config("spark.driver.memory", driver_memory)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))  # our own progress line instead
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    if master.startswith("local"):  # keep a local run on loopback; a cluster needs a reachable driver
        # SPARK_LOCAL_IP also spares the "hostname resolves to a loopback address" warnings at JVM start.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        if not os.environ.get("SPARK_CONF_DIR"):  # a user's own Spark config wins
            builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}")
    spark = builder.getOrCreate()
    spark.dataSource.register(TraceLogSource)
    return spark


PartitionResult = tuple[int, int, dict[str, int], list[str], list[int], "MessageParts"]
"""(records, events, bad counts by reason, damage descriptions, segment bases read, the rollup
parts of its messages read back after its writes) of one partition."""


def index_partition(store_url: str, batch_size: int,
                    writers: int = DEFAULT_WRITERS) -> Callable[[Iterator[Any]], Iterator[PartitionResult]]:
    """The per-partition work; captures only plain data (a URL and numbers) to ship to executors."""

    def run(rows: Iterator[Any]) -> Iterator[PartitionResult]:
        from collector.store import open_store
        from collector.store.indexer import index_payloads
        from collector.store.rollup import read_parts

        counts = {"records": 0}
        bad: Counter[str] = Counter()
        damage: list[str] = []
        bases: set[int] = set()

        def payloads() -> Iterator[bytes]:
            for row in rows:
                bases.add(row.base)
                if row.error is not None:
                    bad["corrupt_records"] += row.lost_records
                    bad["corrupt_bytes"] += row.skipped_bytes
                    damage.append(f"{row.error}: skipped {row.skipped_bytes} bytes, {row.lost_records} record(s)")
                    continue
                counts["records"] += 1
                yield bytes(row.payload)

        # The driver created the tables (_prepare_store): tasks skip that round trip.
        store = open_store(store_url, create_tables=False)
        touched: set[str] = set()
        try:
            n = index_payloads(store, payloads(), batch_size, writers=writers, dropped=bad, touched=touched)
            # No rollup markers: the task reads its messages' parts back now, after its own writes
            # (another task's events of the same message are sorted out by merge_parts).
            parts = read_parts(store, touched)
        finally:
            store.close()
        yield counts["records"], n, {k: v for k, v in bad.items() if v}, damage, sorted(bases), parts

    return run


def is_local_master(master: str) -> bool:
    """True for masters whose executors all run on this host (``local``, ``local[N]``, ``local-cluster[...]``)."""
    return master == "local" or master.startswith(("local[", "local-cluster["))


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


def check_store(store_url: str) -> None:
    """Refuse, before Spark starts, a store URL that names no store or tables of another layout
    (``BadStoreUrlError``, ``SaltBucketsMismatchError``).  A store that does not answer now is
    left to the run: it may by the first batch, and the run reports it if not."""
    from collector.store import StoreUnavailableError, open_store

    try:
        open_store(store_url).close()
    except StoreUnavailableError:
        pass


def _prepare_store(store_url: str) -> None:
    """Open the store once on the driver: its tables get created here, not by racing tasks."""
    from collector.store import StoreError, open_store

    try:
        open_store(store_url).close()
    except (StoreError, OSError) as exc:
        raise IndexJobError(f"store {store_url} unavailable; checkpoint not advanced: {exc}") from exc


def _split_into(spark: Any, store_url: str) -> int:
    """Partitions a large segment slice may be split into: one per core, except into a ``local:``
    store, whose single SQLite writer serialises the tasks anyway (measured slower split)."""
    return 1 if store_url.startswith("local:") else max(1, spark.sparkContext.defaultParallelism)


def _finish_batch(store_url: str, results: list[PartitionResult]) -> None:
    """Run :func:`collector.store.indexer.finish_batch` on the driver once every partition of the
    batch is written, with the rollup parts the partitions read back (merged: the read that saw
    the most events of a message wins, :func:`collector.store.rollup.merge_parts`)."""
    from collector.store import StoreError, open_store
    from collector.store.indexer import finish_batch
    from collector.store.rollup import merge_parts

    parts: MessageParts = {}
    for result in results:
        merge_parts(parts, result[5])
    try:
        store = open_store(store_url, create_tables=False)
        try:
            finish_batch(store, parts=parts)
        finally:
            store.close()
    except (StoreError, OSError) as exc:
        raise IndexJobError(f"store {store_url} unavailable; checkpoint not advanced: {exc}") from exc


class _Run:
    """Totals of one streaming query, filled in by its ``foreachBatch`` on the driver."""

    def __init__(self, unit: str = "segment") -> None:
        self.unit = unit
        self.segments: set[int] = set()
        self.records = 0
        self.events = 0
        self.batches = 0
        self.bad: Counter[str] = Counter()
        self.failure: BaseException | None = None

    def report(self, started: float, purged: int | None = None) -> IndexReport:
        return IndexReport(segments=len(self.segments), records=self.records, events=self.events,
                           bad=dict(self.bad), seconds=time.monotonic() - started, purged=purged, unit=self.unit)


def _stream_error(exc: BaseException, run: _Run) -> IndexJobError:
    """The one-line error for a failed streaming query."""
    if isinstance(run.failure, IndexJobError):
        return run.failure
    text = str(exc)
    for name, kind in (("SegmentGoneError", LogInputError), ("CheckpointMismatchError", CheckpointMismatchError),
                       ("NotATraceLogError", LogInputError)):
        at = text.find(f"{name}: ")
        if at >= 0:
            return kind(text[at + len(name) + 2:].splitlines()[0].strip())
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    return IndexJobError(f"indexing failed; checkpoint not advanced: {first}")


def _commit_recorder(log_dir: str, store_url: str, checkpoint: str) -> Any:
    """A listener that records each batch's commit for retention as soon as Spark has written it.

    Spark calls the source's ``commit`` only when it plans the next batch, so without this
    a follower's last batch would stay unrecorded until more records arrive.
    """
    from pyspark.sql.streaming import StreamingQueryListener

    class CommitRecorder(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:  # posted after the batch's commit log entry
            try:
                sync_commit(log_dir, store_url, checkpoint)
            except OSError as exc:
                log.warning("could not record the index commit for retention (next batch retries): %s", exc)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    return CommitRecorder()


def _fault_pause(batch_id: int) -> None:
    """Tests only: stop dead after a batch's rows are written, before Spark commits it."""
    marker = os.environ.get(FAULT_PAUSE_ENV)
    if marker and batch_id >= int(os.environ.get(FAULT_PAUSE_BATCH_ENV, "0")):
        with open(marker, "w", encoding="utf-8") as f:
            f.write(str(batch_id))
        while True:
            time.sleep(60)


def index_stream(spark: Any, log_dir: str, store_url: str, batch_size: int = DEFAULT_BATCH_SIZE, *,
                 writers: int = DEFAULT_WRITERS, checkpoint: str | None = None, follow_s: float | None = None,
                 on_batch: Callable[[IndexReport, tuple[int, float] | None], None] | None = None,
                 purge: bool = False, source: KafkaTopic | None = None,
                 max_offsets: int | None = None) -> IndexReport:
    """Index the log into the store through one Structured Streaming query.

    ``follow_s`` None: ``Trigger.AvailableNow`` (everything durable now, then return);
    otherwise a processing-time trigger every ``follow_s`` seconds until interrupted.
    The checkpoint (default :func:`default_checkpoint`) belongs to this (log, store) pair;
    ``on_batch`` gets each micro-batch's report and the lag after it (None for Kafka, whose
    lag Spark's progress reports as ``offsetsBehindLatest``).
    ``source``: read this Kafka topic instead of ``log_dir`` (ignored then), at most
    ``max_offsets`` records per micro-batch; the checkpoint then belongs to (topic, store).
    """
    from collector.log.errors import NotATraceLogError
    from collector.log.state import read_log_id
    from spark_jobs.datasource import FORMAT_NAME

    started = time.monotonic()
    store_url = absolute_store_url(store_url)
    check_store_for_master(spark.sparkContext.master, store_url)
    if source is not None:
        from spark_jobs import kafka_source

        log_dir = source.url
        log_id = kafka_source.source_id(source)
        checkpoint = os.path.abspath(checkpoint or kafka_source.default_checkpoint(source, store_url))
    else:
        log_dir = os.path.abspath(log_dir)  # segment paths go to executors, whose cwd differs
        try:
            log_id = read_log_id(log_dir)
        except NotATraceLogError as exc:
            raise LogInputError(str(exc)) from exc
        checkpoint = os.path.abspath(checkpoint or default_checkpoint(log_dir, store_url))
    claim_checkpoint(checkpoint, log_id, log_dir, store_url)
    _prepare_store(store_url)
    if source is None:  # only for a store that opens (a typo must not pin the log)
        protect_from_retention(log_dir, store_url, checkpoint)
    unit = "segment" if source is None else "partition"
    run = _Run(unit)
    work = index_partition(store_url, batch_size, writers)

    def process(batch_df: Any, batch_id: int) -> None:
        try:
            if source is None:
                sync_commit(log_dir, store_url, checkpoint)  # the previous batch is in Spark's commit log now
            batch_started = time.monotonic()
            try:
                results = batch_df.rdd.mapPartitions(work).collect()
            except Exception as exc:  # Py4J/Spark wrap task errors in their own types
                raise _stream_error(exc, run) from exc
            _finish_batch(store_url, results)
            _fault_pause(batch_id)
            batch = _Run(unit)
            for records, events, reasons, damage, bases, _parts in results:
                batch.records += records
                batch.events += events
                batch.bad.update(reasons)
                batch.segments.update(bases)
                for what in damage:
                    log.warning("index: %s (counted in corrupt_records/corrupt_bytes)", what)
            run.batches += 1
            run.records += batch.records
            run.events += batch.events
            run.bad.update(batch.bad)
            run.segments |= batch.segments
            if on_batch is not None and batch.records:
                behind = None if source is not None else lag_after(log_dir, checkpoint, batch_id)
                on_batch(batch.report(batch_started), behind)
        except BaseException as exc:
            run.failure = exc
            raise

    if source is not None:
        from spark_jobs.kafka_source import stream_rows

        df = stream_rows(spark, source, max_offsets)
    else:
        df = (spark.readStream.format(FORMAT_NAME)
              .option("log_dir", log_dir).option("log_id", log_id).option("commit_key", commit_key(checkpoint))
              .option("store", store_url).option("checkpoint", checkpoint)
              .option("partitions", str(_split_into(spark, store_url)))
              .load())
    writer = df.writeStream.foreachBatch(process).option("checkpointLocation", checkpoint)
    if follow_s is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{follow_s} seconds")
    recorder = _commit_recorder(log_dir, store_url, checkpoint) if source is None else None
    if recorder is not None:
        spark.streams.addListener(recorder)
    query = writer.start()
    try:
        while not query.awaitTermination(1.0):
            pass
    except KeyboardInterrupt:
        query.stop()
        raise
    except Exception as exc:  # StreamingQueryException, Py4J errors
        raise _stream_error(exc, run) from exc
    finally:
        if recorder is not None:
            spark.streams.removeListener(recorder)
            sync_commit(log_dir, store_url, checkpoint)
    if source is None:
        drop_legacy_checkpoint(log_dir)
    return run.report(started, purge_expired(store_url) if purge else None)


def index_window(spark: Any, source: KafkaTopic, store_url: str, from_ms: int, to_ms: int,
                 batch_size: int = DEFAULT_BATCH_SIZE, *, writers: int = DEFAULT_WRITERS) -> IndexReport:
    """Re-index the Kafka records received in [``from_ms``, ``to_ms``) with one batch read
    (``startingTimestamp``/``endingTimestamp``); no checkpoint is read or written.  Idempotent:
    the rows written are the ones the streaming run wrote."""
    from spark_jobs.kafka_source import window_rows

    started = time.monotonic()
    store_url = absolute_store_url(store_url)
    check_store_for_master(spark.sparkContext.master, store_url)
    _prepare_store(store_url)
    run = _Run("partition")
    try:
        results = window_rows(spark, source, from_ms, to_ms).rdd.mapPartitions(
            index_partition(store_url, batch_size, writers)).collect()
    except Exception as exc:  # Py4J/Spark wrap task errors in their own types
        raise _stream_error(exc, run) from exc
    _finish_batch(store_url, results)
    for records, events, reasons, _damage, bases, _parts in results:
        run.records += records
        run.events += events
        run.bad.update(reasons)
        run.segments.update(bases)
    return run.report(started)


def index_once(spark: Any, log_dir: str, store_url: str, batch_size: int = DEFAULT_BATCH_SIZE, *,
               writers: int = DEFAULT_WRITERS, purge: bool = False, checkpoint: str | None = None) -> IndexReport:
    """Index everything durable in the log now (``Trigger.AvailableNow``), then return.

    Damaged frames are skipped up to the next frame that verifies and counted in ``bad``.
    ``purge`` deletes a ``local:`` store's expired cells afterwards.
    """
    return index_stream(spark, log_dir, store_url, batch_size, writers=writers, checkpoint=checkpoint,
                        purge=purge)


def run_index(log_dir: str, store_url: str, master: str = DEFAULT_MASTER,
              batch_size: int = DEFAULT_BATCH_SIZE, *, purge: bool = False) -> IndexReport:
    """Run the index job once (Python API); the SparkSession is reused if one is active."""
    return index_once(spark_session(master), log_dir, store_url, batch_size, purge=purge)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tracehook index``."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--log-dir", help="trace-log directory (shared by every executor on a cluster)")
    source.add_argument("--source", metavar="kafka://HOST:PORT[,HOST:PORT]/TOPIC",
                        help="read the collectors' Kafka trace topic (collector --log kafka://...) with Spark's "
                             "Kafka source instead of a trace-log directory")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None, metavar="N",
                        help="with --source: at most N records per micro-batch (maxOffsetsPerTrigger; default: all)")
    parser.add_argument("--from", dest="from_time", default=None, metavar="TIME",
                        help="with --source: re-index the records received from TIME (epoch ms/s, ISO-8601, -2h...) "
                             "with one batch read (startingTimestamp), without the checkpoint")
    parser.add_argument("--to", dest="to_time", default=None, metavar="TIME",
                        help="with --from: up to TIME, exclusive (endingTimestamp; default: now)")
    parser.add_argument("--store", required=True, help="local:PATH or hbase://HOST:PORT?namespace=NS")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--follow", action="store_true",
                      help="keep running: index new records seconds after the collector acknowledges them")
    mode.add_argument("--every", type=float, default=None, metavar="SECONDS",
                      help="keep running, indexing everything new every SECONDS (Trigger.AvailableNow)")
    parser.add_argument("--trigger", type=float, default=DEFAULT_TRIGGER_S, metavar="SECONDS",
                        help="with --follow: start a micro-batch every SECONDS (default: %(default)s)")
    parser.add_argument("--checkpoint", default=None, metavar="DIR",
                        help="Spark checkpoint directory of this (log, store) pair (default: LOG_DIR/index-checkpoints/"
                             "<hash of the store URL>; for --source: $TRACEHOOK_INDEX_CHECKPOINTS or "
                             "~/.local/state/tracehook/index-checkpoints, then kafka-TOPIC-<hash of topic, bootstrap "
                             "and store>)")
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
    from collector.store import resolve_store_url

    if args.writers < 1:
        raise ValueError("--writers must be >= 1")
    if args.batch_size < 1:
        raise ValueError("--batch-size must be >= 1")
    if args.every is not None and args.every <= 0:
        raise ValueError("--every must be a positive number of seconds")
    if args.trigger <= 0:
        raise ValueError("--trigger must be a positive number of seconds")
    args.window, args.kafka = None, None
    if getattr(args, "source", None) is not None:
        _check_kafka_arguments(args)
    elif args.max_offsets_per_trigger is not None or args.from_time is not None or args.to_time is not None:
        raise ValueError("--max-offsets-per-trigger, --from and --to need a Kafka --source")
    else:
        _check_log_dir(args.log_dir)
    if not args.store.startswith(("local:", "hbase://")):
        raise ValueError(f"unknown store URL {args.store!r}: use local:PATH or hbase://HOST:PORT?namespace=NS")
    args.store = resolve_store_url(args.store)
    check_store_for_master(args.master, absolute_store_url(args.store))


def _check_kafka_arguments(args: argparse.Namespace) -> None:
    """--source and its options: the parsed topic in ``args.kafka``, a (from, to) window in ``args.window``."""
    from collector.log.errors import BadLogUrlError
    from collector.log.url import parse_kafka_url
    from collector.query.errors import BadTimeError
    from collector.query.timeparse import current_ms, parse_time

    try:
        args.kafka = parse_kafka_url(args.source)
    except BadLogUrlError as exc:
        raise ValueError(f"--source {exc}") from None
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger < 1:
        raise ValueError("--max-offsets-per-trigger must be >= 1")
    if args.to_time is not None and args.from_time is None:
        raise ValueError("--to needs --from")
    if args.from_time is None:
        return
    if args.follow or args.every is not None:
        raise ValueError("--from/--to re-index a window once: not with --follow or --every")
    now = current_ms()
    try:
        window = (parse_time(args.from_time, now_ms=now, name="--from"),
                  parse_time(args.to_time or "now", now_ms=now, name="--to"))
    except BadTimeError as exc:
        raise ValueError(str(exc)) from None
    if window[0] >= window[1]:
        raise ValueError("--from must be before --to")
    args.window = window


def _check_log_dir(log_dir: str) -> None:
    from collector.log.format import MANIFEST, SEGMENT_SUFFIX

    if not os.path.isdir(log_dir):
        raise IndexJobError(f"no trace log at {log_dir}: pass the collector's DATA_DIR/log")
    names = os.listdir(log_dir)
    # An empty directory is a log the collector has not written yet; anything else must look like one.
    if names and MANIFEST not in names and not any(n.endswith(SEGMENT_SUFFIX) for n in names):
        inner = os.path.join(log_dir, "log")
        hint = f"; did you mean --log-dir {inner}?" if os.path.isdir(inner) else ": pass the collector's DATA_DIR/log"
        raise IndexJobError(f"{log_dir} holds no trace log{hint}")


def _print_batch(report: IndexReport, behind: tuple[int, float] | None) -> None:
    lag = "" if behind is None else f"; lag {behind[0]} record(s), {behind[1]:.1f}s"
    print(f"{time.strftime('%H:%M:%S')} index: {report}{lag}", flush=True)


def _follow(spark: Any, args: argparse.Namespace) -> int:
    try:
        report = index_stream(spark, args.log_dir, args.store, args.batch_size, writers=args.writers,
                              checkpoint=args.checkpoint, follow_s=args.trigger, on_batch=_print_batch,
                              source=args.kafka, max_offsets=args.max_offsets_per_trigger)
    except LogInputError as exc:
        print(f"index: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except IndexJobError as exc:
        print(f"index: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"index: stopped: {report}", flush=True)  # a stopped query (e.g. from the Spark UI)
    return 0


def _reindex_window(spark: Any, args: argparse.Namespace) -> int:
    try:
        report = index_window(spark, args.kafka, args.store, *args.window, args.batch_size, writers=args.writers)
    except IndexJobError as exc:
        print(f"index: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{time.strftime('%H:%M:%S')} index: re-indexed {args.source} from {args.window[0]} to {args.window[1]} "
          f"(epoch ms): {report}", flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    """Follow, run once, or every ``--every`` seconds until interrupted; prints progress lines.

    Exit codes: 0 done, 1 indexing failed (retry later), 2 bad arguments, 3 bad input (not a
    trace log, a checkpoint of another log or store, records deleted before they were indexed),
    130 interrupted.
    """
    # Refused before Spark starts: bad numbers, a log dir with no trace log, a cluster master with a local: store.
    from collector.store.errors import BadStoreUrlError, SaltBucketsMismatchError

    try:
        check_arguments(args)
        check_store(absolute_store_url(args.store))
    except (IndexJobError, ValueError, BadStoreUrlError, SaltBucketsMismatchError) as exc:
        print(f"index: {exc}", file=sys.stderr)
        return EXIT_USAGE
    from collector.log.errors import NotATraceLogError
    from collector.log.state import read_log_id

    jars: list[str] = []
    if args.kafka is None:
        try:
            read_log_id(args.log_dir)
        except NotATraceLogError as exc:
            print(f"index: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    else:
        from spark_jobs.kafka_source import kafka_jars

        try:
            jars = kafka_jars()
        except IndexJobError as exc:
            print(f"index: {exc}", file=sys.stderr)
            return EXIT_USAGE
    signal.signal(signal.SIGTERM, _interrupt)  # stop like Ctrl-C: the running batch is redone next time
    try:
        spark = spark_session(args.master, args.driver_memory, jars)
    except NoSparkError as exc:
        print(f"index: {exc} (install it with: pip install 'tracehook[index]')", file=sys.stderr)
        return EXIT_USAGE
    total_events = 0
    last_purge: float | None = None
    try:
        if args.window is not None:
            return _reindex_window(spark, args)
        if args.follow:
            return _follow(spark, args)
        while True:
            now = time.monotonic()
            if args.every is None:
                purge = args.purge
            else:
                purge = args.purge_every > 0 and (last_purge is None or now - last_purge >= args.purge_every)
            try:
                report = index_stream(spark, args.log_dir, args.store, args.batch_size, writers=args.writers,
                                      purge=purge, checkpoint=args.checkpoint, source=args.kafka,
                                      max_offsets=args.max_offsets_per_trigger)
            except LogInputError as exc:
                print(f"index: {exc}", file=sys.stderr)
                return EXIT_BAD_INPUT
            except IndexJobError as exc:
                print(f"index: {exc}", file=sys.stderr)
                if args.every is None:
                    return EXIT_FAILED
            else:
                if report.purged is not None:
                    last_purge = now
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


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
