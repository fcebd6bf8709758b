"""The Store contract, held by both adapters: sorted rows, ranges, limits, reverse, TTL."""

from __future__ import annotations

import sqlite3
import time

import pytest

from collector.store import keys, local, open_store, schema, sqlite_tables
from collector.store.base import StoreOptions
from collector.store.errors import BadStoreUrlError
from collector.store.local import LocalStore

pytestmark = pytest.mark.fallback

T = "rollups"  # any table with cells of its own: adapters treat them alike


def rows(n: int, topic: str = "t") -> list[tuple[bytes, dict[bytes, bytes]]]:
    return [(keys.pack((topic, i)), {b"r:a": b"%d" % i, b"r:b": b"x"}) for i in range(n)]


def test_put_get_merges_columns_and_overwrites(store) -> None:
    row = keys.pack(("t", 1))
    store.put_rows(T, [(row, {b"r:a": b"1"})])
    store.put_rows(T, [(row, {b"r:b": b"2"})])
    store.put_rows(T, [(row, {b"r:a": b"3"})])
    assert store.get_row(T, row) == {b"r:a": b"3", b"r:b": b"2"}
    assert store.get_row(T, keys.pack(("t", 2))) == {}
    assert store.get_rows(T, [keys.pack(("t", 2)), row]) == [{}, {b"r:a": b"3", b"r:b": b"2"}]


def test_binary_qualifiers_and_values_survive(store) -> None:
    row = keys.pack((b"\x00\xff", "k\x00"))
    columns = {b"c:" + bytes(range(256)): bytes(range(255, -1, -1)), b"c:\x00:": b""}
    store.put_rows("messages", [(row, columns)])
    assert store.get_row("messages", row) == columns


def test_scan_is_sorted_bounded_and_limited(store) -> None:
    data = rows(2500)  # more than one internal page
    store.put_rows(T, list(reversed(data)))
    store.put_rows(T, rows(3, topic="u"))
    start, stop = keys.prefix_range(("t",))
    assert list(store.scan(T, start, stop)) == data
    assert list(store.scan(T, start, stop, limit=1001)) == data[:1001]
    middle = list(store.scan(T, keys.pack(("t", 10)), keys.pack(("t", 20))))
    assert middle == data[10:20]


@pytest.mark.parametrize("reverse", [False, True])
def test_short_scans_return_whole_wide_rows(store, reverse: bool) -> None:
    wide = [(keys.pack(("w", i)), {b"r:%d" % c: b"v%d" % c for c in range(7)}) for i in range(6)]
    store.put_rows(T, wide)
    lo, hi = keys.prefix_range(("w",))
    expected = wide[::-1] if reverse else wide
    for limit in (1, 2, 5, 6, 7):
        assert list(store.scan(T, lo, hi, limit=limit, reverse=reverse)) == expected[:limit]


def test_reverse_scan_covers_the_same_half_open_range(store) -> None:
    data = rows(1500)
    store.put_rows(T, data)
    start, stop = keys.pack(("t", 5)), keys.pack(("t", 1205))
    backwards = list(store.scan(T, start, stop, reverse=True))
    assert backwards == list(reversed(data[5:1205]))
    assert list(store.scan(T, start, stop, reverse=True, limit=2)) == [data[1204], data[1203]]
    lo, hi = keys.prefix_range(("t",))
    assert next(iter(store.scan(T, lo, hi, reverse=True, limit=1))) == data[-1]


def test_delete_rows(store) -> None:
    data = rows(5)
    store.put_rows(T, data)
    store.delete_rows(T, [data[1][0], data[3][0]])
    lo, hi = keys.prefix_range(("t",))
    assert [r for r, _ in store.scan(T, lo, hi)] == [data[0][0], data[2][0], data[4][0]]


def test_get_cells_reads_only_the_columns_asked(store) -> None:
    row = keys.pack(("t", 1))
    store.put_rows(T, [(row, {b"r:%d" % c: b"v%d" % c for c in range(1200)})])  # more than one IN list
    wanted = [b"r:%d" % c for c in range(0, 1200, 2)] + [b"r:absent", b"r:0"]
    assert store.get_cells(T, row, wanted) == {b"r:%d" % c: b"v%d" % c for c in range(0, 1200, 2)}
    assert store.get_cells(T, keys.pack(("t", 2)), [b"r:0"]) == {}
    assert store.get_cells(T, row, []) == {}


def test_change_mark_moves_with_another_connections_commits_only(store, store_url: str) -> None:
    if not store_url.startswith("local:"):
        assert store.change_mark() is None  # HBase cannot tell: callers read as now
        return
    before = store.change_mark()
    store.put_rows(T, rows(3))
    assert store.change_mark().version == before.version  # its own writes
    other = open_store(store_url)
    other.put_rows(T, rows(1, topic="u"))
    other.close()
    assert store.change_mark().version != before.version


