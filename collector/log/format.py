"""The trace log's on-disk format: record framing, segment reading, salvage and the manifest.

Everything here is safe to use from any process; the writer is :mod:`collector.log.file`,
which also re-exports the public names (the contract's import path)::

    from collector.log.file import sealed_segments, read_segment
"""

from __future__ import annotations

import json
import os
import struct
import threading
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import crc32c

from collector.log.errors import CorruptSegmentError

MANIFEST = "manifest.json"
CHECKPOINT = "indexed.json"
SEGMENT_SUFFIX = ".log"
MAX_RECORD_BYTES = 1024 * 1024 * 1024
"""A length above this is treated as corruption rather than a record to allocate for."""
_PREFIX = struct.Struct(">II")
_HEADER = struct.Struct(">QQQH")
_U64 = struct.Struct(">Q")
_MIN_FRAME = _HEADER.size  # a frame body holds at least the fixed header


class LogRecord(NamedTuple):
    """One batch as stored in the log."""

    offset: int
    receive_ms: int
    client_id: str
    seq: int
    payload: bytes


class SegmentInfo(NamedTuple):
    """A sealed segment as listed in the manifest."""

    base: int
    path: str
    records: int
    size: int
    sealed_ms: int


class SegmentScan(NamedTuple):
    """What :func:`scan_segment` found: the good records, where they end, and the damage if any."""

    records: list[LogRecord]
    valid_bytes: int
    error: CorruptSegmentError | None


def segment_name(base: int) -> str:
    """File name of the segment whose first record has offset ``base``."""
    return f"{base:020d}{SEGMENT_SUFFIX}"


def encode_record(offset: int, receive_ms: int, client_id: str, seq: int, payload: bytes) -> bytes:
    """One framed record, ready to append."""
    cid = client_id.encode("utf-8")
    if len(cid) > 0xFFFF:
        raise ValueError("client_id is longer than 65535 bytes")
    body = _HEADER.pack(offset, receive_ms, seq, len(cid)) + cid
    crc = crc32c.crc32c(payload, crc32c.crc32c(body))
    return _PREFIX.pack(len(body) + len(payload), crc) + body + payload


def _frame_at(view: memoryview, pos: int, path: str) -> tuple[LogRecord, int]:
    """The frame starting at ``pos`` and its end position; :class:`CorruptSegmentError` if it is bad."""
    end = len(view)
    if end - pos < _PREFIX.size:
        raise CorruptSegmentError(path, pos, "truncated frame prefix")
    length, crc = _PREFIX.unpack_from(view, pos)
    if length < _MIN_FRAME or length > MAX_RECORD_BYTES:
        raise CorruptSegmentError(path, pos, f"impossible frame length {length}")
    start = pos + _PREFIX.size
    stop = start + length
    if stop > end:
        raise CorruptSegmentError(path, pos, "truncated frame")
    if crc32c.crc32c(view[start:stop]) != crc:
        raise CorruptSegmentError(path, pos, "checksum mismatch")
    offset, receive_ms, seq, cid_len = _HEADER.unpack_from(view, start)
    cid_end = start + _HEADER.size + cid_len
    if cid_end > stop:
        raise CorruptSegmentError(path, pos, "client id runs past the frame")
    try:
        client_id = str(view[start + _HEADER.size:cid_end], "utf-8")
    except UnicodeDecodeError:
        raise CorruptSegmentError(path, pos, "client id is not utf-8") from None
    return LogRecord(offset, receive_ms, client_id, seq, bytes(view[cid_end:stop])), stop


def _iter_frames(data: bytes | memoryview, path: str) -> Iterator[tuple[LogRecord, int]]:
    """Yield (record, end position) per good frame; raise CorruptSegmentError at the first bad one."""
    view = memoryview(data)
    pos, end = 0, len(view)
    while pos < end:
        record, pos = _frame_at(view, pos, path)
        yield record, pos


def _read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def read_segment(path: str) -> Iterator[LogRecord]:
    """Iterate a segment's records; raise :class:`CorruptSegmentError` at a bad frame,
    after yielding every good record before it."""
    for record, _ in _iter_frames(_read_file(path), path):
        yield record


def scan_segment(path: str) -> SegmentScan:
    """Read a segment to its end or first bad frame without raising (recovery and tools)."""
    records: list[LogRecord] = []
    valid = 0
    try:
        for record, valid in _iter_frames(_read_file(path), path):  # noqa: B007 - read after the loop
            records.append(record)
    except CorruptSegmentError as exc:
        return SegmentScan(records, valid, exc)
    return SegmentScan(records, valid, None)


class Damage(NamedTuple):
    """A damaged stretch of a segment that :func:`salvage_segment` skipped."""

    position: int
    """Where the first bad frame starts."""
    skipped_bytes: int
    """Bytes from there to the next frame that verifies (or to the end of the file)."""
    lost_records: int
    """Records in those bytes, from the gap in record offsets (the manifest gives the last one)."""
    why: str


def salvage_segment(path: str, base: int, records: int) -> Iterator[LogRecord | Damage]:
    """Every record of a sealed segment that verifies, with a :class:`Damage` for each bad stretch.

    After a bad frame the reader resynchronises on the next position holding a whole frame
    whose CRC32C verifies and whose record offset lies between the last good one and the
    segment's end (``base + records``, from the manifest).  A false match needs a 32-bit CRC
    collision at a position that also looks like an offset in that range, so records after
    the damage are read rather than dropped, and what was lost is counted from the offsets.
    """
    return salvage_range(path, 0, None, base, base + records)


