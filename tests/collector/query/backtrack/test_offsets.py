"""Offsets at a time and reset plans against brute-force models over the embedded store."""

from __future__ import annotations

from backtrack_helpers import BASE_MS, GROUP, Record, attempt, message, new_topic, pub
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.index.indexer import index_records
from collector.query import backtrack
from collector.store.reader import TraceQuery
from tracehook.wire import Status

# Per queue: (time step >= 0, offset step >= 1) per message, so store time never goes back within a queue.
QUEUES = st.dictionaries(
    st.integers(0, 7),
    st.lists(st.tuples(st.integers(0, 3), st.integers(1, 3)), min_size=1, max_size=12),
    min_size=1, max_size=4,
)
PROBES = st.lists(st.integers(-5, 60), min_size=1, max_size=8)  # around, before and after every message
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

Layout = dict[int, list[tuple[int, int]]]  # queue -> [(store time, offset)]


def layout(steps: dict[int, list[tuple[int, int]]]) -> Layout:
    out: Layout = {}
    for queue, pairs in steps.items():
        t, offset, msgs = BASE_MS, 0, []
        for dt, doff in pairs:
            t, offset = t + dt, offset + doff
            msgs.append((t, offset))
        out[queue] = msgs
    return out


def publish(topic: str, msgs: Layout) -> list[Record]:
    return [pub(topic, f"{topic}/{q}/{o}", message(q, o, t)) for q, pairs in msgs.items() for t, o in pairs]


def brute_offset(pairs: list[tuple[int, int]], time_ms: int) -> int:
    """RocketMQ's LOWER bound: the first offset stored at or after T; after all of them the end offset."""
    at_or_after = [o for t, o in pairs if t >= time_ms]
    return min(at_or_after) if at_or_after else max(o for _, o in pairs) + 1


@SETTINGS
@given(steps=QUEUES, probes=PROBES)
def test_offsets_at_matches_brute_force(query: TraceQuery, steps, probes) -> None:
    topic, msgs = new_topic("off"), layout(steps)
    records = publish(topic, msgs)
    # Receiving a message files it in the queue index again: that must not change any answer.
    first_queue = min(msgs)
    t0, o0 = msgs[first_queue][0]
    records += attempt(topic, GROUP, f"{topic}/{first_queue}/{o0}", message(first_queue, o0, t0), status=None)
    index_records(query.store, records)
    for probe in probes:
        time_ms = BASE_MS + probe
        expected = {q: brute_offset(pairs, time_ms) for q, pairs in msgs.items()}
        assert backtrack.offsets_at(query, topic, time_ms) == expected
        for q in msgs:
            assert backtrack.offsets_at(query, topic, time_ms, q) == {q: expected[q]}
    assert backtrack.offsets_at(query, topic, BASE_MS, queue=99) == {}


def test_before_first_and_after_last(backend_query: TraceQuery) -> None:
    topic = new_topic("edge")
    msgs = {0: [(BASE_MS + 10, 5), (BASE_MS + 20, 6)], 3: [(BASE_MS + 15, 100)]}
    index_records(backend_query.store, publish(topic, msgs))
    assert backtrack.offsets_at(backend_query, topic, 0) == {0: 5, 3: 100}
    assert backtrack.offsets_at(backend_query, topic, BASE_MS + 15) == {0: 6, 3: 100}
    assert backtrack.offsets_at(backend_query, topic, BASE_MS + 20) == {0: 6, 3: 101}
    assert backtrack.offsets_at(backend_query, topic, BASE_MS + 21) == {0: 7, 3: 101}
    assert backtrack.offsets_at(backend_query, new_topic("empty"), BASE_MS) == {}


def expected_plan(msgs: Layout, consumed: dict[int, int], time_ms: int, force: bool) -> dict[int, tuple]:
    """The reset rule of RocketMQ's broker, on brute-force offsets: queue -> (target, current, planned)."""
    out = {}
    for q, pairs in msgs.items():
        target = brute_offset(pairs, time_ms)
        k = consumed.get(q, 0)
        current = pairs[k - 1][1] + 1 if k else None
        if current is None or force or target < current:
            out[q] = (target, current, target)
        else:
            out[q] = (target, current, current)
    return out


@SETTINGS
@given(steps=QUEUES, data=st.data(), probe=st.integers(-5, 60), force=st.booleans())
def test_reset_plan_matches_brute_force(query: TraceQuery, steps, data, probe, force) -> None:
    topic, msgs = new_topic("plan"), layout(steps)
    records = publish(topic, msgs)
    consumed: dict[int, int] = {}
    for q, pairs in msgs.items():
        k = data.draw(st.integers(0, len(pairs)), label=f"consumed on queue {q}")
        consumed[q] = k
        for i, (t, o) in enumerate(pairs[:k]):
            # Any finished consume moves the group on, whatever its status.
            status = Status.OK if i % 3 else Status.FAILED
            records += attempt(topic, GROUP, f"{topic}/{q}/{o}", message(q, o, t), status=status)
        if k < len(pairs):  # received but unfinished: not consumed yet
            t, o = pairs[k]
            records += attempt(topic, GROUP, f"{topic}/{q}/{o}", message(q, o, t), status=None)
    index_records(query.store, records)
    time_ms = BASE_MS + probe
    plan = backtrack.reset_plan(query, topic, GROUP, time_ms, force=force)
    got = {e.queue: (e.target, e.current, e.planned) for e in plan.entries}
    assert got == expected_plan(msgs, consumed, time_ms, force)
    assert plan.offsets() == {q: v[2] for q, v in got.items()}
    for e in plan.entries:
        assert force or e.current is None or e.planned <= e.current  # rewind-only never skips ahead


def _consumed(topic: str, msgs: list[tuple[int, int, int]]) -> list[Record]:
    records: list[Record] = []
    for q, o, t in msgs:
        m = message(q, o, t)
        records += [pub(topic, f"{topic}/{q}/{o}", m)] + attempt(topic, GROUP, f"{topic}/{q}/{o}", m)
    return records


def test_positions_reach_a_queue_consumed_long_ago(query: TraceQuery) -> None:
    topic = new_topic("pos-old")
    index_records(query.store, _consumed(topic, [(0, 5, BASE_MS + 86_400_000), (1, 40, BASE_MS)]))
    positions = backtrack.last_positions(query, topic, GROUP)
    assert {q: p.next_offset for q, p in positions.items()} == {0: 6, 1: 41}
    assert {q: p.next_offset for q, p in backtrack.last_positions(query, topic, GROUP, queue=1).items()} == {1: 41}
    assert backtrack.last_positions(query, topic, "nobody") == {}


def test_positions_allow_for_producer_clock_skew(backend_query: TraceQuery) -> None:
    """Offset 6 filed a second before offset 5 (CreateTime from a producer whose clock lags)."""
    topic, t = new_topic("pos-skew"), BASE_MS + 3_600_000
    index_records(backend_query.store, _consumed(topic, [(0, 5, t), (1, 40, t - 500), (0, 6, t - 1000)]))
    positions = backtrack.last_positions(backend_query, topic, GROUP)
    assert {q: p.next_offset for q, p in positions.items()} == {0: 7, 1: 41}
    # With no slack the scan stops once both queues were seen, before offset 6.
    assert backtrack.last_positions(backend_query, topic, GROUP, slack_ms=0)[0].next_offset == 6
