"""The indexer: which rows an event makes, and that indexing is idempotent."""

from __future__ import annotations

import pytest
from index_helpers import CONSUMER, consumed, ev, message, unique

from collector.index.indexer import index_records
from collector.index.rows import rows_for
from collector.store import keys, schema
from collector.store.reader import TraceQuery
from tracehook.context import trace_id_for
from tracehook.wire import EventType, Status

pytestmark = pytest.mark.fallback


def tables_of(rows) -> list[str]:
    return sorted(table for table, _, _ in rows)


def test_pub_files_message_under_id_keys_time_and_queue() -> None:
    (header, pub), = message("t", "m1", 1000, keys="k1 k2 k1", queue=3, offset=42)
    rows = rows_for(header, pub)
    assert tables_of(rows) == ["keyidx", "keyidx", "messages", "queueidx", "rollups", "seqidx", "timeidx",
                                "traceidx"]
    unpacked = {(table, keys.unpack(row)) for table, row, _ in rows}
    assert ("keyidx", ("t", "k1", keys.reverse_int(1000), "m1")) in unpacked
    assert ("keyidx", ("t", "k2", keys.reverse_int(1000), "m1")) in unpacked
    assert ("queueidx", ("t", 3, 1000, 42)) in unpacked
    assert ("seqidx", ("t", "b1", 42, 3, "m1")) in unpacked
    assert ("messages", (schema.msg_hash("m1"), "m1")) in unpacked
    # The message's own trace (no trace id on the wire); a W3C trace id is keyed as the 16 bytes it spells.
    assert ("traceidx", (bytes.fromhex(trace_id_for("m1")), "m1")) in unpacked


def test_consume_and_dead_events_rows() -> None:
    before, after = consumed("t", "m1", 1000, "g1")
    assert tables_of(rows_for(*before)) == ["messages", "queueidx", "records", "rollups", "timeidx",
                                            "traceidx"]
    assert tables_of(rows_for(*after)) == ["messages", "records", "rollups"]
    dead = ev(EventType.DEAD, 5000, "g1", "t", "m1", store_ms=1000, keys="k")
    assert tables_of(rows_for(CONSUMER, dead)) == ["dead", "dead", "keyidx", "messages", "pending", "rollups",
                                                   "timeidx", "traceidx"]


def test_row_keys_do_not_depend_on_batch_seq_but_on_the_sender() -> None:
    (header, pub), = message("t", "m1", 1000)
    retried = type(header)(header.client_id, header.seq + 1, header.app, header.host)
    assert rows_for(header, pub) == rows_for(retried, pub)
    other_host = type(header)(header.client_id, header.seq, header.app, "web-2")
    assert rows_for(header, pub)[0][2] != rows_for(other_host, pub)[0][2]


def test_reindexing_and_duplicates_change_nothing(store, dump_store, monkeypatch) -> None:
    topic = unique("orders")
    records = []
    for i in range(30):
        records += message(topic, f"m{i}", 1000 + i, keys=f"k{i % 3}", queue=i % 2, offset=i)
        records += consumed(topic, f"m{i}", 1000 + i, "g1", status=Status.OK if i % 4 else Status.EXCEPTION)
    records.append((CONSUMER, ev(EventType.DEAD, 9000, "g1", topic, "m4", store_ms=1004, error="gave up")))
    # Puts of 7 rows on either store (the embedded one gathers bigger puts otherwise).
    monkeypatch.setattr(store, "preferred_put_rows", 1)
    assert index_records(store, records, batch_size=7) == len(records)
    monkeypatch.undo()
    first = dump_store(store)
    assert sum(len(rows) for rows in first.values()) > 0
    # Again, in another batching, with every event duplicated (an at-least-once redelivery).
    assert index_records(store, records + records[::-1], batch_size=1000) == 2 * len(records)
    assert dump_store(store) == first
    trace = TraceQuery(store).get_trace("m4")
    assert len(trace.events) == 4  # PUB, SUB_BEFORE, SUB_AFTER, DEAD: each once


def test_the_embedded_store_takes_each_table_in_one_put(tmp_path, monkeypatch) -> None:
    """Fewer, bigger write transactions: a table's rows go in one put up to the store's
    preferred size, and in ``batch_size`` chunks when the store prefers less (HBase)."""
    from collector.store import open_store

    store = open_store(f"local:{tmp_path / 'i.sqlite3'}")
    put_sizes: dict[str, list[int]] = {}
    write = store.put_rows

    def counting(table, rows, **kwargs) -> None:
        put_sizes.setdefault(table, []).append(len(rows))
        write(table, rows, **kwargs)

    monkeypatch.setattr(store, "put_rows", counting)
    records = [r for i in range(2500) for r in message("t", f"m{i}", 1000 + i, keys=f"k{i}")]
    assert index_records(store, records, batch_size=1000, writers=1) == 2500
    assert put_sizes["messages"] == put_sizes["keyidx"] == [2500]
    assert all(len(sizes) == 1 for sizes in put_sizes.values())
    put_sizes.clear()
    monkeypatch.setattr(store, "preferred_put_rows", 1)
    assert index_records(store, records, batch_size=1000, writers=1) == 2500
    assert put_sizes["messages"] == put_sizes["keyidx"] == [1000, 1000, 500]
    store.close()


def test_batch_size_must_be_positive(tmp_path) -> None:
    from collector.store import open_store

    store = open_store(f"local:{tmp_path / 'i.sqlite3'}")
    with pytest.raises(ValueError, match="batch_size"):
        index_records(store, message("t", "m", 1), batch_size=0)
    store.close()


def test_rows_over_the_hbase_key_limit_are_left_out() -> None:
    long_key = "k" * 16_384  # the wire format's longest string
    (header, pub), = message("t" * 16_384, "m1", 1000, keys=f"{long_key} short")
    rows = rows_for(header, pub)
    assert all(len(row) <= schema.MAX_ROW_KEY_BYTES for _, row, _ in rows)
    assert "messages" in tables_of(rows) and "timeidx" in tables_of(rows)
    assert tables_of(rows).count("keyidx") == 1  # only the short key fits