def _read_window(path: str, start: int, stop: int | None) -> bytes:
    with open(path, "rb") as f:
        f.seek(start)
        return f.read() if stop is None else f.read(max(0, stop - start))


def salvage_range(path: str, start_pos: int, stop_pos: int | None, first: int,
                  stop_offset: int) -> Iterator[LogRecord | Damage]:
    """:func:`salvage_segment` over bytes ``[start_pos, stop_pos)`` of a segment (``None``: to
    its end) holding records ``[first, stop_offset)``; :class:`Damage` positions are file positions.

    The streaming reader passes the collector's durable byte position as ``stop_pos`` for the
    active segment, so bytes the collector has not acknowledged are never even read.
    """
    data = _read_window(path, start_pos, stop_pos)
    view = memoryview(data)
    pos, end, expected = 0, len(data), first
    while pos < end and expected < stop_offset:
        try:
            record, nxt = _frame_at(view, pos, path)
        except CorruptSegmentError as exc:
            found = _resync(data, view, pos + 1, expected, stop_offset, path)
            if found is None:
                yield Damage(start_pos + pos, end - pos, max(0, stop_offset - expected), exc.why)
                return
            first_found = _HEADER.unpack_from(view, found + _PREFIX.size)[0]
            yield Damage(start_pos + pos, found - pos, first_found - expected, exc.why)
            pos = found
            continue
        if record.offset >= stop_offset:
            return
        yield record
        expected = max(expected, record.offset + 1)
        pos = nxt
    if expected < stop_offset:  # a segment cut short after its last whole frame
        yield Damage(start_pos + end, 0, stop_offset - expected, "records missing at the end")


def frame_starts(path: str, start_pos: int, stop_pos: int | None, first: int,
                 every_bytes: int) -> list[tuple[int, int]]:
    """(byte position, record offset) of the frame at ``start_pos`` and of frames about every
    ``every_bytes`` after it, before ``stop_pos``: where a reader can split a range.

    Walks frame prefixes only (no CRC check, one small read per record); a frame that does not
    look right (offset out of sequence, impossible length) ends the walk, leaving the rest of
    the range in the last piece for :func:`salvage_range` to read and count.
    """
    points = [(start_pos, first)]
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        end = size if stop_pos is None else min(stop_pos, size)
        pos, expected, last = start_pos, first, start_pos
        while pos + _PREFIX.size + _U64.size <= end:
            f.seek(pos)
            head = f.read(_PREFIX.size + _U64.size)
            length = _PREFIX.unpack_from(head)[0]
            offset = _U64.unpack_from(head, _PREFIX.size)[0]
            if offset != expected or length < _MIN_FRAME or pos + _PREFIX.size + length > end:
                break
            if pos - last >= every_bytes:
                points.append((pos, offset))
                last = pos
            pos += _PREFIX.size + length
            expected += 1
    return points


def _resync(data: bytes, view: memoryview, pos: int, lo: int, hi: int, path: str) -> int | None:
    """The first position >= ``pos`` of a verified frame with an offset in ``[lo, hi)``, else None."""
    if lo >= hi:
        return None
    # Every candidate's offset field starts with the bytes lo and hi-1 share: bytes.find
    # (in C) jumps between candidates instead of trying each position in Python.
    common = os.path.commonprefix([_U64.pack(lo), _U64.pack(hi - 1)])
    end = len(data)
    while pos + _PREFIX.size + _MIN_FRAME <= end:
        if common:
            at = data.find(common, pos + _PREFIX.size)
            if at < 0:
                return None
            pos = at - _PREFIX.size
            if pos + _PREFIX.size + _MIN_FRAME > end:
                return None
        offset = _U64.unpack_from(view, pos + _PREFIX.size)[0]
        if lo <= offset < hi:
            try:
                _frame_at(view, pos, path)
                return pos
            except CorruptSegmentError:
                pass
        pos += 1
    return None


def _atomic_write_json(path: str, obj: object) -> None:
    tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        # A half-written temp file (disk full) would keep holding the space that is short.
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(os.path.dirname(path) or ".")


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _load_manifest(log_dir: str) -> tuple[list[SegmentInfo], int]:
    """Sealed segments and ``end``: the offset after the last record ever sealed (kept even
    when retention has deleted every segment, so recovery can tell orphans from new data)."""
    try:
        with open(os.path.join(log_dir, MANIFEST), encoding="utf-8") as f:
            doc = json.load(f)
    except FileNotFoundError:
        return [], 0
    segments = sorted(
        (SegmentInfo(e["base"], os.path.join(log_dir, e["file"]), e["records"], e["size"], e["sealed_ms"])
         for e in doc["segments"]),
        key=lambda s: s.base,
    )
    end = max([doc.get("end", 0), *(s.base + s.records for s in segments)])
    return segments, end


def _write_manifest(log_dir: str, segments: Iterable[SegmentInfo], end: int) -> None:
    entries = [
        {"base": s.base, "file": os.path.basename(s.path), "records": s.records, "size": s.size,
         "sealed_ms": s.sealed_ms}
        for s in sorted(segments, key=lambda s: s.base)
    ]
    _atomic_write_json(os.path.join(log_dir, MANIFEST), {"version": 1, "end": end, "segments": entries})


def sealed_segments(log_dir: str) -> list[SegmentInfo]:
    """Sealed segments from the manifest, ascending base (empty when there is no log yet)."""
    return _load_manifest(log_dir)[0]
