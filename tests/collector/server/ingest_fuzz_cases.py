"""Hostile ingest bodies for the fuzz tests: one set of builders, driven either by hypothesis
(shrinkable examples) or by a seeded ``random.Random`` (cheap bulk cases).

Every case is ``(body, known_bad)``. ``known_bad`` bodies are invalid by construction (wrong
type, wrong version, missing field, oversized string, huge declared length, truncation, ...);
the others (random bytes, bit flips) are judged by the independent checker in
``wire_oracle.py`` (plain msgpack plus the documented schema), never by the product's decoder.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

import msgpack
from hypothesis import strategies as st
from wire_oracle import Verdict, verdict

from tracehook import wire

T = TypeVar("T")

WIRE_REASONS = frozenset({"bad_msgpack", "bad_batch", "bad_event", "bad_field", "missing_field",
                          "unknown_version", "trailing_bytes"})
"""The 400 reasons the collector documents for a batch that does not decode or validate."""


class Case(NamedTuple):
    body: bytes
    known_bad: bool
    kind: str


class Raw(bytes):
    """Bytes spliced verbatim into the packed output (headers msgpack itself would never write)."""


def pack(obj: Any) -> bytes:
    """msgpack like the library writes it, except that :class:`Raw` parts go in as they are."""
    if isinstance(obj, Raw):
        return bytes(obj)
    if type(obj) is list:
        return msgpack.Packer().pack_array_header(len(obj)) + b"".join(pack(x) for x in obj)
    if type(obj) is dict:
        return msgpack.Packer().pack_map_header(len(obj)) + b"".join(pack(k) + pack(v) for k, v in obj.items())
    return msgpack.packb(obj, use_bin_type=True)


class Chooser:
    """The few random choices the builders make; :class:`Drawer` makes them with hypothesis."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]

    def blob(self, size: int) -> bytes:
        return self.rng.randbytes(size)


class Drawer(Chooser):
    def __init__(self, draw: st.DrawFn) -> None:  # noqa: D107 - no rng: every choice is drawn
        self.draw = draw

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def choice(self, options: Sequence[T]) -> T:
        return self.draw(st.sampled_from(options))

    def blob(self, size: int) -> bytes:
        return self.draw(st.binary(min_size=size, max_size=size))


_BAD_FOR_STR: list[Any] = [0, -1, 1.5, True, None, b"bytes", [], {}, ["x"]]
_BAD_FOR_INT: list[Any] = ["1", 1.5, True, False, None, b"\x01", [], {}, [1]]
_BAD_FOR_DICT: list[Any] = ["x", 1, [], [["a", "b"]], {1: "a"}, {"a": 1.5}]
_BAD_FOR_LIST: list[Any] = ["x", 1, {}, None, b"list"]
_BAD_BY_TYPE = {str: _BAD_FOR_STR, int: _BAD_FOR_INT, dict: _BAD_FOR_DICT, bytes: ["x", 1, [], {}],
                list: _BAD_FOR_LIST + [[["h", "not bytes"]], [[b"h", b"v"]], [["h"]]]}
_ENVELOPE_TYPES = (int, str, int, str, str, int, dict, list)
# Declared lengths no body carries: the decoder must refuse them before allocating.
HUGE_HEADERS = [
    b"\xc6\xff\xff\xff\xff",  # bin32, 4 GiB
    b"\xdb\xff\xff\xff\xff",  # str32
    b"\xdd\xff\xff\xff\xff",  # array32
    b"\xdf\xff\xff\xff\xff",  # map32
    b"\xc9\xff\xff\xff\xff\x01",  # ext32
    b"\xdd" + struct.pack(">I", wire.MAX_EVENTS_PER_BATCH),  # exactly the limit, then nothing
    b"\xdd" + struct.pack(">I", wire.MAX_EVENTS_PER_BATCH + 1),
    b"\xdc\xff\xff",  # array16
    b"\xc5\xff\xff",  # bin16
]


