"""The rollups' lean read-back (``part_of``) gives what the full trace gives (``Part.of(build_trace(...))``)
for any set of stored events of one message: the rollups read every touched message back after each
batch, so they take the short path, and this keeps it equal to the one the queries take."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from index_helpers import ev

from collector.store.model import build_trace
from collector.store.rollup import Part, part_of
from collector.store.schema import StoredEvent
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


@settings(max_examples=1500, deadline=None)
@given(events=st.lists(_event, max_size=10))
def test_the_lean_part_equals_the_part_of_the_full_trace(events: list[StoredEvent]) -> None:
    trace = build_trace("m", events)
    expected = None if trace is None or trace.placed_ms is None else (trace.topic, Part.of(trace))
    assert part_of("m", events) == expected


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
    assert part_of("m", events) == ("t", Part("m", T0, {"g1": ("consumed", True, 35)}))
