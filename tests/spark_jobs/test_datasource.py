"""The streaming reader's planning and reading, called directly (no Spark session): ranges up to
the durable end, splits at frame boundaries, damage counted once."""

from __future__ import annotations

import os
from typing import Any

import pytest

from collector.log.file import TraceLog
from collector.log.format import encode_record
from collector.log.state import readable_end
from spark_jobs import datasource
from spark_jobs.datasource import TraceLogStreamReader

pytestmark = pytest.mark.spark


def _log(log_dir: str, n: int) -> TraceLog:
    log = TraceLog.open(log_dir, durability="os")
    for i in range(n):
        log.append([(i, "c", i, bytes([i % 256]) * 2000)])
        if i == n // 3:
            log.roll()  # one sealed segment, the rest in the active one
    return log


def _read_all(reader: TraceLogStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[tuple]:
    return [row for part in reader.partitions(start, end) for row in reader.read(part)]


def test_split_ranges_read_every_durable_record_once(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasource, "MIN_SPLIT_BYTES", 20_000)
    log_dir = str(tmp_path / "log")
    log = _log(log_dir, 90)
    reader = TraceLogStreamReader({"log_dir": log_dir, "partitions": "4"})
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert end["offset"] == 90 and end["pos"] == os.path.getsize(os.path.join(log_dir, f"{end['base']:020d}.log"))

    parts = reader.partitions(start, end)
    rows = _read_all(reader, start, end)

    assert len(parts) > 2  # the two segment slices, split further
    assert [r[1] for r in rows] == list(range(90)) and all(r[3] is None for r in rows)
    # A torn frame past the durable end (a write in progress) is never read.
    with open(os.path.join(log_dir, f"{end['base']:020d}.log"), "ab") as f:
        f.write(encode_record(90, 0, "c", 90, b"x" * 100)[:50])
    assert reader.latestOffset(end, None) == end
    assert [r[1] for r in _read_all(reader, start, end)] == list(range(90))
    log.close()


def test_damage_inside_a_split_range_is_counted_once(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasource, "MIN_SPLIT_BYTES", 20_000)
    log_dir = str(tmp_path / "log")
    _log(log_dir, 60).close()
    end = readable_end(log_dir)
    path = os.path.join(log_dir, f"{end.base:020d}.log")
    frame = len(encode_record(0, 0, "c", 0, b"\0" * 2000))
    with open(path, "r+b") as f:  # a payload byte of the active segment's 10th frame
        f.seek(10 * frame - 5)
        byte = f.read(1)
        f.seek(10 * frame - 5)
        f.write(bytes([byte[0] ^ 0xFF]))
    reader = TraceLogStreamReader({"log_dir": log_dir, "partitions": "4"})
    start = reader.initialOffset()
    rows = _read_all(reader, start, reader.latestOffset(start, None))

    good = [r[1] for r in rows if r[3] is None]
    damage = [r for r in rows if r[3] is not None]
    assert len(good) == 59 and len(damage) == 1 and damage[0][5] == 1  # one record lost, counted once
    assert sorted(good) == [o for o in range(60) if o != end.base + 9]
