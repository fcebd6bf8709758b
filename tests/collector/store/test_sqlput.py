"""The embedded store's C connection (collector.store._sqlput) does exactly what the Python paths do.

With the extension built, every write of a ``LocalStore`` goes through a ``_sqlput.Connection`` that opens
the file itself (no Python sqlite3 handle is reached into).  ``LocalStore.put_rows`` runs its upsert through
``upsert`` when it can take the rows (bytes everywhere), else through its ``executemany`` over
``local._py_cells``; both must leave the same cells as a store on Python's sqlite3, with the same SQLite
types, for any rows: rows put twice, index rows sharing one read-only mapping, empty values, puts sorted
by row key or not.
``LocalStore.get_rows`` reads through ``_sqlput.select_rows`` the same way, else through
``LocalStore._py_get_rows``: both must answer what a model of the puts says, for rows asked twice,
rows never written and cells expired by their write time, in lists longer than an ``IN`` chunk.
"""

from __future__ import annotations

import os
import pathlib
import sqlite3
import threading
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.store import local, schema, sqlite_writer
from collector.store.base import StoreOptions

try:
    from collector.store import _sqlput
except ImportError:  # checked by test_extension_is_built
    _sqlput = None

_blobs = st.binary(max_size=24)
_SHARED = MappingProxyType({b"i:": b""})
_columns = st.builds(bytes.__add__, st.sampled_from((b"i:", b"s:", b"c:", b"r:")), _blobs)
"""Column names of the three families :data:`_TABLES` hold: each table keeps the cells of its own (:func:`_of`)."""
_rows = st.lists(st.tuples(_blobs, st.one_of(st.just(_SHARED), st.dictionaries(_columns, _blobs, max_size=3))),
                 max_size=30)


def _of(table: str, rows: list[tuple[bytes, Any]]) -> list[tuple[bytes, Any]]:
    """The rows' cells of ``table``'s families (a store refuses a column of another family, as HBase does);
    in an index table (key-only), the one empty ``i:`` cell of each row that has an ``i:`` cell."""
    t = schema.TABLES_BY_NAME[table]
    families = tuple(f"{f}:".encode() for f in t.families)
    if not t.qualifiers:
        return [(row, _SHARED if any(c.startswith(families) for c in columns) else {}) for row, columns in rows]
    return [(row, {c: v for c, v in columns.items() if c.startswith(families)}) for row, columns in rows]


def test_extension_is_built() -> None:
    # Like the other extensions: without a C compiler and sqlite3.h `pip install -e .[all]` leaves it out,
    # and this fails rather than skipping silently.
    assert _sqlput is not None, ("collector.store._sqlput is not built (it needs a C compiler, Python.h and "
                                 "sqlite3.h): run pip install -e '.[all]'")
    assert local.SQLPUT, ("collector.store._sqlput is older than local.py (no Connection), or not linked with "
                          "the SQLite library Python's sqlite3 loads: rebuild it")


def _cells(store: local.LocalStore, table: str) -> list[tuple[Any, ...]]:
    """Every stored cell of ``table``: (row, column name, write time as stored, value, its types)."""
    t = store._table(table)
    return store._db.execute(f'SELECT row, {t.column_sql}, {t.ts_column}, {t.value_sql}, typeof({t.ts_column}), '
                             f'typeof({t.value_sql}) FROM "{table}" ORDER BY row, {t.stored_column_sql}')


