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

The job is split by concern: :mod:`spark_jobs.session` (the SparkSession),
:mod:`spark_jobs.partition` (a partition's writes and the driver's around a batch),
:mod:`spark_jobs.report` (:class:`IndexReport`), :mod:`spark_jobs.stream` (the streaming
runs) and :mod:`spark_jobs.cli` (options and the run loop).  This module is the command's
entry point (``add_arguments``, ``run``) and re-exports the public names.
"""

from __future__ import annotations

from spark_jobs.cli import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_USAGE, add_arguments, check_arguments, run
from spark_jobs.partition import DEFAULT_BATCH_SIZE, DEFAULT_WRITERS, index_partition
from spark_jobs.report import IndexReport
from spark_jobs.session import APP_NAME, DEFAULT_MASTER, check_store_for_master, spark_session
from spark_jobs.stream import index_once, index_stream, index_window, run_index

__all__ = [
    "APP_NAME",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MASTER",
    "DEFAULT_WRITERS",
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "EXIT_USAGE",
    "IndexReport",
    "add_arguments",
    "check_arguments",
    "check_store_for_master",
    "index_once",
    "index_partition",
    "index_stream",
    "index_window",
    "run",
    "run_index",
    "spark_session",
]
