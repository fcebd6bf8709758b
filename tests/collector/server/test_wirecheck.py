"""The C fast path of check_batch (collector.wirecheck._wirecheck) agrees with the Python validator.

For every input both paths must give the same answer: the same header and event count, or
both a rejection. Inputs are valid batches written with every msgpack encoding width, the
same batches with one value swapped for something else, byte-level damage, and random bytes.
The index path's decode (``validate.decode_batch``: C check, then the events built unchecked)
must give what ``wire.decode_batch`` gives on each of them: the same batch or the same error.
"""

from __future__ import annotations

import random
import struct
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ingest_fuzz_cases import decoded

from collector.wirecheck import validate
from tracehook import wire

try:
    from collector.wirecheck import _wirecheck
except ImportError:  # checked by test_extension_is_built
    _wirecheck = None


MAX_INT = wire.MAX_INT
_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                               HealthCheck.data_too_large])


def test_extension_is_built() -> None:
    # The suite needs a C compiler (and Python.h): without one `pip install -e .[all]` still succeeds
    # but leaves the extension out, and every test here fails rather than skipping silently.
    assert _wirecheck is not None, ("collector.wirecheck._wirecheck is not built (it needs a C compiler and Python.h): "
                                    "run pip install -e '.[all]'")
    assert validate.FAST_PATH


# -- a msgpack writer that picks among the valid encodings --------------------------------


@dataclass(frozen=True)
class Raw:
    """Bytes spliced in as they are (broken or hostile items)."""

    data: bytes


@dataclass(frozen=True)
class Pairs:
    """A map as a list of entries, so keys can repeat."""

    items: tuple[tuple[Any, Any], ...]


@dataclass(frozen=True)
class Ext:
    """An ext item (msgpack.ExtType refuses negative codes, which the wire may carry)."""

    code: int
    data: bytes


@dataclass(frozen=True)
class BadStr:
    """A str item whose payload is given as bytes (possibly not UTF-8)."""

    data: bytes


def _sized(rnd: random.Random, n: int, fix: tuple[int, int] | None, wide: list[tuple[int, str]]) -> bytes:
    options = []
    if fix is not None and n < fix[1]:
        options.append(bytes([fix[0] | n]))
    for code, fmt in wide:
        if n < 1 << (8 * struct.calcsize(fmt)):
            options.append(bytes([code]) + struct.pack(fmt, n))
    return rnd.choice(options)


def _int(rnd: random.Random, v: int) -> bytes:
    options = []
    if 0 <= v <= 127:
        options.append(bytes([v]))
    if -32 <= v < 0:
        options.append(struct.pack(">b", v))
    for code, fmt in ((0xCC, ">B"), (0xCD, ">H"), (0xCE, ">I"), (0xCF, ">Q"),
                      (0xD0, ">b"), (0xD1, ">h"), (0xD2, ">i"), (0xD3, ">q")):
        try:
            options.append(bytes([code]) + struct.pack(fmt, v))
        except struct.error:
            pass
    return rnd.choice(options)


