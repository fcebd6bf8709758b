"""The row-key encoding: round trip, and byte order equal to tuple order."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collector.store import keys
from collector.store.errors import KeyEncodingError

elements = st.one_of(
    st.binary(max_size=12),
    st.text(max_size=12),
    st.integers(min_value=keys.INT_MIN, max_value=keys.INT_MAX),
)
tuples = st.lists(elements, max_size=5).map(tuple)
_RANK = {bytes: 0, str: 1, int: 2}  # the type tags' order


def comparable(t: tuple) -> list[tuple[int, object]]:
    """A tuple made comparable across element types, in the encoding's type order."""
    return [(_RANK[type(v)], v) for v in t]


@given(tuples)
def test_round_trip(t: tuple) -> None:
    assert keys.unpack(keys.pack(t)) == t


@given(tuples, tuples)
def test_byte_order_is_tuple_order(a: tuple, b: tuple) -> None:
    ka, kb = keys.pack(a), keys.pack(b)
    assert (ka < kb) == (comparable(a) < comparable(b))
    assert (ka == kb) == (a == b)


@given(tuples, tuples)
def test_concatenation_and_prefix_range(a: tuple, b: tuple) -> None:
    assert keys.pack(a + b) == keys.pack(a) + keys.pack(b)
    start, stop = keys.prefix_range(a)
    assert start <= keys.pack(a + b) < stop


@given(tuples, tuples)
def test_prefix_range_excludes_other_tuples(a: tuple, b: tuple) -> None:
    start, stop = keys.prefix_range(a)
    inside = start <= keys.pack(b) < stop
    assert inside == (b[: len(a)] == a)


def test_nul_bytes_and_prefixes_sort_like_tuples() -> None:
    ordered = [("a",), ("a", 0), ("a\x00",), ("a\x00\x00",), ("a\x01",), ("b",)]
    packed = [keys.pack(t) for t in ordered]
    assert packed == sorted(packed)
    assert keys.unpack(keys.pack(("x\x00y", b"\x00\xff\x00"))) == ("x\x00y", b"\x00\xff\x00")


def test_negative_and_reversed_integers_order() -> None:
    values = [keys.INT_MIN, -5, -1, 0, 1, 2**40, keys.INT_MAX]
    assert sorted(keys.pack_one(v) for v in values) == [keys.pack_one(v) for v in values]
    times = [0, 1_700_000_000_000, 1_700_000_000_001]
    rev = [keys.pack_one(keys.reverse_int(t)) for t in times]
    assert rev == sorted(rev, reverse=True)


@pytest.mark.parametrize("value", [True, 2**63, -(2**63) - 1, 1.5, None])
def test_bad_elements_are_refused(value: object) -> None:
    with pytest.raises(KeyEncodingError):
        keys.pack(("t", value))


@pytest.mark.parametrize("data", [b"\x03\x00", b"\x02abc", b"\x09", b"\x02\xff\xfe\x00"])
def test_garbage_is_not_a_key(data: bytes) -> None:
    with pytest.raises(KeyEncodingError):
        keys.unpack(data)
