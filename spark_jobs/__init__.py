"""The index job: the trace log indexed into the store by one PySpark Structured Streaming query.

The source is :class:`spark_jobs.datasource.TraceLogSource` read as a stream: offsets are
trace-log record offsets, each micro-batch reads up to the collector's durable end (the
active segment included), one partition per segment slice.  ``foreachBatch`` runs
``mapPartitions`` over the batch: each partition decodes its batches and writes every index
row with :func:`collector.index.indexer.index_records` over one store connection; then the
driver runs :func:`collector.index.indexer.finish_batch`.  Spark's checkpoint (one per
(log, store): ``<log-dir>/index-checkpoints/<hash of the store URL>/`` unless ``--checkpoint``)
holds the offsets; a batch that failed or was killed is run again with the same offsets and
rewrites identical cells.  Each commit is also recorded in ``<log-dir>/index-commits/`` for
the collector's retention and lag metrics.

``--follow`` keeps the query running with a processing-time trigger (default 1 s); one-shot
runs and ``--every`` use ``Trigger.AvailableNow`` over the same source and checkpoint.

The source is either the file trace log (``--log-dir``) or the collectors' Kafka topic
(``--source kafka://HOST:PORT/TOPIC``, read with Spark's own Kafka source); both feed the same
:func:`index_partition`.  With Kafka, ``--max-offsets-per-trigger`` caps a micro-batch and
``--from/--to`` re-index a time window (a batch read by record timestamp, no checkpoint).

Example::

    tracehook index --log-dir /data/log --store local:/data/index.sqlite3 --follow
    tracehook index --source kafka://k1:9092/traces --store hbase://127.0.0.1:9090 --from -2h --to -1h

    from spark_jobs import run_index, index_stream, spark_session
    report = run_index("/data/log", "local:/data/index.sqlite3", master="local[2]")   # AvailableNow
    index_stream(spark_session(), "/data/log", "local:/data/index.sqlite3", follow_s=1.0, on_batch=print)

The modules, from the command down to a task:

- :mod:`spark_jobs.index_job`: the ``tracehook index`` command's entry module (``add_arguments``, ``run``);
- :mod:`spark_jobs.cli`: the command's options, their checks before Spark starts, and its run loop;
- :mod:`spark_jobs.stream`: the streaming runs (:func:`index_stream`, :func:`index_once`, :func:`index_window`);
- :mod:`spark_jobs.setaside_cmd`: ``tracehook set-aside``, the events a run set aside;
- :mod:`spark_jobs.session`: the SparkSession (:func:`spark_session`);
- :mod:`spark_jobs.driver`: the driver's store work around the tasks (prepare, finish a batch, purge);
- :mod:`spark_jobs.partition`: a task's work on an executor (:func:`index_partition`);
- :mod:`spark_jobs.datasource`, :mod:`spark_jobs.kafka_source`: the two sources;
- :mod:`spark_jobs.checkpoint`: one checkpoint per (log, store), and the commit record;
- :mod:`spark_jobs.store_cache`: a worker's open stores, kept from one micro-batch to the next;
- :mod:`spark_jobs.lifecycle`, :mod:`spark_jobs.report`, :mod:`spark_jobs.errors`: stopping and
  waiting, what a run did (:class:`IndexReport`), and the job's exceptions.

The names below are loaded on first use (PEP 562): ``import spark_jobs``, as every executor does
to run :mod:`spark_jobs.partition`, imports neither PySpark nor the rest of the job.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "EXIT_BAD_INPUT": "spark_jobs.cli",
    "EXIT_FAILED": "spark_jobs.cli",
    "EXIT_USAGE": "spark_jobs.cli",
    "add_arguments": "spark_jobs.cli",
    "check_arguments": "spark_jobs.cli",
    "run": "spark_jobs.cli",
    "IndexJobError": "spark_jobs.errors",
    "DEFAULT_BATCH_SIZE": "spark_jobs.partition",
    "DEFAULT_WRITERS": "spark_jobs.partition",
    "index_partition": "spark_jobs.partition",
    "IndexReport": "spark_jobs.report",
    "APP_NAME": "spark_jobs.session",
    "DEFAULT_MASTER": "spark_jobs.session",
    "check_store_for_master": "spark_jobs.session",
    "spark_session": "spark_jobs.session",
    "index_once": "spark_jobs.stream",
    "index_stream": "spark_jobs.stream",
    "index_window": "spark_jobs.stream",
    "run_index": "spark_jobs.stream",
}
"""Each public name and the module that defines it: the one list of the package's API."""

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access does not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
