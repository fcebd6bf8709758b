"""The embedded store: one SQLite file with a sorted ``(row, column)`` table per logical table.

SQLite compares BLOBs with memcmp, which is exactly HBase's row-key order, so the
same keys and the same range scans work unchanged.  TTL follows HBase's rule: a
cell expires ``ttl_s`` seconds after it was written; reads skip expired cells and
:meth:`LocalStore.purge_expired` deletes them.
"""

from __future__ import annotations

import operator
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from collector import extensions
from collector.store import keys, layout, schema, sqlite_tables
from collector.store.base import DEFAULT_OPTIONS, DEFAULT_SCAN_BATCH, ChangeMark, Columns, Row, StoreOptions
from collector.store.sqlite_tables import SqlTable
from collector.store.sqlite_writer import PyWriter, Writer

DEFAULT_BUSY_TIMEOUT_S = 30.0
"""How long a writer waits for another process's write lock (the index job vs. the collector)."""
PAGE_SIZE = 16384
"""SQLite page size of a new store file (an existing file keeps its own)."""
CACHE_KIB = 262144
"""SQLite page cache per connection, in KiB, unless the URL's ``cache_mib`` says otherwise.  Measured
with the index job's store kept open across micro-batches (10^6 events): 64 MiB read 13.2 KB per
event through the kernel, 128 MiB 6.4 KB, 256 and 512 MiB 5.0 KB (docs/index-store.md)."""
PUT_ROWS = 200_000
"""Rows per put the indexer gathers for this store (:attr:`LocalStore.preferred_put_rows`): a follower
behind the log takes micro-batches of 100,000s of events, and each put of hash-keyed message rows
dirties most of that table's pages, so each put more writes them all to the WAL again (measured,
600,000 sends in micro-batches of 200,000: the writes cost 14-17 µs per event with puts of 200,000
rows, 15 with 100,000, 18-19 with 50,000, 24-26 with 20,000; docs/index-store.md)."""
WAL_AUTOCHECKPOINT_PAGES = 1000
"""``PRAGMA wal_autocheckpoint`` of every connection (SQLite's default, said here): the WAL pages after
which a COMMIT checkpoints.  With a put per table and micro-batch the puts write different pages, so a
checkpoint after each copies each page once anyway; 20,000 pages cost the same CPU and let the WAL grow
to 168 MB instead of 73 within a micro-batch of 200,000 sends (docs/index-store.md)."""
WAL_KEEP_BYTES = 64 * 1024 * 1024
"""``PRAGMA journal_size_limit``: the bytes of WAL file SQLite keeps when it starts the WAL over
(a WAL that grew for one big put gives the rest back to the file system)."""
CHECKPOINT_MODE = "TRUNCATE"
"""The checkpoint :meth:`LocalStore.end_batch` runs (``PRAGMA wal_checkpoint(...)``), without waiting
for readers (a query that holds the WAL would otherwise stall the index up to the busy timeout)."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class LocalStore:
    """:class:`~collector.store.base.Store` on SQLite; safe to share between threads."""

    concurrent_reads = False
    preferred_put_rows = PUT_ROWS
    """Rows per :meth:`put_rows` the indexer gathers, more than HBase's round trips want: each put is
    one write transaction, and a transaction writes every page it touched to the WAL, so one put of
    a table's rows per micro-batch writes fewer pages than chunks of 1,000 (measured: the message
    rows are hash-keyed, and each chunk touched a page per row)."""
    max_writers = 1
    """Writer threads the indexer runs for this store at most: every write holds the writing
    connection's lock, so a second writer only waits for it (measured: more CPU per event, and slower)."""

    def __init__(self, path: str, options: StoreOptions = DEFAULT_OPTIONS, *, clock: Callable[[], int] = _now_ms,
                 cache_kib: int | None = None) -> None:
        self.url = f"local:{path}"
        self.options = options
        self._clock = clock
        self._lock = threading.Lock()
        if os.path.dirname(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
        self._busy_timeout_ms = int(DEFAULT_BUSY_TIMEOUT_S * 1000)
        self._wal_path = path + "-wal"
        self._path = os.path.abspath(path)  # the reader opens the same file whatever the cwd is then
        self._cache_kib = CACHE_KIB if cache_kib is None else cache_kib
        self._reader: sqlite3.Connection | None = None
        self._c_reader: Any = None
        """``get_rows``' own ``_sqlput.Connection`` (opened with the reader), when :data:`SQLPUT`."""
        self._read_lock = threading.Lock()
        self._put_in_c = _sqlput is not None
        """Whether the writes go through a ``collector.store._sqlput.Connection`` (:data:`SQLPUT`)."""
        self._db: Writer = (_sqlput.Connection(path, self._busy_timeout_ms) if self._put_in_c
                             else PyWriter(path, DEFAULT_BUSY_TIMEOUT_S))
        """The one connection every write of this store goes through (under ``_lock``)."""
        # Only a new (empty) file takes a page size, before its first table: bigger pages hold
        # more of the short index cells per page header (measured: fewer bytes and less CPU per event).
        self._db.execute(f"PRAGMA page_size={PAGE_SIZE}")
        # Writes land all over the message table (hash-keyed): a bigger page cache re-reads fewer pages
        # (it grows only as pages are read: a small store or a query connection stays small).
        self._db.execute(f"PRAGMA cache_size=-{self._cache_kib}")
        # WAL lets the collector read while the index job writes from another process.
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        # Per connection, so a store file written before these settings gets them too.
        self._db.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
        self._db.execute(f"PRAGMA journal_size_limit={WAL_KEEP_BYTES}")
        try:
            # One write transaction from the check to the record: a process opening the file at the
            # same time sees either no tables or the tables with their layout recorded.
            self._db.execute("BEGIN IMMEDIATE")
            had_tables = layout.has_index_tables(
                {name for (name,) in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'", ())})
            # The layout record (same shape as the other tables, HBase's <ns>_meta) is outside
            # schema.TABLES, so no TTL applies to it and purges never touch it.
            self._db.execute(sqlite_tables.whole_table(layout.META_TABLE).create())
            self.salt_buckets, self.layout_version = layout.settle_layout(
                self.url, options.salt_buckets, read=self._read_meta,
                record_if_absent=self._record_meta_if_absent, had_tables=had_tables)
            if self.layout_version == layout.LAYOUT_VERSION:  # an older store is only read, by the migration
                for table in schema.TABLES:
                    self._db.execute(sqlite_tables.lean(table).create())
            self._tables = self._found_tables()
            self._db.execute("COMMIT")
        except BaseException:
            self._db.close()
            raise

    def _found_tables(self) -> dict[str, SqlTable]:
        """How each table of the layout is kept: as this release creates it, or as layout 2 did (a store
        upgraded in place keeps its tables; :mod:`collector.store.sqlite_tables`)."""
        return {table.name: sqlite_tables.found(table, sqlite_tables.table_columns(
                    self._db.execute(f'PRAGMA table_info("{table.name}")', ())))
                for table in schema.TABLES}

    def _table(self, table: str) -> SqlTable:
        found = self._tables.get(table)
        if found is None:
            raise ValueError(f"unknown table: {table!r}")
        return found

    def _read_meta(self, column: bytes) -> bytes | None:
        found = self._db.execute(f'SELECT value FROM "{layout.META_TABLE}" WHERE row = ? AND col = ?',
                                 (layout.META_ROW, column))
        return bytes(found[0][0]) if found else None

    def _record_meta_if_absent(self, column: bytes, value: bytes) -> None:
        self._db.execute(f'INSERT OR IGNORE INTO "{layout.META_TABLE}" (row, col, ts, value) VALUES (?, ?, ?, ?)',
                         (layout.META_ROW, column, self._clock(), value))

    def get_meta(self, column: bytes) -> bytes | None:
        with self._lock:
            return self._read_meta(column)

    def put_meta(self, column: bytes, value: bytes) -> None:
        with self._lock:
            self._db.execute(f'INSERT INTO "{layout.META_TABLE}" (row, col, ts, value) VALUES (?, ?, ?, ?) '
                             "ON CONFLICT (row, col) DO UPDATE SET ts = excluded.ts, value = excluded.value",
                             (layout.META_ROW, column, self._clock(), value))

    def _read_db(self) -> sqlite3.Connection:
        """The connection reads run on (under ``_read_lock``), opened at the first read.

        Not the writing one: a put holds that one (and its lock) for its whole statement, and the
        indexer reads the rollups' messages back while its writer thread still writes the batch's
        index rows (:func:`collector.index.indexer.index_records`, ``deferred``).  Every write is
        committed when its call returns, so a read after it sees it."""
        if self._reader is None:
            reader = sqlite3.connect(self._path, timeout=DEFAULT_BUSY_TIMEOUT_S, check_same_thread=False,
                                     isolation_level=None)
            reader.execute(f"PRAGMA cache_size=-{self._cache_kib}")
            reader.execute("PRAGMA query_only=ON")
            if self._put_in_c:
                self._c_reader = _sqlput.Connection(self._path, self._busy_timeout_ms)
                self._c_reader.execute(f"PRAGMA cache_size=-{self._cache_kib}")
                self._c_reader.execute("PRAGMA query_only=ON")
            self._reader = reader
        return self._reader

    def _oldest_live(self, table: SqlTable) -> int:
        """The first stored write time of ``table`` still live (its TTL: :meth:`StoreOptions.ttl_of`)."""
        return table.oldest(self._clock() - self.options.ttl_of(table.name) * 1000)

    def put_rows(self, table: str, rows: Sequence[Row], *, ts: int | None = None) -> None:
        self.put_dated_rows(table, [(ts, rows)])

    def put_dated_rows(self, table: str, dated: Sequence[tuple[int | None, Sequence[Row]]]) -> None:
        """:meth:`put_rows` of each ``(ts, rows)`` in turn, in one write transaction (a copy of many
        write times, :mod:`collector.index.migrate`: one transaction per time dirtied the same pages
        again for each)."""
        t = self._table(table)
        sort = table in _SORTED_PUTS
        sql = t.upsert
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for ts, rows in dated:
                    ts = t.stored_ts(self._clock() if ts is None else ts)
                    if self._put_in_c:  # one list of its own: the C loop reads it without the GIL
                        rows = rows if type(rows) is list else list(rows)
                    if not (self._put_in_c and self._db.upsert(sql, rows, ts, sort)):
                        if sort:  # stable: of a row put twice, the later columns still win
                            rows = sorted(rows, key=_row_key)
                        self._db.executemany(sql, _py_cells(rows, ts))
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def end_batch(self) -> bool:
        """Now that an index batch is written (:func:`collector.index.indexer.finish_batch` calls it), a
        WAL bigger than :data:`WAL_KEEP_BYTES` is checkpointed into the file and cut to 0 bytes (a
        smaller one is left to the auto-checkpoints: cutting it after every small batch cost more than
        it gave back).  Never waits: a query still reading a snapshot the WAL holds keeps it, the call
        returns False, and the next batch's call tries again."""
        try:
            if os.path.getsize(self._wal_path) <= WAL_KEEP_BYTES:
                return True
        except FileNotFoundError:
            return True
        with self._lock:
            self._db.execute("PRAGMA busy_timeout=0")
            try:
                ((busy, _, _),) = self._db.execute(f"PRAGMA wal_checkpoint({CHECKPOINT_MODE})")
            finally:
                self._db.execute(f"PRAGMA busy_timeout={self._busy_timeout_ms}")
        return busy == 0

    def get_row(self, table: str, row: bytes) -> Columns:
        t = self._table(table)
        with self._read_lock:
            cur = self._read_db().execute(t.select_row, (row, self._oldest_live(t)))
            return {bytes(col): bytes(value) for col, value in cur}

    def get_rows(self, table: str, rows: Sequence[bytes]) -> list[Columns]:
        t = self._table(table)
        if self._put_in_c:  # the same answer, built in C (tests/collector/store/test_sqlput.py)
            with self._read_lock:
                self._read_db()
                got = self._c_reader.select_rows(t.select_row, rows if type(rows) is list else list(rows),
                                                 self._oldest_live(t))
            if got is not None:
                return got  # type: ignore[no-any-return]
        return self._py_get_rows(t, rows)

    def _py_get_rows(self, t: SqlTable, rows: Sequence[bytes]) -> list[Columns]:
        """:meth:`get_rows` in Python: chunks of ``IN (...)`` lookups, the reference of the C read."""
        oldest = self._oldest_live(t)
        found: dict[bytes, Columns] = {}
        # In key order: each IN list then covers a narrow key range, and its lookups share pages
        # (measured on hash-keyed message rows: about a sixth less CPU per row).
        unique = sorted(set(rows))
        for i in range(0, len(unique), _IN_CHUNK):
            chunk = unique[i:i + _IN_CHUNK]
            with self._read_lock:
                cur = self._read_db().execute(
                    t.select_rows_in(len(chunk)), (*map(bytearray, chunk), oldest),  # bytearray: see _py_cells
                )
                for row, col, value in cur:  # BLOBs come back as bytes
                    columns = found.get(row)
                    if columns is None:
                        found[row] = {col: value}
                    else:
                        columns[col] = value
        if len(unique) < len(rows):  # a row asked twice gets a dict of its own each time
            return [dict(found.get(row, {})) for row in rows]
        pop = found.pop
        return [pop(row, None) or {} for row in rows]

    def get_cells(self, table: str, row: bytes, columns: Iterable[bytes]) -> Columns:
        t = self._table(table)
        # A column of another family is never stored: nothing to ask for.
        wanted = sorted({c for c in map(t.stored_column, columns) if c is not None})
        found: Columns = {}
        for i in range(0, len(wanted), _IN_CHUNK):
            chunk = wanted[i:i + _IN_CHUNK]
            with self._read_lock:
                found.update(self._read_db().execute(
                    t.select_cells(len(chunk)), (row, *map(bytearray, chunk), self._oldest_live(t))))
        return found

    def change_mark(self) -> ChangeMark:
        # data_version changes with every commit of another connection (this process's or not), never ours.
        with self._lock:
            ((version,),) = self._db.execute("PRAGMA data_version")
            return ChangeMark(version, self._clock())

    def scan(
        self, table: str, start: bytes, stop: bytes, *, limit: int | None = None, reverse: bool = False
    ) -> Iterator[Row]:
        t = self._table(table)
        sql = t.scan(reverse)
        # A short scan (limit=1 for an offset, 21 for a page) reads a short page: index rows
        # have one or two cells, and a page that turns out too small is simply continued.
        page = DEFAULT_SCAN_BATCH if limit is None else min(DEFAULT_SCAN_BATCH, 2 * limit + 2)
        lo, hi, emitted = start, stop, 0
        while True:
            # Cells come in pages so a long scan neither holds the lock nor loads everything.
            with self._read_lock:
                cells = self._read_db().execute(sql, (lo, hi, self._oldest_live(t), page)).fetchall()
            rows = _group_cells(cells)
            full = len(cells) == page
            if full and len(rows) == 1:
                page *= 2  # one row wider than a page: read it again with a bigger page
                continue
            if full:
                rows.pop()  # the last row may continue on the next page: read it again whole
            for row in rows:
                yield row
                emitted += 1
                if limit is not None and emitted >= limit:
                    return
            if not full:
                return
            if reverse:
                hi = rows[-1][0]
            else:
                lo = keys.successor(rows[-1][0])
            page = min(DEFAULT_SCAN_BATCH, 2 * page)

    def delete_rows(self, table: str, rows: Iterable[bytes]) -> None:
        with self._lock:
            self._db.executemany(self._table(table).delete_row, [(r,) for r in rows])

    def purge_expired(self) -> int:
        removed = 0
        with self._lock:
            for t in self._tables.values():
                removed += self._db.executemany(t.purge, [(self._oldest_live(t),)])
        return removed

    def close(self) -> None:
        with self._read_lock:
            if self._reader is not None:
                self._reader.close()
            if self._c_reader is not None:
                self._c_reader.close()
        with self._lock:
            self._db.close()


_SORTED_PUTS = frozenset((schema.MESSAGES, schema.PENDING, schema.TRACEIDX, schema.KEYIDX, schema.ROLLUPS))
"""Tables whose puts :meth:`LocalStore.put_rows` writes in key order (``_sqlput`` sorts the cells by row and
column in C, with the GIL released; the Python fallback sorts the rows): a put's rows land all over these
(keyed by a hash of the msg id, a random W3C trace id, a message key before the time; a minute's rollup
parts row takes a column per message, in hash order), and in key order it visits each page once, in turn
(measured at 10^6 events, messages: 3.5 KB less read per event and 1-2 µs less CPU; 400,000 sends:
traceidx 2.6 -> 2.2 µs per cell, keyidx 1.55 -> 1.45, rollups 1.92-2.05 -> 1.80-1.88).  The tables keyed
by topic and time (timeidx, queueidx) come nearly in order already and cost more sorted (1.05 -> 1.2 µs
per cell), so their puts keep the order given."""
_row_key = operator.itemgetter(0)


def _py_cells(rows: Sequence[Row], ts: int) -> list[tuple[bytearray, bytearray, int, bytearray]]:
    """The parameters of :meth:`LocalStore.put_rows`' upsert: one ``(row, col, ts, value)`` per cell.

    The blobs go to SQLite as ``bytearray``: Python's sqlite3 binds a ``bytes`` parameter only after
    looking for an adapter for it (CPython 3.11's ``need_adapt``: a key tuple, a dict lookup and an
    ``AttributeError`` raised and cleared, per value), a ``bytearray`` directly, as the same BLOB.
    Measured: about 1 µs less per cell, copies included (benchmarks/RESULTS.md); the multi-row reads
    bind their keys the same way (0.2 µs less per key looked up, copies included).  ``_sqlput`` binds
    bytes as they are (its own connection's fallback takes these cells too).
    """
    b = bytearray
    return [(b(row), b(col), ts, b(value)) for row, columns in rows for col, value in columns.items()]


def _load_sqlput() -> Any:
    _sqlput = extensions.load("collector.store._sqlput")
    if _sqlput is None:  # not built (no compiler or no sqlite3.h at install), or switched off
        return None
    if not hasattr(_sqlput, "Connection"):  # a build older than this module: rebuild it
        return None
    # Its connections and Python's sqlite3 ones open the same file: both must be one SQLite library.
    import _sqlite3
    shared_object = getattr(_sqlite3, "__file__", None)
    return _sqlput if shared_object and _sqlput.same_library(shared_object) else None


ENV_PYTHON_PUTS = extensions.ENV_PYTHON_PUTS
"""Set to ``1`` to write every put with Python's ``executemany`` (and read with :meth:`LocalStore._py_get_rows`)
even when ``_sqlput`` is built."""
_sqlput = _load_sqlput()
SQLPUT = _sqlput is not None
"""True when the optional C extension ``collector/store/_sqlput.c`` is built (and not turned off by
:data:`ENV_PYTHON_PUTS`): every store's writes then go through a ``_sqlput.Connection`` of its own
(opened with ``sqlite3_open_v2`` on the system libsqlite3 that Python's sqlite3 loads too, checked by
``_sqlput.same_library``), whose puts run their statement over the cells with the GIL released, so the
indexer's writer thread writes while the calling thread builds the next batch (Python's ``executemany``
takes the GIL back for every row, and the two threads took turns: measured, wall time equal to CPU time
with a core idle); :meth:`LocalStore.get_rows` reads through a second one (``select_rows``).  The other
reads stay on Python's sqlite3.  tests/collector/store/test_sqlput.py checks both paths store and answer
the same."""


def _group_cells(cells: list[tuple[bytes, bytes, bytes]]) -> list[Row]:
    rows: list[Row] = []
    for row, col, value in cells:
        row = bytes(row)
        if not rows or rows[-1][0] != row:
            rows.append((row, {}))
        rows[-1][1][bytes(col)] = bytes(value)
    return rows


_IN_CHUNK = 500
"""Rows per ``IN (...)`` lookup: below SQLite's default limit of bound parameters."""

