"""decode_batch's column-wise fast path accepts and rejects exactly what validate_event does."""

from __future__ import annotations

import copy
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.wirecheck import validate
from tracehook import wire

pytestmark = pytest.mark.fallback

_VALUES = st.one_of(
    st.sampled_from([0, 1, 2, 3, 4, 5, 6, -1, -2, 2**63 - 1, 2**63, True, False, None, 1.5, "", "x", b"b", {}, []]),
    st.dictionaries(st.sampled_from(["k", "v"]), st.sampled_from(["s", 1]), max_size=2),
    st.integers(min_value=-3, max_value=2**64 - 1),
    st.text(max_size=3),
)


def _valid_event(i: int) -> list[Any]:
    ev = wire.make_event(wire.EventType.PUB, 1000 + i, "g", "t", f"m{i}", keys="k", queue=1, offset=i, status=1,
                         props={"a": "b"}, tx_state=1, body=b"x")
    return wire.trim(ev)


@st.composite
def _events(draw: st.DrawFn) -> list[Any]:
    events = []
    for i in range(draw(st.integers(min_value=0, max_value=6))):
        ev = _valid_event(i)[: draw(st.integers(min_value=3, max_value=wire.FIELD_COUNT))]
        for _ in range(draw(st.integers(min_value=0, max_value=2))):
            pos = draw(st.integers(min_value=0, max_value=wire.FIELD_COUNT + 1))
            value = draw(_VALUES)
            if pos < len(ev):
                ev[pos] = value
            else:
                ev.append(value)
        events.append(ev if draw(st.integers(0, 20)) else draw(_VALUES))
    return events


def _reference(events: list[Any]) -> list[wire.Event] | tuple[str, str]:
    try:
        return [wire.validate_event(e, i) for i, e in enumerate(copy.deepcopy(events))]
    except wire.WireError as exc:
        return (exc.reason, exc.detail)


@settings(max_examples=400, deadline=None)
@given(_events())
def test_fast_path_matches_per_event_validation(events: list[Any]) -> None:
    try:
        data = msgpack.packb([1, "c", 1, "a", "h", 0, {}, events], use_bin_type=True)
    except (OverflowError, TypeError):
        return  # not representable in msgpack, so never on the wire
    expected = _reference(msgpack.unpackb(data, raw=False)[7])
    try:
        got: Any = wire.decode_batch(data).events
    except wire.WireError as exc:
        got = (exc.reason, exc.detail)
    assert got == expected
    try:
        checked: Any = validate.check_batch(data)[1]
    except wire.WireError as exc:
        checked = (exc.reason, exc.detail)
    assert checked == (len(expected) if isinstance(expected, list) else expected)


def test_valid_batches_of_mixed_lengths_take_the_fast_path() -> None:
    events = [_valid_event(i)[:n] for i, n in enumerate((5, 9, 15, 19, wire.FIELD_COUNT))]
    fast = wire._validate_all(copy.deepcopy(events))
    assert fast is not None
    assert fast == [wire.validate_event(e, i) for i, e in enumerate(events)]