def test_local_ttl_hides_then_purges_expired_cells(tmp_path) -> None:
    now = [1_000_000]
    store = LocalStore(str(tmp_path / "i.sqlite3"), StoreOptions(ttl_s=60), clock=lambda: now[0])
    old, new = keys.pack(("t", 1)), keys.pack(("t", 2))
    store.put_rows(T, [(old, {b"r:a": b"old"})])
    now[0] += 30_000
    store.put_rows(T, [(new, {b"r:a": b"new"})])
    now[0] += 45_000  # `old` is 75 s old, `new` 45 s
    assert store.get_row(T, old) == {}
    assert [r for r, _ in store.scan(T, b"", b"\xff")] == [new]
    assert store.purge_expired() == 1
    now[0] -= 60_000  # even with the clock turned back, the purged cell is gone for good
    assert store.get_row(T, old) == {}
    store.close()


def test_local_bodies_keep_their_own_ttl(tmp_path) -> None:
    # The bodies table expires on body_ttl_s, every other table on ttl_s: reads and purges alike.
    now = [1_000_000]
    store = LocalStore(str(tmp_path / "i.sqlite3"), StoreOptions(ttl_s=60, body_ttl_s=20), clock=lambda: now[0])
    row = keys.pack(("m", 1))
    store.put_rows("bodies", [(row, {b"b:s": b"body"})])
    store.put_rows("messages", [(row, {b"s:a": b"event"})])
    now[0] += 30_000  # past the bodies' 20 s, within the trace's 60 s
    assert store.get_row("bodies", row) == {} and store.get_rows("bodies", [row]) == [{}]
    assert list(store.scan("bodies", b"", b"\xff")) == [] and store.get_cells("bodies", row, [b"b:s"]) == {}
    assert store.get_row("messages", row) == {b"s:a": b"event"}
    assert store.purge_expired() == 1  # the body only
    now[0] -= 30_000
    assert store.get_row("bodies", row) == {} and store.get_row("messages", row) == {b"s:a": b"event"}
    store.close()


@pytest.mark.parametrize("query, ttl, body_ttl", [("", 30 * 86400, 7 * 86400), ("?body_ttl_days=1", 30 * 86400, 86400),
                                                 ("?ttl_days=2&body_ttl_days=0.5", 2 * 86400, 43200)])
def test_body_ttl_days_is_a_store_option(tmp_path, query: str, ttl: int, body_ttl: int) -> None:
    store = open_store(f"local:{tmp_path / 'i.sqlite3'}{query}")
    try:
        assert (store.options.ttl_of("messages"), store.options.ttl_of("bodies")) == (ttl, body_ttl)
    finally:
        store.close()


def test_local_rewriting_identical_cells_restarts_their_ttl(tmp_path) -> None:
    # Re-indexing rewrites identical cells, and each rewrite is a new write (HBase's put): its TTL starts again.
    now = [1_000_000]
    store = LocalStore(str(tmp_path / "i.sqlite3"), StoreOptions(ttl_s=60), clock=lambda: now[0])
    row, other = keys.pack(("t", 1)), keys.pack(("t", 2))
    store.put_rows(T, [(row, {b"r:a": b"v", b"r:b": b""}), (other, {b"r:a": b"w"})])
    now[0] += 45_000
    store.put_rows(T, [(row, {b"r:a": b"v", b"r:b": b""})])
    now[0] += 30_000  # 75 s after the first write, 30 s after the rewrite of `row`
    assert store.get_row(T, row) == {b"r:a": b"v", b"r:b": b""}
    assert store.get_row(T, other) == {}
    store.close()


@pytest.mark.parametrize("table", ["messages", T])
def test_local_put_of_one_row_twice_keeps_the_later_columns(tmp_path, table: str) -> None:
    # The embedded store sorts the rows of a put into hash-keyed tables: a row given twice in one put
    # still ends with the later of its two values.
    store = LocalStore(str(tmp_path / "i.sqlite3"))
    row, before, after = keys.pack(("m", 2)), keys.pack(("m", 1)), keys.pack(("m", 3))
    a, b = (b"c:a", b"c:b") if table == "messages" else (b"r:a", b"r:b")
    store.put_rows(table, [(row, {a: b"first", b: b"b"}), (after, {a: b"x"}), (before, {a: b"y"}), (row, {a: b"second"})])
    assert store.get_row(table, row) == {a: b"second", b: b"b"}
    lo, hi = keys.prefix_range(("m",))
    assert [r for r, _ in store.scan(table, lo, hi)] == [before, row, after]
    store.close()


