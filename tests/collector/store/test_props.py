"""The indexed-property lists, their rows on both row builders, the value cap and the backfill's resume."""

from __future__ import annotations

from collections import Counter

import pytest

from collector.index import rowbuild
from collector.index.backfill import backfill
from collector.index.indexer import batched_rows, index_payloads, index_records
from collector.store import open_store, props, schema
from collector.store.errors import BadPropertyError
from collector.store.reader import TraceQuery
from tests.fixtures.props_model import Msg, events
from tracehook import wire


def test_lists_set_unset_and_round_trip():
    p = props.NOTHING.with_names(None, ["orderId", "tenant", "orderId"]).with_names("pay", ["a:b=c"])
    assert p.names_for("orders") == {"orderId", "tenant"} and p.names_for("pay") == {"a:b=c"}
    assert props.IndexedProps.decode(p.encode()) == p
    assert p.without(None, ["tenant"]).names_for("orders") == {"orderId"}
    assert p.without("pay").names_for("pay") == {"orderId", "tenant"}  # back to the default
    assert p.without("pay", ["a:b=c"]).names_for("pay") == {"orderId", "tenant"}
    assert p.without(None).without("pay").empty


@pytest.mark.parametrize(("names", "words"), [([""], "empty"), (["n" * 257], "256 bytes"), ([], "at least one"),
                                              (["\ud800"], "Unicode"), ([f"n{i}" for i in range(65)], "at most 64")])
def test_names_that_cannot_be_indexed_are_refused(names, words):
    with pytest.raises(BadPropertyError, match=words):
        props.NOTHING.with_names(None, names)


def test_a_long_value_is_filed_under_its_first_256_bytes_cut_at_a_character():
    value = "a" + "é" * 200  # 401 bytes: byte 256 is inside an "é"
    prefix = schema.prop_value_prefix(value)
    assert len(prefix.encode()) == 255 and value.startswith(prefix)
    assert schema.prop_value_prefix("é" * 128) == "é" * 128  # exactly 256 bytes: whole


def test_an_indexer_rereads_the_lists_after_the_refresh_time(tmp_path):
    url = f"local:{tmp_path / 'i.sqlite3'}"
    indexer, operator = open_store(url), open_store(url)
    props.save(operator, props.NOTHING.with_names(None, ["a"]))
    assert props.current(indexer, now=100.0).names_for("t") == {"a"}
    props.save(operator, props.NOTHING.with_names(None, ["b"]))  # another process's change
    assert props.current(indexer, now=100.0 + props.REFRESH_S - 1).names_for("t") == {"a"}
    assert props.current(indexer, now=100.0 + props.REFRESH_S).names_for("t") == {"b"}
    indexer.close()
    operator.close()


def _messages(n: int) -> list[Msg]:
    return [Msg(f"m{i}", "t", 10 + i % 7, i % 3 != 0, {"a": str(i % 4), "b": "x" * 300},
                {"a": "c"} if i % 2 else None) for i in range(n)]


def test_both_row_builders_file_the_same_property_rows(monkeypatch):
    lists = props.NOTHING.with_names(None, ["a", "b"])
    records = events(_messages(40))

    def prop_rows() -> set[bytes]:
        return {row for table, rows in batched_rows(records, 7, props=lists) if table == schema.PROPIDX
                for row, _ in rows}

    fast = prop_rows()
    monkeypatch.setattr(rowbuild, "FAST_PATH", False)
    assert prop_rows() == fast and len(fast) > 40


def test_over_long_row_keys_are_counted_not_written(tmp_path):
    store = open_store(f"local:{tmp_path / 'i.sqlite3'}")
    props.save(store, props.NOTHING.with_names(None, ["a"]))
    topic = "t" * 32_700  # the topic alone nearly fills HBase's row-key limit
    dropped: Counter[str] = Counter()
    index_records(store, events([Msg("m1", topic, 5, True, {"a": "v" * 100}, None)]), dropped=dropped)
    assert dropped["row_key_too_long"] >= 1 and not list(store.scan(schema.PROPIDX, b"", b"\xff"))
    store.close()


def test_the_trace_log_path_indexes_properties(tmp_path):
    store = open_store(f"local:{tmp_path / 'i.sqlite3'}")
    props.save(store, props.NOTHING.with_names("t", ["a"]))
    sends = [e for _, e in events(_messages(3)) if e.type == wire.EventType.PUB]  # m1, m2
    assert index_payloads(store, [wire.encode_batch(events(_messages(1))[0][0], sends)]) == 2
    assert [i.msg_id for i in TraceQuery(store).by_prop("t", "a", "1", 0, 100, 10).items] == ["m1"]
    store.close()


def test_an_interrupted_backfill_resumes_and_a_finished_one_starts_over(tmp_path):
    store = open_store(f"local:{tmp_path / 'i.sqlite3'}")
    msgs = _messages(30)
    index_records(store, events(msgs))  # nothing indexed yet: no names set
    q = TraceQuery(store)
    assert not q.by_prop("t", "a", "1", 0, 100, 50).items
    with pytest.raises(BadPropertyError, match="not indexed on topic"):
        backfill(store, "t", ["a"], 0, 100)
    props.save(store, props.NOTHING.with_names(None, ["a"]))
    first, _ = backfill(store, "t", ["a"], 0, 100, chunk=4, max_chunks=2)
    assert not first.done and first.messages == 8
    second, resumed_at = backfill(store, "t", ["a"], 0, 100, chunk=4)
    assert second.done and resumed_at == 8 and second.messages == 30
    want = sorted((m for m in msgs if m.props.get("a") == "1"), key=lambda m: (-m.t, m.msg_id))
    assert [i.msg_id for i in q.by_prop("t", "a", "1", 0, 100, 50).items] == [m.msg_id for m in want]
    again, resumed_at = backfill(store, "t", ["a"], 0, 100, chunk=4)
    assert again.done and resumed_at == 0 and again.messages == 30
    other, resumed_at = backfill(store, "t", ["a"], 0, 100, chunk=4, max_chunks=1)
    other, resumed_at = backfill(store, "t", ["a"], 0, 50, chunk=4)  # another window: from the start
    assert resumed_at == 0
    store.close()
