"""The HBase store: the same tables through the Thrift1 gateway with happybase.

Tables are created on first use as ``<namespace>_<table>`` (Thrift1 cannot create
HBase namespaces; for a real namespace made in the HBase shell, pass
``namespace=ns:trace`` and the tables become ``ns:trace_messages`` ...).  Every
family keeps one version and expires cells ``ttl_s`` seconds after they were
written (HBase's column-family TTL, applied on read and purged by compactions).

The salt bucket count is recorded in ``<namespace>_meta`` (no TTL) and checked on
every open (:mod:`collector.store.layout`).  Given ``thrift2=(host, port)``, an HBase
Thrift2 gateway, new tables are created there (:mod:`collector.store.hbase_admin`):
pre-split (the time index one region per salt bucket, the message and pending tables
as many regions evenly over their 4-byte hash prefix) and with their families'
``storage``, a compression codec and a data block encoding (GZ and FAST_DIFF unless
the URL says otherwise).  Without it they start as one region, compressed but not
encoded (Thrift1 cannot set an encoding).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import happybase
from Hbase_thrift import AlreadyExists, IllegalArgument, Mutation  # loaded by happybase
from Hbase_thrift import IOError as HBaseIOError
from thriftpy2.thrift import TApplicationException
from thriftpy2.transport import TTransportException

from collector.store import hbase_admin, keys, layout, schema
from collector.store.base import DEFAULT_OPTIONS, DEFAULT_SCAN_BATCH, Columns, Row, StoreOptions
from collector.store.errors import StoreError, StoreUnavailableError

DEFAULT_NAMESPACE = "tracehook"
DEFAULT_TIMEOUT_MS = 60_000
"""Socket timeout of a Thrift call (a big batched put takes a while on a busy server)."""
DEFAULT_POOL_SIZE = 8
"""Connections kept open; each thread uses one at a time (happybase connections are not thread-safe).
Eight lets a time-range query scan all salt buckets at once."""

_UNAVAILABLE = (TTransportException, OSError, EOFError)


def _create_if_absent(conn: happybase.Connection, name: str, families: dict[str, dict[str, Any]]) -> None:
    """Create table ``name`` unless another process (the collector, a parallel index task) made it first.

    Thrift1 says so with AlreadyExists when the table was there before the call, and with an
    IOError carrying TableExistsException when the other create was still in progress.
    """
    try:
        conn.create_table(name, families)
    except AlreadyExists:
        pass
    except HBaseIOError as exc:
        if b"TableExistsException" not in _message_bytes(exc):
            raise


def _message_bytes(exc: Exception) -> bytes:
    message = getattr(exc, "message", None) or b""
    return message if isinstance(message, bytes) else str(message).encode()

log = logging.getLogger(__name__)


def scan_bound(key: bytes) -> bytes | None:
    """A scan bound HBase takes that cuts the rows it can hold where ``key`` does (None: after them all).

    HBase refuses a scan whose start or stop row is longer than a row may be
    (:data:`~collector.store.schema.MAX_ROW_KEY_BYTES`, ``L``), and queries build such keys: a 16 KiB
    topic's 16 KiB key, or the successor of a row of exactly ``L`` bytes where a page resumes.  A row
    ``R`` of at most ``L`` bytes sorts before ``key`` exactly when it sorts before ``key[:L]`` with its
    trailing 0xFF bytes dropped and its last byte then raised by one, a key of at most ``L`` bytes.
    """
    if len(key) <= schema.MAX_ROW_KEY_BYTES:
        return key
    head = key[:schema.MAX_ROW_KEY_BYTES].rstrip(b"\xff")
    return head[:-1] + bytes([head[-1] + 1]) if head else None


class HBaseStore:
    """:class:`~collector.store.base.Store` on HBase Thrift1; safe to share between threads."""

    concurrent_reads = True
    preferred_put_rows = 1
    """No minimum put: each put is one Thrift round trip, whose size the caller's ``batch_size`` sets."""

    def __init__(
        self, host: str, port: int, namespace: str = DEFAULT_NAMESPACE, options: StoreOptions = DEFAULT_OPTIONS,
        *, timeout_ms: int = DEFAULT_TIMEOUT_MS, pool_size: int = DEFAULT_POOL_SIZE, create_tables: bool = True,
        thrift2: tuple[str, int] | None = None, storage: hbase_admin.FamilyStorage | None = None,
    ) -> None:
        if not namespace:
            raise ValueError("namespace must not be empty")
        self.url = f"hbase://{host}:{port}?namespace={namespace}"
        self.options = options
        self.namespace = namespace
        self._connect_args: dict[str, Any] = dict(
            host=host, port=port, timeout=timeout_ms, table_prefix=namespace, table_prefix_separator="_",
        )
        self._idle: queue.LifoQueue[happybase.Connection] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(pool_size)
        self.max_writers = pool_size  # each writer holds a pooled connection through its put
        self._closed = False
        self._thrift2 = thrift2
        self.storage = storage or hbase_admin.family_storage({}, thrift2=thrift2 is not None)
        self._timeout_ms = timeout_ms
        self.salt_buckets, self.layout_version = self._open_tables(create_tables)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[happybase.Connection]:
        """A pooled connection; one that failed is dropped with the idle ones, and errors become store errors."""
        if self._closed:
            raise StoreError("store is closed")
        with self._slots:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                conn = None
            try:
                if conn is None:
                    conn = happybase.Connection(autoconnect=True, **self._connect_args)
                yield conn
            except _UNAVAILABLE as exc:
                if conn is not None:
                    conn.close()
                conn = None
                self._drop_idle()  # the same outage broke them too: the next call reconnects
                raise StoreUnavailableError(f"HBase at {self.url} is unavailable: {exc!r}") from exc
            except (HBaseIOError, IllegalArgument, TApplicationException) as exc:
                raise StoreError(f"HBase error: {getattr(exc, 'message', None) or exc!r}") from exc
            finally:
                if conn is not None:
                    self._idle.put(conn)

    def _drop_idle(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return

    def _existing_tables(self, conn: happybase.Connection) -> set[str]:
        return {name.decode() for name in conn.tables()}

    def _open_tables(self, create: bool) -> tuple[int, int]:
        """Check (and with ``create``, record) the salt bucket count and layout version, create missing
        tables of a store in this release's layout; ``(salt buckets, layout version)``."""
        with self._connection() as conn:
            existing = self._existing_tables(conn)
            if layout.META_TABLE not in existing:
                if not create:  # an index task whose driver made the tables; nothing recorded to check
                    old = layout.has_index_tables(existing)  # tables from before anything was recorded
                    return (self.options.salt_buckets or schema.DEFAULT_SALT_BUCKETS,
                            layout.OLDEST_LAYOUT if old else layout.LAYOUT_VERSION)
                _create_if_absent(conn, layout.META_TABLE, {layout.META_FAMILY: dict(max_versions=1)})
            buckets, version = layout.settle_layout(
                self.url, self.options.salt_buckets, had_tables=layout.has_index_tables(existing),
                read=lambda column: self._read_meta(conn, column),
                record_if_absent=lambda column, value: self._record_meta_if_absent(conn, column, value))
        if not create or version != layout.LAYOUT_VERSION:  # an older store is only read, by the migration
            return buckets, version
        missing = [t for t in schema.TABLES if t.name not in existing]
        self._create_tables(missing, buckets)  # each on a pooled connection of its own
        if missing and self._thrift2 is None:
            # A warning when the URL chose a bucket count (the user is sizing for volume).
            level = logging.INFO if self.options.salt_buckets is None or buckets == 1 else logging.WARNING
            log.log(level, "created HBase tables %s_* as one region each and without a data block encoding: pass "
                        "thrift2=HOST:PORT (an HBase Thrift2 gateway) in the store URL to create them pre-split by "
                        "salt bucket and FAST_DIFF-encoded", self.namespace)
        with self._connection() as conn:
            self._warn_other_ttl(conn, [t.name for t in schema.TABLES if t.name in existing])
        return buckets, version

    def _read_meta(self, conn: happybase.Connection, column: bytes) -> bytes | None:
        return conn.table(layout.META_TABLE).row(layout.META_ROW, columns=[column]).get(column)

    def _record_meta_if_absent(self, conn: happybase.Connection, column: bytes, value: bytes) -> None:
        # checkAndPut with no expected value: written only if absent, so racing first opens agree.
        conn.client.checkAndPut(
            conn.table(layout.META_TABLE).name, layout.META_ROW, column, None,
            Mutation(isDelete=False, column=column, value=value), {})

    def _create_tables(self, tables: list[schema.Table], buckets: int) -> None:
        """Create ``tables`` side by side (HBase runs the create procedures in parallel: 11 tables
        take about 1.4 s instead of 7 s one after another on a standalone HBase)."""
        def create(table: schema.Table) -> None:
            with self._connection() as conn:
                self._create_table(conn, table, buckets)

        if tables:
            with ThreadPoolExecutor(max_workers=len(tables), thread_name_prefix="hbase-create") as pool:
                for future in [pool.submit(create, t) for t in tables]:
                    future.result()  # the first error, after every create has finished

    def _create_table(self, conn: happybase.Connection, table: schema.Table, buckets: int) -> None:
        if self._thrift2 is None:  # compression only: Thrift1's ColumnDescriptor has no encoding
            compression = self.storage.compression.upper()
            # Thrift1's ColumnDescriptor defaults turn the block cache and the row bloom filter off
            # (HBase's own defaults have both on): without them every read decompresses from disk.
            family = dict(max_versions=1, time_to_live=self.options.ttl_of(table.name), compression=compression,
                          block_cache_enabled=True, bloom_filter_type="ROW")
            _create_if_absent(conn, table.name, {f: family for f in table.families})
            return
        host, port = self._thrift2
        try:
            hbase_admin.create_table(
                host, port, f"{self.namespace}_{table.name}", table.families, max_versions=1,
                ttl_s=self.options.ttl_of(table.name), split_keys=layout.split_keys(table.name, buckets),
                timeout_ms=self._timeout_ms, storage=self.storage)
        except hbase_admin.TIOError as exc:
            if "TableExistsException" not in (exc.message or ""):
                raise StoreError(f"HBase Thrift2 at {host}:{port} could not create {table.name}: {exc.message}") from exc
        except _UNAVAILABLE as exc:
            raise StoreUnavailableError(f"HBase Thrift2 gateway at {host}:{port} is unavailable: {exc!r}") from exc

    def _warn_other_ttl(self, conn: happybase.Connection, tables: list[str]) -> None:
        """Warn once when existing tables keep cells for another TTL than the URL asks (``ttl_days``, and
        ``body_ttl_days`` for the bodies table: :meth:`StoreOptions.ttl_of`).

        Not altered here: Thrift1 has no call to change a family, so the TTL stays until
        changed in the HBase shell (``alter 'NS_table', {NAME => 's', TTL => N}``).
        """
        other = sorted({
            (f"{self.namespace}_{table}", int(desc["time_to_live"]), self.options.ttl_of(table))
            for table in tables for desc in conn.table(table).families().values()
            if int(desc["time_to_live"]) != self.options.ttl_of(table)
        })
        if other:
            log.warning("HBase tables keep cells for another TTL than the store URL asks for (ttl_days, "
                        "body_ttl_days): %s; the existing TTL applies until altered in the HBase shell",
                        ", ".join(f"{name} {ttl} s (asked {asked} s)" for name, ttl, asked in other))

    def put_rows(self, table: str, rows: Sequence[Row], *, ts: int | None = None) -> None:
        # One mutateRows call for all rows (mutateRowsTs with an explicit timestamp).
        with self._connection() as conn, conn.table(table).batch(timestamp=ts) as batch:
            for row, columns in rows:
                batch.put(row, columns)

    def get_row(self, table: str, row: bytes) -> Columns:
        with self._connection() as conn:
            return dict(conn.table(table).row(row))

    def get_rows(self, table: str, rows: Sequence[bytes]) -> list[Columns]:
        if not rows:
            return []
        with self._connection() as conn:
            found = dict(conn.table(table).rows(list(rows)))
        return [dict(found.get(row, {})) for row in rows]

    def get_cells(self, table: str, row: bytes, columns: Iterable[bytes]) -> Columns:
        wanted = sorted(set(columns))
        if not wanted:  # happybase reads no columns as all of them
            return {}
        with self._connection() as conn:
            return dict(conn.table(table).row(row, columns=wanted))

    def change_mark(self) -> None:
        return None  # another client's writes leave no trace a reader could compare

    def scan(
        self, table: str, start: bytes, stop: bytes, *, limit: int | None = None, reverse: bool = False
    ) -> Iterator[Row]:
        # Read in pages, each with its own short-lived scanner, so a caller that holds
        # several scans open at once (merged salt buckets) never holds pooled connections.
        remaining = limit
        while remaining is None or remaining > 0:
            page = DEFAULT_SCAN_BATCH if remaining is None else min(remaining, DEFAULT_SCAN_BATCH)
            rows = self._scan_page(table, start, stop, page, reverse)
            yield from rows
            if len(rows) < page:
                return
            if remaining is not None:
                remaining -= len(rows)
            if reverse:
                stop = rows[-1][0]
            else:
                start = keys.successor(rows[-1][0])

    def _scan_page(self, table: str, start: bytes, stop: bytes, count: int, reverse: bool) -> list[Row]:
        out: list[Row] = []
        lo, hi = scan_bound(start), scan_bound(stop)  # hi None: to the table's end
        if lo is None or (hi is not None and lo >= hi):
            return out  # no row HBase can hold is in the range (and HBase would answer lo's row)
        with self._connection() as conn:
            if reverse:
                # A reversed HBase scan starts at its (inclusive) start row and stops before its
                # stop row; [lo, hi) backwards is: begin at hi, skip it, end below lo.
                rows = conn.table(table).scan(row_start=hi, reverse=True, limit=count + 1, batch_size=count + 1)
            else:
                rows = conn.table(table).scan(row_start=lo, row_stop=hi, limit=count, batch_size=count)
            try:
                for row, columns in rows:
                    if reverse and hi is not None and row >= hi:
                        continue
                    if reverse and row < lo:
                        break
                    out.append((row, dict(columns)))
                    if len(out) == count:
                        break
            finally:
                rows.close()  # closes the server-side scanner
        return out

    def scan_cells(
        self, table: str, start: bytes, *, limit: int
    ) -> list[tuple[bytes, dict[bytes, tuple[bytes, int]]]]:
        """Up to ``limit`` rows from ``start`` (inclusive), each cell with its write timestamp (ms).

        Only the migration reads timestamps (:mod:`collector.store.layout_v1`): its copies must
        not outlive the cells they copy.
        """
        with self._connection() as conn:
            rows = conn.table(table).scan(row_start=start, limit=limit, batch_size=limit, include_timestamp=True)
            try:
                return [(row, dict(columns)) for row, columns in rows]
            finally:
                rows.close()

    def delete_rows(self, table: str, rows: Iterable[bytes]) -> None:
        with self._connection() as conn, conn.table(table).batch() as batch:
            for row in rows:
                batch.delete(row)

    def purge_expired(self) -> int:
        """Ask HBase to major-compact every table, which drops expired cells (asynchronously).

        Reads never return expired cells anyway; returns 0 as HBase does not say how many went.
        """
        with self._connection() as conn:
            for table in schema.TABLES:
                conn.compact_table(table.name, major=True)
        return 0

    def get_meta(self, column: bytes) -> bytes | None:
        with self._connection() as conn:
            return self._read_meta(conn, column)

    def put_meta(self, column: bytes, value: bytes) -> None:
        with self._connection() as conn:
            conn.table(layout.META_TABLE).put(layout.META_ROW, {column: value})

    def end_batch(self) -> bool:
        """Nothing to do: HBase flushes and compacts on its own."""
        return True

    def drop_tables(self) -> None:
        """Delete this namespace's tables (tests and benchmarks clean up with this)."""
        with self._connection() as conn:
            existing = self._existing_tables(conn)
            for name in [t.name for t in schema.TABLES] + [layout.META_TABLE]:
                if name in existing:
                    conn.delete_table(name, disable=True)

    def close(self) -> None:
        self._closed = True
        self._drop_idle()
