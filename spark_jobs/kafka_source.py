"""The index job's Kafka source: Spark's own ``kafka`` format over the collectors' trace topic.

A collector with ``--log kafka://HOST:PORT/TOPIC`` (:mod:`collector.log.kafka`) writes each
batch as one record; this module reads them back with ``spark-sql-kafka-0-10`` (no Kafka
reader of ours) and projects them onto the file-log source's row schema
(:data:`spark_jobs.datasource.SCHEMA`), so the same ``index_partition`` decodes and indexes
both::

    spark = spark_session("local[2]", jars=kafka_jars())
    rows = stream_rows(spark, parse_kafka_url("kafka://127.0.0.1:9092/traces"), max_offsets=100_000)
    rows = window_rows(spark, topic, from_ms, to_ms)      # a batch read by record timestamp

Offsets live in Spark's checkpoint (one per (topic, store), :func:`default_checkpoint`); the
record's ``partition`` takes the place of the segment base (``base``) in the job's counts.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import subprocess
from typing import Any

from collector.log.url import KafkaTopic
from spark_jobs.errors import IndexJobError

JARS_ENV = "TRACEHOOK_SPARK_KAFKA_JARS"
"""The connector's jars: comma-separated jar files or directories of jars (``--kafka-jars`` wins);
without it, a checkout's ``scripts/spark-kafka jars`` finds them."""
CHECKPOINTS_ENV = "TRACEHOOK_INDEX_CHECKPOINTS"
"""Where Kafka sources' default checkpoints go (default ``~/.local/state/tracehook/index-checkpoints``)."""
FETCH_SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "spark-kafka"
FETCH_TIMEOUT_S = 600
PARTITIONS_TIMEOUT_S = 10.0


def kafka_jars(given: str | None = None) -> list[str]:
    """The connector jars for ``spark.jars``: from ``given`` (``--kafka-jars``), else :data:`JARS_ENV`,
    each a comma-separated list of jar files or directories (every ``*.jar`` in one); else from a
    checkout's ``scripts/spark-kafka jars`` (which resolves them through Maven the first time).
    :class:`IndexJobError` when none works."""
    given = given or os.environ.get(JARS_ENV)
    if given:
        jars = _expand_jars(given)
    elif FETCH_SCRIPT.exists():
        try:
            done = subprocess.run([str(FETCH_SCRIPT), "jars"], capture_output=True, text=True, check=False,
                                  timeout=FETCH_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise IndexJobError(f"cannot run {FETCH_SCRIPT} jars: {exc}") from exc
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["failed"])[-1]
            raise IndexJobError(f"the Spark Kafka connector is not available: {last}")
        jars = [j for j in done.stdout.strip().split(",") if j]
    else:
        raise IndexJobError(f"the Spark Kafka connector jars are not known: pass --kafka-jars or set {JARS_ENV} to "
                            "the directory (or comma-separated files) of the spark-sql-kafka-0-10 jars "
                            "(docs/index-job.md, From Kafka)")
    if not jars:
        raise IndexJobError(f"no Spark Kafka connector jars in {given or FETCH_SCRIPT}")
    missing = [j for j in jars if not os.path.isfile(j)]
    if missing:
        raise IndexJobError(f"Spark Kafka connector jar missing: {missing[0]}")
    return jars


def _expand_jars(paths: str) -> list[str]:
    """Comma-separated jar files and directories -> jar files (a directory's ``*.jar``, sorted)."""
    jars: list[str] = []
    for path in (p.strip() for p in paths.split(",")):
        if not path:
            continue
        if os.path.isdir(path):
            jars += sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".jar"))
        else:
            jars.append(path)
    return jars


def topic_partitions(spark: Any, topic: KafkaTopic) -> int | None:
    """How many partitions the topic has (empty ones included), asked of Kafka by the connector's own
    ``kafka-clients`` in the driver's JVM; None when Kafka does not answer in time."""
    jvm = spark._jvm
    props = jvm.java.util.Properties()
    props.put("bootstrap.servers", topic.bootstrap)
    try:
        admin = jvm.org.apache.kafka.clients.admin.Admin.create(props)
        try:
            described = admin.describeTopics(jvm.java.util.Collections.singletonList(topic.topic)).allTopicNames()
            found = described.get(int(PARTITIONS_TIMEOUT_S), jvm.java.util.concurrent.TimeUnit.SECONDS)
            return int(found.get(topic.topic).partitions().size())
        finally:
            admin.close()
    except Exception:  # noqa: BLE001 - Py4J wraps Kafka's errors; the progress line falls back to what it read
        return None


def source_id(topic: KafkaTopic) -> str:
    """The identity a checkpoint records for a Kafka source (in place of a trace log's id)."""
    return f"kafka:{topic.topic}@{','.join(sorted(topic.bootstrap.split(',')))}"


def default_checkpoint(topic: KafkaTopic, store_url: str) -> str:
    """``<root>/kafka-<topic>-<hash of (topic, bootstrap, store)>``: one checkpoint per (topic, store)."""
    root = os.environ.get(CHECKPOINTS_ENV) or os.path.join(
        os.path.expanduser("~"), ".local", "state", "tracehook", "index-checkpoints")
    digest = hashlib.sha256(f"{source_id(topic)}\n{store_url}".encode()).hexdigest()[:16]
    return os.path.join(os.path.abspath(root), f"kafka-{topic.topic}-{digest}")


def _as_log_rows(df: Any) -> Any:
    """Kafka rows -> the trace-log source's rows: the record value is the batch, as in a log record."""
    from pyspark.sql import functions as F

    return df.select(F.col("partition").cast("long").alias("base"), F.col("offset").alias("offset"),
                     F.col("value").alias("payload"), F.lit(None).cast("string").alias("error"),
                     F.lit(0).cast("long").alias("skipped_bytes"), F.lit(0).cast("long").alias("lost_records"))


def _reader(spark: Any, reader: Any, topic: KafkaTopic) -> Any:
    # minPartitions: a busy collector's records share one Kafka partition (they are keyed by
    # client id); Spark splits such a partition's offset range so every core indexes part of it.
    return (reader.format("kafka").option("kafka.bootstrap.servers", topic.bootstrap)
            .option("subscribe", topic.topic)
            .option("minPartitions", str(max(1, spark.sparkContext.defaultParallelism))))


def stream_rows(spark: Any, topic: KafkaTopic, max_offsets: int | None = None) -> Any:
    """The topic as a stream from its earliest offsets (then from the checkpoint's), at most
    ``max_offsets`` records per micro-batch (``maxOffsetsPerTrigger``)."""
    reader = _reader(spark, spark.readStream, topic).option("startingOffsets", "earliest")
    # Records the topic's retention deleted before they were indexed: counted by Spark in its
    # log, not a reason to stop indexing the rest.
    reader = reader.option("failOnDataLoss", "false")
    if max_offsets is not None:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    return _as_log_rows(reader.load())


def window_rows(spark: Any, topic: KafkaTopic, from_ms: int, to_ms: int) -> Any:
    """A batch read of the records whose timestamp (the collector's receive time) is in
    [``from_ms``, ``to_ms``): per partition, from the first offset at or after ``from_ms`` to
    the first at or after ``to_ms`` (Kafka's offsetsForTimes; the latest when there is none)."""
    reader = (_reader(spark, spark.read, topic).option("startingTimestamp", str(from_ms))
              .option("endingTimestamp", str(to_ms))
              .option("startingOffsetsByTimestampStrategy", "latest"))
    return _as_log_rows(reader.load())
