"""Store URLs: what a ``local:`` or ``hbase://`` URL names, parsed into a small typed value.

Example::

    from collector.store.url import LocalUrl, parse_store_url

    parsed = parse_store_url("local:/tmp/index.sqlite3?ttl_days=7")
    assert isinstance(parsed, LocalUrl) and parsed.options.ttl_s == 7 * 86400

``local:PATH`` takes ``ttl_days``, ``body_ttl_days``, ``salt_buckets`` and ``cache_mib``;
``hbase://HOST:PORT`` takes ``ttl_days``, ``body_ttl_days``, ``salt_buckets``, ``namespace``,
``thrift2``, ``compression`` and ``block_encoding`` (:mod:`collector.store` has their meaning).
A URL that names no store, or has an unknown or bad option, raises :class:`BadStoreUrlError`
with one line; nothing is opened here (:func:`collector.store.open_store` does that).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

from collector.store.base import StoreOptions
from collector.store.errors import BadStoreUrlError, url_int

if TYPE_CHECKING:
    from collector.store.hbase_admin import FamilyStorage

__all__ = ["HBaseUrl", "INDEX_FILE", "LocalUrl", "MAX_CACHE_MIB", "StoreUrl", "absolute_store_url",
           "check_store_url", "local_path", "parse_store_url", "resolve_store_url"]

MAX_CACHE_MIB = 65536
"""Upper bound of a ``local:`` URL's ``cache_mib`` (a typo's extra zeros are refused, not allocated)."""
INDEX_FILE = "index.sqlite3"
"""The embedded index's file name inside a collector's (or the demo's) data directory."""
DEFAULT_HBASE_PORT = 9090
"""HBase's Thrift1 port, taken when an ``hbase://`` URL names none."""

_LOCAL_OPTIONS = frozenset({"ttl_days", "body_ttl_days", "salt_buckets", "cache_mib"})
_HBASE_OPTIONS = frozenset({"ttl_days", "body_ttl_days", "namespace", "salt_buckets", "thrift2", "compression",
                            "block_encoding"})


@dataclass(frozen=True)
class LocalUrl:
    """A ``local:PATH`` URL: the embedded SQLite store."""

    path: str
    options: StoreOptions
    cache_kib: int | None = None
    """SQLite's page cache per connection (``cache_mib`` × 1024); None takes the store's default."""


@dataclass(frozen=True)
class HBaseUrl:
    """An ``hbase://HOST:PORT`` URL: HBase through its Thrift1 gateway."""

    host: str
    port: int
    namespace: str | None
    """The table name prefix; None takes :data:`collector.store.hbase.DEFAULT_NAMESPACE`."""
    options: StoreOptions
    thrift2: tuple[str, int] | None
    """The Thrift2 gateway that creates new tables pre-split and encoded (Thrift1 cannot)."""
    storage: FamilyStorage
    """Compression and block encoding of new tables' families."""


StoreUrl = LocalUrl | HBaseUrl


def parse_store_url(url: str) -> StoreUrl:
    """The store ``url`` names and its options; :class:`BadStoreUrlError` when it names none or has bad options."""
    if url.startswith("local:"):
        path, _, query = url[len("local:"):].partition("?")
        if not path:
            raise BadStoreUrlError("local: needs a file path, e.g. local:/var/lib/tracehook/index.sqlite3")
        opts = _options(parse_qs(query), _LOCAL_OPTIONS)
        cache_kib = _cache_mib(opts["cache_mib"]) * 1024 if "cache_mib" in opts else None
        return LocalUrl(path=path, options=_store_options(opts), cache_kib=cache_kib)
    if url.startswith("hbase://"):
        parts = urlsplit(url)
        opts = _options(parse_qs(parts.query), _HBASE_OPTIONS)
        try:
            port = parts.port or DEFAULT_HBASE_PORT
        except ValueError:
            raise BadStoreUrlError(f"bad port in {url!r}") from None
        # Lazy: hbase_admin loads thriftpy2, which a local: store never needs.
        from collector.store.hbase_admin import family_storage

        thrift2 = _address(opts.get("thrift2"), url)
        return HBaseUrl(host=parts.hostname or "127.0.0.1", port=port, namespace=opts.get("namespace"),
                        options=_store_options(opts), thrift2=thrift2,
                        storage=family_storage(opts, thrift2=thrift2 is not None))
    raise BadStoreUrlError(f"unknown store URL {url!r}: use local:PATH or hbase://HOST:PORT?namespace=NS")


def check_store_url(url: str) -> None:
    """Raise ``BadStoreUrlError`` when ``url`` names no store or has bad options; opens nothing."""
    parse_store_url(url)


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


def _options(query: dict[str, list[str]], known: frozenset[str]) -> dict[str, str]:
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


def _address(text: str | None, url: str) -> tuple[str, int] | None:
    """``HOST:PORT`` of the ``thrift2`` option."""
    if text is None:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadStoreUrlError(f"thrift2 must be HOST:PORT, not {text!r} (in {url!r})")
    return host, int(port)
