"""The index job's writes: each partition's work on an executor, and the driver's work around a batch.

A task decodes its rows' batches and writes their index rows over one store connection
(:func:`index_partition`), which its process keeps open for the next micro-batch
(:mod:`spark_jobs.store_cache`); the driver opens the store before the query (:func:`prepare_store`)
and, once every partition of a micro-batch is written, runs the batch's finishing step
(:func:`finish_partitions`); :func:`index_batch` does both for one batch::

    results = batch_df.rdd.mapPartitions(index_partition(store_url, batch_size)).collect()
    finish_partitions(store_url, results)
    results = index_batch(batch_df.rdd, store_url, batch_size)   # the same, one task for a local: store
"""

from __future__ import annotations

import logging
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import wait
from typing import TYPE_CHECKING, Any

from spark_jobs.errors import IndexJobError

if TYPE_CHECKING:
    from collector.store.rollup import MessageParts

DEFAULT_BATCH_SIZE = 1000
DEFAULT_WRITERS = 1
"""Writer threads per task: one store connection per partition.  Two measured the same
(17.3k vs 17.6k events/s into HBase, benchmarks/RESULTS.md): building rows, not the put, is the limit."""

log = logging.getLogger(__name__)


PartitionResult = tuple[int, int, dict[str, int], list[str], list[int], "MessageParts"]
"""(records, events, bad counts by reason, damage descriptions, segment bases read, the rollup
parts of its messages read back after its writes) of one partition."""


def index_partition(store_url: str, batch_size: int, writers: int = DEFAULT_WRITERS, *,
                    finish: bool = False) -> Callable[[Iterator[Any]], Iterator[PartitionResult]]:
    """The per-partition work; captures only plain data (a URL and numbers) to ship to executors.

    ``finish``: this task holds the whole batch, so it runs the batch's finishing step itself
    (:func:`finish_partitions`' work, on its own connection) and returns no rollup parts.
    """

    def run(rows: Iterator[Any]) -> Iterator[PartitionResult]:
        from collector.store.indexer import finish_batch, finish_writes, index_payloads
        from collector.store.rollup import read_parts
        from spark_jobs.store_cache import job_store

        counts = {"records": 0}
        bad: Counter[str] = Counter()
        damage: list[str] = []
        bases: set[int] = set()

        def payloads() -> Iterator[bytes]:
            for row in rows:
                bases.add(row.base)
                if row.error is not None:
                    bad["corrupt_records"] += row.lost_records
                    bad["corrupt_bytes"] += row.skipped_bytes
                    damage.append(f"{row.error}: skipped {row.skipped_bytes} bytes, {row.lost_records} record(s)")
                    continue
                counts["records"] += 1
                yield bytes(row.payload)

        touched: set[str] = set()
        # Into a local: store the index rows are still being written while the rollups are worked out
        # (its reads have a connection of their own); every write is done before the task reports.
        deferred: list[Any] | None = [] if one_task(store_url) else None
        # Kept open in this worker for the next micro-batch (a local: store's page cache stays warm).
        with job_store(store_url) as store:
            try:
                n = index_payloads(store, payloads(), batch_size, writers=writers, dropped=bad, touched=touched,
                                   deferred=deferred)
                # No rollup markers: the task reads its messages' parts back now, after its own writes
                # (another task's events of the same message are sorted out by merge_parts).
                parts = read_parts(store, touched)
                if finish:  # no other partition wrote this batch: nothing to merge, no parts to ship
                    finish_batch(store, parts=parts, written=deferred)
                    parts = {}
            except BaseException:
                if deferred:  # the writes still running end (or fail) before the store is closed
                    wait(deferred)
                raise
            if deferred:
                finish_writes(deferred)
        yield counts["records"], n, {k: v for k, v in bad.items() if v}, damage, sorted(bases), parts

    return run


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


def one_task(store_url: str) -> bool:
    """True for a ``local:`` store: its single SQLite writer serialises tasks anyway, and two
    processes writing one file each find their page cache stale after the other's commits
    (measured: more CPU per event, no faster; benchmarks/RESULTS.md), so a batch is one task."""
    return store_url.startswith("local:")


def split_into(spark: Any, store_url: str) -> int:
    """Partitions a large segment slice may be split into: one per core, except into a ``local:``
    store (:func:`one_task`)."""
    return 1 if one_task(store_url) else max(1, spark.sparkContext.defaultParallelism)


def index_batch(rdd: Any, store_url: str, batch_size: int, writers: int = DEFAULT_WRITERS) -> list[PartitionResult]:
    """Index and finish one batch: ``rdd`` holds the data source's rows (any number of partitions).

    Into a ``local:`` store (:func:`one_task`) the partitions are coalesced into one task, which
    finishes the batch itself: the rollup parts of its messages never leave the executor.
    Otherwise one task per partition, then :func:`finish_partitions` on the driver.
    Task failures come out as Spark raises them; a driver-side store failure as ``IndexJobError``.
    """
    if one_task(store_url) and rdd.getNumPartitions() > 0:
        whole = rdd if rdd.getNumPartitions() == 1 else rdd.coalesce(1)
        return whole.mapPartitions(index_partition(store_url, batch_size, writers, finish=True)).collect()
    results = rdd.mapPartitions(index_partition(store_url, batch_size, writers)).collect()
    finish_partitions(store_url, results)
    return results


def finish_partitions(store_url: str, results: list[PartitionResult]) -> None:
    """Run :func:`collector.store.indexer.finish_batch` on the driver once every partition of the
    batch is written, with the rollup parts the partitions read back (merged: the read that saw
    the most events of a message wins, :func:`collector.store.rollup.merge_parts`)."""
    from collector.store import StoreError
    from collector.store.indexer import finish_batch
    from collector.store.rollup import merge_parts
    from spark_jobs.store_cache import job_store

    parts: MessageParts = {}
    for result in results:
        merge_parts(parts, result[5])
    try:
        with job_store(store_url) as store:
            finish_batch(store, parts=parts)
    except (StoreError, OSError) as exc:
        raise IndexJobError(f"store {store_url} unavailable; checkpoint not advanced: {exc}") from exc