def _stores(tmp: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> tuple[local.LocalStore, local.LocalStore]:
    fast = local.LocalStore(str(tmp / "c.sqlite3"))
    monkeypatch.setattr(local, "_sqlput", None)
    slow = local.LocalStore(str(tmp / "py.sqlite3"))
    monkeypatch.undo()
    assert fast._put_in_c and not slow._put_in_c
    assert isinstance(fast._db, _sqlput.Connection) and isinstance(slow._db, sqlite_writer.PyWriter)
    return fast, slow


_TABLES = (schema.KEYIDX, schema.MESSAGES, schema.ROLLUPS, schema.TIMEIDX)
"""Tables whose puts are sorted by row key (the first three) and one whose puts are not; of each shape
(key-only, whole column names, qualifiers: :mod:`collector.store.sqlite_tables`)."""


def test_which_puts_are_sorted() -> None:
    assert {schema.KEYIDX, schema.MESSAGES, schema.ROLLUPS} <= local._SORTED_PUTS
    assert schema.TIMEIDX not in local._SORTED_PUTS


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(_rows, min_size=1, max_size=3))
def test_both_paths_store_the_same_cells(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                         batches: list[list[tuple[bytes, Any]]]) -> None:
    d = tmp_path / os.urandom(6).hex()
    fast, slow = _stores(d, monkeypatch)
    try:
        for ts, rows in enumerate(batches, start=1_790_000_000):
            for table in _TABLES:
                fast.put_rows(table, _of(table, rows), ts=ts * 1000 + 999)  # whole seconds kept
                slow.put_rows(table, _of(table, rows), ts=ts * 1000 + 999)
        for table in _TABLES:
            expected = {}
            for ts, rows in enumerate(batches, start=1_790_000_000):  # the model: later puts win
                for row, columns in _of(table, rows):  # in the order given: sorting a put must not change who wins
                    for col, value in columns.items():
                        expected[(row, col)] = (ts, value)
            want = [(r, c, ts, v, "integer", "blob") for (r, c), (ts, v) in sorted(expected.items())]
            assert _cells(fast, table) == want
            assert _cells(slow, table) == want
    finally:
        fast.close()
        slow.close()


def test_rows_it_cannot_take_go_through_executemany(tmp_path: pathlib.Path) -> None:
    store = local.LocalStore(str(tmp_path / "x.sqlite3"))
    for table in (schema.MESSAGES, schema.ROLLUPS):
        c = b"c:" if table == schema.MESSAGES else b"r:"
        rows = [(b"r2", {c: memoryview(b"w")}), (bytearray(b"r1"), {c: b"v"}), (b"r2", {c: b"x"})]
        store.put_rows(table, rows, ts=5000)  # type: ignore[arg-type]
        assert _cells(store, table) == [(b"r1", c, 5, b"v", "integer", "blob"),
                                        (b"r2", c, 5, b"x", "integer", "blob")]
    store.put_rows(schema.KEYIDX, [(b"r2", {b"i:": memoryview(b"")}), (bytearray(b"r1"), {b"i:": b""})],  # type: ignore[arg-type]
                   ts=5000)
    assert _cells(store, schema.KEYIDX) == [(b"r1", b"i:", 5, b"", "integer", "blob"),
                                            (b"r2", b"i:", 5, b"", "integer", "blob")]
    store.close()


_NOW_MS = 1_790_000_000_000
_TTL_S = 60
_keys = st.sampled_from([b"", b"a", b"ab", b"b", b"\x00", b"\xff\x01", b"m" * 20])
_puts = st.lists(st.tuples(_keys, st.dictionaries(st.builds(bytes.__add__, st.sampled_from((b"s:", b"c:")),
                                                                   st.binary(max_size=4)), _blobs, max_size=3),
                           st.sampled_from([_NOW_MS, _NOW_MS - 1000, _NOW_MS - _TTL_S * 1000,
                                            _NOW_MS - _TTL_S * 1000 - 1])), max_size=12)
"""Cells written now, 1 s ago, just in the TTL and 1 ms past it (kept as whole seconds: expired, never late)."""


def _model(puts: list[tuple[bytes, dict[bytes, bytes], int]], asked: list[bytes]) -> list[dict[bytes, bytes]]:
    """The columns of each row asked: the last put of each cell, if written no more than the TTL ago."""
    cells: dict[bytes, dict[bytes, tuple[bytes, int]]] = {}
    for row, columns, ts in puts:
        for col, value in columns.items():
            cells.setdefault(row, {})[col] = (value, ts)
    live = _NOW_MS - _TTL_S * 1000
    return [{col: value for col, (value, ts) in sorted(cells.get(row, {}).items()) if ts >= live} for row in asked]