def event(c: Chooser, i: int) -> list[Any]:
    """A valid event, all fields or trimmed."""
    full = wire.make_event(
        c.choice([1, 2, 3, 4, 5]), 1_700_000_000_000 + i, "grp", "orders", f"m-{i}", keys="k1 k2", queue=i % 4,
        offset=i, status=c.choice([0, 1, 5]), props={"a": "b"}, retry=1, tx_state=c.choice([0, 2]), body=b"x",
        body_flags=c.choice([0, 1, 3]), raw_key=c.choice([None, b"k"]), raw_headers=c.choice([None, [["h", b"v"]]]),
    )
    return list(full) if c.integer(0, 1) else wire.trim(full)


def batch(c: Chooser, client_id: str = "fuzz", seq: int = 1, n: int | None = None) -> list[Any]:
    """A valid batch as the object msgpack would decode."""
    n = c.integer(1, 4) if n is None else n
    return [1, client_id, seq, "shop", "host", 1_700_000_000_000, {"sent": 3}, [event(c, i) for i in range(n)]]


def _event_slot(c: Chooser, obj: list[Any]) -> tuple[list[Any], int]:
    ev = c.choice(obj[7])
    return ev, c.integer(0, len(ev) - 1)


def wrong_type(c: Chooser) -> Case:
    obj = batch(c)
    if c.integer(0, 1):
        i = c.integer(0, 7)
        obj[i] = c.choice(_BAD_BY_TYPE.get(_ENVELOPE_TYPES[i], _BAD_FOR_LIST))
    else:
        ev, j = _event_slot(c, obj)
        expected = wire._TYPES[j]
        options = [v for v in _BAD_BY_TYPE[expected] if not (v is None and j in wire._NULLABLE)]
        ev[j] = c.choice(options)
    return Case(pack(obj), True, "wrong_type")


def wrong_version(c: Chooser) -> Case:
    obj = batch(c)
    obj[0] = c.choice([0, 2, -1, 99, 2**63, "1", 1.5, None, True])
    return Case(pack(obj), True, "wrong_version")


def missing_field(c: Chooser) -> Case:
    obj = batch(c)
    what = c.integer(0, 3)
    if what == 0:
        obj = obj[: c.integer(0, 7)]
    elif what == 1:
        ev = c.choice(obj[7])
        del ev[c.integer(0, wire.MIN_FIELDS - 1):]
    elif what == 2:
        c.choice(obj[7])[c.choice([3, 4])] = ""
    else:
        obj[1] = ""
    return Case(pack(obj), True, "missing_field")


def bad_value(c: Chooser) -> Case:
    """Right types, values out of range: unknown enums, negative or > 64-bit numbers."""
    obj = batch(c)
    ev = c.choice(obj[7])
    ev.extend(wire.DEFAULTS[len(ev):])
    field, value = c.choice([(0, 0), (0, 7), (1, -2), (1, 2**63), (9, -2), (10, -5), (11, 2**64 - 1),
                             (13, 2**63), (16, 2**64 - 1), (17, 2**63), (14, 9), (21, 7),
                             (18, {f"p{i}": "v" for i in range(wire.MAX_PROPS + 1)})])
    ev[field] = value
    if c.integer(0, 1):
        obj[c.choice([2, 5])] = c.choice([-1, 2**63])
    return Case(pack(obj), True, "bad_value")


def oversized(c: Chooser) -> Case:
    obj = batch(c)
    over = c.integer(1, 4096)
    if c.integer(0, 2):
        s = "x" * (wire.MAX_STR_LEN + over)
        if c.integer(0, 1):
            obj[c.choice([1, 3, 4])] = s
        else:
            c.choice(obj[7])[c.choice([2, 3, 4])] = s
    else:
        ev = c.choice(obj[7])
        ev.extend(wire.DEFAULTS[len(ev):])
        ev[22] = b"b" * (wire.MAX_BODY_LEN + over)
    return Case(pack(obj), True, "oversized")


