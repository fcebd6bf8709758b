"""A PySpark Python Data Source over sealed trace-log segments: one partition per segment.

Each row is one raw log record, ``(base, offset, payload, error)``.  Decoding happens
later, in the index job's ``mapPartitions``, so a bad batch is counted there.  A corrupt
frame does not fail the read: every good record before it is yielded, then one row with
``payload = None`` and ``error`` set, so the job can count it.

Options (plain data only, so the reader runs unchanged on a cluster's executors):

``segments``
    JSON list of ``[base, path]``; paths must be visible from every executor (the shared
    log directory, see docs/index-job.md).

Example::

    spark.dataSource.register(TraceLogSource)
    df = spark.read.format("tracehook_log").option("segments", json.dumps([[0, "/logs/000...0.log"]])).load()
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

FORMAT_NAME = "tracehook_log"
SCHEMA = "base long, offset long, payload binary, error string"


class SegmentPartition(InputPartition):
    """One sealed segment: its base offset and path."""

    def __init__(self, base: int, path: str) -> None:
        super().__init__((base, path))
        self.base = base
        self.path = path


class TraceLogSource(DataSource):
    """``spark.read.format("tracehook_log")``: raw records of the listed sealed segments."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return TraceLogReader(json.loads(self.options.get("segments", "[]")))


class TraceLogReader(DataSourceReader):
    """Reads each segment with :func:`collector.tracelog.read_segment`."""

    def __init__(self, segments: list[list[Any]]) -> None:
        self.segments = [(int(base), str(path)) for base, path in segments]

    def partitions(self) -> list[InputPartition]:
        return [SegmentPartition(base, path) for base, path in self.segments]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int, bytes | None, str | None]]:
        # Imported here: this runs in a Python worker on an executor.
        from collector.tracelog import CorruptSegmentError, read_segment

        assert isinstance(partition, SegmentPartition)
        try:
            for record in read_segment(partition.path):
                yield (partition.base, record.offset, record.payload, None)
        except CorruptSegmentError as exc:
            yield (partition.base, -1, None, f"corrupt: {exc}")
