"""The index job's driver-side store work around the tasks: before the query, around each batch, after the run.

Before Spark starts the driver refuses a store URL it cannot use (:func:`check_store`), then opens
the store once so that its tables are created there (:func:`prepare_store`).  Each micro-batch is
indexed by tasks (:func:`spark_jobs.partition.index_partition`) and finished on the driver once every
partition is written (:func:`finish_partitions`); :func:`index_batch` does both for one batch.  After a
run, a ``local:`` store's expired cells are deleted (:func:`purge_expired`)::

    prepare_store(store_url)
    results = index_batch(batch_df.rdd, store_url, batch_size)   # one task for a local: store
    purge_expired(store_url)
"""

from __future__ import annotations

import logging
import sqlite3
from typing import TYPE_CHECKING, Any

from spark_jobs.errors import IndexJobError
from spark_jobs.partition import DEFAULT_WRITERS, PartitionResult, index_partition, one_task

if TYPE_CHECKING:
    from collector.index.rollup import MessageParts

log = logging.getLogger(__name__)


def purge_expired(store_url: str) -> int | None:
    """Delete a ``local:`` store's expired cells; None for HBase, whose compactions drop them.

    A failure is logged, not raised: the run's index and checkpoint are already written.
    """
    if not store_url.startswith("local:"):
        return None
    from collector.store import StoreError, open_store

    try:
        store = open_store(store_url)
        try:
            return store.purge_expired()
        finally:
            store.close()
    except (StoreError, OSError, sqlite3.Error) as exc:
        log.warning("purging expired cells from %s failed (retried next time): %s", store_url, exc)
        return None


def check_store(store_url: str) -> None:
    """Refuse, before Spark starts, a store URL that names no store or tables of another layout
    (``BadStoreUrlError``, ``SaltBucketsMismatchError``, ``OldLayoutError``: one line naming
    ``tracehook migrate-store``).  A store that does not answer now is left to the run: it may by
    the first batch, and the run reports it if not."""
    from collector.store import StoreUnavailableError, open_store

    try:
        open_store(store_url).close()
    except StoreUnavailableError:
        pass


def prepare_store(store_url: str) -> None:
    """Open the store once on the driver: its tables get created here, not by racing tasks.
    A store in another layout is refused as it is (``OldLayoutError``), never indexed into."""
    from collector.store import LayoutVersionError, StoreError, open_store

    try:
        open_store(store_url).close()
    except LayoutVersionError:
        raise
    except (StoreError, OSError) as exc:
        raise IndexJobError(f"store {store_url} unavailable; checkpoint not advanced: {exc}") from exc


def split_into(spark: Any, store_url: str) -> int:
    """Partitions a large segment slice may be split into: one per core, except into a ``local:``
    store (:func:`one_task`)."""
    return 1 if one_task(store_url) else max(1, spark.sparkContext.defaultParallelism)


def index_batch(rdd: Any, store_url: str, batch_size: int, writers: int = DEFAULT_WRITERS, *,
                isolate: bool = False) -> list[PartitionResult]:
    """Index and finish one batch: ``rdd`` holds the data source's rows (any number of partitions).

    Into a ``local:`` store (:func:`one_task`) the partitions are coalesced into one task, which
    finishes the batch itself: the rollup parts of its messages never leave the executor.
    Otherwise one task per partition, then :func:`finish_partitions` on the driver.
    ``isolate``: the batch failed; index it again in one task that sets aside each event it still
    cannot store (:func:`index_partition`), whatever the store.
    Task failures come out as Spark raises them; a driver-side store failure as ``IndexJobError``.
    """
    if (isolate or one_task(store_url)) and rdd.getNumPartitions() > 0:
        whole = rdd if rdd.getNumPartitions() == 1 else rdd.coalesce(1)
        return whole.mapPartitions(index_partition(store_url, batch_size, writers, finish=True,
                                                   isolate=isolate)).collect()
    results = rdd.mapPartitions(index_partition(store_url, batch_size, writers)).collect()
    finish_partitions(store_url, results)
    return results


def finish_partitions(store_url: str, results: list[PartitionResult]) -> None:
    """Run :func:`collector.index.indexer.finish_batch` on the driver once every partition of the
    batch is written, with the rollup parts the partitions read back (merged: the read that saw
    the most events of a message wins, :func:`collector.index.rollup.merge_parts`)."""
    from collector.index.indexer import finish_batch
    from collector.index.rollup import merge_parts
    from collector.store import StoreError
    from spark_jobs.store_cache import job_store

    parts: MessageParts = {}
    for result in results:
        merge_parts(parts, result.parts)
    try:
        with job_store(store_url) as store:
            finish_batch(store, parts=parts)
    except (StoreError, OSError) as exc:
        raise IndexJobError(f"store {store_url} unavailable; checkpoint not advanced: {exc}") from exc