def nested(depth: int) -> Raw:
    """``depth`` arrays inside each other around a nil."""
    return Raw(b"\x91" * depth + b"\xc0")


def deep(c: Chooser) -> Case:
    obj = batch(c)
    depth = c.choice([2, 50, 500, 1023, 1024, 1025, 5000, 100_000])
    where = c.integer(0, 3)
    if where == 0:
        obj[6] = {"sent": nested(depth)}
    elif where == 1:
        ev = c.choice(obj[7])
        ev.extend(wire.DEFAULTS[len(ev):])
        ev[18] = {"p": nested(depth)}
    elif where == 2:
        c.choice(obj[7])[c.integer(0, 4)] = nested(depth)
    else:
        obj[7] = nested(depth)
    return Case(pack(obj), True, "deep")


def huge_length(c: Chooser) -> Case:
    header = Raw(c.choice(HUGE_HEADERS) + c.blob(c.integer(0, 16)))
    where = c.integer(0, 4)
    if where == 0:
        return Case(bytes(header), True, "huge_length")
    obj = batch(c)
    if where == 1:
        obj[c.integer(1, 7)] = header
    elif where == 2:
        obj[7] = [*obj[7][:1], header]
    elif where == 3:
        ev = c.choice(obj[7])
        ev[c.integer(0, len(ev) - 1)] = header
    else:
        # Nested claims: each level would preallocate its declared size if the decoder let it.
        obj[7] = Raw((b"\xdd" + struct.pack(">I", wire.MAX_EVENTS_PER_BATCH)) * c.integer(2, 1100))
    return Case(pack(obj), True, "huge_length")


def truncated(c: Chooser) -> Case:
    body = pack(batch(c))
    return Case(body[: c.integer(0, len(body) - 1)], True, "truncated")


def trailing(c: Chooser) -> Case:
    return Case(pack(batch(c)) + c.blob(c.integer(1, 8)), True, "trailing")


def random_bytes(c: Chooser) -> Case:
    size = c.choice([0, 1, 2, 5, 9, 40, 300])
    prefix = c.choice([b"", b"\x98", b"\x98\x01", b"\x98\x01\xa1c"])  # look like a batch's start
    return Case(prefix + c.blob(size), False, "random_bytes")


def bit_flip(c: Chooser) -> Case:
    body = bytearray(pack(batch(c)))
    for _ in range(c.integer(1, 3)):
        body[c.integer(0, len(body) - 1)] ^= 1 << c.integer(0, 7)
    return Case(bytes(body), False, "bit_flip")


BUILDERS: tuple[Callable[[Chooser], Case], ...] = (
    wrong_type, wrong_version, missing_field, bad_value, oversized, deep, huge_length, truncated, trailing,
    random_bytes, bit_flip,
)


def cases(seed: int, count: int) -> list[Case]:
    """``count`` cases from a seeded generator, every builder in turn."""
    c = Chooser(random.Random(seed))
    return [BUILDERS[i % len(BUILDERS)](c) for i in range(count)]


@st.composite
def hostile_bodies(draw: st.DrawFn) -> Case:
    """A hypothesis strategy over the same builders (shrinks to the smallest failing case)."""
    c = Drawer(draw)
    return c.choice(BUILDERS)(c)


def wire_verdict(body: bytes) -> Verdict:
    """The reference answer (:func:`wire_oracle.verdict`): the reasons a bad body may be refused
    with, or (no reasons) a valid body's header and event count."""
    return verdict(body)


def decoded(decode: Callable[[bytes], wire.Batch], body: bytes) -> Any:
    """What ``decode`` makes of ``body``: the batch with its events' value types, or the error's reason and detail."""
    try:
        batch = decode(body)
    except wire.WireError as exc:
        return (exc.reason, exc.detail)
    return batch, [tuple(map(type, e)) for e in batch.events]
