"""The trace index store: row-key layout, the two adapters and the queries, over SQLite or HBase.

The indexer that writes it is :mod:`collector.index`, a package above this one.

Example::

    from collector.store import open_store
    from collector.index.indexer import index_records
    from collector.store.reader import TraceQuery

    store = open_store("local:/tmp/index.sqlite3")          # or "hbase://127.0.0.1:9090?namespace=trace"
    index_records(store, [(batch.header, ev) for ev in batch.events])
    trace = TraceQuery(store).get_trace("msg-1")
    store.close()

Store URLs: ``local:PATH`` (embedded SQLite, the default) and
``hbase://HOST:PORT?namespace=NS`` (HBase Thrift1 through happybase; tables are
named ``NS_messages`` and so on).  Both take ``ttl_days=N`` (retention, default 30),
``body_ttl_days=N`` (retention of kept message bodies, default 7)
and ``salt_buckets=N`` (time-index buckets, recorded with the tables and checked on
every open: :mod:`collector.store.layout`).  ``local:`` takes ``cache_mib=N``, SQLite's
page cache per connection (:data:`collector.store.local.CACHE_KIB` by default).  HBase takes ``thrift2=HOST:PORT``, an HBase
Thrift2 gateway through which new tables are created pre-split and encoded (Thrift1
cannot), and ``compression=`` / ``block_encoding=`` for new tables
(:mod:`collector.store.hbase_admin`).  :mod:`collector.store.url` parses them.
"""

from __future__ import annotations

import sqlite3

from collector.store.base import Store, StoreOptions
from collector.store.errors import (
    BadStoreUrlError,
    LayoutVersionError,
    OldLayoutError,
    QueryError,
    SaltBucketsMismatchError,
    StoreError,
    StoreUnavailableError,
)
from collector.store.url import (
    INDEX_FILE,
    MAX_CACHE_MIB,
    LocalUrl,
    absolute_store_url,
    check_store_url,
    local_path,
    parse_store_url,
    resolve_store_url,
)

__all__ = ["BadStoreUrlError", "INDEX_FILE", "LayoutVersionError", "MAX_CACHE_MIB", "OldLayoutError", "QueryError",
           "SaltBucketsMismatchError", "Store", "StoreError", "StoreOptions", "StoreUnavailableError",
           "absolute_store_url", "check_store_url", "local_path", "open_store", "resolve_store_url"]


def open_store(url: str, *, create_tables: bool = True, any_layout: bool = False) -> Store:
    """Open (and create on first use) the store a URL names.

    ``create_tables=False`` skips the HBase table check and creation (index tasks: the
    driver created them); the SQLite store's ``CREATE TABLE IF NOT EXISTS`` costs nothing.
    A store in another layout than this release's is refused (:class:`OldLayoutError`, one
    line naming ``tracehook upgrade-store`` or ``tracehook migrate-store``) unless ``any_layout``
    (the migration and the upgrade open one).
    """
    store = _open(url, create_tables)
    if not any_layout:
        from collector.store.layout import check_layout

        try:
            check_layout(url, store.layout_version)
        except LayoutVersionError:
            store.close()
            raise
    return store


def _open(url: str, create_tables: bool) -> Store:
    parsed = parse_store_url(url)
    if isinstance(parsed, LocalUrl):
        from collector.store.local import LocalStore

        try:
            return LocalStore(parsed.path, parsed.options, cache_kib=parsed.cache_kib)
        except (sqlite3.Error, OSError) as exc:  # a directory, a file that is not SQLite, no permission
            raise BadStoreUrlError(f"cannot open the index at {parsed.path}: {exc}") from None
    from collector.store.hbase import DEFAULT_NAMESPACE, HBaseStore

    namespace = DEFAULT_NAMESPACE if parsed.namespace is None else parsed.namespace
    return HBaseStore(parsed.host, parsed.port, namespace, parsed.options, create_tables=create_tables,
                      thrift2=parsed.thrift2, storage=parsed.storage)
