"""Property tests on the embedded store: paged queries equal a brute-force filter of what was indexed."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from index_helpers import message, page_ids

from collector.store import open_store
from collector.store.indexer import index_records
from collector.store.reader import TraceQuery

messages = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.sampled_from(["k1", "k2", "k1 k2", ""]), st.integers(1, 50)),
    max_size=40,
)  # store times from 1: 0 means "unknown" and files the message under its event time


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages, st.integers(1, 7), st.integers(0, 50), st.integers(0, 50))
def test_pages_equal_brute_force(msgs, limit: int, begin: int, end: int) -> None:
    begin, end = min(begin, end), max(begin, end)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"local:{tmp}/i.sqlite3")
        records = []
        for n, (topic, keys, t) in enumerate(msgs):
            records += message(topic, f"m{n:03d}", t, keys=keys)
        index_records(store, records)
        q = TraceQuery(store)
        listed = [(f"m{n:03d}", topic, keys.split(), t) for n, (topic, keys, t) in enumerate(msgs)]
        in_a = sorted((t, m) for m, topic, _, t in listed if topic == "a" and begin <= t <= end)
        assert page_ids(lambda **kw: q.by_time("a", begin, end, newest_first=False, **kw), limit) == [m for _, m in in_a]
        assert page_ids(lambda **kw: q.by_time("a", begin, end, **kw), limit) == [m for _, m in reversed(in_a)]
        with_k1 = sorted(((t, m) for m, topic, keys, t in listed if topic == "a" and "k1" in keys
                          and begin <= t <= end), key=lambda x: (-x[0], x[1]))
        assert page_ids(lambda **kw: q.by_key("a", "k1", begin, end, **kw), limit) == [m for _, m in with_k1]
        store.close()
