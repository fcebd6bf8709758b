"""The trace index: row-key layout, the indexer and the queries, over SQLite or HBase.

Example::

    from collector.store import open_store
    from collector.store.indexer import index_records
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
(:mod:`collector.store.hbase_admin`).
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any
from urllib.parse import parse_qs, urlsplit

from collector.store.base import Store, StoreOptions
from collector.store.errors import (
    BadStoreUrlError,
    LayoutVersionError,
    OldLayoutError,
    QueryError,
    SaltBucketsMismatchError,
    StoreError,
    StoreUnavailableError,
    url_int,
)

__all__ = ["LayoutVersionError", "OldLayoutError", "QueryError", "SaltBucketsMismatchError", "Store", "StoreError",
           "StoreOptions", "StoreUnavailableError",
           "check_store_url", "open_store", "resolve_store_url", "local_path", "absolute_store_url"]

MAX_CACHE_MIB = 65536
"""Upper bound of a ``local:`` URL's ``cache_mib`` (a typo's extra zeros are refused, not allocated)."""
INDEX_FILE = "index.sqlite3"
"""The embedded index's file name inside a collector's (or the demo's) data directory."""


def _options(query: dict[str, list[str]], known: set[str]) -> dict[str, str]:
    unknown = set(query) - known
    if unknown:
        raise BadStoreUrlError(f"unknown store option(s): {', '.join(sorted(unknown))}")
    return {name: values[-1] for name, values in query.items()}


def _store_options(opts: dict[str, str]) -> StoreOptions:
    from collector.store.layout import parse_salt_buckets

    buckets = parse_salt_buckets(opts["salt_buckets"]) if "salt_buckets" in opts else None
    ttls = {field: _days(opts[name], name) for name, field in (("ttl_days", "ttl_s"), ("body_ttl_days", "body_ttl_s"))
            if name in opts}
    return StoreOptions(salt_buckets=buckets, **ttls)


def _days(text: str, name: str) -> int:
    """A ``ttl_days`` or ``body_ttl_days`` option as whole seconds (at least 1)."""
    try:
        days = float(text)
    except ValueError:
        raise BadStoreUrlError(f"{name} must be a number, not {text!r}") from None
    if not days > 0 or days == float("inf"):
        raise BadStoreUrlError(f"{name} must be positive")
    return max(1, int(days * 86400))


def _cache_mib(text: str) -> int:
    """The ``cache_mib`` option of a ``local:`` URL: SQLite's page cache per connection, in MiB."""
    return url_int("cache_mib", text, MAX_CACHE_MIB, " of MiB")


def _parse(url: str) -> tuple[str, dict[str, Any]]:
    """The backend a URL names and its constructor arguments; ``BadStoreUrlError`` when it names none."""
    if url.startswith("local:"):
        path, _, query = url[len("local:"):].partition("?")
        if not path:
            raise BadStoreUrlError("local: needs a file path, e.g. local:/var/lib/tracehook/index.sqlite3")
        opts = _options(parse_qs(query), {"ttl_days", "body_ttl_days", "salt_buckets", "cache_mib"})
        cache_kib = _cache_mib(opts["cache_mib"]) * 1024 if "cache_mib" in opts else None
        return "local", {"path": path, "options": _store_options(opts), "cache_kib": cache_kib}
    if url.startswith("hbase://"):
        parts = urlsplit(url)
        opts = _options(parse_qs(parts.query),
                        {"ttl_days", "body_ttl_days", "namespace", "salt_buckets", "thrift2", "compression",
                         "block_encoding"})
        try:
            port = parts.port or 9090
        except ValueError:
            raise BadStoreUrlError(f"bad port in {url!r}") from None
        from collector.store.hbase_admin import family_storage

        thrift2 = _address(opts.get("thrift2"), url)
        return "hbase", {"host": parts.hostname or "127.0.0.1", "port": port, "namespace": opts.get("namespace"),
                         "options": _store_options(opts), "thrift2": thrift2,
                         "storage": family_storage(opts, thrift2=thrift2 is not None)}
    raise BadStoreUrlError(f"unknown store URL {url!r}: use local:PATH or hbase://HOST:PORT?namespace=NS")


def _address(text: str | None, url: str) -> tuple[str, int] | None:
    """``HOST:PORT`` of the ``thrift2`` option."""
    if text is None:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadStoreUrlError(f"thrift2 must be HOST:PORT, not {text!r} (in {url!r})")
    return host, int(port)


def local_path(url: str) -> str | None:
    """The SQLite file a ``local:`` URL names (as written, maybe relative); None for other stores."""
    if not url.startswith("local:"):
        return None
    return url[len("local:"):].partition("?")[0]


def absolute_store_url(url: str) -> str:
    """``url`` with a ``local:`` path made absolute (executors and other processes have other working
    directories; two spellings of one file compare equal); other URLs come back unchanged."""
    path = local_path(url)
    if not path:
        return url
    return f"local:{os.path.abspath(path)}{url[len('local:') + len(path):]}"


def resolve_store_url(url: str, *, must_exist: bool = False) -> str:
    """``url`` with a ``local:`` data directory resolved to the index file inside it.

    ``local:DIR`` where DIR holds ``index.sqlite3`` (a collector's or the demo's data
    directory) names that file.  A directory without one, and with ``must_exist`` a path
    with no file (a reader would get a new, empty store), raise :class:`BadStoreUrlError`
    with one line saying what to pass.  Other URLs come back unchanged.
    """
    if not url.startswith("local:"):
        return url
    path, sep, query = url[len("local:"):].partition("?")
    if path and os.path.isdir(path):
        inside = os.path.join(path, INDEX_FILE)
        if not os.path.isfile(inside):
            raise BadStoreUrlError(f"local:{path} is a directory with no {INDEX_FILE} in it; "
                                   f"pass the index file, e.g. --store local:{inside}")
        return f"local:{inside}{sep}{query}"
    if path and must_exist and not os.path.isfile(path):
        raise BadStoreUrlError(f"no index at {path}; pass the index file (DATA_DIR/{INDEX_FILE}) "
                               "or the data directory holding it")
    return url


def check_store_url(url: str) -> None:
    """Raise ``BadStoreUrlError`` when ``url`` names no store or has bad options; opens nothing."""
    _parse(url)


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
    kind, args = _parse(url)
    if kind == "local":
        from collector.store.local import LocalStore

        try:
            return LocalStore(args["path"], args["options"], cache_kib=args["cache_kib"])
        except (sqlite3.Error, OSError) as exc:  # a directory, a file that is not SQLite, no permission
            raise BadStoreUrlError(f"cannot open the index at {args['path']}: {exc}") from None
    from collector.store.hbase import DEFAULT_NAMESPACE, HBaseStore

    namespace = DEFAULT_NAMESPACE if args["namespace"] is None else args["namespace"]
    return HBaseStore(args["host"], args["port"], namespace, args["options"], create_tables=create_tables,
                      thrift2=args["thrift2"], storage=args["storage"])