def enc(rnd: random.Random, v: Any) -> bytes:
    """msgpack bytes of ``v``, with a random valid width for every header."""
    if isinstance(v, Raw):
        return v.data
    if v is None:
        return b"\xc0"
    if v is True or v is False:
        return b"\xc3" if v else b"\xc2"
    if isinstance(v, int):
        return _int(rnd, v)
    if isinstance(v, float):
        try:
            return b"\xcb" + struct.pack(">d", v) if rnd.random() < 0.5 else b"\xca" + struct.pack(">f", v)
        except OverflowError:  # too big for float32
            return b"\xcb" + struct.pack(">d", v)
    if isinstance(v, (str, BadStr)):
        data = v.data if isinstance(v, BadStr) else v.encode("utf-8", "surrogatepass")
        return _sized(rnd, len(data), (0xA0, 32), [(0xD9, ">B"), (0xDA, ">H"), (0xDB, ">I")]) + data
    if isinstance(v, bytes):
        return _sized(rnd, len(v), None, [(0xC4, ">B"), (0xC5, ">H"), (0xC6, ">I")]) + v
    if isinstance(v, Ext):
        n = len(v.data)
        fixed = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}
        head = bytes([fixed[n]]) if n in fixed and rnd.random() < 0.5 else _sized(
            rnd, n, None, [(0xC7, ">B"), (0xC8, ">H"), (0xC9, ">I")])
        return head + struct.pack(">b", v.code) + v.data
    if isinstance(v, list):
        return _sized(rnd, len(v), (0x90, 16), [(0xDC, ">H"), (0xDD, ">I")]) + b"".join(enc(rnd, x) for x in v)
    if isinstance(v, (dict, Pairs)):
        items = v.items if isinstance(v, Pairs) else tuple(v.items())
        return _sized(rnd, len(items), (0x80, 16), [(0xDE, ">H"), (0xDF, ">I")]) + b"".join(
            enc(rnd, k) + enc(rnd, x) for k, x in items)
    raise TypeError(v)


# -- values --------------------------------------------------------------------------------

_EDGE_INTS = [-(2**63), -(2**31) - 1, -129, -33, -2, -1, 0, 1, 5, 6, 63, 64, 127, 128, 255, 256, 65535,
              65536, 2**32 - 1, 2**32, MAX_INT, MAX_INT + 1, 2**64 - 1]
_BAD_UTF8 = [b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xe0\x9f\xbf",
             b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xff", b"\x80",
             b"\xe2\x82", b"a\xe2\x82", b"\xf0\x9f\x98", b"abcdefgh\xc3", b"\xc3\x28", b"\xe2\x28\xa1"]
_GOOD_UTF8 = [b"\xed\x9f\xbf", b"\xee\x80\x80", b"\xf4\x8f\xbf\xbf", b"\xf0\x90\x80\x80", b"\xe0\xa0\x80",
              b"\xc2\x80", b"\x00", b"abcdefgh\xc3\xa9", b"\xef\xbf\xbf"]
_HUGE = [b"\xdd\xff\xff\xff\xff", b"\xdc\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xde\x04\x01", b"\xc6\xff\xff\xff\xff",
         b"\xc5\xff\xff", b"\xdb\xff\xff\xff\xff", b"\xda\x40\x01", b"\xc9\xff\xff\xff\xff\x05",
         b"\xdd\x00\x01\x86\xa1", b"\xdd\x00\x01\x86\xa0", b"\xc1", b"\xcf\x00", b"\xd3\xff\xff"]

_scalars = st.one_of(
    st.sampled_from(_EDGE_INTS),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.sampled_from([None, True, False, 0.0, 1.5, "", "x", b"", b"b"]),
    st.floats(allow_nan=False, width=32),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.sampled_from(_BAD_UTF8 + _GOOD_UTF8).map(BadStr),
    st.sampled_from([wire.MAX_STR_LEN, wire.MAX_STR_LEN + 1]).map(lambda n: "x" * n),
    st.sampled_from([wire.MAX_STR_LEN // 2, wire.MAX_STR_LEN // 2 + 1]).map(lambda n: "é" * n),
    st.sampled_from([wire.MAX_BODY_LEN, wire.MAX_BODY_LEN + 1]).map(lambda n: b"b" * n),
    st.builds(Ext, st.sampled_from([-128, -2, -1, 0, 5, 127]),
              st.sampled_from([b"", b"\x00", b"\x00" * 4, b"\x00" * 12])),
    st.sampled_from(_HUGE).map(Raw),
)


def _nest(depth: int, leaf: bytes) -> Raw:
    return Raw(b"\x91" * depth + leaf)


_deep = st.builds(_nest, st.integers(min_value=1015, max_value=1026), st.sampled_from([b"\x01", b"\x90", b"\x80"]))
_keys = st.one_of(st.text(max_size=4), st.binary(max_size=2), st.sampled_from([1, None, 1.5, BadStr(b"\xff")]))
_any = st.recursive(
    st.one_of(_scalars, _deep),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(st.tuples(_keys, inner), max_size=4).map(lambda items: Pairs(tuple(items))),
    ),
    max_leaves=12,
)

# Values msgpack itself accepts anywhere (the valid batches' unread fields and overwritten duplicates).
_plain = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**64 - 1),
              st.floats(allow_nan=False), st.text(max_size=6), st.binary(max_size=6),
              st.builds(Ext, st.integers(min_value=0, max_value=127), st.just(b""))),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.one_of(st.text(max_size=3), st.binary(max_size=2)), inner,
                                            max_size=3)),
    max_leaves=8,
)