def _read_stores(tmp: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> tuple[local.LocalStore, local.LocalStore]:
    """A store that reads in C and one that reads in Python, with IN lookups of 3 rows (many chunks)."""
    options = StoreOptions(ttl_s=_TTL_S)
    fast = local.LocalStore(str(tmp / "c.sqlite3"), options, clock=lambda: _NOW_MS)
    slow = local.LocalStore(str(tmp / "py.sqlite3"), options, clock=lambda: _NOW_MS)
    monkeypatch.setattr(local, "_IN_CHUNK", 3)
    monkeypatch.setattr(slow, "get_rows", lambda table, rows: slow._py_get_rows(slow._table(table), rows))
    return fast, slow


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(puts=_puts, asked=st.lists(_keys | st.binary(max_size=3), max_size=12))
def test_both_reads_answer_as_the_model(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                        puts: list[tuple[bytes, dict[bytes, bytes], int]], asked: list[bytes]) -> None:
    fast, slow = _read_stores(tmp_path / os.urandom(6).hex(), monkeypatch)
    try:
        for store in (fast, slow):
            for row, columns, ts in puts:
                store.put_rows(schema.MESSAGES, [(row, columns)], ts=ts)
        want = _model(puts, asked)
        got = fast.get_rows(schema.MESSAGES, asked)
        assert fast._c_reader is not None
        assert got == want
        assert [list(columns) for columns in got] == [list(columns) for columns in want]  # columns in key order
        assert slow.get_rows(schema.MESSAGES, tuple(asked)) == want
        if got:  # a row asked twice is a dict of its own each time
            got[0][b"new"] = b""
            assert all(b"new" not in columns for columns in got[1:])
    finally:
        fast.close()
        slow.close()


def test_long_reads_answer_as_the_model(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, slow = _read_stores(tmp_path, monkeypatch)
    monkeypatch.setattr(local, "_IN_CHUNK", 500)
    puts = [(b"r%05d" % (i * 7 % 3000), {b"c:%d" % (i % 3): b"v%d" % i}, _NOW_MS - (i % 5) * 20_000)
            for i in range(4000)]
    asked = [b"r%05d" % (i * 13 % 3100) for i in range(1700)] + [b"r00000"] * 3
    for store in (fast, slow):
        store.put_rows(schema.MESSAGES, [(row, columns) for row, columns, _ in puts], ts=_NOW_MS)
        for row, columns, ts in puts:
            if ts < _NOW_MS - _TTL_S * 1000:
                store.put_rows(schema.MESSAGES, [(row, columns)], ts=ts)
    model = _model([(row, columns, _NOW_MS) for row, columns, _ in puts] +
                   [p for p in puts if p[2] < _NOW_MS - _TTL_S * 1000], asked)
    assert sum(map(len, model)) > 1000 and model.count({}) > 100  # hits, misses and expired cells
    assert fast.get_rows(schema.MESSAGES, asked) == model
    assert slow.get_rows(schema.MESSAGES, asked) == model
    fast.close()
    slow.close()


def test_reads_it_cannot_take_go_through_python(tmp_path: pathlib.Path) -> None:
    store = local.LocalStore(str(tmp_path / "x.sqlite3"))
    store.put_rows(schema.ROLLUPS, [(b"r", {b"r:c": b"v"})])
    sql = store._table(schema.ROLLUPS).select_row
    store._read_db()
    reader = store._c_reader
    assert reader.select_rows(sql, [b"r", "r"], 0) is None  # a key that is not bytes
    assert reader.select_rows(sql, [b"r", b"r"], 0) == [{b"r:c": b"v"}, {b"r:c": b"v"}]
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        reader.select_rows("SELECT col, value FROM nope WHERE row = ? AND ts >= ?", [b"r"], 0)
    assert not reader.in_transaction  # its own read transaction ended, even after an error
    with pytest.raises(sqlite3.OperationalError, match="readonly"):  # the reader only reads (query_only)
        reader.execute(f'DELETE FROM "{schema.ROLLUPS}"')
    # A value stored as TEXT (never by this store) is answered as Python's sqlite3 reads it.
    store._db.execute(f'INSERT INTO "{schema.ROLLUPS}" VALUES (?, ?, ?, ?)', (b"t", b"c", 2**62, "text"))
    assert reader.select_rows(sql, [b"t"], 0) is None
    assert store.get_rows(schema.ROLLUPS, [b"t", b"r"]) == [{b"r:c": "text"}, {b"r:c": b"v"}]
    store.close()


def test_its_connection_runs_statements_as_python_sqlite3_does(tmp_path: pathlib.Path) -> None:
    assert _sqlput is not None
    path = str(tmp_path / "x.sqlite3")
    db = _sqlput.Connection(path, 1000)
    ref = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE t (row BLOB, col BLOB, ts INTEGER, value BLOB, PRIMARY KEY (row, col))")
    sql = "INSERT INTO t VALUES (?, ?, ?, ?)"
    assert not db.upsert(sql, [(b"r", {b"c": b"v"})], 1)  # autocommit: not inside the caller's BEGIN
    db.execute("BEGIN IMMEDIATE")
    assert db.in_transaction
    assert db.upsert(sql, [(b"r", {b"c": b"v"})], 1)
    with pytest.raises(sqlite3.IntegrityError):  # the same (row, col) again, as sqlite3 raises it
        db.upsert(sql, [(b"r", {b"c": b"w"})], 2)
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        db.upsert("INSERT INTO nope VALUES (?, ?, ?, ?)", [(b"r", {b"c": b"v"})], 1)
    values = [(b"b", bytearray(b"ba"), 2**62, None), (b"s", b"", -1, "text"), (b"f", b"x", 0, 1.5)]
    assert db.executemany(sql, values) == 3
    with pytest.raises(TypeError, match="parameter 4"):
        db.execute(sql, (b"z", b"z", 0, object()))
    with pytest.raises(ValueError, match="4 parameters wanted"):
        db.execute(sql, (b"z",))
    db.execute("COMMIT")
    select = "SELECT row, col, ts, value, typeof(value) FROM t ORDER BY row"
    assert db.execute(select) == ref.execute(select).fetchall()
    assert [r[4] for r in db.execute(select)] == ["null", "real", "blob", "text"]
    assert db.executemany("DELETE FROM t WHERE ts < ?", [(1,), (2,)]) == 3  # rows changed, as rowcount
    db.close()
    db.close()  # again: nothing
    with pytest.raises(ValueError, match="closed"):
        db.execute("SELECT 1")
    ref.close()


def test_it_shares_python_sqlite3s_library(tmp_path: pathlib.Path) -> None:
    """Its connections and Python's open one file: one SQLite library (else a close drops the other's locks)."""
    assert _sqlput is not None
    import _json
    import _sqlite3

    assert _sqlput.same_library(_sqlite3.__file__)
    assert _sqlput.SQLITE_VERSION_NUMBER == sqlite3.sqlite_version_info[0] * 1_000_000 + \
        sqlite3.sqlite_version_info[1] * 1000 + sqlite3.sqlite_version_info[2]
    assert not _sqlput.same_library(_json.__file__)  # loaded, without SQLite
    assert not _sqlput.same_library(str(tmp_path / "absent.so"))


def test_two_stores_of_one_file_write_in_turn_without_busy_errors(tmp_path: pathlib.Path) -> None:
    """Two stores of one file in one process (a Spark worker reusing a store beside a new one) write from
    two threads: each waits for the other's write lock (the GIL released while it waits), none fails."""
    path = str(tmp_path / "x.sqlite3")
    stores = [local.LocalStore(path), local.LocalStore(path)]
    errors: list[BaseException] = []

    def write(n: int, store: local.LocalStore) -> None:
        try:
            for i in range(40):
                store.put_rows(schema.MESSAGES, [(b"%d-%03d-%d" % (n, i, j), {b"c:": b"v" * 50}) for j in range(200)])
                store.get_rows(schema.MESSAGES, [b"%d-%03d-0" % (1 - n, i)])
                store.put_meta(b"m%d" % n, b"%d" % i)
                store.delete_rows(schema.MESSAGES, [b"%d-%03d-1" % (n, i)])
                store.end_batch()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n, s)) for n, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    got = stores[0].scan(schema.MESSAGES, b"", b"\xff")
    assert sum(1 for _ in got) == 2 * 40 * 199
    assert stores[1].get_meta(b"m0") == b"39" and stores[0].get_meta(b"m1") == b"39"
    for store in stores:
        store.close()
