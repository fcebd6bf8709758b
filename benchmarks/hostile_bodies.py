"""CPU per KB to validate hostile ingest bodies vs a valid batch of the same size.

Builds 1 MB bodies that hold one container header per byte or nearly (1000-deep arrays as
events, the same in a newer version's trailing field followed by a stray byte, runs of
empty arrays, client_stats values that are empty maps) and a valid batch, keeps a live heap
of ``--heap`` small objects (a running collector has one; the garbage collector's older
generations walk it), and prints the best-of-N CPU time per KB of ``check_batch`` (C path
first, then the Python path for anything it does not accept) and of the Python path alone::

    python benchmarks/hostile_bodies.py [--size 1000000] [--heap 300000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

import msgpack

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from collector.wirecheck import validate  # noqa: E402
from tracehook import wire  # noqa: E402

_HEAD = msgpack.packb([1, "client", 1, "app", "host", 0, {}])[1:]


def _array32(n: int) -> bytes:
    return b"\xdd" + n.to_bytes(4, "big")


def bodies(size: int) -> dict[str, bytes]:
    """name -> body of about ``size`` bytes."""
    ev = wire.encode_event(wire.make_event(1, 1_700_000_000_000, "g", "orders", "id-0000001", keys="k", queue=1))
    deep = b"\x91" * 1000 + b"\x01"
    flat = b"\x9f" + b"\x90" * 15  # an event of 15 empty arrays
    maps = b"\xdc" + (1000).to_bytes(2, "big") + b"\x80" * 1000  # a stats value: 1000 empty maps
    n_stats = min(size // (len(maps) + 5), 1024)
    dense = wire.encode_event([1, 0, "", "t", "m"])  # the smallest valid event: 8 bytes
    n_dense = min(size // len(dense), wire.MAX_EVENTS_PER_BATCH)
    return {
        "valid": b"\x98" + _HEAD + _array32(size // len(ev)) + ev * (size // len(ev)),
        "valid_dense": b"\x98" + _HEAD + _array32(n_dense) + dense * n_dense,
        "deep_events": b"\x98" + _HEAD + _array32(size // len(deep)) + deep * (size // len(deep)),
        "deep_trailing_then_junk": b"\x99" + _HEAD + b"\x90" + _array32(size // len(deep))
        + deep * (size // len(deep)) + b"\x00",
        "empty_arrays": b"\x98" + _HEAD + _array32(size // 16) + flat * (size // 16),
        "empty_maps_in_stats": b"\x98\x01\xa1c\x01\xa0\xa0\x00\xde" + n_stats.to_bytes(2, "big")
        + b"".join(b"\xa4" + b"%04d" % i + maps for i in range(n_stats)) + b"\x90",
    }


def cpu_us_per_kb(fn: Callable[[bytes], object], body: bytes, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        try:
            fn(body)
        except wire.WireError:
            pass
        best = min(best, time.process_time() - started)
    return best * 1e6 / (len(body) / 1024)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--heap", type=int, default=300_000, help="live small objects kept meanwhile")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    heap = [[i] for i in range(args.heap)]
    print(f"C fast path: {validate.FAST_PATH}; body ~{args.size / 1024:.0f} KB; live heap {len(heap)} lists")
    print(f"{'body':26} {'verdict':14} {'check_batch us/KB':>18} {'Python path us/KB':>18}")
    for name, body in bodies(args.size).items():
        try:
            validate.check_batch(body)
            verdict = "ok"
        except wire.WireError as exc:
            verdict = exc.reason
        both = cpu_us_per_kb(validate.check_batch, body, args.repeat)  # the C path first, as ingest does
        py = cpu_us_per_kb(wire.check_batch, body, args.repeat)
        print(f"{name:26} {verdict:14} {both:18.1f} {py:18.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
