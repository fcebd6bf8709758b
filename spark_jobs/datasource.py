"""A PySpark Python Data Source over sealed trace-log segments: one partition per segment.

Each row is one raw log record, ``(base, offset, payload, error, skipped_bytes, lost_records)``.
Decoding happens later, in the index job's ``mapPartitions``, so a bad batch is counted there.
A corrupt frame does not fail the read: the reader skips to the next frame that verifies
(:func:`collector.logformat.salvage_segment`) and yields one row with ``payload = None``,
``error`` set and the bytes and records it had to skip, so the job can count the loss.

Options (plain data only, so the reader runs unchanged on a cluster's executors):

``segments``
    JSON list of ``[base, path, records]`` (``records`` from the manifest, to count what
    damage lost); paths must be absolute and visible from every executor (the shared log
    directory, see docs/index-job.md).

Example::

    spark.dataSource.register(TraceLogSource)
    df = spark.read.format("tracehook_log").option("segments", json.dumps([[0, "/logs/000...0.log", 4096]])).load()
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

FORMAT_NAME = "tracehook_log"
SCHEMA = "base long, offset long, payload binary, error string, skipped_bytes long, lost_records long"


class SegmentPartition(InputPartition):
    """One sealed segment: its base offset, path and record count."""

    def __init__(self, base: int, path: str, records: int) -> None:
        super().__init__((base, path, records))
        self.base = base
        self.path = path
        self.records = records


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
    """Reads each segment with :func:`collector.logformat.salvage_segment`."""

    def __init__(self, segments: list[list[Any]]) -> None:
        self.segments = [(int(base), str(path), int(records)) for base, path, records in segments]

    def partitions(self) -> list[InputPartition]:
        return [SegmentPartition(base, path, records) for base, path, records in self.segments]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int, bytes | None, str | None, int, int]]:
        # Imported here: this runs in a Python worker on an executor.
        from collector.logformat import Damage, salvage_segment

        assert isinstance(partition, SegmentPartition)
        for item in salvage_segment(partition.path, partition.base, partition.records):
            if isinstance(item, Damage):
                error = f"corrupt: {partition.path}: {item.why} at byte {item.position}"
                yield (partition.base, -1, None, error, item.skipped_bytes, item.lost_records)
            else:
                yield (partition.base, item.offset, item.payload, None, 0, 0)
