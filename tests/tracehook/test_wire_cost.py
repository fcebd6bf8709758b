"""Hostile bodies cost the validator about what a valid batch of the same size costs.

A body can hold one container header per byte (deep nesting, or runs of empty arrays and
maps); the Python path of check_batch turns each into an object. These tests pin the work
per byte without timing thresholds: no garbage-collector pass runs while a body is checked
(that was what made such bodies cost ~0.5 ms per KB), and each hostile body makes no more
Python calls than the densest valid batch of the same size, and holds at most 1.5x its memory.
The CPU time per KB is measured in benchmarks/hostile_bodies.py.
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
from collections.abc import Callable

import msgpack
import pytest

from collector.wirecheck import validate
from tracehook import wire

SIZE = 256 * 1024
WORK_SIZE = 64 * 1024  # counting calls and allocations slows the check down ~10x
_HEAD = msgpack.packb([1, "client", 1, "app", "host", 0, {}])[1:]  # the 7 fields after the array header


def _array32(n: int) -> bytes:
    return b"\xdd" + n.to_bytes(4, "big")


def _valid_dense(size: int = SIZE) -> bytes:
    """The valid batch with the most objects per byte: smallest events (8 bytes each)."""
    ev = wire.encode_event([1, 0, "", "t", "m"])
    n = size // len(ev)
    return b"\x98" + _HEAD + _array32(n) + ev * n


def _deep_events(size: int = SIZE) -> bytes:  # every event a 1000-deep array: rejected as bad_event
    unit = b"\x91" * 1000 + b"\x01"
    return b"\x98" + _HEAD + _array32(size // len(unit)) + unit * (size // len(unit))


def _deep_trailing_then_junk(size: int = SIZE) -> bytes:  # a newer version's field nested deep, then a stray byte
    unit = b"\x91" * 1000 + b"\x01"
    return b"\x99" + _HEAD + b"\x90" + _array32(size // len(unit)) + unit * (size // len(unit)) + b"\x00"


def _empty_arrays(size: int = SIZE) -> bytes:  # events of 15 empty arrays each: one container per byte
    unit = b"\x9f" + b"\x90" * 15
    return b"\x98" + _HEAD + _array32(size // 16) + unit * (size // 16)


def _empty_maps_in_stats(size: int = SIZE) -> bytes:  # client_stats values that are arrays of 1000 empty maps
    value = b"\xdc" + (1000).to_bytes(2, "big") + b"\x80" * 1000
    n = size // (len(value) + 5)
    entries = b"".join(b"\xa4" + b"%04d" % i + value for i in range(n))
    return b"\x98\x01\xa1c\x01\xa0\xa0\x00\xde" + n.to_bytes(2, "big") + entries + b"\x90"


HOSTILE: dict[str, Callable[[int], bytes]] = {
    "deep_events": _deep_events,
    "deep_trailing_then_junk": _deep_trailing_then_junk,
    "empty_arrays": _empty_arrays,
    "empty_maps_in_stats": _empty_maps_in_stats,
}


def _verdict(body: bytes) -> str:
    try:
        validate.check_batch(body)
    except wire.WireError as exc:
        return exc.reason
    return "ok"


def _collections() -> int:
    return sum(s["collections"] for s in gc.get_stats())


@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_no_gc_pass_while_a_body_is_checked(shape: str) -> None:
    body = HOSTILE[shape]()
    heap = [[i] for i in range(100_000)]  # a live heap, as in a running collector
    gc.collect()
    before = _collections()
    reason = _verdict(body)
    assert reason not in ("ok", "bad_msgpack")  # rejected after unpacking, not by a length limit
    assert _collections() == before, f"{shape}: the GC ran while ~{len(body)} objects were built"
    assert gc.isenabled()
    del heap


def _python_calls(fn: Callable[[], object]) -> int:
    """Python and C function calls made while ``fn`` runs (the per-object work in Python)."""
    calls = 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def _peak_bytes(fn: Callable[[], object]) -> int:
    """The most memory ``fn`` held at once (every object a body turns into is allocated)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_hostile_bodies_do_no_more_work_than_a_dense_valid_batch() -> None:
    # Work counted, not timed: the Python calls made and the memory held while a body is
    # checked (CPU time per KB is in benchmarks/hostile_bodies.py). The densest valid batch
    # goes through the Python path, as a body the C path does not accept does.
    valid = _valid_dense(WORK_SIZE)
    assert _verdict(valid) == "ok"
    valid_calls = _python_calls(lambda: wire.check_batch(valid))
    valid_peak = _peak_bytes(lambda: wire.check_batch(valid))
    for shape, make in HOSTILE.items():
        body = make(WORK_SIZE)
        assert abs(len(body) - len(valid)) < len(valid) // 10, shape
        calls = _python_calls(lambda body=body: _verdict(body))
        assert calls <= valid_calls, f"{shape}: {calls} calls vs {valid_calls} for a valid batch"
        # At most one small container per byte: measured 0.9-1.3x the valid batch's peak.
        peak = _peak_bytes(lambda body=body: _verdict(body))
        assert peak <= 1.5 * valid_peak, f"{shape}: {peak} bytes held vs {valid_peak} for a valid batch"


def test_errors_do_not_keep_the_body_alive() -> None:
    # The raised WireError carries no traceback into the frames that held the body's objects.
    try:
        wire.decode_batch(_deep_events())
    except wire.WireError as exc:
        assert exc.reason == "bad_event"
        assert exc.__context__ is None and exc.__cause__ is None
        frames = []
        tb = exc.__traceback__
        while tb is not None:
            frames.append(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        assert frames[1:] == ["decode_batch"]  # not the frames below it that held the events
    else:
        pytest.fail("accepted")
