"""Reading a sealed segment past a damaged frame: only frames whose CRC verifies, the loss counted."""

from __future__ import annotations

import os
import pathlib

import pytest

from collector.log.format import Damage, LogRecord, encode_record, salvage_segment

BASE = 4096


def _segment(tmp_path: pathlib.Path, n: int = 6) -> tuple[str, list[bytes]]:
    frames = [encode_record(BASE + i, 1000 + i, "client", i, f"payload-{i}".encode() * (i + 1)) for i in range(n)]
    path = tmp_path / "seg.log"
    path.write_bytes(b"".join(frames))
    return str(path), frames


def _damage(path: str, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


def _split(items: list[LogRecord | Damage]) -> tuple[list[int], list[Damage]]:
    return [r.offset for r in items if isinstance(r, LogRecord)], [d for d in items if isinstance(d, Damage)]


@pytest.mark.parametrize("where", ["payload", "length", "crc"])
def test_a_bad_frame_in_the_middle_is_skipped_and_counted(tmp_path: pathlib.Path, where: str) -> None:
    path, frames = _segment(tmp_path)
    start = sum(len(f) for f in frames[:2])  # the third frame
    at = {"payload": start + len(frames[2]) - 2, "length": start, "crc": start + 4}[where]
    _damage(path, at, b"\xff\xff")

    offsets, damage = _split(list(salvage_segment(path, BASE, len(frames))))

    assert offsets == [BASE + i for i in (0, 1, 3, 4, 5)]
    assert [(d.position, d.skipped_bytes, d.lost_records) for d in damage] == [(start, len(frames[2]), 1)]


def test_several_frames_lost_and_a_torn_tail(tmp_path: pathlib.Path) -> None:
    path, frames = _segment(tmp_path, 8)
    first_bad = sum(len(f) for f in frames[:1])
    _damage(path, first_bad, b"\x00" * (len(frames[1]) + len(frames[2])))  # frames 1 and 2 zeroed
    os.truncate(path, sum(len(f) for f in frames[:7]) - 3)  # frame 6 torn, frame 7 gone

    offsets, damage = _split(list(salvage_segment(path, BASE, len(frames))))

    assert offsets == [BASE + i for i in (0, 3, 4, 5)]
    assert [d.lost_records for d in damage] == [2, 2]
    assert damage[0].skipped_bytes == len(frames[1]) + len(frames[2])
    assert damage[1].skipped_bytes == len(frames[6]) - 3


def test_a_frame_with_an_offset_outside_the_segment_is_not_trusted(tmp_path: pathlib.Path) -> None:
    # A payload holding a whole valid frame (a client can send any bytes): after damage, the
    # reader must not take it for a record unless its offset fits between the good ones.
    inner = encode_record(7, 1, "fake", 1, b"x" * 40)
    frames = [encode_record(BASE + i, 1, "c", i, b"p" + (inner if i == 1 else b"")) for i in range(3)]
    path = tmp_path / "seg.log"
    path.write_bytes(b"".join(frames))
    _damage(str(path), len(frames[0]) + 4, b"\xff\xff")  # frame 1's CRC

    offsets, damage = _split(list(salvage_segment(str(path), BASE, 3)))

    assert offsets == [BASE, BASE + 2]
    assert [d.lost_records for d in damage] == [1]


def test_a_clean_segment_has_no_damage(tmp_path: pathlib.Path) -> None:
    path, frames = _segment(tmp_path)
    assert _split(list(salvage_segment(path, BASE, len(frames)))) == ([BASE + i for i in range(6)], [])
