"""A store upgraded in place keeps its layout 2 message cells: the new code reads them, and indexing the
same events again overwrites them (the qualifier is the layout 2 value's hash) instead of listing an
event twice in a message's document or counting it twice in the rollups."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from index_helpers import ev
from test_rollup import T0, events, observed, rollup_rows

from collector.index import readback
from collector.index.indexer import finish_batch, index_records
from collector.index.rollup import read_parts
from collector.store import Store, codec, keys, open_store, schema
from collector.store.reader import TraceQuery
from tracehook.wire import EventType

# An event as the layout 2 indexer (main before layout 3) stored it: value and qualifier, byte for byte.
OLD_EVENT = ev(EventType.SUB_AFTER, 1700000000123, "billing", "orders", "0123456789abcdef0123456789abcdef",
               keys="k1 k2", broker="b1:9092", queue=3, offset=42, born_ms=1700000000100, store_ms=1700000000110,
               cost_us=5000, retry=1, request_id="00ff00ff00ff00ff", span_id="aabbccddeeff0011", props={"p": "1"})
OLD_VALUE = bytes.fromhex(
    "94a473686f70a57765622d31a8636c69656e742d39dc001903cf0000018bcfe5687ba762696c6c696e67a66f7264657273c410012345"
    "6789abcdef0123456789abcdefa0a56b31206b32a0a762313a39303932032ae9f3cd138800a0010081a170a131c40800ff00ff00ff00"
    "ffa000c0a0c408aabbccddeeff0011")
OLD_QUALIFIER = bytes.fromhex("a110f5e0aa0ff678")


def test_the_layout_2_value_and_qualifier_are_the_old_indexers() -> None:
    qualifier, value = codec.encode_event("shop", "web-1", "client-9", OLD_EVENT)
    assert codec.encode_event_value_v2("shop", "web-1", "client-9", OLD_EVENT) == OLD_VALUE
    assert qualifier == OLD_QUALIFIER
    assert len(OLD_VALUE) - len(value) == 19  # the msg_id (16 bytes + its header) and the inner array's header
    assert codec.decode_event_value(OLD_EVENT.msg_id, OLD_VALUE) == codec.StoredEvent("shop", "web-1", "client-9",
                                                                                     OLD_EVENT)


def _to_layout_2(store: Store, table: str) -> int:
    """Rewrite every message cell of ``table`` as the layout 2 indexer stored it (same column); how many."""
    rows = []
    for row, columns in store.scan(table, b"", b"\xff"):
        msg_id = str(keys.unpack(row)[-1])
        old = {}
        for col, value in columns.items():
            s = codec.decode_event_value(msg_id, value)
            old[col] = codec.encode_event_value_v2(s.app, s.host, s.client_id, s.event)
            assert col[2:] == codec.event_id(old[col])
        rows.append((row, old))
    store.put_rows(table, rows)
    return sum(len(c) for _, c in rows)


def _traces(store: Store, msg_ids: set[str]) -> dict[str, Any]:
    query = TraceQuery(store)
    return {m: query.get_trace(m) for m in sorted(msg_ids)}


def _index(store: Store, records: list[Any], *, upgrade: bool = False) -> None:
    """Index ``records`` and finish the batch; ``upgrade``: turn the cells to layout 2 before finishing
    (the dead letters are still pending then, and the rollups not yet refreshed)."""
    index_records(store, records)
    if upgrade:
        _to_layout_2(store, schema.MESSAGES)
        assert _to_layout_2(store, schema.PENDING) == 1
    finish_batch(store, now_ms=T0)


def _state(store: Store, msg_ids: set[str]) -> tuple[Any, ...]:
    return _traces(store, msg_ids), rollup_rows(store), observed(store, "t")


def test_layout_2_cells_are_read_and_reindexing_overwrites_them(tmp_path: Path, monkeypatch: Any) -> None:
    first, second = events("t")
    # A dead letter in the second batch: it waits in the pending table until finish_batch places it.
    dead_of = first[0][1]
    second = [*second, (first[0][0], dead_of._replace(type=EventType.DEAD, time_ms=dead_of.time_ms + 50, group="g3"))]
    msg_ids = {e.msg_id for _, e in first + second}
    control, local = (open_store(f"local:{tmp_path}/{name}.sqlite3") for name in ("control", "upgraded"))
    try:
        for store in (control, local):
            _index(store, first)
        _index(control, second)
        _index(local, second, upgrade=True)  # the rollups and the dead letter's placement read layout 2 cells
        messages = list(control.scan(schema.MESSAGES, b"", b"\xff"))
        assert [(r, list(c)) for r, c in local.scan(schema.MESSAGES, b"", b"\xff")] == [(r, list(c)) for r, c in messages]
        assert all(codec.value_layout(v) == codec.LAYOUT_2 for _, c in local.scan(schema.MESSAGES, b"", b"\xff")
                   for v in c.values())
        assert _state(local, msg_ids) == _state(control, msg_ids)
        parts = read_parts(local, msg_ids)  # the C read-back, then msgspec's
        assert parts == read_parts(control, msg_ids)
        with monkeypatch.context() as m:
            m.setattr(readback, "_readback", None)
            assert read_parts(local, msg_ids) == parts

        # Every event again, by the new indexer: the same cells, now layout 3; nothing twice.
        _index(local, first + second)
        assert list(local.scan(schema.MESSAGES, b"", b"\xff")) == messages
        assert _state(local, msg_ids) == _state(control, msg_ids)
    finally:
        control.close()
        local.close()
