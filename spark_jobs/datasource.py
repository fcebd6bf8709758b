"""A PySpark Python Data Source over sealed trace-log segments: one partition per segment.

Each row is one raw log record, ``(base, offset, payload, error, skipped_bytes, lost_records)``.
Decoding happens later, in the index job's ``mapPartitions``, so a bad batch is counted there.
A corrupt frame does not fail the read: the reader skips to the next frame that verifies
(:func:`collector.log.format.salvage_segment`) and yields one row with ``payload = None``,
``error`` set and the bytes and records it had to skip, so the job can count the loss.

Options (plain data only, so the reader runs unchanged on a cluster's executors):

``segments``
    JSON list of ``[base, path, records]`` (``records`` from the manifest, to count what
    damage lost); paths must be absolute and visible from every executor (the shared log
    directory, see docs/index-job.md).

Example::

    spark.dataSource.register(TraceLogSource)
    df = spark.read.format("tracehook_log").option("segments", json.dumps([[0, "/logs/000...0.log", 4096]])).load()

Streaming (``spark.readStream.format("tracehook_log")``, what the index job uses): offsets are
log positions ``{"log": id, "offset": n, "base": segment, "pos": byte}``; each micro-batch reads
records ``[start, end)`` where ``end`` is the collector's durable end (:mod:`collector.log.state`),
active segment included, one partition per segment slice.  Options: ``log_dir`` (absolute),
``log_id``, and for :meth:`TraceLogStreamReader.commit` ``commit_key``, ``store`` and
``checkpoint``: each commit is recorded in ``<log_dir>/index-commits/<commit_key>.json``,
which is what lets the collector's retention delete segments.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow

FORMAT_NAME = "tracehook_log"
MIN_SPLIT_BYTES = 1024 * 1024
"""A segment slice is split into several partitions (up to the ``partitions`` option) only in
pieces of at least this many bytes: the active segment of a busy collector is one slice."""
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

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return TraceLogStreamReader(self.options)


class TraceLogReader(DataSourceReader):
    """Reads each segment with :func:`collector.log.format.salvage_segment`."""

    def __init__(self, segments: list[list[Any]]) -> None:
        self.segments = [(int(base), str(path), int(records)) for base, path, records in segments]

    def partitions(self) -> list[InputPartition]:
        return [SegmentPartition(base, path, records) for base, path, records in self.segments]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int, bytes | None, str | None, int, int]]:
        # Imported here: this runs in a Python worker on an executor.
        from collector.log.format import Damage, salvage_segment

        assert isinstance(partition, SegmentPartition)
        for item in salvage_segment(partition.path, partition.base, partition.records):
            if isinstance(item, Damage):
                error = f"corrupt: {partition.path}: {item.why} at byte {item.position}"
                yield (partition.base, -1, None, error, item.skipped_bytes, item.lost_records)
            else:
                yield (partition.base, item.offset, item.payload, None, 0, 0)


Row = tuple[int, int, bytes | None, str | None, int, int]


def _rows(path: str, base: int, items: Iterator[Any]) -> Iterator[Row]:
    from collector.log.format import Damage

    for item in items:
        if isinstance(item, Damage):
            error = f"corrupt: {path}: {item.why} at byte {item.position}"
            yield (base, -1, None, error, item.skipped_bytes, item.lost_records)
        else:
            yield (base, item.offset, item.payload, None, 0, 0)


class SliceOfSegment(InputPartition):
    """Records ``[first, stop)`` of segment ``base``, from byte ``start_pos`` to ``stop_pos`` (None: its end)."""

    def __init__(self, base: int, path: str, start_pos: int, stop_pos: int | None, first: int, stop: int) -> None:
        super().__init__((base, start_pos, first, stop))
        self.base, self.path, self.start_pos, self.stop_pos = base, path, start_pos, stop_pos
        self.first, self.stop = first, stop


class TraceLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of log records up to the collector's durable end (see the module docstring)."""

    def __init__(self, options: dict[str, str]) -> None:
        from collector.log.state import read_log_id

        self.log_dir = options["log_dir"]
        self.log_id = options.get("log_id") or read_log_id(self.log_dir)
        self.commit_key = options.get("commit_key")
        self.store = options.get("store", "")
        self.checkpoint = options.get("checkpoint", "")
        self.max_partitions = max(1, int(options.get("partitions", "1")))
        self.target: dict[str, Any] | None = None

    # -- offsets ----------------------------------------------------------------------------

    def _offset(self, offset: int, base: int, pos: int) -> dict[str, Any]:
        return {"log": self.log_id, "offset": offset, "base": base, "pos": pos}

    def _check(self, position: dict[str, Any]) -> None:
        from collector.log.state import read_log_id
        from spark_jobs.errors import CheckpointMismatchError

        if position.get("log") != self.log_id or read_log_id(self.log_dir) != self.log_id:
            raise CheckpointMismatchError(
                f"the checkpoint's offsets belong to trace log {position.get('log')}, not to {self.log_dir} "
                f"(log {read_log_id(self.log_dir)}); use the checkpoint of this log and store")

    def _durable_end(self) -> dict[str, Any]:
        from collector.log.state import readable_end

        end = readable_end(self.log_dir)
        return self._offset(end.offset, end.base, end.pos)

    def initialOffset(self) -> dict[str, Any]:
        """The first record still in the log (a new checkpoint indexes everything the log holds)."""
        from collector.log.format import sealed_segments

        sealed = sealed_segments(self.log_dir)
        if sealed:
            return self._offset(sealed[0].base, sealed[0].base, 0)
        end = self._durable_end()
        return self._offset(end["base"], end["base"], 0)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = self._durable_end()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The durable end (with ``Trigger.AvailableNow``: no later than it was at the start)."""
        self._check(start)
        end = self._durable_end()
        if self.target is not None and end["offset"] > self.target["offset"]:
            end = self.target
        if end["offset"] <= start["offset"]:
            return start
        self._locate(start)  # a start the log no longer holds fails here, before Spark logs the batch
        return end

    def reportLatestOffset(self) -> dict[str, Any]:
        return self._durable_end()

    def _locate(self, position: dict[str, Any]) -> tuple[int, int]:
        """(base, pos) of the segment file holding record ``position["offset"]``."""
        from collector.log.errors import SegmentGoneError
        from collector.log.format import segment_name

        base, pos, offset = position["base"], position["pos"], position["offset"]
        path = os.path.join(self.log_dir, segment_name(base))
        if os.path.exists(path) and (offset == base or os.path.getsize(path) >= pos):
            return base, pos
        # The segment ended exactly at this offset and retention has since deleted it.
        if os.path.exists(os.path.join(self.log_dir, segment_name(offset))):
            return offset, 0
        raise SegmentGoneError(
            f"records from offset {offset} are no longer in {self.log_dir}: {segment_name(base)} was deleted "
            "before this checkpoint indexed it; see docs/index-job.md (backfilling a store)")

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        from collector.log.errors import SegmentGoneError
        from collector.log.format import _load_manifest, segment_name

        if end["offset"] <= start["offset"]:
            return []
        self._check(start)
        base, pos = self._locate(start)
        sealed, _ = _load_manifest(self.log_dir)
        # Every segment before end's was sealed when end was read (the collector lists a segment
        # in the manifest before it starts the next one).
        chain = [(s.base, s.base + s.records) for s in sealed if base <= s.base < end["base"]]
        chain.append((end["base"], end["offset"]))
        slices: list[InputPartition] = []
        expected = start["offset"]
        for seg_base, seg_end in chain:
            if seg_base > expected:
                raise SegmentGoneError(
                    f"records {expected}..{seg_base - 1} are missing from {self.log_dir} (a segment was deleted)")
            first = max(expected, seg_base)
            stop = min(seg_end, end["offset"])
            if first < stop:
                at = pos if seg_base == base else 0
                until = end["pos"] if seg_base == end["base"] else None
                slices.extend(self._split(seg_base, os.path.join(self.log_dir, segment_name(seg_base)),
                                          at, until, first, stop))
            expected = max(expected, stop)
        return slices

    def _split(self, base: int, path: str, at: int, until: int | None, first: int,
               stop: int) -> list[InputPartition]:
        """One slice, or up to ``max_partitions`` pieces of it split at frame boundaries."""
        from collector.log.format import frame_starts

        size = (os.path.getsize(path) if until is None else until) - at
        if self.max_partitions < 2 or size < 2 * MIN_SPLIT_BYTES:
            return [SliceOfSegment(base, path, at, until, first, stop)]
        points = frame_starts(path, at, until, first, max(MIN_SPLIT_BYTES, size // self.max_partitions))
        bounds = [*points[1:], (until, stop)]
        return [SliceOfSegment(base, path, pos, nxt_pos, offset, nxt_offset)
                for (pos, offset), (nxt_pos, nxt_offset) in zip(points, bounds)]

    def read(self, partition: InputPartition) -> Iterator[Row]:
        from collector.log.errors import SegmentGoneError
        from collector.log.format import salvage_range

        assert isinstance(partition, SliceOfSegment)
        try:
            items = salvage_range(partition.path, partition.start_pos, partition.stop_pos,
                                  partition.first, partition.stop)
            yield from _rows(partition.path, partition.base, items)
        except FileNotFoundError:
            raise SegmentGoneError(f"{partition.path} was deleted under the reader (records "
                                   f"{partition.first}..{partition.stop - 1} not indexed)") from None

    def commit(self, end: dict[str, Any]) -> None:
        """Spark has processed everything before ``end``: record it for the collector's retention."""
        if self.commit_key:
            from collector.log.state import LogPosition, write_commit

            write_commit(self.log_dir, self.commit_key, self.store, self.checkpoint,
                         LogPosition(end["offset"], end["base"], end["pos"]))
