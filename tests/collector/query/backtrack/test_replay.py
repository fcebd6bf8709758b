"""The replay list is exactly the messages a group never consumed successfully, with the right last status."""

from __future__ import annotations

import pytest
from backtrack_helpers import (
    BASE_MS,
    EXPECTED_STATUS,
    GROUP,
    OTHER_GROUP,
    OUTCOMES,
    Record,
    dead,
    message,
    new_topic,
    outcome_records,
)
from fixtures.pages import CursorPages
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.index.indexer import index_records
from collector.query import backtrack
from collector.store.errors import BadRangeError
from collector.store.reader import TraceQuery

QUEUES = 3


def build(topic: str, outcomes: list[str], *, step_ms: int = 1000) -> tuple[list[Record], dict[str, dict]]:
    """Message i is stored at BASE_MS + i * step_ms on queue i % 3; returns records and message fields by id."""
    records: list[Record] = []
    fields: dict[str, dict] = {}
    for i, outcome in enumerate(outcomes):
        msg_id = f"{topic}-{i:03d}-{outcome}"
        m = message(i % QUEUES, i // QUEUES, BASE_MS + i * step_ms)
        fields[msg_id] = m
        records += outcome_records(topic, msg_id, m, outcome)
    return records, fields


def expected(topic: str, outcomes: list[str], lo: int = 0, hi: int | None = None) -> dict[str, str]:
    hi = len(outcomes) - 1 if hi is None else hi
    return {f"{topic}-{i:03d}-{o}": EXPECTED_STATUS[o] for i, o in enumerate(outcomes)
            if EXPECTED_STATUS[o] is not None and lo <= i <= hi}


def listed(query: TraceQuery, topic: str, begin: int, end: int, group: str = GROUP, page: int = 1000) -> dict:
    return {i.msg_id: i.status for i in backtrack.iter_replay(query, topic, group, begin, end, page_size=page)}


def test_every_outcome(backend_query: TraceQuery) -> None:
    topic = new_topic("every")
    records, fields = build(topic, list(OUTCOMES))
    index_records(backend_query.store, records)
    items = list(backtrack.iter_replay(backend_query, topic, GROUP, 0, BASE_MS + 10**6))
    assert {i.msg_id: i.status for i in items} == expected(topic, list(OUTCOMES))
    assert [i.time_ms for i in items] == sorted(i.time_ms for i in items)  # oldest first
    by_status = {i.status: i for i in items}
    failed = by_status["FAILED"]
    assert (failed.queue, failed.offset) == (fields[failed.msg_id]["queue"], fields[failed.msg_id]["offset"])
    assert (failed.error, failed.attempts) == ("handler failed", 1)
    assert (by_status["DEAD"].error, by_status["DEAD"].attempts) == ("max retries", 3)
    assert (by_status["PENDING"].attempts, by_status["PENDING"].error) == (1, "")
    assert by_status["NOT_RECEIVED"].last_attempt_ms == 0
    # The other group consumed everything it received: it only misses what it never saw.
    assert set(listed(backend_query, topic, 0, BASE_MS + 10**6, group=OTHER_GROUP)) == {
        f"{topic}-{i:03d}-never" for i, o in enumerate(OUTCOMES) if o == "never"
    }


@pytest.mark.parametrize("page", [1, 2, 3, 7])
def test_pages_add_up_to_the_whole_list(query: TraceQuery, page: int) -> None:
    topic = new_topic("pages")
    outcomes = list(OUTCOMES) * 3
    index_records(query.store, build(topic, outcomes)[0])
    pages = CursorPages(max_pages=200)
    for cursor in pages:
        result = backtrack.replay_list(query, topic, GROUP, 0, BASE_MS + 10**6, page, cursor)
        assert len(result.items) <= page
        pages.add([i.msg_id for i in result.items], result.next_cursor)
    seen = pages.items
    assert len(seen) == len(set(seen))
    assert set(seen) == set(expected(topic, outcomes))


def test_window_bounds_are_inclusive(query: TraceQuery) -> None:
    topic = new_topic("window")
    outcomes = ["failed"] * 10
    index_records(query.store, build(topic, outcomes)[0])
    assert listed(query, topic, BASE_MS + 3000, BASE_MS + 6000) == expected(topic, outcomes, 3, 6)
    assert listed(query, topic, BASE_MS + 3001, BASE_MS + 5999) == expected(topic, outcomes, 4, 5)
    assert listed(query, topic, BASE_MS + 10**6, BASE_MS + 2 * 10**6) == {}


def test_dead_letter_error_wins_over_the_last_attempt(query: TraceQuery) -> None:
    topic = new_topic("dead")
    records, fields = build(topic, ["failed"])
    msg_id = next(iter(fields))
    records.append(dead(topic, GROUP, msg_id, fields[msg_id], error="poison message"))
    index_records(query.store, records)
    [item] = backtrack.iter_replay(query, topic, GROUP, 0, BASE_MS + 10**6)
    assert (item.status, item.error, item.attempts) == ("DEAD", "poison message", 1)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(outcomes=st.lists(st.sampled_from(OUTCOMES), min_size=1, max_size=40), data=st.data())
def test_replay_list_is_exactly_the_unconsumed_set(query: TraceQuery, outcomes, data) -> None:
    topic = new_topic("prop")
    index_records(query.store, build(topic, outcomes, step_ms=7)[0])
    lo = data.draw(st.integers(0, len(outcomes) - 1), label="first")
    hi = data.draw(st.integers(lo, len(outcomes) - 1), label="last")
    page = data.draw(st.integers(1, 10), label="page")
    got = listed(query, topic, BASE_MS + lo * 7, BASE_MS + hi * 7, page=page)
    assert got == expected(topic, outcomes, lo, hi)


def test_dead_counts_per_group_and_bucket(backend_query: TraceQuery) -> None:
    topic = new_topic("counts")
    records: list[Record] = []
    # (group, minute the message was stored): bucket = minute // 10 with 10-minute buckets.
    dead_letters = [("billing", 0), ("billing", 9), ("billing", 25), ("audit", 10), ("audit", 59)]
    for n, (group, minute) in enumerate(dead_letters):
        m = message(0, n, BASE_MS + minute * 60_000)
        records.append(dead(topic, group, f"{topic}-{n}", m))
    records.append(dead(topic, "billing", f"{topic}-0", message(0, 0, BASE_MS)))  # a duplicate counts once
    index_records(backend_query.store, records)
    counts = backtrack.dead_counts(backend_query, topic, BASE_MS, BASE_MS + 3_600_000 - 1, 600_000)
    assert counts.buckets == [BASE_MS + i * 600_000 for i in range(6)]
    assert counts.groups == {"audit": [0, 1, 0, 0, 0, 1], "billing": [2, 0, 1, 0, 0, 0]}
    assert counts.totals() == {"audit": 2, "billing": 3}
    narrow = backtrack.dead_counts(backend_query, topic, BASE_MS + 60_000, BASE_MS + 10 * 60_000, 60_000)
    assert narrow.groups == {"audit": [0] * 9 + [1], "billing": [0] * 8 + [1, 0]}
    with pytest.raises(BadRangeError):
        backtrack.dead_counts(backend_query, topic, BASE_MS, BASE_MS + 10**9, 1)
    with pytest.raises(BadRangeError):
        backtrack.dead_counts(backend_query, topic, BASE_MS, BASE_MS - 1)


def test_offsets_by_queue_is_what_a_replayer_reads(query: TraceQuery) -> None:
    topic = new_topic("offsets")
    outcomes = ["failed", "ok", "never", "dead", "ok", "pending", "timeout"]
    index_records(query.store, build(topic, outcomes)[0])
    items = list(backtrack.iter_replay(query, topic, GROUP, 0, BASE_MS + 10**6))
    # Message i is on queue i % 3 at offset i // 3: failed 0, never 2, dead 3, pending 5, timeout 6.
    assert backtrack.offsets_by_queue(items) == {0: [0, 1, 2], 2: [0, 1]}
    # The JSON form (replay-list output, the API's items) gives the same positions.
    assert backtrack.offsets_by_queue([i.to_json() for i in items]) == {0: [0, 1, 2], 2: [0, 1]}


def test_a_replayed_message_is_replayed_until_the_group_consumes_it(backend_query: TraceQuery) -> None:
    from backtrack_helpers import CONSUMER, attempt, ev, pub, replay_reference

    from tracehook.wire import EventType, Status

    topic = new_topic("replayed")
    ms = [message(0, i, BASE_MS + i * 1000) for i in range(4)]
    ids = [f"{topic}-{i}" for i in range(4)]
    records = [pub(topic, msg_id, m) for msg_id, m in zip(ids, ms)]
    records += attempt(topic, GROUP, ids[0], ms[0], status=Status.FAILED)
    records += attempt(topic, GROUP, ids[1], ms[1], status=Status.FAILED)
    records += attempt(topic, OTHER_GROUP, ids[3], ms[3])

    def replayed(i: int, at: int) -> Record:
        return CONSUMER, ev(EventType.REPLAY, at, GROUP, topic, ids[i], retry=1, request_id="run-1",
                            props={"replay.target": "topic:replays"}, **ms[i])

    records += [replayed(0, BASE_MS + 5000), replayed(1, BASE_MS + 5000), replayed(2, BASE_MS + 5000)]
    # Message 1 was replayed and then failed again: missed again, its own status; message 2 never received.
    records += attempt(topic, GROUP, ids[1], ms[1], retry=50, status=Status.TIMEOUT)
    index_records(backend_query.store, records)
    items = list(backtrack.iter_replay(backend_query, topic, GROUP, 0, BASE_MS + 10**6))
    got = {i.msg_id: (i.status, i.replayed_ms) for i in items}
    assert got == {ids[0]: ("REPLAYED", BASE_MS + 5000), ids[1]: ("TIMEOUT", BASE_MS + 5000),
                   ids[2]: ("REPLAYED", BASE_MS + 5000), ids[3]: ("NOT_RECEIVED", 0)}
    assert [i.to_json() for i in items] == replay_reference(records, topic, GROUP, 0, BASE_MS + 10**6)
    # The other group's list knows nothing of GROUP's replays; the replay is one message, not a second one.
    assert {i.msg_id for i in backtrack.iter_replay(backend_query, topic, OTHER_GROUP, 0, BASE_MS + 10**6)} \
        == set(ids[:3])
    trace = backend_query.get_trace(ids[0])
    assert trace is not None and [r["props"] for r in trace.replays] == [{"replay.target": "topic:replays"}]
    assert trace.outcomes[GROUP].replay_target == "topic:replays" and trace.replayed == {GROUP: BASE_MS + 5000}
    records += attempt(topic, GROUP, ids[0], ms[0], retry=60, status=Status.OK)
    index_records(backend_query.store, records)
    assert ids[0] not in {i.msg_id for i in backtrack.iter_replay(backend_query, topic, GROUP, 0, BASE_MS + 10**6)}
