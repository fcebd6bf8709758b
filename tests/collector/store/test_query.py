"""TraceQuery on both stores: traces, pages by key / time / dead letters, records, offsets, replay list."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fixtures.stores import BACKENDS
from index_helpers import CONSUMER, PRODUCER, all_pages, consumed, ev, message, unique

from collector.index.indexer import index_records
from collector.store import Store, open_store
from collector.store.errors import BadCursorError, BadRangeError
from collector.store.reader import TraceQuery
from tracehook.wire import EventType, Status, TxState

pytestmark = pytest.mark.fallback

END = 2**62


@pytest.fixture(scope="module", params=BACKENDS)
def module_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """One store per backend for the whole module (HBase tables take seconds to create); tests use unique topics."""
    if request.param == "local":
        url = f"local:{tmp_path_factory.mktemp('q') / 'index.sqlite3'}"
    else:
        url = request.getfixturevalue("ready_hbase_url")()
    store = open_store(url)
    yield store
    store.close()


@pytest.fixture
def q(module_store: Store) -> TraceQuery:
    return TraceQuery(module_store)


def index(q: TraceQuery, records) -> None:
    index_records(q.store, records)


def test_trace_pairs_attempts_per_group(q: TraceQuery) -> None:
    topic, mid = unique("t"), unique("m")
    index(q, message(topic, mid, 1000, keys="k1 k2", queue=2, offset=7)
          + consumed(topic, mid, 1000, "billing", status=Status.RETRY_LATER, queue=2, offset=7)
          + consumed(topic, mid, 1000, "billing", retry=1, queue=2, offset=7)
          + consumed(topic, mid, 1000, "shipping", status=None, queue=2, offset=7)
          + [(PRODUCER, ev(EventType.END_TX, 1003, "pg", topic, mid, tx_id="tx1", tx_state=TxState.COMMIT))])
    trace = q.get_trace(mid)
    assert (trace.topic, trace.keys, trace.tags, trace.queue, trace.offset) == (topic, "k1 k2", "tag-a", 2, 7)
    assert (trace.born_ms, trace.store_ms, trace.broker, trace.props) == (999, 1000, "b1", {"p": "1"})
    assert trace.send["type_name"] == "PUB" and trace.send["host"] == "web-1" and trace.send["app"] == "shop"
    billing = trace.consumes["billing"]
    assert [(a["retry"], a["status_name"]) for a in billing] == [(0, "RETRY_LATER"), (1, "OK")]
    assert billing[0]["before"]["request_id"] == billing[0]["after"]["request_id"] == f"{mid}/billing/0"
    assert billing[1]["cost_us"] == 5000 and billing[1]["client_id"] == CONSUMER.client_id
    shipping = trace.consumes["shipping"]
    assert len(shipping) == 1 and shipping[0]["after"] is None and shipping[0]["status"] is None
    assert [t["tx_state"] for t in trace.tx] == [TxState.COMMIT] and trace.dead == []
    times = [e["time_ms"] for e in trace.events]
    assert times == sorted(times) and len(trace.events) == 1 + 4 + 1 + 1
    assert trace.to_json()["consumes"]["billing"][1]["status"] == Status.OK


def test_unknown_message_has_no_trace(q: TraceQuery) -> None:
    assert q.get_trace(unique("nothing")) is None
    assert q.consume_records(unique("nothing")) == []


def test_consume_records_are_qmq_actions_and_types(q: TraceQuery) -> None:
    topic, mid = unique("t"), unique("m")
    index(q, message(topic, mid, 1000) + consumed(topic, mid, 1000, "g", status=Status.FAILED)
          + consumed(topic, mid, 1000, "g", retry=1, status=Status.FAILED)
          + [(CONSUMER, ev(EventType.DEAD, 2000, "g", topic, mid, store_ms=1000, retry=2))])
    records = q.consume_records(mid)
    assert [(r["action"], r["type"]) for r in records] == [(0, 0), (1, 0), (0, 1), (1, 1), (1, 2)]
    assert {r["consumer_id"] for r in records} == {CONSUMER.client_id}


def test_by_key_is_newest_first_and_pages_without_gaps(q: TraceQuery) -> None:
    topic = unique("t")
    records = []
    for i in range(23):
        records += message(topic, f"m{i:02d}", 10_000 + i * 10, keys="shared" if i % 2 == 0 else "other")
    index(q, records)
    expected = [f"m{i:02d}" for i in range(22, -1, -2)]
    ids, pages = all_pages(lambda **kw: q.by_key(topic, "shared", 0, END, **kw), limit=5)
    assert ids == expected and pages == 3
    # Both ends of the window are inclusive.
    page = q.by_key(topic, "shared", 10_040, 10_080, 100)
    assert [i.msg_id for i in page.items] == ["m08", "m06", "m04"]
    assert q.by_key(topic, "missing", 0, END, 10).items == []



def test_by_key_has_no_result_cap(q: TraceQuery) -> None:
    # RocketMQ's queryMessage stops at 64 results (maxNum); a key here can have any number.
    topic, n = unique("t"), 150
    records = []
    for i in range(n):
        records += message(topic, f"m{i:03d}", 20_000 + i, keys="hot")
    index(q, records)
    expected = [f"m{i:03d}" for i in reversed(range(n))]
    ids, pages = all_pages(lambda **kw: q.by_key(topic, "hot", 0, END, **kw), limit=20)
    assert ids == expected and pages == 8  # no overlap, no gap, to the very end
    assert [i.msg_id for i in q.by_key(topic, "hot", 0, END, 500).items] == expected

def test_by_time_merges_salt_buckets_in_time_order(q: TraceQuery) -> None:
    topic = unique("t")
    records = []
    for i in range(40):  # ids hash to all buckets
        records += message(topic, f"id-{i}", 50_000 + (i * 7919) % 40 * 100)
    records += message(unique("other"), "id-x", 50_500)
    index(q, records)
    times = sorted(50_000 + (i * 7919) % 40 * 100 for i in range(40))
    page = q.by_time(topic, 0, END, 1000, newest_first=False)
    assert [i.time_ms for i in page.items] == times and page.next_cursor is None
    ids, pages = all_pages(lambda **kw: q.by_time(topic, 0, END, newest_first=False, **kw), limit=6)
    assert ids == [i.msg_id for i in page.items] and pages == 7
    newest, _ = all_pages(lambda **kw: q.by_time(topic, 0, END, **kw), limit=6)  # the default order
    assert newest == ids[::-1]
    window = q.by_time(topic, 50_100, 50_300, 100)
    assert [i.time_ms for i in window.items] == [50_300, 50_200, 50_100]


def test_dead_letters_all_groups_or_one(q: TraceQuery) -> None:
    topic = unique("t")
    records = []
    for i, group in enumerate(["a", "b", "a"]):
        mid = f"d{i}"
        records += message(topic, mid, 1000 * (i + 1))
        records.append((CONSUMER, ev(EventType.DEAD, 9000, group, topic, mid, store_ms=1000 * (i + 1),
                                     error=f"gave up {i}")))
    index(q, records)
    page = q.dead_letters(topic, None, 0, END, 10)
    assert [(i.msg_id, i.group, i.error) for i in page.items] == [
        ("d2", "a", "gave up 2"), ("d1", "b", "gave up 1"), ("d0", "a", "gave up 0")]
    assert [i.msg_id for i in q.dead_letters(topic, "a", 0, END, 10).items] == ["d2", "d0"]
    ids, pages = all_pages(lambda **kw: q.dead_letters(topic, None, 0, END, **kw), limit=2)
    assert ids == ["d2", "d1", "d0"] and pages == 2


def test_offsets_at_is_a_lower_bound_per_queue(q: TraceQuery) -> None:
    topic = unique("t")
    records = []
    for queue in (0, 1):
        for offset in range(5):  # queue 0 stored at 1000..1400, queue 1 at 1050..1450
            records += message(topic, f"q{queue}-{offset}", 1000 + queue * 50 + offset * 100, queue=queue,
                               offset=100 * queue + offset)
    index(q, records)
    assert q.queues(topic) == [0, 1]
    assert q.offsets_at(topic, 1200) == {0: 2, 1: 102}
    assert q.offsets_at(topic, 1201) == {0: 3, 1: 102}
    assert q.offsets_at(topic, 0) == {0: 0, 1: 100}  # before everything: the first offset
    assert q.offsets_at(topic, 99_999) == {0: 5, 1: 105}  # after everything: the end offset
    assert q.offsets_at(topic, 1200, queue=1) == {1: 102}
    assert q.offsets_at(topic, 1200, queue=7) == {}



def test_by_sequence_tells_partitions_apart(q: TraceQuery) -> None:
    topic = unique("t")
    index(q, message(topic, "p0", 1000, queue=0, offset=5) + message(topic, "p1", 2000, queue=1, offset=5)
          + message(topic, "p1-6", 3000, queue=1, offset=6)
          + consumed(topic, "p1", 2000, "g", queue=1, offset=5))  # no broker on the consume: no extra row
    assert [s.msg_id for s in q.by_sequence(topic, "b1", 5, 0)] == ["p0"]
    assert [s.msg_id for s in q.by_sequence(topic, "b1", 5, 1)] == ["p1"]
    assert sorted(s.msg_id for s in q.by_sequence(topic, "b1", 5)) == ["p0", "p1"]  # ambiguous without a queue
    assert [(s.msg_id, s.queue, s.offset) for s in q.by_sequence(topic, "b1", 6)] == [("p1-6", 1, 6)]
    assert q.by_sequence(topic, "b1", 5, 2) == [] and q.by_sequence(topic, "b2", 5) == []

def test_unconsumed_lists_what_a_group_never_finished(q: TraceQuery) -> None:
    topic = unique("t")
    records = []
    for i in range(12):
        mid, t = f"u{i:02d}", 1000 + i
        records += message(topic, mid, t)
        if i % 3 == 0:
            records += consumed(topic, mid, t, "g")  # done
        elif i % 3 == 1:
            records += consumed(topic, mid, t, "g", status=Status.EXCEPTION)  # failed only
        if i == 4:
            records += consumed(topic, mid, t, "g", retry=1)  # failed, then done on retry
        records += consumed(topic, mid, t, "other")  # another group's success does not count
    index(q, records)
    expected = [f"u{i:02d}" for i in range(12) if i % 3 != 0 and i != 4]
    ids, _ = all_pages(lambda **kw: q.unconsumed(topic, "g", 0, END, **kw), limit=3)
    assert ids == expected
    assert [i.msg_id for i in q.unconsumed(topic, "other", 0, END, 100).items] == []


@pytest.mark.parametrize("cursor", ["garbage", "k.!!!", "t.AAAA", "k." + "A" * 12])
def test_bad_cursors_are_named(q: TraceQuery, cursor: str) -> None:
    with pytest.raises(BadCursorError):
        q.by_key("t", "k", 0, END, 10, cursor=cursor)


def test_cursor_of_another_query_is_refused(q: TraceQuery) -> None:
    topic = unique("t")
    index(q, message(topic, "a", 1, keys="k") + message(topic, "b", 2, keys="k"))
    cursor = q.by_time(topic, 0, END, 1).next_cursor
    assert cursor is not None
    with pytest.raises(BadCursorError):
        q.by_key(topic, "k", 0, END, 1, cursor=cursor)


@pytest.mark.parametrize("begin, end, limit", [(10, 5, 10), (-1, 5, 10), (0, 5, 0), (0, 5, 1001), (0, 2**63, 10)])
def test_bad_ranges_are_named(q: TraceQuery, begin: int, end: int, limit: int) -> None:
    with pytest.raises(BadRangeError):
        q.by_time("t", begin, end, limit)
