"""The trace log: framing, sealing, manifest, recovery from damage, checkpoint and retention."""

from __future__ import annotations

import logging
import os
import pathlib
import tempfile
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.log import file as tracelog
from collector.log import state as logstate
from collector.log.errors import CorruptSegmentError, StorageError
from collector.log.file import TraceLog


def _entries(n: int, start: int = 0, size: int = 50) -> list[tuple[int, str, int, bytes]]:
    return [(1_000 + i, f"client-{i % 3}", i, bytes([i % 256]) * (size + i % 7)) for i in range(start, start + n)]


def _all_records(log_dir: str, tl: TraceLog) -> list[tracelog.LogRecord]:
    sealed = [r for s in tracelog.sealed_segments(log_dir) for r in tracelog.read_segment(s.path)]
    active = tracelog.scan_segment(os.path.join(log_dir, tracelog.segment_name(tl.active_base)))
    assert active.error is None
    return sealed + active.records


def test_records_round_trip_with_their_header(tmp_path: pathlib.Path) -> None:
    tl = TraceLog.open(str(tmp_path))
    offsets = tl.append([(5, "cli-é", 42, b"payload"), (6, "other", 0, b"")])
    assert offsets == [0, 1]
    tl.roll()
    [seg] = tracelog.sealed_segments(str(tmp_path))
    assert (seg.base, seg.records) == (0, 2)
    assert seg.size == os.path.getsize(seg.path)
    assert list(tracelog.read_segment(seg.path)) == [
        tracelog.LogRecord(0, 5, "cli-é", 42, b"payload"),
        tracelog.LogRecord(1, 6, "other", 0, b""),
    ]


def test_segments_roll_by_size_and_are_named_by_base_offset(tmp_path: pathlib.Path) -> None:
    tl = TraceLog.open(str(tmp_path), segment_bytes=500)
    for entry in _entries(20):
        tl.append([entry])
    sealed = tracelog.sealed_segments(str(tmp_path))
    assert len(sealed) >= 3
    bases = [s.base for s in sealed]
    assert bases == sorted(bases) and bases[0] == 0
    for prev, nxt in zip(sealed, sealed[1:]):
        assert nxt.base == prev.base + prev.records
        assert os.path.basename(nxt.path) == tracelog.segment_name(nxt.base)
    assert [r.offset for r in _all_records(str(tmp_path), tl)] == list(range(20))


def test_roll_by_age_and_the_active_segment_stays_out_of_the_manifest(tmp_path: pathlib.Path) -> None:
    tl = TraceLog.open(str(tmp_path), segment_age_s=10)
    tl.append(_entries(2))
    assert tl.roll_if_due(now_ms=1_000 + 5_000) is None
    assert tracelog.sealed_segments(str(tmp_path)) == []
    info = tl.roll_if_due(now_ms=1_000 + 10_000)
    assert info is not None and info.records == 2
    assert tracelog.sealed_segments(str(tmp_path)) == [info]
    assert tl.roll_if_due(now_ms=10**13) is None  # an empty active segment is never sealed


def test_reopen_continues_offsets_and_keeps_data(tmp_path: pathlib.Path) -> None:
    tl = TraceLog.open(str(tmp_path), segment_bytes=400)
    tl.append(_entries(7))
    tl.close()
    tl = TraceLog.open(str(tmp_path), segment_bytes=400)
    assert tl.recovery is not None and tl.recovery.cut_bytes == 0
    assert tl.append(_entries(1, start=7)) == [7]
    assert [r.seq for r in _all_records(str(tmp_path), tl)] == list(range(8))


def test_read_segment_yields_good_records_then_raises(tmp_path: pathlib.Path) -> None:
    tl = TraceLog.open(str(tmp_path))
    tl.append(_entries(3))
    tl.close()
    path = os.path.join(str(tmp_path), tracelog.segment_name(0))
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 1)
    got = []
    with pytest.raises(CorruptSegmentError) as info:
        for record in tracelog.read_segment(path):
            got.append(record.offset)
    assert got == [0, 1]
    assert info.value.path == path and 0 < info.value.position < size


def test_durable_end_follows_every_append_and_roll(tmp_path: pathlib.Path) -> None:
    log_dir = str(tmp_path)
    assert logstate.read_durable(log_dir) is None
    tl = TraceLog.open(log_dir, segment_bytes=200)
    assert logstate.read_durable(log_dir) == logstate.LogPosition(0, 0, 0)
    for entry in _entries(6):
        tl.append([entry])
        end = logstate.read_durable(log_dir)
        assert end == tl.durable_end() and end.pos == os.path.getsize(os.path.join(log_dir, tracelog.segment_name(end.base)))
    tl.close()
    log_id = logstate.read_log_id(log_dir)
    assert TraceLog.open(log_dir).log_id == log_id  # the id belongs to the log, not to one process