def _column(i: int) -> st.SearchStrategy[Any]:
    """A valid value for event position ``i``, following the Python rules."""
    t = wire._TYPES[i]
    if t is list:  # raw_headers: the C walk has no array kind (validate._c_rules), see test_raw_headers_...
        return st.none()
    if t is int:
        if wire.Event._fields[i] == "body_flags":
            return st.integers(*wire.INT_RANGES["body_flags"])
        if i == 0:
            return st.sampled_from(sorted(wire._EVENT_TYPES))
        if i == wire._STATUS:
            return st.sampled_from(sorted(wire._STATUSES))
        if i == wire._TX_STATE:
            return st.sampled_from(sorted(wire._TX_STATES))
        if i in wire._KEYED_INTS or i == wire._BODY_FLAGS:
            lo, hi = wire.INT_RANGES[wire.Event._fields[i]]
            return st.one_of(st.sampled_from([lo, 0, hi]), st.integers(min_value=lo, max_value=hi))
        # Every integer is signed 64-bit (the unsigned ones above MAX_INT are in the mutation tests).
        return st.one_of(st.sampled_from([v for v in _EDGE_INTS if v <= MAX_INT]),
                         st.integers(min_value=-(2**63), max_value=MAX_INT))
    if t is str:
        text = st.one_of(st.text(max_size=12), st.sampled_from(_GOOD_UTF8).map(BadStr),
                         st.just("y" * wire.MAX_STR_LEN))
        return text.filter(lambda s: s not in ("", BadStr(b""))) if i in wire._NONEMPTY else text
    if t is bytes:
        return st.one_of(st.none(), st.binary(max_size=12), st.just(b"z" * wire.MAX_BODY_LEN))
    if t is list:
        return st.one_of(st.none(), _raw_headers())
    return st.one_of(st.none(), _props())


@st.composite
def _raw_headers(draw: st.DrawFn) -> list[list[Any]]:
    """Valid raw_headers: up to MAX_RAW_HEADERS [str, bytes] pairs (names may repeat), sometimes at the byte cap."""
    if draw(st.integers(0, 9)) == 0:  # exactly at the cap: one value fills what the names leave
        names = [f"h{i}" for i in range(draw(st.integers(1, wire.MAX_RAW_HEADERS)))]
        left = wire.MAX_RAW_HEADERS_BYTES - sum(map(len, names))
        return [[names[0], b"v" * left]] + [[n, b""] for n in names[1:]]
    return draw(st.lists(st.tuples(st.text(max_size=6), st.binary(max_size=8)).map(list),
                         max_size=wire.MAX_RAW_HEADERS))


@st.composite
def _props(draw: st.DrawFn) -> Pairs:
    """Valid props, sometimes with repeated keys (the last value wins, a key counts once)."""
    keys = draw(st.lists(st.text(max_size=3), max_size=wire.MAX_PROPS, unique=True))
    items = [(k, draw(st.text(max_size=4))) for k in keys]
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        if items:  # an earlier copy of a key with any value: still valid
            k = draw(st.sampled_from(keys))
            items.insert(0, (k, draw(_plain)))
    return Pairs(tuple(items))