def test_local_cells_are_stored_as_blobs(tmp_path) -> None:
    # The stored cells are what a plain insert of the bytes gives: BLOBs (an empty value too, never NULL or TEXT),
    # a table of one family without it, records without their (empty) values, an index row as its key
    # alone, write times in whole seconds.
    path = str(tmp_path / "i.sqlite3")
    store = LocalStore(path, clock=lambda: 1_234_999)
    store.put_rows(T, [(b"r\x00", {b"r:a": b"", b"r:\xff": b"\x00v"}), (b"s", {b"r:": b"w"})])
    store.put_rows("messages", [(b"m", {b"s:\x00": b"e", b"c:": b""})])
    store.put_rows("records", [(b"c", {b"c:": b"", b"c:\x92\x00\x01": b""})])
    store.put_rows("keyidx", [(b"k\x00", {b"i:": b""})])
    assert store.get_rows("keyidx", [b"k\x00", b"k"]) == [{b"i:": b""}, {}]
    assert store.get_cells("keyidx", b"k\x00", [b"i:", b"i:a"]) == {b"i:": b""}
    assert list(store.scan("keyidx", b"", b"\xff")) == [(b"k\x00", {b"i:": b""})]
    store.close()
    db = sqlite3.connect(path)
    try:
        stored = db.execute(f'SELECT row, qualifier, ts_s, value, typeof(row), typeof(qualifier), typeof(value) '
                            f'FROM "{T}" ORDER BY row, qualifier').fetchall()
        messages = db.execute('SELECT row, col, ts_s, value, typeof(col), typeof(value) '
                              'FROM "messages" ORDER BY row, col').fetchall()
        records = db.execute('SELECT * FROM "records"').fetchall()
        index = db.execute('SELECT * FROM "keyidx"').fetchall()
    finally:
        db.close()
    assert stored == [(b"r\x00", b"a", 1234, b"", "blob", "blob", "blob"),
                      (b"r\x00", b"\xff", 1234, b"\x00v", "blob", "blob", "blob"),
                      (b"s", b"", 1234, b"w", "blob", "blob", "blob")]
    assert messages == [(b"m", b"c:", 1234, b"", "blob", "blob"), (b"m", b"s:\x00", 1234, b"e", "blob", "blob")]
    assert records == [(b"c", b"", 1234), (b"c", b"\x92\x00\x01", 1234)]
    assert index == [(b"k\x00", 1234)]


@pytest.mark.parametrize("python_puts", [False, True])
def test_local_refuses_a_column_of_another_family(tmp_path, monkeypatch, python_puts: bool) -> None:
    # As HBase refuses a put to a family the table does not have: nothing of the put is written.
    if python_puts:
        monkeypatch.setattr(local, "_sqlput", None)
    store = LocalStore(str(tmp_path / "i.sqlite3"))
    cases = ((T, {b"c:a": b""}), (T, {b"r": b""}), (T, {b"r;": b""}), ("records", {b"c:": b"v"}),
             ("records", {b"i:": b""}), ("keyidx", {b"i:": b"v"}), ("keyidx", {b"i:a": b""}), ("keyidx", {b"r:": b""}))
    fine = {T: {b"r:": b""}, "records": {b"c:a": b""}, "keyidx": {b"i:": b""}}
    for table, cells in cases:
        with pytest.raises(sqlite3.IntegrityError, match="NOT NULL"):
            store.put_rows(table, [(b"a", fine[table]), (b"b", cells)])
        assert store.get_rows(table, [b"a", b"b"]) == [{}, {}]
        assert store.get_cells(table, b"b", list(cells)) == {}
    store.close()


@pytest.mark.hbase
@pytest.mark.slow
def test_hbase_family_ttl_expires_cells(make_hbase_url) -> None:
    store = open_store(make_hbase_url(ttl_days="0.00002"))  # 1.7 s, rounded to 1 s
    kept = open_store(make_hbase_url())
    try:
        assert store.options.ttl_s == 1
        row = keys.pack(("t", 1))
        kept.put_rows(T, [(row, {b"r:a": b"v"})])
        store.put_rows(T, [(row, {b"r:a": b"v"})])
        time.sleep(2.5)
        assert store.get_row(T, row) == {}
        assert list(store.scan(T, b"", b"\xff")) == []
        assert kept.get_row(T, row) == {b"r:a": b"v"}  # the default 30-day TTL keeps it
    finally:
        store.close()
        kept.close()


