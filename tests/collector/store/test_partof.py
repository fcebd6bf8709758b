"""The read-back's part of a message of sends and paired consumes in C (collector/store/_partof.h) is the
Python path's.

``readback.parts`` answers a message row with its part values straight from C when its events are
sends, consume attempts with request ids and dead letters; ``rollup._part_values`` of the decoded events (checked
against the full trace in test_rollup_parts.py) is the reference, value for value and byte for byte.
and dead letters; any other shape (replays, transactions, id-less consumes) is left to Python: the
extension then gives the events' fields, and the parts computed from them are the same too.
"""

from __future__ import annotations

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st
from index_helpers import ev

from collector.index import readback
from collector.index.rollup import _part_values
from collector.index.rollup_buckets import _VERSION as V
from collector.index.rollup_parts import MOVED
from collector.store import codec
from tracehook.wire import Event, EventType, Status

T0 = 1_700_000_000_000 - 1_700_000_000_000 % 60_000
MINUTE = 60_000
_CONSUMES = (EventType.SUB_BEFORE, EventType.SUB_AFTER)
_MODELLED = {EventType.PUB, EventType.SUB_BEFORE, EventType.SUB_AFTER, EventType.DEAD}

# Few distinct values per field, so events tie in time, share request ids and groups, and place the
# message in different minutes and topics; hex request ids are stored as bytes, others as text.
_times = st.sampled_from([T0, T0 + 1, T0 + 2, T0 + MINUTE - 1, T0 + MINUTE, T0 + 2 * MINUTE + 7, 5, -MINUTE - 3])
# Half the time the first value: attempts of one group reusing one request id pair as the last open one.
_groups = st.just("g1") | st.sampled_from(["g1", "g2", "b", "é", "a" * 40, "z" * 300])
_request_ids = st.just("0a1b") | st.sampled_from(["r1", "r2", "0a1b", "0a1c", "0A1B", "ab" * 32, "ab" * 33, ""])


@st.composite
def _events(draw: st.DrawFn, common: bool) -> Event:
    """An event; ``common``: one the C path models (a send, a dead letter or a consume with a request id)."""
    types = sorted(_MODELLED) if common else list(EventType)
    type_ = draw(st.sampled_from(types))
    request_id = draw(_request_ids.filter(bool) if common and type_ in _CONSUMES else _request_ids)
    return ev(type_, draw(_times), draw(_groups), draw(st.sampled_from(["t", "u"])), "m",
              store_ms=draw(st.sampled_from([0, T0 + 3, T0 + MINUTE + 3, -7])),
              born_ms=draw(st.sampled_from([0, T0 + 1, T0 + MINUTE])), status=draw(st.sampled_from(list(Status))),
              retry=draw(st.integers(0, 2)), request_id=request_id)


def _row(events: list[Event]) -> dict[bytes, bytes]:
    """A message row as the indexer stores it: a cell per distinct event."""
    return {b"s:" + q: v for q, v in (codec.encode_event("a", "h", "c", e) for e in events)}


def _modelled(row: dict[bytes, bytes]) -> bool:
    """Whether the C path answers this row itself (worked out from the events, not from the extension;
    a layout 3 value's request id is at 3 + 19 - 1: after the sender, without the msg_id)."""
    events = codec.decode_events("m", list(row.values()))
    return 1 <= len(events) <= 32 and all(
        e.type in _MODELLED and (e.type in (EventType.PUB, EventType.DEAD) or e.request_id)
        and (len(e.request_id) <= 64 or not isinstance(msgpack.unpackb(row_value)[3 + 19 - 1], bytes))
        for e, row_value in zip(events, row.values()))


def _check(rows: list[dict[bytes, bytes]]) -> list[object]:
    found = readback.parts(rows)
    assert len(found) == len(rows)
    for got, row in zip(found, rows):
        expected = _part_values(codec.decode_events("m", list(row.values())))
        if _modelled(row):
            assert type(got) is dict
            assert got == expected
            assert all(type(v) is bytes for v in got.values())
        else:
            assert type(got) is list
            assert _part_values(got, readback.ORDER) == expected
    return found


@settings(max_examples=500, deadline=None)
@given(st.lists(st.lists(_events(common=True), min_size=1, max_size=8), min_size=1, max_size=4))
def test_the_common_shapes_get_the_python_paths_part_from_c(rows_events: list[list[Event]]) -> None:
    _check([_row(events) for events in rows_events])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_events(common=False), max_size=8), min_size=1, max_size=4))
def test_any_shape_gets_the_python_paths_part_or_falls_back(rows_events: list[list[Event]]) -> None:
    _check([_row(events) for events in rows_events])


def _send(t: int = T0, **fields: object) -> Event:
    return ev(EventType.PUB, t + 1, "pg", "t", "m", born_ms=t - 1, store_ms=t, **fields)


def _attempt(group: str, at: int, status: Status | None, *, retry: int = 0, rid: str = "",
             **fields: object) -> list[Event]:
    rid = rid or f"{group}-{retry}"
    out = [ev(EventType.SUB_BEFORE, at, group, "t", "m", request_id=rid, retry=retry, **fields)]
    if status is not None:
        out.append(ev(EventType.SUB_AFTER, at + 4, group, "t", "m", request_id=rid, retry=retry, status=status))
    return out


