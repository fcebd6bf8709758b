"""Property tests on both stores: paged queries equal a brute-force filter of what was indexed.

Topics are prefixes of each other, share bytes and carry separators, so a scan that runs past
its topic's rows or a cursor that lands in a neighbour's shows up as an extra or missing id.
"""

from __future__ import annotations

import uuid
from functools import partial

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from index_helpers import backend_of, message, page_ids

from collector.index.indexer import index_records
from collector.store import Store
from collector.store.reader import TraceQuery

pytestmark = pytest.mark.fallback

TOPICS = ["a", "b", "ab", "a b", "a\x00", "a/b", "\u00e9"]
KEYS = ["k1", "k2"]
EXAMPLES = {"local": 300, "hbase": 40}
"""Examples per backend: SQLite answers in microseconds, each HBase example costs Thrift round trips."""

messages = st.lists(
    st.tuples(st.sampled_from(TOPICS), st.sampled_from(["k1", "k2", "k1 k2", ""]), st.integers(1, 50)),
    max_size=40,
)  # store times from 1: 0 means "unknown" and files the message under its event time


def test_pages_equal_brute_force(store: Store, store_url: str) -> None:
    @settings(max_examples=EXAMPLES[backend_of(store_url)], deadline=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(messages, st.integers(1, 7), st.integers(0, 50), st.integers(0, 50))
    def check(msgs: list[tuple[str, str, int]], limit: int, begin: int, end: int) -> None:
        begin, end = min(begin, end), max(begin, end)
        # One store for every example: a fresh prefix keeps each example's rows apart.
        nonce = uuid.uuid4().hex[:6]
        listed = [(f"{nonce}m{n:03d}", nonce + topic, keys.split(), t) for n, (topic, keys, t) in enumerate(msgs)]
        records = []
        for msg_id, topic, keys, t in listed:
            records += message(topic, msg_id, t, keys=" ".join(keys))
        index_records(store, records)
        q = TraceQuery(store)
        for topic in sorted({nonce + t for t in TOPICS}):
            in_topic = sorted((t, m) for m, tp, _, t in listed if tp == topic and begin <= t <= end)
            oldest = page_ids(partial(q.by_time, topic, begin, end, newest_first=False), limit)
            assert oldest == [m for _, m in in_topic], topic
            assert page_ids(partial(q.by_time, topic, begin, end), limit) == [m for _, m in reversed(in_topic)]
            for key in KEYS:
                with_key = sorted(((t, m) for m, tp, keys, t in listed if tp == topic and key in keys
                                   and begin <= t <= end), key=lambda x: (-x[0], x[1]))
                assert page_ids(partial(q.by_key, topic, key, begin, end), limit) == [m for _, m in with_key]

    check()