@pytest.mark.hbase
@pytest.mark.slow
def test_hbase_bodies_family_has_its_own_ttl(make_hbase_url) -> None:
    store = open_store(make_hbase_url(body_ttl_days="0.00002"))  # bodies: 1 s; the trace: 30 days
    try:
        assert store.options.ttl_of("bodies") == 1
        row = keys.pack(("m", 1))
        store.put_rows("bodies", [(row, {b"b:s": b"body"})])
        store.put_rows("messages", [(row, {b"s:a": b"event"})])
        time.sleep(2.5)
        assert store.get_row("bodies", row) == {}
        assert store.get_row("messages", row) == {b"s:a": b"event"}
    finally:
        store.close()


@pytest.mark.hbase
@pytest.mark.slow
def test_hbase_erased_bodies_are_gone_and_marked(make_hbase_url) -> None:
    # The erased marker is written a millisecond after the row delete, which HBase's delete does not hide.
    from collector.index.indexer import index_records
    from collector.store import bodies, schema
    from tracehook import wire

    store = open_store(make_hbase_url())
    try:
        header = wire.BatchHeader("c", 1, "shop", "host")
        now = int(time.time() * 1000)
        index_records(store, [(header, wire.Event(*wire.make_event(1, now - i, "p", "sms", f"m{i}", body=b"x" * i)))
                              for i in range(1, 4)])
        assert bodies.erase_messages(store, ["m1", "nope"]) == 1
        assert bodies.erase_topic(store, "sms", since_ms=now - 2) == 1  # m2 (m1 is erased already)
        assert [bodies.read_body(store, m).erased for m in ("m1", "m2", "m3")] == [True, True, False]
        assert bodies.read_body(store, "m3").kept.body == b"xxx"  # type: ignore[union-attr]
        assert store.get_row(schema.MESSAGES, schema.message_row("m1"))  # the trace stays
    finally:
        store.close()


@pytest.mark.parametrize(
    "url", ["sqlite:/x", "local:", "local:/x?ttl_days=abc", "local:/x?ttl_days=-1", "local:/x?bogus=1",
            "local:/x?body_ttl_days=0", "local:/x?body_ttl_days=x", "local:/x?body_ttl_days=inf",
            "hbase://h:99999?namespace=x", "local:/x?cache_mib=0", "local:/x?cache_mib=1.5",
            "local:/x?cache_mib=65537", "hbase://h:9090?namespace=x&cache_mib=64"],
)
def test_bad_store_urls_are_named(url: str) -> None:
    with pytest.raises(BadStoreUrlError):
        open_store(url)


def test_cache_mib_sets_the_sqlite_page_cache(tmp_path) -> None:
    """``cache_mib`` is SQLite's page cache of the store's connection; without it, the default."""
    from collector.store.local import CACHE_KIB

    for query, kib in (("?cache_mib=3", 3 * 1024), ("", CACHE_KIB)):
        store = open_store(f"local:{tmp_path / 'index.sqlite3'}{query}")
        try:
            assert store._db.execute("PRAGMA cache_size") == [(-kib,)]
        finally:
            store.close()


def test_local_layout_2_tables_keep_their_shape(tmp_path) -> None:
    # A store upgraded in place keeps layout 2's tables: (row, col, ts, value), whole columns, milliseconds.
    path = str(tmp_path / "i.sqlite3")
    LocalStore(path).close()
    with sqlite3.connect(path) as db:
        for name in ("keyidx", "messages"):
            db.execute(f'DROP TABLE "{name}"')
            db.execute(sqlite_tables.whole_table(name).create())
    now = [1_000_000]
    store = LocalStore(path, StoreOptions(ttl_s=60), clock=lambda: now[0])
    assert [store._table(n) for n in ("keyidx", "messages")] == [sqlite_tables.whole_table(n) for n in ("keyidx", "messages")]
    assert store._table("records") == sqlite_tables.lean(schema.TABLES_BY_NAME["records"])
    store.put_rows("keyidx", [(b"k", {b"i:": b""})])
    store.put_rows("messages", [(b"m", {b"s:a": b"v"})])
    now[0] += 60_001  # 1 ms past the TTL: milliseconds count here
    store.put_rows("messages", [(b"n", {b"c:b": b"w"})])
    assert store.get_rows("keyidx", [b"k"]) == [{}] and store.get_row("messages", b"m") == {}
    assert list(store.scan("messages", b"", b"\xff")) == [(b"n", {b"c:b": b"w"})]
    assert store.purge_expired() == 2
    store.close()
    with sqlite3.connect(path) as db:
        assert db.execute('SELECT * FROM "messages"').fetchall() == [(b"n", b"c:b", 1_060_001, b"w")]
