"""Hostile bodies cost the validator about what a valid batch of the same size costs.

A body can hold one container header per byte (deep nesting, or runs of empty arrays and
maps); the Python path of check_batch turns each into an object. These tests pin the work
per byte without timing thresholds: no garbage-collector pass runs while a body is checked
(that was what made such bodies cost ~0.5 ms per KB), and the CPU time of each hostile
body stays within a generous factor of the densest valid batch of the same size, measured
alongside.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import msgpack
import pytest

from collector.server import validate
from tracehook import wire

SIZE = 256 * 1024
_HEAD = msgpack.packb([1, "client", 1, "app", "host", 0, {}])[1:]  # the 7 fields after the array header


def _array32(n: int) -> bytes:
    return b"\xdd" + n.to_bytes(4, "big")


def _valid_dense() -> bytes:
    """The valid batch with the most objects per byte: smallest events (8 bytes each)."""
    ev = wire.encode_event([1, 0, "", "t", "m"])
    n = SIZE // len(ev)
    return b"\x98" + _HEAD + _array32(n) + ev * n


def _deep_events() -> bytes:  # every event a 1000-deep array: rejected as bad_event
    unit = b"\x91" * 1000 + b"\x01"
    return b"\x98" + _HEAD + _array32(SIZE // len(unit)) + unit * (SIZE // len(unit))


def _deep_trailing_then_junk() -> bytes:  # a newer version's field nested deep, then a stray byte
    unit = b"\x91" * 1000 + b"\x01"
    return b"\x99" + _HEAD + b"\x90" + _array32(SIZE // len(unit)) + unit * (SIZE // len(unit)) + b"\x00"


def _empty_arrays() -> bytes:  # events of 15 empty arrays each: one container per byte
    unit = b"\x9f" + b"\x90" * 15
    return b"\x98" + _HEAD + _array32(SIZE // 16) + unit * (SIZE // 16)


def _empty_maps_in_stats() -> bytes:  # client_stats values that are arrays of 1000 empty maps
    value = b"\xdc" + (1000).to_bytes(2, "big") + b"\x80" * 1000
    n = SIZE // (len(value) + 5)
    entries = b"".join(b"\xa4" + b"%04d" % i + value for i in range(n))
    return b"\x98\x01\xa1c\x01\xa0\xa0\x00\xde" + n.to_bytes(2, "big") + entries + b"\x90"


HOSTILE: dict[str, Callable[[], bytes]] = {
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


def _cpu(fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(3):
        started = time.process_time()
        fn()
        best = min(best, time.process_time() - started)
    return best


def test_hostile_bodies_cost_no_more_than_a_dense_valid_batch() -> None:
    # Measured at ~0.5-1x in benchmarks/hostile_bodies.py; 3x leaves room for a noisy machine.
    valid = _valid_dense()
    assert _verdict(valid) == "ok"
    # The Python path, as for a body the C path does not accept (and without the extension).
    valid_cpu = _cpu(lambda: wire.check_batch(valid))
    for shape, make in HOSTILE.items():
        body = make()
        assert abs(len(body) - len(valid)) < len(valid) // 10, shape
        cpu = _cpu(lambda body=body: _verdict(body))
        assert cpu <= 3 * valid_cpu, f"{shape}: {cpu * 1e3:.1f} ms vs {valid_cpu * 1e3:.1f} ms for a valid batch"


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