@st.composite
def _event(draw: st.DrawFn) -> list[Any]:
    n = draw(st.integers(min_value=wire.MIN_FIELDS, max_value=wire.FIELD_COUNT))
    return [draw(_column(i)) for i in range(n)]


@st.composite
def _batch(draw: st.DrawFn) -> list[Any]:
    """A valid batch as a structure for ``enc``."""
    stats_keys = draw(st.lists(st.text(max_size=3), max_size=3, unique=True))
    stats = [(k, draw(st.integers(min_value=0, max_value=MAX_INT))) for k in stats_keys]
    if stats and draw(st.booleans()):  # an earlier duplicate with a bad value is overwritten
        stats.insert(0, (stats[-1][0], draw(_plain)))
    batch = [
        draw(st.integers(min_value=1, max_value=wire.SCHEMA_VERSION)),
        draw(st.text(min_size=1, max_size=8)),
        draw(st.integers(min_value=0, max_value=MAX_INT)),
        draw(st.text(max_size=8)),
        draw(st.text(max_size=8)),
        draw(st.integers(min_value=0, max_value=wire.MAX_TIME_MS)),
        Pairs(tuple(stats)),
        draw(st.lists(_event(), max_size=5)),
    ]
    batch += draw(st.lists(_plain, max_size=2))  # fields of a newer version nobody reads
    return batch


# -- the comparison ------------------------------------------------------------------------


def _python(data: bytes) -> tuple[wire.BatchHeader, int] | None:
    try:
        return wire.check_batch(data)
    except wire.WireError:
        return None


def _fast(data: bytes) -> tuple[wire.BatchHeader, int] | None:
    assert _wirecheck is not None, "collector.wirecheck._wirecheck is not built"
    got = _wirecheck.check(data)
    return None if got is None else (wire.BatchHeader(*got[:6]), got[6])


def _agree(data: bytes) -> tuple[wire.BatchHeader, int] | None:
    expected = _python(data)
    assert _fast(data) == expected
    # The index path's decode: the same batch (events value for value and type for type) or the same error.
    wire_decoded = decoded(wire.decode_batch, data)
    assert decoded(validate.decode_batch, data) == wire_decoded
    if expected is not None:
        assert validate.check_batch(data) == expected
        assert decoded(wire.decode_checked_batch, data) == wire_decoded  # what it builds once C said valid
    return expected


def _slots(batch: list[Any]) -> list[tuple[Any, int]]:
    """Every place a value can be swapped: header fields, events, event fields, props entries."""
    slots: list[tuple[Any, int]] = [(batch, i) for i in range(len(batch))]
    events = batch[7] if isinstance(batch[7], list) else []
    slots += [(events, i) for i in range(len(events))]
    for event in events:
        if isinstance(event, list):
            slots += [(event, i) for i in range(len(event))]
            slots += [(value, 0) for value in event if isinstance(value, Pairs) and value.items]
    return slots


@_SETTINGS
@given(_batch(), st.randoms(use_true_random=False))
def test_valid_batches(batch: list[Any], rnd: random.Random) -> None:
    assert _agree(enc(rnd, batch)) is not None


@_SETTINGS
@given(_batch(), st.randoms(use_true_random=False), st.data())
def test_batches_with_a_value_swapped(batch: list[Any], rnd: random.Random, data: st.DataObject) -> None:
    for _ in range(data.draw(st.integers(min_value=1, max_value=2))):
        slots = _slots(batch)
        container, i = data.draw(st.sampled_from(slots))
        value = data.draw(_any)
        if isinstance(container, Pairs):  # swap a key or a value of the first entry
            k, v = container.items[0]
            entry = (value, v) if data.draw(st.booleans()) else (k, value)
            batch = _replace_pairs(batch, container, Pairs((entry,) + container.items[1:]))
        elif data.draw(st.integers(0, 9)) == 0 and isinstance(container, list):
            container.append(value)  # one field too many, or an extra event
        else:
            container[i] = value
    _agree(enc(rnd, batch))


