"""The store interface: a sorted map of rows to columns, as HBase has it.

Adapters (:mod:`collector.store.local`, :mod:`collector.store.hbase`) only move
bytes; the layout lives in :mod:`collector.store.schema` and every query in
:mod:`collector.store.reader`, so both stores answer identically.

Columns are ``b"family:qualifier"``; a row is ``(row_key, {column: value})``.
Every cell expires ``ttl_s`` seconds after it was written (HBase column-family TTL), the
``bodies`` table's after ``body_ttl_s`` (:meth:`StoreOptions.ttl_of`); expired cells are never returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

from collector.store import schema

Columns = dict[bytes, bytes]
Row = tuple[bytes, Columns]

DEFAULT_SCAN_BATCH = 1000
"""Rows fetched per round trip when a scan has no limit."""


@dataclass(frozen=True)
class StoreOptions:
    """Options every store takes from its URL's query string."""

    ttl_s: int = schema.DEFAULT_TTL_S
    salt_buckets: int | None = None
    """Salt buckets of the time index; None takes the count the store's tables were created with
    (:data:`schema.DEFAULT_SALT_BUCKETS` for a new store).  See :mod:`collector.store.layout`."""
    body_ttl_s: int = schema.DEFAULT_BODY_TTL_S
    """Retention of kept message bodies (the ``bodies`` table), URL option ``body_ttl_days``."""

    def ttl_of(self, table: str) -> int:
        """The TTL (seconds) of every cell of ``table``: its :attr:`schema.Table.ttl` retention."""
        return self.body_ttl_s if schema.TABLES_BY_NAME[table].ttl == schema.BODY_TTL else self.ttl_s


DEFAULT_OPTIONS = StoreOptions()


class ChangeMark(NamedTuple):
    """What :meth:`Store.change_mark` gives: equal versions mean no other connection changed the store."""

    version: int
    """Changes whenever another connection or process commits to the store (not for this object's own writes)."""
    now_ms: int
    """The store's clock, which cells' TTL counts by."""


@runtime_checkable
class Store(Protocol):
    """A sorted key-value store with HBase's data model (rows, families, TTL)."""

    url: str
    options: StoreOptions
    concurrent_reads: bool
    """True when reads from several threads overlap (HBase); the SQLite store serialises them."""
    salt_buckets: int
    """The salt bucket count recorded with the store's tables (what the indexer and queries use)."""
    layout_version: int
    """The layout recorded with the store's tables (:mod:`collector.store.layout`)."""
    max_writers: int
    """Writer threads the indexer runs for this store at most (it takes the fewer of this and its
    ``writers``): more would only wait for the store's connections."""
    preferred_put_rows: int
    """Rows per :meth:`put_rows` the indexer gathers at least (it takes the more of this and its
    ``batch_size``); 1 when the caller's batch size is the store's best (a put is one round trip)."""

    def put_rows(self, table: str, rows: Sequence[Row], *, ts: int | None = None) -> None:
        """Write the given columns of each row (other columns of the row stay).

        ``ts`` (epoch ms) is the cells' write time, which their TTL counts from: now when None.
        """

    def get_row(self, table: str, row: bytes) -> Columns:
        """All live columns of one row; ``{}`` when it has none."""

    def get_rows(self, table: str, rows: Sequence[bytes]) -> list[Columns]:
        """:meth:`get_row` for many rows in one round trip, in the order asked."""

    def get_cells(self, table: str, row: bytes, columns: Iterable[bytes]) -> Columns:
        """The live cells of ``row`` among ``columns`` (absent ones left out): a few cells of a wide row."""

    def change_mark(self) -> ChangeMark | None:
        """A mark that tells whether anyone else wrote to the store since an earlier mark (their
        versions differ then); None when the store cannot tell (HBase), so callers read as now."""

    def scan(
        self, table: str, start: bytes, stop: bytes, *, limit: int | None = None, reverse: bool = False
    ) -> Iterator[Row]:
        """Rows with ``start <= key < stop`` in key order (descending when ``reverse``)."""

    def delete_rows(self, table: str, rows: Iterable[bytes]) -> None:
        """Remove whole rows."""

    def purge_expired(self) -> int:
        """Drop expired cells now (HBase does it in compactions); returns how many went."""

    def get_meta(self, column: bytes) -> bytes | None:
        """A setting recorded with the store's tables (its ``meta`` table: no TTL, never purged); None when unset."""

    def put_meta(self, column: bytes, value: bytes) -> None:
        """Record a setting with the store's tables (overwriting it)."""

    def end_batch(self) -> bool:
        """An index batch is written and finished (:func:`collector.index.indexer.finish_batch`): the
        store's moment for housekeeping that should not run inside its writes (the embedded store
        checkpoints its WAL).  False when that was put off to the next call."""

    def close(self) -> None:
        """Release connections; the store is unusable afterwards."""
