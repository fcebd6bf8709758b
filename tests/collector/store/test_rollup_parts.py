"""The rollups' short paths, against what they must equal: the lean read-back (``part_of`` of the events
as ``codec.decode_events`` reads them back, without validating) gives what the full trace of the validated
events gives (``Part.of(build_trace(...))``) for any set of stored events of one message, and a
minute aggregated in one pass over its parts (``aggregate``, ``aggregate_cells``) holds what the
bucket's definitions say, worked out here by brute force."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from index_helpers import ev

from collector.index import readback
from collector.index.rollup import _part_values
from collector.index.rollup_parts import (
    MOVED,
    Part,
    aggregate,
    aggregate_cells,
    encoded_part_of,
    part_of,
    sort_entries,
)
from collector.store import codec, schema
from collector.store.codec import StoredEvent
from collector.store.model import build_trace, could_place
from tracehook.hooks import REPLAY_TARGET_PROP
from tracehook.wire import EventType, Status

T0 = 1_700_000_000_000 - 1_700_000_000_000 % 60_000
MINUTE = 60_000

# Few distinct values per field, so events tie in time, share request ids and groups, and place the
# message in different minutes and topics: the cases where the two paths could part ways.
_times = st.sampled_from([T0, T0 + 1, T0 + 2, T0 + MINUTE - 1, T0 + MINUTE, T0 + 2 * MINUTE + 7])
_event = st.builds(
    lambda type_, time_ms, group, topic, store_ms, born_ms, status, retry, request_id, replay: StoredEvent(
        "app", "host", "client", ev(type_, time_ms, group, topic, "m", store_ms=store_ms, born_ms=born_ms,
                                    status=status, retry=retry, request_id=request_id,
                                    props={REPLAY_TARGET_PROP: "topic:x"} if replay else None)),
    st.sampled_from(list(EventType)), _times, st.sampled_from(["g1", "g2", "pg"]), st.sampled_from(["t", "u"]),
    st.sampled_from([0, T0 + 3, T0 + MINUTE + 3]), st.sampled_from([0, T0 + 1, T0 + MINUTE]),
    st.sampled_from(list(Status)), st.integers(0, 2), st.sampled_from(["", "r1", "r2"]), st.booleans(),
)


@settings(max_examples=600, deadline=None)
@given(events=st.lists(_event, max_size=10))
def test_the_lean_part_equals_the_part_of_the_full_trace(events: list[StoredEvent]) -> None:
    values = [codec.encode_event_value(e.app, e.host, e.client_id, e.event) for e in events]
    trace = build_trace("m", [codec.decode_event_value("m", v) for v in values])  # the query path's reading
    expected = None if trace is None or trace.placed_ms is None else (trace.topic, Part.of(trace))
    trusted = codec.decode_events("m", values)
    assert part_of("m", trusted) == expected
    assert part_of("m", [e.event for e in events]) == expected
    # What the read-back stores: the same part, encoded.
    assert encoded_part_of(trusted) == (None if expected is None else
                                        (expected[0], expected[1].placed_ms, expected[1].encode()))


@settings(max_examples=500, deadline=None)
@given(events=st.lists(_event, max_size=10))
def test_the_read_back_files_the_part_in_its_minute_and_moved_in_the_others(events: list[StoredEvent]) -> None:
    """What the read-back writes for a message (one pass over its events, rollup._part_values): its
    part in the minute the full trace places it in, and MOVED in every other minute one of its
    events could have placed it in (a batch that saw only those events filed it there)."""
    values = [codec.encode_event_value(e.app, e.host, e.client_id, e.event) for e in events]
    trace = build_trace("m", [codec.decode_event_value("m", v) for v in values])
    expected: dict[tuple[str, int], bytes] = {}
    for e in events:
        if could_place(e.event):
            expected[(e.event.topic, schema.minute_of(schema.message_time(e.event)))] = MOVED
    if trace is not None and trace.placed_ms is not None:
        expected[(trace.topic, schema.minute_of(trace.placed_ms))] = Part.of(trace).encode()
    assert _part_values(codec.decode_events("m", values)) == expected
    # As read_parts reads them: cut down to the fields a part reads (in C, and in Python).
    assert _part_values(readback.part_events(values), readback.ORDER) == expected
    assert _part_values(readback.py_part_events(values), readback.ORDER) == expected


_sends = st.lists(st.builds(
    lambda time_ms, topic, store_ms, born_ms, status, request_id: StoredEvent("app", "host", "client", ev(
        EventType.PUB, time_ms, "pg", topic, "m", store_ms=store_ms, born_ms=born_ms, status=status,
        request_id=request_id)),
    _times, st.sampled_from(["t", "u"]), st.sampled_from([0, T0 + 3, T0 + MINUTE + 3]),
    st.sampled_from([0, T0 + 1, T0 + MINUTE]), st.sampled_from(list(Status)), st.sampled_from(["", "r1"])),
    min_size=1, max_size=3)


@settings(max_examples=500, deadline=None)
@given(events=_sends)
def test_a_message_only_sent_files_the_part_of_its_full_trace(events: list[StoredEvent]) -> None:
    """The read-back's shortcut for a message whose only event is its send (and sends retried: the path
    around it), for every status and time it can have."""
    values = [codec.encode_event_value(e.app, e.host, e.client_id, e.event) for e in events]
    trace = build_trace("m", [codec.decode_event_value("m", v) for v in values])
    assert trace is not None and trace.placed_ms is not None
    expected = {(e.event.topic, schema.minute_of(schema.message_time(e.event))): MOVED for e in events}
    expected[(trace.topic, schema.minute_of(trace.placed_ms))] = Part.of(trace).encode()
    assert _part_values(readback.part_events(values), readback.ORDER) == expected
    assert _part_values(codec.decode_events("m", values)) == expected
    assert encoded_part_of(codec.decode_events("m", values)) == (trace.topic, trace.placed_ms, Part.of(trace).encode())


def test_a_dead_letter_replayed_then_consumed_counts_as_consumed() -> None:
    """One case spelled out (the replay rule is the rarest path): replayed, dead, replayed again, then
    consumed: the group's last replay is the one that counts."""
    def stored(type_: EventType, t: int, **fields: object) -> StoredEvent:
        return StoredEvent("app", "host", "client", ev(type_, t, "g1", "t", "m", **fields))

    events = [
        StoredEvent("app", "host", "client", ev(EventType.PUB, T0 + 1, "pg", "t", "m", store_ms=T0)),
        stored(EventType.REPLAY, T0 + 5, props={REPLAY_TARGET_PROP: "topic:t"}),
        stored(EventType.SUB_BEFORE, T0 + 10, request_id="a"),
        stored(EventType.SUB_AFTER, T0 + 11, request_id="a", status=Status.FAILED),
        stored(EventType.DEAD, T0 + 12),
        stored(EventType.REPLAY, T0 + 20, props={REPLAY_TARGET_PROP: "topic:t"}),
        stored(EventType.SUB_BEFORE, T0 + 30, request_id="b", retry=1),
        stored(EventType.SUB_AFTER, T0 + 35, request_id="b", retry=1),
    ]
    assert part_of("m", [e.event for e in events]) == ("t", Part("m", T0, {"g1": ("consumed", True, 35)}))