def _replace_pairs(batch: list[Any], old: Pairs, new: Pairs) -> list[Any]:
    for event in batch[7] if isinstance(batch[7], list) else []:
        if isinstance(event, list):
            for i, value in enumerate(event):
                if value is old:
                    event[i] = new
    return batch


_RAW_HEADERS = wire.Event._fields.index("raw_headers")
# Values just outside a column's rules (enum neighbours, range ends, empty, other types).
_NEAR = [-2, -1, 0, 1, 2, 3, 5, 6, 7, 63, 64, 255, wire.MAX_TIME_MS, wire.MAX_TIME_MS + 1, MAX_INT, MAX_INT + 1,
         2**64 - 1, -(2**63), "", "x", None, True,
         False, 1.0, b"", b"x", {}, {"k": "v"}, {"k": 1}, [], [1], [["h", b"v"]], [["h", "v"]], [[b"h", b"v"]],
         [["h", b"v", b""]], [["h"]], [["h", b"v"]] * (wire.MAX_RAW_HEADERS + 1),
         [["h", b"v" * (wire.MAX_RAW_HEADERS_BYTES - 1)]], [["h", b"v" * wire.MAX_RAW_HEADERS_BYTES]]]
_near = st.sampled_from(_NEAR)


@_SETTINGS
@given(_event(), st.integers(min_value=0, max_value=wire.FIELD_COUNT), st.one_of(_near, _any),
       st.randoms(use_true_random=False))
def test_events_with_a_field_out_of_line(event: list[Any], i: int, value: Any, rnd: random.Random) -> None:
    if i < len(event):
        event[i] = value
    else:
        event.append(value)  # one field too many once the event is full
    _agree(enc(rnd, _header([event])))


def test_every_column_with_every_neighbour_value() -> None:
    full = [1, 1, "g", "t", "m", *[""] * 4, -1, -1, 0, 0, 0, 0, "", 0, 0, None, "", "", 0, None,
            "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331",  # ... body, trace_id, span_id
            3, b"key", [["h", b"v"]]]  # body_flags, raw_key, raw_headers
    assert len(full) == wire.FIELD_COUNT
    assert _agree(_one(_header([full]))) is not None
    for i in range(wire.FIELD_COUNT):
        for value in _NEAR:
            event = list(full)
            event[i] = value
            _agree(_one(_header([event])))
            _agree(_one(_header([event[: max(i + 1, wire.MIN_FIELDS)]])))


def test_every_header_field_with_every_neighbour_value() -> None:
    event = [1, 1, "g", "t", "m"]
    for i in range(7):  # version .. client_stats
        for value in _NEAR:
            header = _header([event])
            header[i] = value
            _agree(_one(header))
    assert _agree(_one([1, "c", 1, "app", "host", wire.MAX_TIME_MS, Pairs(()), [event]])) is not None
    assert _agree(_one([1, "c", 1, "app", "host", wire.MAX_TIME_MS + 1, Pairs(()), [event]])) is None


@_SETTINGS
@given(st.one_of(_near, _any), st.randoms(use_true_random=False))
def test_any_value_where_it_is_unread_or_overwritten(value: Any, rnd: random.Random) -> None:
    # A trailing batch field is never read and a repeated map key keeps only its last
    # value, so these places take any msgpack at all: the skipping must match the unpacker.
    ev = [1, 1, "g", "t", "m", *[""] * 4, -1, -1, 0, 0, 0, 0, "", 0, 0]
    _agree(enc(rnd, _header(extra=(value,))))
    _agree(enc(rnd, _header([ev + [Pairs((("k", value), ("k", "v")))]])))
    _agree(enc(rnd, _header(stats=Pairs((("k", value), ("k", 1))))))
    _agree(enc(rnd, _header(stats=Pairs((("k", 1), ("k", value))))))


