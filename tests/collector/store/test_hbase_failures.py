"""HBase going away mid-write: a named error, nothing hangs, and a re-run completes identically.

The connection is cut with a TCP relay between happybase and the real Thrift server,
so the shared HBase other tests use keeps running.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fixtures.relay import Relay
from index_helpers import consumed, message, unique

from collector.index.indexer import index_records
from collector.store import open_store
from collector.store.errors import StoreUnavailableError

pytestmark = [pytest.mark.hbase, pytest.mark.slow]


@pytest.fixture
def relay(hbase_port: int) -> Iterator[Relay]:
    r = Relay(hbase_port)
    yield r
    r.close()


def test_cut_mid_run_raises_then_rerun_matches_a_clean_index(relay, make_hbase_url, hbase_port, tmp_path, dump_store):
    topic = unique("t")
    records = []
    for i in range(3000):
        records += message(topic, f"m{i}", 1000 + i, keys=f"k{i % 10}", queue=i % 4, offset=i)
        records += consumed(topic, f"m{i}", 1000 + i, "g", queue=i % 4, offset=i)
    url = make_hbase_url().replace(f":{hbase_port}?", f":{relay.port}?")
    store = open_store(url)

    def cut_halfway():
        for n, record in enumerate(records):
            if n == len(records) // 2:
                relay.cut()
            yield record

    with pytest.raises(StoreUnavailableError):
        index_records(store, cut_halfway(), batch_size=500)
    relay.restore()
    assert index_records(store, records, batch_size=500) == len(records)

    reference = open_store(f"local:{tmp_path / 'ref.sqlite3'}")
    index_records(reference, records)
    assert dump_store(store) == dump_store(reference)
    reference.close()
    store.close()


@pytest.mark.hbase
@pytest.mark.slow
def test_reopening_with_another_ttl_warns(make_hbase_url, caplog) -> None:
    url = make_hbase_url(ttl_days="1")
    open_store(url).close()
    with caplog.at_level("WARNING", logger="collector.store.hbase"):
        open_store(url).close()
        assert not caplog.records  # same TTL: quiet
        open_store(url.replace("ttl_days=1", "ttl_days=2")).close()
    assert "another TTL than the store URL asks" in caplog.text and "86400 s (asked 172800 s)" in caplog.text
    assert "_bodies" not in caplog.text  # its TTL is body_ttl_days', unchanged
    assert "_messages" in caplog.text
