"""The index job's work on an executor: one task indexes its partition of a micro-batch.

A task decodes its rows' batches and writes their index rows over one store connection
(:func:`index_partition`), which its process keeps open for the next micro-batch
(:mod:`spark_jobs.store_cache`), and reports a :class:`PartitionResult`: counts, damage, the rollup
parts of its messages, and the events it set aside.  The driver's side of a batch (opening the
store, finishing the batch) is :mod:`spark_jobs.driver`::

    results = batch_df.rdd.mapPartitions(index_partition(store_url, batch_size)).collect()
"""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import wait
from typing import TYPE_CHECKING, Any, NamedTuple

from collector.index.isolate import MAX_REASON_CHARS, Item
from collector.log.setaside import SetAside

if TYPE_CHECKING:
    from collector.index.rollup import MessageParts

DEFAULT_BATCH_SIZE = 1000
DEFAULT_WRITERS = 1
"""Writer threads per task: one store connection per partition.  Two measured the same
(17.3k vs 17.6k events/s into HBase, benchmarks/RESULTS.md): building rows, not the put, is the limit."""


class PartitionResult(NamedTuple):
    """What one task did with its partition of a batch."""

    records: int
    events: int
    bad: dict[str, int]
    """Counts of what could not be read, by reason (corrupt frames, batches that do not decode)."""
    damage: list[str]
    """Descriptions of damaged frames."""
    bases: list[int]
    """The segment bases (Kafka partitions) read."""
    parts: MessageParts
    """The rollup parts of its messages read back after its writes (empty when the task finished the batch)."""
    set_aside: list[SetAside]
    """Events the indexer could not store (:mod:`collector.index.isolate`), for the driver to record."""


def index_partition(store_url: str, batch_size: int, writers: int = DEFAULT_WRITERS, *,
                    finish: bool = False, isolate: bool = False) -> Callable[[Iterator[Any]], Iterator[PartitionResult]]:
    """The per-partition work; captures only plain data (a URL and numbers) to ship to executors.

    ``finish``: this task holds the whole batch, so it runs the batch's finishing step itself
    (:func:`spark_jobs.driver.finish_partitions`' work, on its own connection) and returns no rollup parts.
    ``isolate`` (with ``finish``): the batch failed once; index it again chunk by chunk, setting aside
    each event that still fails (:func:`collector.index.isolate.index_isolating`).
    An event of a logged batch that the wire format refuses (a batch logged under older rules) is set
    aside in either mode, and the rest of its batch indexed.
    """

    def run(rows: Iterator[Any]) -> Iterator[PartitionResult]:
        from collector.index.indexer import finish_batch, finish_writes, index_records
        from collector.index.isolate import index_isolating
        from collector.index.rollup import read_parts
        from spark_jobs.store_cache import job_store

        counts = {"records": 0, "events": 0}
        bad: Counter[str] = Counter()
        damage: list[str] = []
        bases: set[int] = set()
        set_aside: list[SetAside] = []

        def items() -> Iterator[Item]:
            for row in rows:
                bases.add(row.base)
                if row.error is not None:
                    bad["corrupt_records"] += row.lost_records
                    bad["corrupt_bytes"] += row.skipped_bytes
                    damage.append(f"{row.error}: skipped {row.skipped_bytes} bytes, {row.lost_records} record(s)")
                    continue
                counts["records"] += 1
                yield from _decode_record(row, bad, set_aside)

        with job_store(store_url) as store:
            if isolate:
                # A chunk at a time in memory: the batch is read once, as in a normal run.
                chunk: list[Item] = []
                for item in itertools.chain(items(), [None]):
                    if item is not None:
                        chunk.append(item)
                    if chunk and (item is None or len(chunk) >= ISOLATE_CHUNK_EVENTS):
                        failed = index_isolating(store, chunk)
                        set_aside.extend(_set_aside_entry(f.item, f.reason) for f in failed)
                        counts["events"] += len(chunk) - len(failed)
                        chunk = []
                yield PartitionResult(counts["records"], counts["events"], dict(+bad), damage, sorted(bases), {},
                                      set_aside)
                return
            touched: set[str] = set()
            # Into a local: store the index rows are still being written while the rollups are worked out
            # (its reads have a connection of their own); every write is done before the task reports.
            deferred: list[Any] | None = [] if one_task(store_url) else None
            # Kept open in this worker for the next micro-batch (a local: store's page cache stays warm).
            try:
                n = index_records(store, ((item.header, item.event) for item in items()), batch_size,
                                  writers=writers, dropped=bad, touched=touched, deferred=deferred)
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
        yield PartitionResult(counts["records"], n, dict(+bad), damage, sorted(bases), parts, set_aside)

    return run


ISOLATE_CHUNK_EVENTS = 2000
"""Events an isolating task holds and indexes at a time (:func:`collector.index.isolate.index_isolating`)."""


def one_task(store_url: str) -> bool:
    """True for a ``local:`` store: its single SQLite writer serialises tasks anyway, and two
    processes writing one file each find their page cache stale after the other's commits
    (measured: more CPU per event, no faster; benchmarks/RESULTS.md), so a batch is one task."""
    return store_url.startswith("local:")


def _decode_record(row: Any, bad: Counter[str], set_aside: list[SetAside]) -> Iterator[Item]:
    """The events of one trace-log record, with their positions.  A batch that does not decode is
    counted in ``bad`` under the wire format's reason; one whose envelope decodes but some of whose
    events the wire format refuses yields the others and sets those aside."""
    from collector.wirecheck import validate
    from tracehook import wire

    payload = bytes(row.payload)
    try:
        batch = validate.decode_batch(payload)
    except wire.WireError as exc:
        try:
            header, events = wire.decode_events_separately(payload)
        except wire.WireError:
            bad[exc.reason] += 1
            return
        for i, (raw, event) in enumerate(events):
            if isinstance(event, wire.WireError):
                set_aside.append(_refused_entry(row, i, raw, event))
            else:
                yield Item((row.base, row.offset, i), header, event)
        return
    header = batch.header
    for i, event in enumerate(batch.events):
        yield Item((row.base, row.offset, i), header, event)


def _set_aside_entry(item: Item, reason: str) -> SetAside:
    event = item.event
    base, offset, index = item.position
    return SetAside(base=base, offset=offset, event=index, msg_id=event.msg_id, topic=event.topic,
                    type=_type_name(event.type), reason=reason, set_aside_ms=int(time.time() * 1000))


def _refused_entry(row: Any, index: int, raw: Any, error: Exception) -> SetAside:
    """The entry of an event the wire format refuses: what of it can be read, and the refusal."""
    fields = raw if isinstance(raw, list) else []

    def text(i: int) -> str:
        return fields[i] if len(fields) > i and isinstance(fields[i], str) else ""

    kind = _type_name(fields[0]) if fields and type(fields[0]) is int else ""
    reason = f"refused by the wire format: {error}"[:MAX_REASON_CHARS]
    return SetAside(base=row.base, offset=row.offset, event=index, msg_id=text(4), topic=text(3), type=kind,
                    reason=reason, set_aside_ms=int(time.time() * 1000))


def _type_name(value: int) -> str:
    from tracehook.wire import EventType

    try:
        return EventType(value).name
    except ValueError:
        return str(value)