@_SETTINGS
@given(_batch(), st.randoms(use_true_random=False), st.data())
def test_damaged_bytes(batch: list[Any], rnd: random.Random, data: st.DataObject) -> None:
    raw = bytearray(enc(rnd, batch))
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        kind = data.draw(st.sampled_from(["flip", "truncate", "insert", "delete", "append", "huge"]))
        at = data.draw(st.integers(min_value=0, max_value=max(len(raw) - 1, 0)))
        if kind == "flip" and raw:
            raw[at] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "truncate":
            del raw[at:]
        elif kind == "insert":
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete":
            del raw[at:at + data.draw(st.integers(1, 4))]
        elif kind == "append":
            raw += data.draw(st.binary(min_size=1, max_size=4))
        else:
            raw[at:at] = data.draw(st.sampled_from(_HUGE))
    _agree(bytes(raw))


@_SETTINGS
@given(st.binary(max_size=300))
def test_random_bytes(data: bytes) -> None:
    _agree(data)
    _agree(b"\x98\x01\xa1c\x01\xa0\xa0\x00\x80" + data)  # a valid envelope, random events


# -- edges named explicitly ------------------------------------------------------------------


def _header(events: Any = (), stats: Any = Pairs(()), extra: tuple[Any, ...] = ()) -> list[Any]:
    return [1, "c", 1, "app", "host", 0, stats, list(events), *extra]


def _one(value: Any) -> bytes:
    return enc(random.Random(0), value)


@pytest.mark.parametrize("depth", [1021, 1022, 1023, 1024])
@pytest.mark.parametrize("leaf", [b"\x01", b"\x90", b"\x80"])
def test_nesting_at_the_unpackers_stack_limit(depth: int, leaf: bytes) -> None:
    # msgpack keeps at most 1024 containers open, empty ones included. Each placement below
    # has depth + 1 containers open around the leaf: a trailing field inside the batch,
    # a props value (batch, events, event, props) and a client_stats value (batch, stats),
    # both overwritten by a later valid duplicate so that only the nesting decides.
    allowed = depth + 1 + (leaf != b"\x01") <= 1024
    ev = [1, 1, "g", "t", "m", *[""] * 4, -1, -1, 0, 0, 0, 0, "", 0, 0]
    batches = [
        _header(extra=(_nest(depth, leaf),)),
        _header([ev + [Pairs((("k", _nest(depth - 3, leaf)), ("k", "v")))]]),
        _header(stats=Pairs((("k", _nest(depth - 1, leaf)), ("k", 1)))),
    ]
    for batch in batches:
        assert (_agree(_one(batch)) is not None) == allowed


def test_props_count_distinct_keys_and_last_values() -> None:
    ev = [1, 1, "g", "t", "m", *[""] * 4, -1, -1, 0, 0, 0, 0, "", 0, 0]
    many = tuple((f"k{i}", "v") for i in range(wire.MAX_PROPS))
    assert _agree(_one(_header([ev + [Pairs(many + (("k0", "w"),))]]))) is not None
    assert _agree(_one(_header([ev + [Pairs(many + (("new", "w"),))]]))) is None
    assert _agree(_one(_header([ev + [Pairs((("a", 1), ("a", "x")))]]))) is not None
    assert _agree(_one(_header([ev + [Pairs((("a", "x"), ("a", 1)))]]))) is None
    assert _agree(_one(_header([ev + [Pairs(((b"a", "x"),))]]))) is None


def test_client_stats_keep_the_last_duplicate() -> None:
    got = _agree(_one(_header(stats=Pairs((("d", -1), ("d", 7), ("e", 2))))))
    assert got is not None and got[0].client_stats == {"d": 7, "e": 2}
    assert _agree(_one(_header(stats=Pairs((("d", 7), ("d", MAX_INT + 1)))))) is None


