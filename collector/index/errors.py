"""Named errors of the indexer (:mod:`collector.index`); the store's own are in :mod:`collector.store.errors`."""

from __future__ import annotations

from collector.store.errors import StoreError


class MigrationError(StoreError):
    """A migration that cannot run as asked: its old store is in no layout it reads, or is the new store."""

    reason = "bad_migration"


class InjectedFault(RuntimeError):
    """Tests only: the failure ``TRACEHOOK_INDEX_FAULT_MSG_ID`` asks of the indexer (not a StoreError:
    an event's failure, which the index job sets aside)."""
