"""Stores in layout 2, as the release before layout 3 wrote them.

Layout 3 is layout 2 with tables added and message cells that leave out what their row key
holds.  So a layout-2 store is built here as: the events indexed by today's indexer, then every
message and pending cell replaced by layout 2's own (frozen below, never taken from today's
schema module: ``msgpack([app, host, client_id, trimmed event])`` with born/store times as their
difference from the event's time and hex ids as bytes, under ``s:``/``c:`` + ``blake2b(value, 8)``),
the tables layout 3 added dropped, ``m:layout_version`` set to 2, and (an embedded store) every table
in layout 2's SQLite shape: ``(row, col, ts, value)``, whole column names, write times in milliseconds
(:mod:`collector.store.sqlite_tables`).  Until layout 3's cells
differ from layout 2's, the rewrite changes nothing; the store is a layout-2 store either way.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

import msgpack

from collector.index.indexer import finish_batch, index_records
from collector.store import keys, layout, layout_v2, local_path, open_store, schema, sqlite_tables
from tracehook import wire
from tracehook.wire import BatchHeader, Event, EventType

Record = tuple[BatchHeader, Event]
_CONSUME = (EventType.SUB_BEFORE, EventType.SUB_AFTER)
_BORN, _STORE, _HEX = 11, 12, (4, 5, 19, 23, 24)
_is_hex = re.compile("(?:[0-9a-f]{2})+").fullmatch


def message_row(msg_id: str) -> bytes:
    return keys.pack((hashlib.blake2b(msg_id.encode(), digest_size=4).digest(), msg_id))


def cell(header: BatchHeader, event: Event) -> tuple[bytes, bytes]:
    """Layout 2's column and value of one event in its message (or pending) row."""
    raw: list[Any] = wire.trim(event)
    n = len(raw)
    if n > _BORN:
        raw[_BORN] -= raw[1]
        if n > _STORE:
            raw[_STORE] -= raw[1]
    for i in _HEX:
        if i < n and raw[i] and _is_hex(raw[i]):
            raw[i] = bytes.fromhex(raw[i])
    value = msgpack.packb([header.app, header.host, header.client_id, raw], use_bin_type=True)
    family = b"c:" if event.type in _CONSUME else b"s:"
    return family + hashlib.blake2b(value, digest_size=8).digest(), value


def write(url: str, records: Sequence[Record], *, chunk: int = 20_000) -> None:
    """The layout-2 store at ``url`` (new, or a layout-3 one this rewrites) holding ``records``,
    indexed ``chunk`` events at a time and rewritten ``chunk`` messages at a time."""
    store = open_store(url)
    try:
        for i in range(0, len(records), chunk):
            index_records(store, list(records[i:i + chunk]))
            finish_batch(store)
        by_msg: dict[str, list[Record]] = {}
        for header, event in records:
            by_msg.setdefault(event.msg_id, []).append((header, event))
        pending = {row for row, _ in store.scan("pending", b"", b"\xff")}
        # After the deletes' time: HBase hides a cell written no later than a delete of its row.
        ts = int(time.time() * 1000) + 2_000
        ids = list(by_msg)
        for i in range(0, len(ids), chunk):
            rows = {message_row(m): by_msg[m] for m in ids[i:i + chunk]}
            store.delete_rows("messages", list(rows))
            store.put_rows("messages", [(row, dict(cell(h, e) for h, e in recs)) for row, recs in rows.items()],
                           ts=ts)
            dead = [(row, dict(cell(h, e) for h, e in recs if e.type == EventType.DEAD))
                    for row, recs in rows.items() if row in pending]
            store.delete_rows("pending", [row for row, _ in dead])
            store.put_rows("pending", dead, ts=ts)
        store.put_meta(layout.LAYOUT_VERSION_COLUMN, b"2")
    finally:
        store.close()
    _drop_added_tables(url)


def _drop_added_tables(url: str) -> None:
    path = local_path(url)
    if path is not None:
        db = sqlite3.connect(path)
        try:
            names = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            for name in names - {"meta", *layout_v2.TABLES}:
                db.execute(f'DROP TABLE "{name}"')
            _whole_tables(db)
            db.commit()
        finally:
            db.close()
        return
    import happybase

    parts = urlsplit(url)
    namespace = parse_qs(parts.query)["namespace"][0]
    conn = happybase.Connection(parts.hostname, parts.port, table_prefix=namespace, table_prefix_separator="_")
    try:
        for name in {n.decode() for n in conn.tables()} - {"meta", *layout_v2.TABLES}:
            conn.delete_table(name, disable=True)
    finally:
        conn.close()


def _whole_tables(db: sqlite3.Connection) -> None:
    """Every table of ``db`` in layout 2's SQLite shape, its cells as they are."""
    for name in layout_v2.TABLES:
        t = sqlite_tables.found(schema.TABLES_BY_NAME[name],
                                sqlite_tables.table_columns(db.execute(f'PRAGMA table_info("{name}")').fetchall()))
        if t == sqlite_tables.whole_table(name):
            continue
        db.execute(f'ALTER TABLE "{name}" RENAME TO "{name}_lean"')
        db.execute(sqlite_tables.whole_table(name).create())
        db.execute(f'INSERT INTO "{name}" SELECT row, {t.column_sql}, {t.ts_column} * {t.unit_ms}, {t.value_sql} '
                   f'FROM "{name}_lean"')
        db.execute(f'DROP TABLE "{name}_lean"')
