"""Layout 1, frozen: how the migration reads the events of a store made before layout versions.

Every store made before the layout version was recorded (:mod:`collector.store.layout`) is
layout 1.  Its ``messages`` table holds every indexed event once, so it is all a migration
needs: each row is ``keys.pack((hash4(msg_id), msg_id))`` and each cell one event, valued
``msgpack([app, host, client_id, trimmed wire event])`` (the wire event decodes with
:func:`tracehook.wire.validate_event`, which accepts every older wire version).  Its
qualifiers (``s:`` + ``pack((type, event id))``, ``c:`` + ``pack((group, request id, event id))``)
are not needed: the new layout computes its own from the event.  The ``pending`` table holds
copies of dead-letter events that are in ``messages`` too, and every other table is derived;
re-indexing the events rebuilds them all.

This module never imports :mod:`collector.store.schema`, which describes the current layout
and may change; only the row-key encoding (:mod:`collector.store.keys`) is shared, unchanged.

Each cell comes with its write time, which its TTL counts from: the migration writes its
copies no later, so they expire no later than the originals
(:mod:`collector.index.migrate`).  A ``local:`` store is read with SQLite directly, read-only
(its file layout, a ``(row, col, ts, value)`` table per table, is frozen here too); an HBase
store through :meth:`collector.store.hbase.HBaseStore.scan_cells`.
"""

from __future__ import annotations

import itertools
import operator
import sqlite3
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import msgpack

from collector.store import keys
from collector.store.base import Store
from collector.store.errors import BadStoreUrlError, StoreUnavailableError
from tracehook import wire
from tracehook.wire import BatchHeader, Event

VERSION = 1
MESSAGES = "messages"
"""The only table the migration reads."""
TABLES = ("messages", "keyidx", "timeidx", "dead", "records", "queueidx", "seqidx", "pending", "traceidx", "rollups")
"""Layout 1's tables (a ``local:`` file has one SQLite table each, and ``meta``)."""
FAMILIES = {"messages": ("s", "c"), "records": ("c",), "pending": ("s",), "rollups": ("r",)}
"""Column families of layout 1's tables; every other table has ``i``."""

Cell = tuple[bytes, int]
"""A cell's value and its write time (epoch ms)."""
MessageRow = tuple[bytes, list[Cell]]


@dataclass(frozen=True)
class StoredEvent:
    """One event of a layout-1 message row, with the batch header fields it was stored with."""

    header: BatchHeader
    event: Event


def decode_event(value: bytes) -> StoredEvent:
    """A layout-1 message cell's value; ``wire.WireError`` (or msgpack's) when it is not one."""
    app, host, client_id, raw = msgpack.unpackb(value, raw=False, use_list=True)
    return StoredEvent(BatchHeader(client_id, 0, app=app, host=host), wire.validate_event(raw))


def decode_events(values: Iterable[bytes]) -> tuple[list[tuple[BatchHeader, Event]], int]:
    """:func:`decode_event` of each of ``values``: the header and event of each that decodes, and how many did not."""
    out: list[tuple[BatchHeader, Event]] = []
    bad = 0
    for value in values:
        try:
            stored = decode_event(value)
        except Exception:  # noqa: BLE001 - any cell that does not decode is counted and left out
            bad += 1
            continue
        out.append((stored.header, stored.event))
    return out, bad


def row_hash_fraction(row: bytes) -> float:
    """How far through the message table ``row`` is (rows are ordered by their 4-byte hash)."""
    return int.from_bytes(keys.unpack(row)[0], "big") / 2**32  # type: ignore[arg-type]


def message_reader(store: Store) -> Callable[[bytes | None, int], list[MessageRow]]:
    """``read(after, limit)``: up to ``limit`` live message rows after row ``after`` (None: from the
    first), in key order, each with its cells' values and write times.  ``store`` is the old store,
    opened with ``any_layout=True``."""
    scan_cells = getattr(store, "scan_cells", None)
    if scan_cells is not None:  # HBase
        def read_hbase(after: bytes | None, limit: int) -> list[MessageRow]:
            start = b"" if after is None else keys.successor(after)
            return [(row, list(cells.values())) for row, cells in scan_cells(MESSAGES, start, limit=limit)]
        return read_hbase
    from collector.store import local_path

    path = local_path(store.url)
    if path is None:
        raise BadStoreUrlError(f"cannot read layout-1 rows from {store.url}")
    return _SqliteReader(path, store.options.ttl_s).read


class _SqliteReader:
    """Layout-1 message rows of a ``local:`` file, read-only; cells past the store's TTL are left out."""

    def __init__(self, path: str, ttl_s: int) -> None:
        self._path, self._ttl_ms = path, ttl_s * 1000

    def read(self, after: bytes | None, limit: int) -> list[MessageRow]:
        oldest = int(time.time() * 1000) - self._ttl_ms
        try:
            db = sqlite3.connect(f"file:{self._path}?mode=ro", uri=True, timeout=30.0)
            try:
                found = db.execute(
                    f'SELECT DISTINCT row FROM "{MESSAGES}" WHERE row > ? AND ts >= ? ORDER BY row LIMIT ?',
                    (after or b"", oldest, limit)).fetchall()
                if not found:
                    return []
                cells = db.execute(
                    f'SELECT row, value, ts FROM "{MESSAGES}" WHERE row > ? AND row <= ? AND ts >= ? ORDER BY row, col',
                    (after or b"", found[-1][0], oldest)).fetchall()
            finally:
                db.close()
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"cannot read {self._path}: {exc}") from exc
        # SQLite gives BLOBs as bytes and INTEGERs as int: grouped as they come, without a copy.
        return [(row, [(value, ts) for _, value, ts in group]) for row, group in itertools.groupby(cells, _first)]


_first = operator.itemgetter(0)
