"""Named errors of the index store.

Each carries a short ``reason`` code; the collector's server maps them to HTTP answers
in one place (:mod:`collector.server.errors`).
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of every error raised by :mod:`collector.store`."""

    reason = "store_error"


class BadStoreUrlError(StoreError, ValueError):
    """A store URL that names no known backend or has bad options."""

    reason = "bad_store_url"


def url_int(option: str, text: str, high: int, unit: str = "") -> int:
    """A store URL's whole-number ``option`` from 1 to ``high``; :class:`BadStoreUrlError` naming the bad value."""
    try:
        n = int(text)
    except ValueError:
        raise BadStoreUrlError(f"{option} must be a whole number{unit}, not {text!r}") from None
    if not 1 <= n <= high:
        raise BadStoreUrlError(f"{option} must be between 1 and {high}, not {n}")
    return n


class StoreUnavailableError(StoreError):
    """The backend did not answer (HBase down, connection refused or reset)."""

    reason = "store_unavailable"


class KeyEncodingError(StoreError, ValueError):
    """A value that cannot be packed into a row key, or bytes that are not a packed key."""

    reason = "bad_key"


class StoredValueError(StoreError, ValueError):
    """A message cell that is not an event value this index writes (a damaged or foreign cell)."""

    reason = "bad_stored_value"


class QueryError(StoreError, ValueError):
    """A query the store cannot answer as asked (the caller's mistake)."""

    reason = "bad_query"


class BadCursorError(QueryError):
    """A ``cursor`` that this query did not hand out."""

    reason = "bad_cursor"


class BadRangeError(QueryError):
    """A time range with begin after end, or a limit outside the allowed bounds."""

    reason = "bad_range"


class SaltBucketsMismatchError(StoreError):
    """Opening a store with a salt bucket count other than the one its tables were created with.

    Rows would be filed under buckets that queries never scan, so this is refused, never guessed.
    """

    reason = "salt_buckets_mismatch"


class LayoutVersionError(StoreError):
    """A store whose tables are in another layout than this release's (a newer one: upgrade tracehook)."""

    reason = "layout_version"


class OldLayoutError(LayoutVersionError):
    """A store in an older layout (:mod:`collector.store.layout`): refused with one line naming
    ``tracehook upgrade-store`` (in place) or ``tracehook migrate-store`` (a copy), never answered from."""

    reason = "old_layout"


class UpgradeError(StoreError):
    """An in-place upgrade that cannot run as asked: no room for its snapshot, an HBase store without
    ``--no-snapshot``, a rollback from a file that is no snapshot of this store."""

    reason = "bad_upgrade"


class BadPropertyError(QueryError):
    """A property name that cannot be indexed (empty, too long, not text), or a bad property query."""

    reason = "bad_prop"
