"""Stores in layout 1, built byte by byte as the release before layout versions wrote them.

Written here from the frozen description of layout 1 (the message row key, qualifiers and
values of that release's schema.py), never through today's indexer or schema module, which
describe layout 2 and may change.  Only the message and pending tables get rows: they are
all the migration reads; the other tables exist, empty, as in any old store.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from urllib.parse import parse_qs, urlsplit

import msgpack

from collector.store import keys
from tracehook import wire
from tracehook.wire import BatchHeader, Event, EventType

TABLES = {"messages": ("s", "c"), "keyidx": ("i",), "timeidx": ("i",), "dead": ("i",), "records": ("c",),
          "queueidx": ("i",), "seqidx": ("i",), "pending": ("s",), "traceidx": ("i",), "rollups": ("r",)}
_CONSUME = (EventType.SUB_BEFORE, EventType.SUB_AFTER)



def message_row(msg_id: str) -> bytes:
    return keys.pack((hashlib.blake2b(msg_id.encode(), digest_size=4).digest(), msg_id))


def cell(header: BatchHeader, event: Event) -> tuple[bytes, bytes]:
    """Layout 1's column and value of one event in its message row."""
    value = msgpack.packb([header.app, header.host, header.client_id, wire.trim(event)], use_bin_type=True)
    event_id = hashlib.blake2b(value, digest_size=8).digest()
    if event.type in _CONSUME:
        return b"c:" + keys.pack((event.group, event.request_id, event_id)), value
    return b"s:" + keys.pack((int(event.type), event_id)), value


def v1_rows(records: Sequence[tuple[BatchHeader, Event, int]]) -> dict[str, list[tuple[bytes, bytes, bytes, int]]]:
    """``(row, column, value, write ts)`` of the message and pending tables for ``(header, event, ts)``."""
    out: dict[str, list[tuple[bytes, bytes, bytes, int]]] = {"messages": [], "pending": []}
    for header, event, ts in records:
        column, value = cell(header, event)
        out["messages"].append((message_row(event.msg_id), column, value, ts))
        if event.type == EventType.DEAD:
            out["pending"].append((message_row(event.msg_id), column, value, ts))
    return out


def write_local(path: str, records: Sequence[tuple[BatchHeader, Event, int]]) -> None:
    """A ``local:`` layout-1 file: a ``(row, col, ts, value)`` table per table, salt buckets recorded."""
    db = sqlite3.connect(path)
    try:
        for name in ["meta", *TABLES]:
            db.execute(f'CREATE TABLE IF NOT EXISTS "{name}" (row BLOB NOT NULL, col BLOB NOT NULL, '
                       "ts INTEGER NOT NULL, value BLOB NOT NULL, PRIMARY KEY (row, col)) WITHOUT ROWID")
        db.execute('INSERT OR REPLACE INTO "meta" VALUES (?, ?, ?, ?)', (b"layout", b"m:salt_buckets", 0, b"8"))
        for table, rows in v1_rows(records).items():
            db.executemany(f'INSERT OR REPLACE INTO "{table}" (row, col, value, ts) VALUES (?, ?, ?, ?)', rows)
        db.commit()
    finally:
        db.close()


def write_hbase(url: str, records: Sequence[tuple[BatchHeader, Event, int]], ttl_s: int = 30 * 86400) -> None:
    """The same in HBase: ``<namespace>_<table>`` tables, cells put with their write timestamps."""
    import happybase

    parts = urlsplit(url)
    namespace = parse_qs(parts.query)["namespace"][0]
    conn = happybase.Connection(parts.hostname, parts.port, table_prefix=namespace, table_prefix_separator="_")
    try:
        for name, families in TABLES.items():
            conn.create_table(name, {f: dict(max_versions=1, time_to_live=ttl_s) for f in families})
        conn.create_table("meta", {"m": dict(max_versions=1)})
        conn.table("meta").put(b"layout", {b"m:salt_buckets": b"8"})
        for table, rows in v1_rows(records).items():
            for row, column, value, ts in rows:
                conn.table(table).put(row, {column: value}, timestamp=ts)
    finally:
        conn.close()