def test_huge_declared_lengths_are_rejected_without_reading_them() -> None:
    for huge in _HUGE:
        assert _agree(_one(_header([Raw(huge)]))) is None
        assert _agree(_one(_header()) + huge) is None


def test_not_bytes_goes_to_the_python_path() -> None:
    assert _wirecheck is not None
    assert _wirecheck.check("not bytes") is None
    with pytest.raises(wire.WireError):
        validate.check_batch("not bytes")  # type: ignore[arg-type]
    data = _one(_header())
    assert _wirecheck.check(bytearray(data)) == _wirecheck.check(memoryview(data))


def test_the_trace_context_fields_take_the_fast_path() -> None:
    # trace_id and span_id are the newest columns; the C table comes from wire._TYPES, so both
    # the old 23-field shape and the 25-field one validate in C, and a non-str there is refused.
    old = [1, 1, "g", "t", "m", *[""] * 4, -1, -1, 0, 0, 0, 0, "", 0, 0, None, "", "", 0, b"body"]
    new = old + ["0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"]
    assert [c[0] for c in wire.fast_path_rules()["columns"][23:25]] == ["str", "str"]
    for event in (old, new, new[:-1]):
        data = _one(_header([event]))
        assert validate.fast_check_batch(data) == (wire.BatchHeader("c", 1, "app", "host", 0, {}), 1)
        assert _agree(data) is not None
    for bad in (None, 1, b"0af7651916cd43dd8448eb211c80319c"):
        assert _wirecheck is not None and _wirecheck.check(_one(_header([[*old, bad]]))) is None
        assert _agree(_one(_header([[*old, "0af7651916cd43dd8448eb211c80319c", bad]]))) is None


def test_the_kept_record_fields_take_the_fast_path() -> None:
    # body_flags, raw_key and raw_headers (issue 43): the C table has a column kind for the pairs,
    # so an event carrying a kept record is validated in C like any other, and refused alike.
    base = [1, 1, "g", "t", "m", *[""] * 4, -1, -1, 0, 0, 0, 0, "", 0, 0, None, "", "", 0, b"body", "", ""]
    assert [c[0] for c in wire.fast_path_rules()["columns"][25:]] == ["int", "bin", "pairs"]
    good = [[*base, 3], [*base, 0, None, None], [*base, 2, b"k", []], [*base, 1, b"", [["a", b"1"], ["a", b""]]],
            [*base, 0, None, [["n", b"v"]] * wire.MAX_RAW_HEADERS]]
    for event in good:
        data = _one(_header([event]))
        assert validate.fast_check_batch(data) == (wire.BatchHeader("c", 1, "app", "host", 0, {}), 1)
        assert _agree(data) is not None
    bad = [[*base, 4], [*base, -1], [*base, 0, "key"], [*base, 0, None, {}], [*base, 0, None, [["n", "v"]]],
           [*base, 0, None, [["n", b"v"]] * (wire.MAX_RAW_HEADERS + 1)],
           [*base, 0, None, [["n", b"v" * wire.MAX_RAW_HEADERS_BYTES]]], [*base, 0, None, None, None]]
    for event in bad:
        assert _agree(_one(_header([event]))) is None


def test_ingest_learns_whether_a_batch_may_carry_a_body() -> None:
    """The C walk counts the bin values it saw: ingest strips bodies (collector/server/bodystrip.py)
    only from batches that may hold one, and a batch with a body, raw key or raw headers does."""
    ev = list(wire.make_event(1, 5, "g", "t", "m"))
    plain = _one(_header([ev[:5]]))
    assert validate.check_batch_bodies(plain)[1:] == (1, False)
    for kept in ([*ev[:22], b"body"], [*ev[:25], 0, b"key"], [*ev[:25], 0, None, [["h", b"v"]]]):
        data = _one(_header([kept]))
        assert _wirecheck is not None and _wirecheck.check(data)[7] >= 1
        assert validate.check_batch_bodies(data)[1:] == (1, True)
