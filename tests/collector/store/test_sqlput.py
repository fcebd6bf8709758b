"""The embedded store's C put (collector.store._sqlput) stores exactly what Python's executemany stores.

``LocalStore.put_rows`` runs its upsert through the extension when it can take the connection
(``_sqlput.check``) and the rows (bytes everywhere), else through ``executemany`` over
``local._cells``; both must leave the same cells, with the same SQLite types, for any rows: rows
put twice, index rows sharing one read-only mapping, empty values.
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
    assert local.SQLPUT


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


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(_rows, min_size=1, max_size=3))
def test_both_paths_store_the_same_cells(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch,
                                         batches: list[list[tuple[bytes, Any]]]) -> None:
    d = tmp_path / os.urandom(6).hex()
    fast, slow = _stores(d, monkeypatch)
    try:
        for ts, rows in enumerate(batches, start=1_790_000_000_000):
            for table in (schema.KEYIDX, schema.MESSAGES):  # the messages table's puts are sorted first
                fast.put_rows(table, rows, ts=ts)
                slow.put_rows(table, rows, ts=ts)
        for table in (schema.KEYIDX, schema.MESSAGES):
            expected = {}
            for ts, rows in enumerate(batches, start=1_790_000_000_000):  # the model: later puts win
                for row, columns in (sorted(rows, key=lambda r: r[0]) if table == schema.MESSAGES else rows):
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
    rows = [(bytearray(b"r1"), {b"c:": b"v"}), (b"r2", {b"c:": memoryview(b"w")})]
    store.put_rows(schema.KEYIDX, rows, ts=5)  # type: ignore[arg-type]
    assert _cells(store, schema.KEYIDX) == [(b"r1", b"c:", 5, b"v", "integer", "blob"),
                                            (b"r2", b"c:", 5, b"w", "integer", "blob")]
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
