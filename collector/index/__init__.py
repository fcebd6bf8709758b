"""The indexer: trace events turned into the store's rows, and the rollups rebuilt from them.

This package sits above :mod:`collector.store` (the row keys, the stored-value codec, the two
adapters and the queries): it imports the store, never the other way round.

Example::

    from collector.store import open_store
    from collector.index import finish_batch, index_records

    store = open_store("local:/tmp/index.sqlite3")
    index_records(store, [(batch.header, ev) for ev in batch.events])
    finish_batch(store)                     # the rollups of the messages just indexed
    store.close()

Modules: :mod:`~collector.index.indexer` (rows written, batches finished), :mod:`~collector.index.rows`
(one event's rows, in Python), :mod:`~collector.index.rowbuild` (the C row builder, the same rows), :mod:`~collector.index.rollup` with ``rollup_parts`` / ``rollup_buckets`` /
``rollup_delta`` / ``rollup_hours`` (per-minute and hourly rollups), :mod:`~collector.index.readback`
(the rollups' read of messages), :mod:`~collector.index.isolate` (a failing event set aside),
:mod:`~collector.index.backfill` (property rows for events already indexed) and
:mod:`~collector.index.migrate` (``tracehook migrate-store``: an older layout indexed again).
"""

from __future__ import annotations

from collector.index.indexer import batched_rows, finish_batch, index_payloads, index_records
from collector.index.rows import rows_for

__all__ = ["batched_rows", "finish_batch", "index_payloads", "index_records", "rows_for"]