def test_retention_deletes_only_what_every_checkpoint_committed(tmp_path: pathlib.Path) -> None:
    log_dir = str(tmp_path)
    tl = TraceLog.open(log_dir, segment_bytes=200)
    for entry in _entries(16):
        tl.append([entry])
    sealed = tracelog.sealed_segments(log_dir)
    assert len(sealed) >= 3
    assert tl.apply_retention(0, now_ms=sealed[-1].sealed_ms + 1) == []  # no checkpoint: nothing is indexed
    end_of = [logstate.LogPosition(s.base + s.records, s.base, s.size) for s in sealed]
    logstate.write_commit(log_dir, "a", "local:a", "/ck/a", end_of[2])
    logstate.write_commit(log_dir, "b", "local:b", "/ck/b", end_of[0])  # a second store, further behind
    backlog_before = tl.backlog_bytes()
    # Too young: nothing goes, even if indexed.
    assert tl.apply_retention(3600) == []
    deleted = tl.apply_retention(0, now_ms=sealed[-1].sealed_ms + 1)
    assert [s.base for s in deleted] == [sealed[0].base]  # only what both have committed
    assert all(not os.path.exists(s.path) for s in deleted)
    assert tl.backlog_bytes() == backlog_before  # deleted segments were not backlog
    logstate.remove_commit(log_dir, "b")  # that store is dropped: retention stops waiting for it
    deleted = tl.apply_retention(0, now_ms=sealed[-1].sealed_ms + 1)
    assert [s.base for s in deleted] == [sealed[1].base, sealed[2].base]
    remaining = tracelog.sealed_segments(log_dir)
    assert [s.base for s in remaining] == [s.base for s in sealed[3:]]
    assert all(os.path.exists(s.path) for s in remaining)


def test_orphan_left_by_a_retention_crash_is_removed_at_open(tmp_path: pathlib.Path) -> None:
    log_dir = str(tmp_path)
    tl = TraceLog.open(log_dir, segment_bytes=300)
    for entry in _entries(8):
        tl.append([entry])
    first = tracelog.sealed_segments(log_dir)[0]
    tl.close()
    # Simulate the crash between the manifest update and the unlink.
    segments, end = tracelog._load_manifest(log_dir)
    tracelog._write_manifest(log_dir, segments[1:], end)
    tl = TraceLog.open(log_dir, segment_bytes=300)
    assert tl.recovery is not None and tl.recovery.orphans_removed == 1
    assert not os.path.exists(first.path)
    assert tl.append(_entries(1, start=8)) == [8]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(min_value=1, max_value=12),
    where=st.floats(min_value=0.0, max_value=1.0, exclude_max=True),
    damage=st.sampled_from(["truncate", "flip", "garbage_tail"]),
)
def test_recovery_keeps_every_record_before_the_damage_and_none_after(n: int, where: float, damage: str) -> None:
    with tempfile.TemporaryDirectory() as log_dir:
        tl = TraceLog.open(log_dir)
        ends = []
        for entry in _entries(n):
            tl.append([entry])
            ends.append(tl.active_size)
        tl.close()
        path = os.path.join(log_dir, tracelog.segment_name(0))
        size = os.path.getsize(path)
        pos = int(where * size)
        if damage == "truncate":
            with open(path, "r+b") as f:
                f.truncate(pos)
        elif damage == "flip":
            with open(path, "r+b") as f:
                f.seek(pos)
                byte = f.read(1)[0]
                f.seek(pos)
                f.write(bytes([byte ^ 0xFF]))
        else:
            pos = size
            with open(path, "ab") as f:
                f.write(b"\x00\x00\x10\x00garbage")
        # Complete records are the ones whose frame ends at or before the damaged byte.
        expect = sum(1 for end in ends if end <= pos)
        damaged_size = os.path.getsize(path)
        tl = TraceLog.open(log_dir)
        assert tl.recovery is not None
        assert tl.active_records == expect
        kept_bytes = ends[expect - 1] if expect else 0
        assert os.path.getsize(path) == kept_bytes
        assert tl.recovery.cut_bytes == damaged_size - kept_bytes  # the report names exactly the tail cut off
        assert (tl.recovery.cut_reason is None) == (damaged_size == kept_bytes)
        kept = tracelog.scan_segment(path)
        assert kept.error is None
        assert [r.seq for r in kept.records] == list(range(expect))
        # The log goes on from where the good records end.
        assert tl.append(_entries(1, start=100)) == [expect]
        tl.close()


def test_recovery_logs_the_file_and_the_bytes_it_cut(tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    log_dir = str(tmp_path)
    tl = TraceLog.open(log_dir)
    tl.append(_entries(3))
    tl.close()
    garbage = b"\x00\x00\x10\x00torn"
    with open(os.path.join(log_dir, tracelog.segment_name(0)), "ab") as f:
        f.write(garbage)
    with caplog.at_level(logging.WARNING, logger="collector.log.file"):
        tl = TraceLog.open(log_dir)
    assert tl.recovery is not None and tl.recovery.cut_bytes == len(garbage) and tl.active_records == 3
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert tracelog.segment_name(0) in warning and f"truncating {len(garbage)} bytes" in warning
    assert "kept 3 records" in warning
    tl.close()


def test_a_failed_seal_leaves_the_segment_active_and_writable(tmp_path: pathlib.Path) -> None:
    log_dir = str(tmp_path)
    tl = TraceLog.open(log_dir)
    tl.append(_entries(2))
    # A directory where the manifest's temp file should go makes the manifest write fail.
    os.mkdir(os.path.join(log_dir, f"{tracelog.MANIFEST}.tmp.{os.getpid()}.{threading.get_ident()}"))
    with pytest.raises(StorageError):
        tl.roll()
    assert tracelog.sealed_segments(log_dir) == []
    assert tl.append(_entries(1, start=2)) == [2]
    assert [r.seq for r in _all_records(log_dir, tl)] == [0, 1, 2]