def _part(row: dict[bytes, bytes]) -> dict[tuple[str, int], list[object]]:
    """The C path's answer for one row, each part decoded."""
    [got] = _check([row])
    assert type(got) is dict
    return {minute: msgpack.unpackb(value) if value != MOVED else MOVED for minute, value in got.items()}


def test_the_realistic_shapes_are_answered_in_c() -> None:
    ok, failed, retry_later = Status.OK, Status.FAILED, Status.RETRY_LATER
    # send + billing OK: [version, placed ms, stored, group, outcome code, retried, latency]
    row = _row([_send(), *_attempt("billing", T0 + 5, ok)])
    assert _part(row) == {("t", T0): [V, T0, True, "billing", 0, False, 9]}
    # a failed first attempt, then a retry that succeeds; and a second group that failed
    row = _row([_send(), *_attempt("billing", T0 + 5, failed), *_attempt("billing", T0 + 1000, ok, retry=1),
                *_attempt("shipping", T0 + 8, failed)])
    assert _part(row) == {("t", T0): [V, T0, True, "billing", 0, True, 1004, "shipping", 2, False, None]}
    # still running (pending), running a redelivery (retrying), asked for a redelivery (retrying)
    row = _row([_send(), *_attempt("a", T0 + 5, None), *_attempt("b", T0 + 5, None, retry=1),
                *_attempt("c", T0 + 5, retry_later)])
    assert _part(row) == {("t", T0): [V, T0, True, "a", 4, False, None, "b", 1, True, None, "c", 1, True, None]}


def test_many_groups_long_names_and_hex_request_ids_encode_as_msgpack_does() -> None:
    groups = [f"group-{i:02d}-" + "x" * (i * 20) for i in range(12)]
    events = [_send()] + [e for i, g in enumerate(groups) for e in _attempt(g, T0 + i, Status.OK, rid=f"{i:02x}" * 16)]
    [part] = _part(_row(events)).values()
    assert part[:3] == [V, T0, True] and part[3::4] == groups


def test_a_failed_send_nobody_received_is_not_stored_and_a_consume_that_knew_the_store_time_places() -> None:
    assert _part(_row([_send(status=Status.FAILED)])) == {("t", T0): [V, T0, False]}
    # no send traced: the consume that knew the store time places it, in its own topic
    consume = ev(EventType.SUB_BEFORE, T0 + 70_000, "g", "u", "m", request_id="r", store_ms=T0 + 61_000)
    assert _part(_row([consume])) == {("u", T0 + MINUTE): [V, T0 + 61_000, True, "g", 4, False, None]}
    # placed by its send now: MOVED in the minute the consume placed it in
    assert _part(_row([consume, _send()])) == {("t", T0): [V, T0, True, "g", 4, False, None], ("u", T0 + MINUTE): MOVED}
    # no event could place it: nothing to file
    assert _part(_row([ev(EventType.SUB_AFTER, T0, "g", "t", "m", request_id="r")])) == {}


def test_a_dead_letter_is_final_without_replays_and_a_group_with_only_one_still_has_an_outcome() -> None:
    failed = [*_attempt("billing", T0 + 5, Status.FAILED), *_attempt("billing", T0 + 1005, Status.OK, retry=1)]
    dead = ev(EventType.DEAD, T0 + 3000, "billing", "t", "m", retry=2)
    assert _part(_row([_send(), *failed, dead])) == {("t", T0): [V, T0, True, "billing", 3, True, None]}
    assert _part(_row([_send(status=Status.FAILED), ev(EventType.DEAD, T0 + 9, "dlq", "t", "m")])) == {
        ("t", T0): [V, T0, True, "dlq", 3, False, None]}  # dead-lettered: the broker stored it
    # outcome_of reads "never replayed" as a replay at time 0: a dead letter before it is revived by a success
    row = _row([_send(0), ev(EventType.DEAD, -5, "g", "t", "m"), *_attempt("g", 3, Status.OK)])
    assert _part(row) == {("t", 0): [V, 1, True, "g", 0, False, 6]}  # placed at its send time (no store or born time)
    # no send traced: a dead letter that knew the store time places it
    assert _part(_row([ev(EventType.DEAD, T0 + 9, "g", "u", "m", store_ms=T0 + 2)])) == {
        ("u", T0): [V, T0 + 2, True, "g", 3, False, None]}


def test_replays_transactions_and_id_less_consumes_are_left_to_python() -> None:
    id_less = _attempt("billing", T0 + 5, Status.OK)
    id_less = [e._replace(request_id="") for e in id_less]
    for extra in ([ev(EventType.REPLAY, T0 + 9, "billing", "t", "m", request_id="r")],
                  [ev(EventType.END_TX, T0 + 2, "pg", "t", "m")], id_less):
        [got] = _check([_row([_send(), *_attempt("shipping", T0 + 5, Status.OK), *extra])])
        assert type(got) is list


def test_a_latency_or_a_minute_beyond_64_bits_is_left_to_python() -> None:
    far = 2**62 + 2**61
    for events in ([ev(EventType.PUB, -far, "pg", "t", "m"), *_attempt("g", far, Status.OK)],  # latency >= 2**63
                   [ev(EventType.PUB, -2**63 + 5, "pg", "t", "m")]):  # its minute starts before -2**63
        row = _row(events)
        [got] = readback.parts([row])
        assert type(got) is list
        assert _part_values(got, readback.ORDER) == _part_values(codec.decode_events("m", list(row.values())))
