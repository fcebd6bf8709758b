"""The trace index: row-key layout, the indexer and the queries, over SQLite or HBase.

Example::

    from collector.store import open_store
    from collector.store.indexer import index_records
    from collector.store.query import TraceQuery

    store = open_store("local:/tmp/index.sqlite3")          # or "hbase://127.0.0.1:9090?namespace=trace"
    index_records(store, [(batch.header, ev) for ev in batch.events])
    trace = TraceQuery(store).get_trace("msg-1")
    store.close()

Store URLs: ``local:PATH`` (embedded SQLite, the default) and
``hbase://HOST:PORT?namespace=NS`` (HBase Thrift1 through happybase; tables are
named ``NS_messages`` and so on).  Both take ``ttl_days=N`` (retention, default 30).
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from collector.store.base import Store, StoreOptions
from collector.store.errors import BadStoreUrlError, QueryError, StoreError, StoreUnavailableError

__all__ = ["QueryError", "Store", "StoreError", "StoreOptions", "StoreUnavailableError", "open_store"]


def _options(query: dict[str, list[str]], known: set[str]) -> dict[str, str]:
    unknown = set(query) - known
    if unknown:
        raise BadStoreUrlError(f"unknown store option(s): {', '.join(sorted(unknown))}")
    return {name: values[-1] for name, values in query.items()}


def _store_options(opts: dict[str, str]) -> StoreOptions:
    if "ttl_days" not in opts:
        return StoreOptions()
    try:
        days = float(opts["ttl_days"])
    except ValueError:
        raise BadStoreUrlError(f"ttl_days must be a number, not {opts['ttl_days']!r}") from None
    if days <= 0:
        raise BadStoreUrlError("ttl_days must be positive")
    return StoreOptions(ttl_s=max(1, int(days * 86400)))


def open_store(url: str, *, create_tables: bool = True) -> Store:
    """Open (and create on first use) the store a URL names.

    ``create_tables=False`` skips the HBase table check and creation (index tasks: the
    driver created them); the SQLite store's ``CREATE TABLE IF NOT EXISTS`` costs nothing.
    """
    if url.startswith("local:"):
        path, _, query = url[len("local:"):].partition("?")
        if not path:
            raise BadStoreUrlError("local: needs a file path, e.g. local:/var/lib/tracehook/index.sqlite3")
        opts = _options(parse_qs(query), {"ttl_days"})
        from collector.store.local import LocalStore

        return LocalStore(path, _store_options(opts))
    if url.startswith("hbase://"):
        parts = urlsplit(url)
        opts = _options(parse_qs(parts.query), {"ttl_days", "namespace"})
        try:
            port = parts.port or 9090
        except ValueError:
            raise BadStoreUrlError(f"bad port in {url!r}") from None
        from collector.store.hbase import DEFAULT_NAMESPACE, HBaseStore

        return HBaseStore(
            parts.hostname or "127.0.0.1", port, opts.get("namespace", DEFAULT_NAMESPACE), _store_options(opts),
            create_tables=create_tables,
        )
    raise BadStoreUrlError(f"unknown store URL {url!r}: use local:PATH or hbase://HOST:PORT?namespace=NS")
