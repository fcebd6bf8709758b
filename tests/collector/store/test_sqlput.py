"""The embedded store's C put and read (collector.store._sqlput) do exactly what their Python paths do.

``LocalStore.put_rows`` runs its upsert through the extension when it can take the connection
(``_sqlput.check``) and the rows (bytes everywhere), else through ``executemany`` over
``local._cells``; both must leave the same cells, with the same SQLite types, for any rows: rows
put twice, index rows sharing one read-only mapping, empty values, puts sorted by row key or not.
``LocalStore.get_rows`` reads through ``_sqlput.select_rows`` the same way, else through
``LocalStore._py_get_rows``: both must answer what a model of the puts says, for rows asked twice,
rows never written and cells expired by their write time, in lists longer than an ``IN`` chunk.
"""

from __future__ import annotations

import os
import pathlib
import sqlite3
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector.store import local, schema
from collector.store.base import StoreOptions

try:
    from collector.store import _sqlput
except ImportError:  # checked by test_extension_is_built
    _sqlput = None

_blobs = st.binary(max_size=24)
_SHARED = MappingProxyType({b"i:": b""})
_rows = st.lists(st.tuples(_blobs, st.one_of(st.just(_SHARED), st.dictionaries(_blobs, _blobs, max_size=3))),
                 max_size=30)


def test_extension_is_built() -> None:
    # Like the other extensions: without a C compiler and sqlite3.h `pip install -e .[all]` leaves it out,
    # and this fails rather than skipping silently.
    assert _sqlput is not None, ("collector.store._sqlput is not built (it needs a C compiler, Python.h and "
                                 "sqlite3.h): run pip install -e '.[all]'")
    assert local.SQLPUT, "collector.store._sqlput is older than local.py (no select_rows): rebuild it"


def _cells(store: local.LocalStore, table: str) -> list[tuple[Any, ...]]:
    return store._db.execute(f'SELECT row, col, ts, value, typeof(ts), typeof(value) FROM "{table}" '
                             "ORDER BY row, col").fetchall()


def _stores(tmp: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> tuple[local.LocalStore, local.LocalStore]:
    fast = local.LocalStore(str(tmp / "c.sqlite3"))
    monkeypatch.setattr(local, "_sqlput", None)
    slow = local.LocalStore(str(tmp / "py.sqlite3"))
    monkeypatch.undo()
    assert fast._put_in_c and not slow._put_in_c
    return fast, slow


_TABLES = (schema.KEYIDX, schema.MESSAGES, schema.TIMEIDX)
"""Tables whose puts are sorted by row key (the first two) and one whose puts are not."""


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
        for ts, rows in enumerate(batches, start=1_790_000_000_000):
            for table in _TABLES:
                fast.put_rows(table, rows, ts=ts)
                slow.put_rows(table, rows, ts=ts)
        for table in _TABLES:
            expected = {}
            for ts, rows in enumerate(batches, start=1_790_000_000_000):  # the model: later puts win
                for row, columns in rows:  # in the order given: sorting a put must not change who wins
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
    rows = [(b"r2", {b"c:": memoryview(b"w")}), (bytearray(b"r1"), {b"c:": b"v"}), (b"r2", {b"c:": b"x"})]
    for table in _TABLES:
        store.put_rows(table, rows, ts=5)  # type: ignore[arg-type]
        assert _cells(store, table) == [(b"r1", b"c:", 5, b"v", "integer", "blob"),
                                        (b"r2", b"c:", 5, b"x", "integer", "blob")]
    store.close()


_NOW_MS = 1_790_000_000_000
_TTL_S = 60
_keys = st.sampled_from([b"", b"a", b"ab", b"b", b"\x00", b"\xff\x01", b"m" * 20])
_puts = st.lists(st.tuples(_keys, st.dictionaries(st.binary(max_size=4), _blobs, max_size=3),
                           st.sampled_from([_NOW_MS, _NOW_MS - 1000, _NOW_MS - _TTL_S * 1000,
                                            _NOW_MS - _TTL_S * 1000 - 1])), max_size=12)


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
    monkeypatch.setattr(slow, "get_rows", lambda table, rows: slow._py_get_rows(table, rows))
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
        assert fast._read_in_c
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
    puts = [(b"r%05d" % (i * 7 % 3000), {b"c%d" % (i % 3): b"v%d" % i}, _NOW_MS - (i % 5) * 20_000)
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
    assert _sqlput is not None
    store = local.LocalStore(str(tmp_path / "x.sqlite3"))
    store.put_rows(schema.KEYIDX, [(b"r", {b"c": b"v"})])
    sql = f'SELECT col, value FROM "{schema.KEYIDX}" WHERE row = ? AND ts >= ?'
    reader = store._read_db()
    assert _sqlput.select_rows(reader, sql, [b"r", "r"], 0) is None  # a key that is not bytes
    assert _sqlput.select_rows(object(), sql, [b"r"], 0) is None
    assert _sqlput.select_rows(reader, sql, [b"r", b"r"], 0) == [{b"c": b"v"}, {b"c": b"v"}]
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        _sqlput.select_rows(reader, "SELECT col, value FROM nope WHERE row = ? AND ts >= ?", [b"r"], 0)
    assert not reader.in_transaction  # its own read transaction ended, even after an error
    # A value stored as TEXT (never by this store) is answered as Python's sqlite3 reads it.
    store._db.execute(f'INSERT INTO "{schema.KEYIDX}" VALUES (?, ?, ?, ?)', (b"t", b"c", 2**62, "text"))
    assert _sqlput.select_rows(reader, sql, [b"t"], 0) is None
    assert store.get_rows(schema.KEYIDX, [b"t", b"r"]) == [{b"c": "text"}, {b"c": b"v"}]
    store.close()


def test_it_takes_only_a_connection_it_can_find_inside_a_transaction(tmp_path: pathlib.Path) -> None:
    assert _sqlput is not None
    path = str(tmp_path / "x.sqlite3")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE t (row BLOB, col BLOB, ts INTEGER, value BLOB, PRIMARY KEY (row, col))")
    file = db.execute("PRAGMA database_list").fetchone()[2]
    version = local._SQLITE_VERSION
    assert _sqlput.check(db, file, version)
    assert not _sqlput.check(db, file + "-other", version)
    assert not _sqlput.check(db, file, version + 1)
    assert not _sqlput.check(object(), file, version)
    sql = "INSERT INTO t VALUES (?, ?, ?, ?)"
    assert not _sqlput.upsert(db, sql, [(b"r", {b"c": b"v"})], 1)  # autocommit: not inside the caller's BEGIN
    db.execute("BEGIN IMMEDIATE")
    assert _sqlput.upsert(db, sql, [(b"r", {b"c": b"v"})], 1)
    with pytest.raises(sqlite3.IntegrityError):  # the same (row, col) again, as sqlite3 raises it
        _sqlput.upsert(db, sql, [(b"r", {b"c": b"w"})], 2)
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        _sqlput.upsert(db, "INSERT INTO nope VALUES (?, ?, ?, ?)", [(b"r", {b"c": b"v"})], 1)
    db.execute("COMMIT")
    assert db.execute("SELECT row, col, ts, value FROM t").fetchall() == [(b"r", b"c", 1, b"v")]
    db.close()
