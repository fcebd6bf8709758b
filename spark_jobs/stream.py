"""The index job's streaming runs: one Structured Streaming query over the trace log or a Kafka topic.

:func:`index_stream` follows (processing-time trigger) or runs once (``Trigger.AvailableNow``)
with the checkpoint of its (log, store) pair; :func:`index_window` re-indexes a Kafka time
window with one batch read; :func:`index_once` and :func:`run_index` are the one-shot front ends::

    report = index_once(spark_session(), "/data/log", "local:/data/index.sqlite3")
    index_stream(spark, log_dir, store_url, follow_s=1.0, on_batch=print)   # until interrupted
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from collector.log import setaside
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
from spark_jobs.driver import index_batch, prepare_store, purge_expired, split_into
from spark_jobs.errors import CheckpointMismatchError, IndexJobError, LogInputError
from spark_jobs.partition import DEFAULT_BATCH_SIZE, DEFAULT_WRITERS
from spark_jobs.report import IndexReport, RunTotals
from spark_jobs.session import DEFAULT_MASTER, check_store_for_master, spark_session

if TYPE_CHECKING:
    from collector.log.url import KafkaTopic

DEFAULT_TRIGGER_S = 1.0
"""``--follow``'s processing-time trigger: a trace is queryable about this long after it is durable."""
FAULT_PAUSE_ENV = "TRACEHOOK_INDEX_FAULT_PAUSE"
"""Tests only: a file path; the job writes it and hangs after a batch's rows are written, before
Spark commits the batch (so a test can SIGKILL it there)."""
FAULT_PAUSE_BATCH_ENV = "TRACEHOOK_INDEX_FAULT_PAUSE_BATCH"
STOP_POLL_S = 1.0
"""How often a running query looks for a stop request (``index_stream(stop=...)``)."""

log = logging.getLogger(__name__)


def _stream_error(exc: BaseException, run: RunTotals) -> IndexJobError:
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


def _index_batch(rdd: Any, store_url: str, batch_size: int, writers: int, run: RunTotals,
                 stopping: Callable[[], bool] = lambda: False) -> list[Any]:
    """:func:`spark_jobs.driver.index_batch`, a failure as one :class:`IndexJobError`.

    A batch that fails is indexed once more with ``isolate``: each event that still fails is set
    aside (returned in the results) and the rest is indexed, so one bad event never stops the
    index.  A failure of the store fails that second attempt too, and the batch with it.
    """
    try:
        return index_batch(rdd, store_url, batch_size, writers)
    except Exception as exc:  # Py4J/Spark wrap task errors in their own types
        if stopping():
            raise _stream_error(exc, run) from exc
        first = _stream_error(exc, run)
    log.warning("index: a batch failed (%s); indexing it again event by event, setting aside what cannot "
                "be stored", first)
    run.failure = None
    try:
        return index_batch(rdd, store_url, batch_size, writers, isolate=True)
    except IndexJobError:
        raise
    except Exception as exc:
        raise _stream_error(exc, run) from exc


def _record_set_aside(checkpoint: str | None, results: list[Any]) -> int:
    """Write the batch's set-aside events beside ``checkpoint`` before Spark commits the batch;
    returns how many, each logged once."""
    entries = [entry for result in results for entry in result.set_aside]
    for e in entries:
        log.warning("index: set aside %s event %d of record %d (segment/partition %d), msg_id %r, topic %r: %s "
                    "(tracehook set-aside list)", e.type, e.event, e.offset, e.base, e.msg_id, e.topic, e.reason)
    if entries and checkpoint is not None:
        setaside.record(checkpoint, entries)
    return len(entries)


