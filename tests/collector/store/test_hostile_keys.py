"""Topics, keys and msg ids made of separators, NUL bytes, odd Unicode and 10 KB strings.

Every message must come back exactly by id, by key and by topic + time, on both stores,
and never for another message whose fields merely share bytes with its own (the row keys
join several strings, so ``("a", "b\\x00c")`` and ``("a\\x00b", "c")`` must stay apart).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from index_helpers import PRODUCER, backend_of, consumed, ev

from collector.index.indexer import index_records
from collector.index.rows import KEY_SEPARATOR
from collector.store import Store
from collector.store.reader import TraceQuery
from tracehook import wire
from tracehook.wire import BatchHeader, Event, EventType

pytestmark = pytest.mark.fallback

T0 = 1_790_000_000_000
LONG = 10 * 1024
GROUP = "billing"

# What keys.py escapes and terminates with (0x00, with 0xFF after an escaped NUL), what
# people use as separators, and Unicode that normalisation or a careless decoder would merge.
PIECES = ["\x00", "\x00\xff", "\x01", "\xff", "/", "|", ":", "%2F", "\\", "e\u0301", "\u00e9", "\U0001d11e",
          "\u202e", "\ufeff", "\x1c", "\u00a0", "\n"]


@dataclass(frozen=True)
class Msg:
    """One message to index: its topic, its single business key and its id."""

    topic: str
    key: str
    msg_id: str
    t: int


def records(msgs: list[Msg]) -> list[tuple[BatchHeader, Event]]:
    """A PUB, a consume and a dead letter of each message, round-tripped through the wire format."""
    events: list[tuple[BatchHeader, Event]] = []
    for m in msgs:
        events.append((PRODUCER, ev(EventType.PUB, m.t, "pg", m.topic, m.msg_id, keys=m.key, queue=0, offset=m.t % 1000,
                                    born_ms=m.t - 1, store_ms=m.t)))
        events += consumed(m.topic, m.msg_id, m.t, GROUP)
        events.append((PRODUCER, ev(EventType.DEAD, m.t + 50, GROUP, m.topic, m.msg_id, keys=m.key, born_ms=m.t - 1,
                                    store_ms=m.t, error="gave up")))
    # Only what the collector would accept gets indexed: decode what the wire encodes.
    decoded = wire.decode_batch(wire.encode_batch(PRODUCER, [e for _, e in events]))
    assert decoded.events == [e for _, e in events]
    return [(header, e) for (header, _), e in zip(events, decoded.events)]


def assert_each_found_exactly(q: TraceQuery, msgs: list[Msg]) -> None:
    """By id, by key, by topic + time and as a dead letter, every message answers for itself alone."""
    for m in msgs:
        trace = q.get_trace(m.msg_id)
        assert trace is not None, m
        doc = trace.to_json()
        assert (doc["msg_id"], doc["topic"], doc["keys"]) == (m.msg_id, m.topic, m.key)
        assert {r["consumer_group"] for r in q.consume_records(m.msg_id)} == {GROUP}

        page = q.by_key(m.topic, m.key, 0, T0 * 2, 1000)
        assert sorted(s.msg_id for s in page.items) == sorted(o.msg_id for o in msgs if (o.topic, o.key) == (m.topic, m.key))
        expected_by_time = sorted(o.msg_id for o in msgs if o.topic == m.topic and o.t == m.t)
        page = q.by_time(m.topic, m.t, m.t, 1000)
        assert sorted(s.msg_id for s in page.items) == expected_by_time
        assert all(s.topic == m.topic for s in page.items)
        dead = q.dead_letters(m.topic, GROUP, 0, T0 * 2, 1000)
        assert sorted(s.msg_id for s in dead.items) == sorted(o.msg_id for o in msgs if o.topic == m.topic)


def colliding_messages(nonce: str) -> list[Msg]:
    """Hand-picked pairs whose joined fields share bytes; ``nonce`` keeps HBase runs apart."""
    n = nonce
    long_a, long_b = "x" * LONG, "x" * (LONG - 1) + "y"
    pairs = [
        (f"{n}a", "b\x00c", f"{n}m"),            # topic "a" key "b\0c" ...
        (f"{n}a\x00b", "c", f"{n}m\x00"),         # ... against topic "a\0b" key "c"; ids prefixes of each other
        (f"{n}a", "b", f"{n}m\x00\x00"),
        (f"{n}a\x00", "b", f"{n}m\x01"),
        (f"{n}a\x00\xff", "b", f"{n}m\x00\xff"),  # the escape sequence itself, as text
        (f"{n}a/b", "c|d:e", f"{n}m/"),
        (f"{n}a", "b/c", f"{n}m/x"),
        (f"{n}e\u0301", "\u00e9", f"{n}\u00e9"),  # combining vs precomposed: different strings, different rows
        (f"{n}\u00e9", "e\u0301", f"{n}e\u0301"),
        (f"{n}\U0001d11e", "\U0001f600\x00", f"{n}\U0001d11e\x00"),
        (f"{n}tab", "k\tk\x1ck\u00a0k", f"{n}ws"),  # whitespace other than the space separator is part of the key
        (f"{n}tab", "k", f"{n}ws2"),
        (f"{n}{long_a}", long_a, f"{n}{long_a}"),
        (f"{n}{long_a}", long_b, f"{n}{long_b}"),
        (f"{n}{long_b}", long_a, f"{n}{long_a}\x00"),
    ]
    return [Msg(topic, key, msg_id, T0 + (i % 3)) for i, (topic, key, msg_id) in enumerate(pairs)]


def test_colliding_fields_stay_apart(store: Store) -> None:
    msgs = colliding_messages(uuid.uuid4().hex[:6])
    index_records(store, records(msgs))
    q = TraceQuery(store)
    assert_each_found_exactly(q, msgs)
    # A prefix of an indexed id, topic or key is not a match.
    nonce = msgs[0].msg_id[:-1]
    assert q.get_trace(f"{nonce}") is None and q.get_trace(f"{nonce}m\x00\x00\x00") is None
    assert q.by_key(msgs[0].topic, "b", 0, T0 * 2, 10).items[0].msg_id == f"{nonce}m\x00\x00"
    assert q.by_key(msgs[0].topic, "b\x00", 0, T0 * 2, 10).items == []
    assert q.by_key(msgs[0].topic[:-1], "ab", 0, T0 * 2, 10).items == []
    assert q.by_time(f"{nonce}", 0, T0 * 2, 10).items == []


# Text built mostly from the pieces above, with arbitrary Unicode (no surrogates: not UTF-8) mixed in.
hostile_text = st.lists(
    st.one_of(st.sampled_from(PIECES), st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=3)),
    min_size=1, max_size=6,
).map("".join)


@st.composite
def hostile_messages(draw: st.DrawFn) -> list[Msg]:
    """A few messages over a couple of topics, each with a distinct id; keys and times may repeat."""
    topics = draw(st.lists(hostile_text, min_size=1, max_size=3, unique=True))
    ids = draw(st.lists(hostile_text, min_size=1, max_size=6, unique=True))
    return [
        Msg(draw(st.sampled_from(topics)), draw(hostile_text.filter(lambda k: KEY_SEPARATOR not in k)), msg_id,
            T0 + draw(st.integers(0, 2)))
        for msg_id in ids
    ]


EXAMPLES = {"local": 400, "hbase": 40}
"""Examples per backend: SQLite answers in microseconds, each HBase example costs Thrift round trips."""


def test_hostile_fields_round_trip(store: Store, store_url: str) -> None:
    @settings(max_examples=EXAMPLES[backend_of(store_url)], deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(hostile_messages())
    def check(msgs: list[Msg]) -> None:
        # One store for every example: a fresh prefix keeps each example's rows apart.
        nonce = uuid.uuid4().hex[:6]
        msgs = [Msg(nonce + m.topic, m.key, nonce + m.msg_id, m.t) for m in msgs]
        index_records(store, records(msgs))
        assert_each_found_exactly(TraceQuery(store), msgs)

    check()
