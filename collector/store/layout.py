"""What a store records about its own layout: its layout version and salt bucket count, set when its tables are made.

The **layout version** (:data:`LAYOUT_VERSION`) names the row keys, columns and values the
store's tables hold.  A new store records it when its tables are created; a store whose
tables exist without the record was made by an older release: layout 1.  Opening a store of
another layout is refused (:func:`check_layout`, from :func:`collector.store.open_store`) with
one line naming the command that brings it to this layout: ``tracehook upgrade-store`` for a
layout this release reads in place (:data:`IN_PLACE_FROM`, :mod:`collector.store.upgrade`),
``tracehook migrate-store`` for an older one (:mod:`collector.index.migrate`), so nothing is
ever answered from rows read the wrong way.

The time index starts every row with ``salt(msg_id) % buckets``; readers scan every
bucket and the indexer files each message under one.  A reader or writer that used
another count than the tables were written with would silently miss rows, so the count
is recorded with the tables (a ``meta`` table in both stores) when they are created,
and every open checks it: the URL's ``salt_buckets`` must match, or
:class:`~collector.store.errors.SaltBucketsMismatchError` is raised.  A URL without
``salt_buckets`` takes the recorded count.

The same count decides HBase's initial regions (:func:`split_keys`): one per bucket in
the time index, and as many spread evenly over the 4-byte hash that starts the message
and pending rows.  Both adapters call :func:`settle_salt_buckets` with their own two
primitives (read the record, write it if absent), so the rule lives here once.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from collector.store import keys, layout_v1, schema
from collector.store.errors import LayoutVersionError, OldLayoutError, SaltBucketsMismatchError, url_int

LAYOUT_VERSION = 3
"""The layout this release reads and writes: layout 2 (issue 27's lean index, rollups of format 3) with
message cells that leave out what their row key holds, and the property index and body tables (issues
42 and 43).  Layout 3 only adds tables, and its readers read layout 2's cells as well as its own."""
IN_PLACE_FROM = frozenset({2})
"""Older layouts a store is upgraded from in place (``tracehook upgrade-store``: the layout record and
the missing tables, nothing rewritten); a store in another older layout is copied across
(``tracehook migrate-store``)."""
OLDEST_LAYOUT = 1
"""The layout of a store whose tables exist without a recorded version."""

META_TABLE = "meta"
"""The store's own table (no TTL, never purged): one row of layout settings."""
META_FAMILY = "m"
META_ROW = b"layout"
SALT_BUCKETS_COLUMN = b"m:salt_buckets"
LAYOUT_VERSION_COLUMN = b"m:layout_version"
"""The store's layout version; absent from a store whose tables exist: layout 1."""
MAX_SALT_BUCKETS = 1024
"""Upper bound of ``salt_buckets``: each bucket is one scan per time-range page and one region per table."""
HASH_SPLIT_TABLES = (schema.MESSAGES, schema.PENDING)
"""Tables whose row keys start with the 4-byte ``msg_hash``: split evenly over the hash space."""
BUCKET_SPLIT_TABLES = (schema.TIMEIDX,)
"""Tables whose row keys start with the salt bucket: one region per bucket."""


def parse_salt_buckets(text: str) -> int:
    """The ``salt_buckets`` URL option as an int; :class:`BadStoreUrlError` naming the bad value."""
    return url_int("salt_buckets", text, MAX_SALT_BUCKETS)


def encode_count(n: int) -> bytes:
    return str(n).encode("ascii")


def decode_count(value: bytes) -> int:
    return int(value.decode("ascii"))


def has_index_tables(table_names: Collection[str]) -> bool:
    """Whether a store holding tables ``table_names`` (logical names) has its index tables already:
    this layout's message table, or layout 1's (in case this layout names it otherwise)."""
    return schema.MESSAGES in table_names or layout_v1.MESSAGES in table_names


def settle_layout(
    url: str, asked: int | None, *, read: Callable[[bytes], bytes | None],
    record_if_absent: Callable[[bytes, bytes], None], had_tables: bool,
) -> tuple[int, int]:
    """``(salt buckets, layout version)`` of a store opened at ``url``; records both on its first open.

    ``read(column)`` returns a recorded value of the meta row (None when there is none) and
    ``record_if_absent(column, value)`` writes one unless another process already did (the
    first writer wins).  ``had_tables``: the store's tables existed before this open.  An
    adapter calls this before it creates missing tables, so a process racing it through the
    first open finds the version recorded already.  The version is only read here; refusing
    another one is :func:`check_layout`'s (the migration opens an old store on purpose).
    """
    buckets = settle_salt_buckets(
        url, asked, had_tables=had_tables,
        read=lambda: _decoded(read(SALT_BUCKETS_COLUMN)),
        record_if_absent=lambda n: record_if_absent(SALT_BUCKETS_COLUMN, encode_count(n)))
    version = _decoded(read(LAYOUT_VERSION_COLUMN))
    if version is None and not had_tables:
        record_if_absent(LAYOUT_VERSION_COLUMN, encode_count(LAYOUT_VERSION))
        version = _decoded(read(LAYOUT_VERSION_COLUMN))
    return buckets, OLDEST_LAYOUT if version is None else version


def _decoded(value: bytes | None) -> int | None:
    return None if value is None else decode_count(value)


def check_layout(url: str, version: int) -> None:
    """Refuse a store whose tables are in another layout than :data:`LAYOUT_VERSION`.

    Raises :class:`OldLayoutError` (an older layout: the line names the upgrade or migration command) or
    :class:`LayoutVersionError` (a newer one: written by a later release).
    """
    if version < LAYOUT_VERSION:
        raise OldLayoutError(old_layout_line(url, version))
    if version > LAYOUT_VERSION:
        raise LayoutVersionError(newer_layout_line(url, version))


def old_layout_line(url: str, version: int) -> str:
    """The one line every refusal of an old store prints (CLI, index job, collector's 503)."""
    if version in IN_PLACE_FROM:
        return (f"{url} is an index in layout {version}; this release reads layout {LAYOUT_VERSION}: upgrade it in "
                f"place with `tracehook upgrade-store {url}` (seconds, nothing rewritten; docs/index-store.md, "
                f"Upgrading to layout {LAYOUT_VERSION})")
    return (f"{url} is an index in layout {version}; this release reads layout {LAYOUT_VERSION}: move it across "
            f"with `tracehook migrate-store --from {url} --to NEW_STORE_URL`, or rebuild it from the trace log "
            "(docs/index-store.md, Upgrading from layout 1)")


def newer_layout_line(url: str, version: int) -> str:
    """The one line a store written by a later release is refused with."""
    return (f"{url} is an index in layout {version}, newer than the layout {LAYOUT_VERSION} this release reads: "
            "upgrade tracehook")


def settle_salt_buckets(
    url: str, asked: int | None, *, read: Callable[[], int | None], record_if_absent: Callable[[int], None],
    had_tables: bool,
) -> int:
    """The salt bucket count a store opened at ``url`` uses; records it on a store's first open.

    ``read`` returns the recorded count (None when none is), ``record_if_absent`` writes one
    unless another process already did (the first writer wins).  Tables made before counts
    were recorded (``had_tables``) were written with :data:`schema.DEFAULT_SALT_BUCKETS`.
    Raises :class:`SaltBucketsMismatchError` when ``asked`` differs from the recorded count.
    """
    recorded = read()
    if recorded is None:
        record_if_absent(schema.DEFAULT_SALT_BUCKETS if had_tables else asked or schema.DEFAULT_SALT_BUCKETS)
        recorded = read()
        assert recorded is not None, "the salt bucket count was not recorded"
    if asked is not None and asked != recorded:
        raise SaltBucketsMismatchError(
            f"{url} asks for salt_buckets={asked} but its tables were created with {recorded}; "
            f"use salt_buckets={recorded} (or leave it out), or index into a new store for another count")
    return recorded


def split_keys(table: str, buckets: int) -> list[bytes]:
    """The keys HBase's initial regions of ``table`` start at (``[]``: one region)."""
    if buckets <= 1:
        return []
    if table in BUCKET_SPLIT_TABLES:
        return [keys.pack((bucket,)) for bucket in range(1, buckets)]
    if table in HASH_SPLIT_TABLES:
        return [keys.pack(((i * 2**32 // buckets).to_bytes(4, "big"),)) for i in range(1, buckets)]
    return []