def _prune_set_aside(log_dir: str, checkpoint: str) -> None:
    """Forget set-aside events whose records retention has deleted from the log."""
    if not os.path.exists(setaside.path_of(checkpoint)):
        return
    from collector.log.format import sealed_segments
    from collector.log.state import readable_end

    sealed = sealed_segments(log_dir)
    dropped = setaside.prune(checkpoint, sealed[0].base if sealed else readable_end(log_dir).base)
    if dropped:
        log.info("index: forgot %d set-aside event(s) whose records the trace log no longer keeps", dropped)


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
                 max_offsets: int | None = None, stop: threading.Event | None = None) -> IndexReport:
    """Index the log into the store through one Structured Streaming query.

    ``follow_s`` None: ``Trigger.AvailableNow`` (everything durable now, then return);
    otherwise a processing-time trigger every ``follow_s`` seconds until interrupted.
    The checkpoint (default :func:`default_checkpoint`) belongs to this (log, store) pair;
    ``on_batch`` gets each micro-batch's report and the lag after it (None for Kafka, whose
    lag Spark's progress reports as ``offsetsBehindLatest``).
    ``source``: read this Kafka topic instead of ``log_dir`` (ignored then), at most
    ``max_offsets`` records per micro-batch; the checkpoint then belongs to (topic, store).
    ``stop``: once set, the query is stopped (a running batch is redone next time) and the
    report of what was committed returned.
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
    prepare_store(store_url)
    if source is None:  # only for a store that opens (a typo must not pin the log)
        protect_from_retention(log_dir, store_url, checkpoint)
    unit = "segment" if source is None else "partition"
    run = RunTotals(unit)

    def process(batch_df: Any, batch_id: int) -> None:
        try:
            if source is None:
                sync_commit(log_dir, store_url, checkpoint)  # the previous batch is in Spark's commit log now
            batch_started = time.monotonic()
            results = _index_batch(batch_df.rdd, store_url, batch_size, writers, run, stopping)
            batch = RunTotals(unit)
            batch.set_aside = _record_set_aside(checkpoint, results)
            if source is None:
                _prune_set_aside(log_dir, checkpoint)
            _fault_pause(batch_id)
            if source is not None:
                batch.topic_partitions = run.topic_partitions = _topic_size(spark, source, results, run)
            for result in results:
                batch.records += result.records
                batch.events += result.events
                batch.bad.update(result.bad)
                batch.segments.update(result.bases)
                for what in result.damage:
                    log.warning("index: %s (counted in corrupt_records/corrupt_bytes)", what)
            run.batches += 1
            run.records += batch.records
            run.events += batch.events
            run.bad.update(batch.bad)
            run.set_aside += batch.set_aside
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
              .option("partitions", str(split_into(spark, store_url)))
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
    stopping = stop.is_set if stop is not None else (lambda: False)
    try:
        while not query.awaitTermination(STOP_POLL_S):
            if stopping():
                query.stop()
                break
    except KeyboardInterrupt:
        query.stop()
        raise
    except Exception as exc:  # StreamingQueryException, Py4J errors
        # While stopping, an error is the JVM that got the signal too (a whole process group
        # was signalled) and is gone: the stop is still a stop.
        if not stopping():
            raise _stream_error(exc, run) from exc
    finally:
        if recorder is not None:
            with contextlib.suppress(*(() if not stopping() else (Exception,))):
                spark.streams.removeListener(recorder)
            sync_commit(log_dir, store_url, checkpoint)
    if source is None:
        drop_legacy_checkpoint(log_dir)
    elif run.topic_partitions is None and not stopping():  # no batch ran: still say how many the topic has
        run.topic_partitions = _topic_size(spark, source, [], run)
    return run.report(started, purge_expired(store_url) if purge else None)


def _topic_size(spark: Any, source: KafkaTopic, results: list[Any], run: RunTotals) -> int | None:
    """The topic's partition count for the progress line: asked of Kafka once per run, and again when a
    batch read a partition beyond it (a topic's partitions only grow)."""
    from spark_jobs.kafka_source import topic_partitions

    known = run.topic_partitions
    if known is None or any(base >= known for result in results for base in result[4]):
        known = topic_partitions(spark, source) or known
    return known


def index_window(spark: Any, source: KafkaTopic, store_url: str, from_ms: int, to_ms: int,
                 batch_size: int = DEFAULT_BATCH_SIZE, *, writers: int = DEFAULT_WRITERS) -> IndexReport:
    """Re-index the Kafka records received in [``from_ms``, ``to_ms``) with one batch read
    (``startingTimestamp``/``endingTimestamp``); no checkpoint is read or written.  Idempotent:
    the rows written are the ones the streaming run wrote."""
    from spark_jobs import kafka_source
    from spark_jobs.kafka_source import window_rows

    started = time.monotonic()
    store_url = absolute_store_url(store_url)
    check_store_for_master(spark.sparkContext.master, store_url)
    prepare_store(store_url)
    run = RunTotals("partition")
    results = _index_batch(window_rows(spark, source, from_ms, to_ms).rdd, store_url, batch_size, writers, run)
    run.set_aside = _record_set_aside(kafka_source.default_checkpoint(source, store_url), results)
    run.topic_partitions = _topic_size(spark, source, results, run)
    for result in results:
        run.records += result.records
        run.events += result.events
        run.bad.update(result.bad)
        run.segments.update(result.bases)
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
