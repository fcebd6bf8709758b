"""The embedded store's file is plain SQLite: what apsw writes, Python's own sqlite3 (the library the
releases before apsw opened it with) reads cell for cell, and a file that library wrote, the store opens
and answers from as from its own.  One library at a time: two SQLite libraries must not hold one file
open in one process (they do not see each other's locks)."""

from __future__ import annotations

import contextlib
import sqlite3

from index_helpers import consumed, message

from collector.store import local, schema
from collector.store.indexer import finish_batch, index_records
from collector.store.local import LocalStore
from collector.store.reader import TraceQuery

IDS = [f"m{i}" for i in range(40)]


def _index(store: LocalStore) -> None:
    index_records(store, [r for i, msg_id in enumerate(IDS)
                          for r in message("orders", msg_id, 1000 + i, keys=f"k{i % 3}")
                          + consumed("orders", msg_id, 1000 + i, "billing")])
    finish_batch(store)


def _cells(store: LocalStore) -> dict[str, list[tuple[bytes, dict[bytes, bytes]]]]:
    return {t.name: list(store.scan(t.name, b"", b"\xff" * 8)) for t in schema.TABLES}


def _answers(store: LocalStore) -> list[object]:
    query = TraceQuery(store)
    return [query.get_trace(msg_id) for msg_id in IDS[::7]]


def test_python_sqlite3_reads_what_the_store_wrote(tmp_path) -> None:
    path = str(tmp_path / "index.sqlite3")
    store = LocalStore(path, clock=lambda: 1234)
    _index(store)
    cells = _cells(store)
    store.close()
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("PRAGMA page_size").fetchone() == (local.PAGE_SIZE,)
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        for table, rows in cells.items():
            stored = db.execute(f'SELECT row, col, value, ts, typeof(row), typeof(col), typeof(value), typeof(ts) '
                                f'FROM "{table}" ORDER BY row, col').fetchall()
            assert {(r, c, v) for r, c, v, *_ in stored} == {(r, c, v) for r, cols in rows for c, v in cols.items()}
            assert {tuple(s[3:]) for s in stored} <= {(1234, "blob", "blob", "blob", "integer")}
    assert sum(map(len, cells.values())) > 4 * len(IDS)


def test_the_store_answers_from_a_file_python_sqlite3_wrote(tmp_path) -> None:
    """The same cells, written as the releases before apsw wrote them (Python's sqlite3, the same tables
    and settings, BLOBs bound as bytearray), answer every query as the store's own file does; and the
    store writes on into that file."""
    ours = LocalStore(str(tmp_path / "ours.sqlite3"), clock=lambda: 1234)
    _index(ours)
    cells, answers = _cells(ours), _answers(ours)
    meta = list(ours._db.execute('SELECT row, col, ts, value FROM "meta"'))
    ours.close()
    path = str(tmp_path / "theirs.sqlite3")
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute(f"PRAGMA page_size={local.PAGE_SIZE}")
        db.execute("PRAGMA journal_mode=WAL")
        for name in ("meta", *cells):
            db.execute(local.TABLE_SQL.format(name=name))
        db.executemany('INSERT INTO "meta" VALUES (?, ?, ?, ?)', meta)
        b = bytearray
        for table, rows in cells.items():
            db.executemany(f'INSERT INTO "{table}" VALUES (?, ?, ?, ?)',
                           [(b(r), b(c), 1234, b(v)) for r, cols in rows for c, v in cols.items()])
    theirs = LocalStore(path, clock=lambda: 1234)
    try:
        assert _cells(theirs) == cells
        assert _answers(theirs) == answers
        theirs.put_rows(schema.MESSAGES, [(schema.message_row("new"), {b"e:1": b"\x00"})])
        assert theirs.get_rows(schema.MESSAGES, [schema.message_row("new")]) == [{b"e:1": b"\x00"}]
    finally:
        theirs.close()