# --- aggregating a minute's parts -------------------------------------------------------------

_parts = st.lists(st.builds(
    lambda n, placed, stored, groups: Part(f"m{n}", T0 + placed, groups if stored else {}, stored=stored),
    st.integers(0, 30), st.integers(0, 5), st.booleans(),
    st.dictionaries(st.sampled_from(["g1", "g2", "g3"]), st.tuples(
        st.sampled_from(["consumed", "retrying", "failed", "dead", "pending"]), st.booleans(),
        st.none() | st.sampled_from([0, 5, 6, 1_800_000, 1_800_001])), max_size=3),
), max_size=12, unique_by=lambda p: p.msg_id)


def expected_groups(parts: list[Part]) -> dict[str, tuple[Any, ...]]:
    """Per group, from the definitions (GroupBucket's docstring): the outcome counts, retried, the
    latency sum, the first message it received, the oldest it has not consumed (received or not),
    and the oldest such at or after that first one (messages in (time, msg id) order)."""
    stored = sorted((p for p in parts if p.stored), key=lambda p: (p.placed_ms, p.msg_id))
    out: dict[str, tuple[Any, ...]] = {}
    for group in {g for p in stored for g in p.groups}:
        received = [i for i, p in enumerate(stored) if group in p.groups]
        open_ = [i for i, p in enumerate(stored) if group not in p.groups or p.groups[group][0] in ("retrying", "pending")]
        after = [i for i in open_ if i >= received[0]]
        fates = [p.groups[group] for p in stored if group in p.groups]
        out[group] = (
            tuple(sum(f[0] == o for f in fates) for o in ("consumed", "retrying", "failed", "dead", "pending")),
            sum(f[1] for f in fates), sum(f[2] or 0 for f in fates), stored[received[0]].placed_ms,
            stored[open_[0]].placed_ms if open_ else None, stored[after[0]].placed_ms if after else None,
        )
    return out


@settings(max_examples=500, deadline=None)
@given(parts=_parts, moved=st.lists(st.integers(31, 40), max_size=3))
def test_a_minute_aggregates_its_parts_as_defined(parts: list[Part], moved: list[int]) -> None:
    cells = {schema.rollup_part_column(p.msg_id): p.encode() for p in parts}
    cells |= {schema.rollup_part_column(f"m{n}"): MOVED for n in moved}  # placed elsewhere now
    for bucket in (aggregate("t", T0, parts), aggregate_cells("t", T0, cells)):
        assert (bucket.sent, bucket.failed_sends) == (sum(p.stored for p in parts), sum(not p.stored for p in parts))
        assert {g: ((b.consumed, b.retrying, b.failed, b.dead, b.pending), b.retried, b.latency_sum_ms, b.first_ms,
                    b.oldest_open_ms, b.oldest_open_after_first_ms)
                for g, b in bucket.groups.items()} == expected_groups(parts)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([T0, T0 + 1, T0 + MINUTE - 1, 2**40 + 5]),
                          st.sampled_from([b"p:a", b"p:b", b"p:ab", b"p:\xff"]), st.booleans()), max_size=40))
def test_parts_are_sorted_by_time_then_column_keeping_ties_in_order(keys: list[tuple[int, bytes, bool]]) -> None:
    # Entries equal in (placed ms, column) stay in their given order, as one stable sort by both keeps them.
    entries = [(placed, column, stored, [i], 3) for i, (placed, column, stored) in enumerate(keys)]
    expected = sorted(entries, key=lambda e: (e[0], e[1]))
    sort_entries(entries)
    assert entries == expected
