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

from typing import Any
from urllib.parse import parse_qs, urlsplit

from collector.store.base import Store, StoreOptions
from collector.store.errors import BadStoreUrlError, QueryError, StoreError, StoreUnavailableError

__all__ = ["QueryError", "Store", "StoreError", "StoreOptions", "StoreUnavailableError", "check_store_url",
           "open_store"]


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


def _parse(url: str) -> tuple[str, dict[str, Any]]:
    """The backend a URL names and its constructor arguments; ``BadStoreUrlError`` when it names none."""
    if url.startswith("local:"):
        path, _, query = url[len("local:"):].partition("?")
        if not path:
            raise BadStoreUrlError("local: needs a file path, e.g. local:/var/lib/tracehook/index.sqlite3")
        opts = _options(parse_qs(query), {"ttl_days"})
        return "local", {"path": path, "options": _store_options(opts)}
    if url.startswith("hbase://"):
        parts = urlsplit(url)
        opts = _options(parse_qs(parts.query), {"ttl_days", "namespace"})
        try:
            port = parts.port or 9090
        except ValueError:
            raise BadStoreUrlError(f"bad port in {url!r}") from None
        return "hbase", {"host": parts.hostname or "127.0.0.1", "port": port, "namespace": opts.get("namespace"),
                         "options": _store_options(opts)}
    raise BadStoreUrlError(f"unknown store URL {url!r}: use local:PATH or hbase://HOST:PORT?namespace=NS")


def check_store_url(url: str) -> None:
    """Raise ``BadStoreUrlError`` when ``url`` names no store or has bad options; opens nothing."""
    _parse(url)


def open_store(url: str, *, create_tables: bool = True) -> Store:
    """Open (and create on first use) the store a URL names.

    ``create_tables=False`` skips the HBase table check and creation (index tasks: the
    driver created them); the SQLite store's ``CREATE TABLE IF NOT EXISTS`` costs nothing.
    """
    kind, args = _parse(url)
    if kind == "local":
        from collector.store.local import LocalStore

        return LocalStore(args["path"], args["options"])
    from collector.store.hbase import DEFAULT_NAMESPACE, HBaseStore

    namespace = DEFAULT_NAMESPACE if args["namespace"] is None else args["namespace"]
    return HBaseStore(args["host"], args["port"], namespace, args["options"], create_tables=create_tables)
