"""Turn decoded events into index rows and write them.

Idempotent by construction: every row key and column qualifier is computed from
the event alone (see :mod:`collector.store.schema`), so indexing the same events
again, or a duplicate of an event, rewrites identical cells.

Example::

    from collector.store import open_store
    from collector.index.indexer import index_payloads
    index_payloads(open_store("local:index.sqlite3"), [payload])   # trace-log records (batch bytes)
"""

from __future__ import annotations

import itertools
import os
import time
import weakref
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait

from collector.index import rowbuild
from collector.index import rows as index_rows
from collector.index.errors import InjectedFault
from collector.index.rollup import MessageParts, refresh_rollups
from collector.index.rollup_parts import part_of
from collector.index.rows import MARK, ROW_KEY_TOO_LONG
from collector.store import codec, keys, schema
from collector.store import props as indexed_props
from collector.store.base import Columns, Row, Store
from tracehook import wire
from tracehook.wire import BatchHeader, Event

DEFAULT_BATCH_SIZE = 1000
"""Rows per put (one round trip), per table, as happybase's ``Table.batch(batch_size=...)``."""
DEFAULT_WRITERS = 2
"""Threads writing batches while the next one is built (the store's round trips release the GIL)."""

PENDING_MAX_AGE_MS = 24 * 3600 * 1000
"""How long a dead letter waits in ``pending`` for its send; after that it stays filed under its own time."""




def batched_rows(
    records: Iterable[tuple[BatchHeader, Event]], batch_size: int, *, dropped: Counter[str] | None = None,
    salt_buckets: int = schema.DEFAULT_SALT_BUCKETS, mark: bool = True,
    props: indexed_props.IndexedProps | None = None,
) -> Iterator[tuple[str, list[Row]]]:
    """The writes :func:`index_records` makes: ``(table, rows)`` with up to ``batch_size`` rows each.

    Rows are merged per (table, row key) while they wait, so one put carries every column
    a batch of events gives that row (a message's send and consume events, say), and index
    rows filed by several events of a message are one write.  With ``props``, the events'
    indexed properties are filed in ``propidx`` too (:mod:`collector.store.props`; built here,
    beside either row builder).
    """
    if props is None or props.empty:
        yield from _batched_rows(records, batch_size, dropped=dropped, salt_buckets=salt_buckets, mark=mark)
        return
    prop_rows = indexed_props.PropRows(props)
    for item in _batched_rows(prop_rows.tap(records), batch_size, dropped=dropped, salt_buckets=salt_buckets,
                              mark=mark):
        if len(prop_rows.rows) >= batch_size:
            yield schema.PROPIDX, prop_rows.take()
        yield item
    if prop_rows.rows:
        yield schema.PROPIDX, prop_rows.take()
    if dropped is not None and prop_rows.too_long:
        dropped[ROW_KEY_TOO_LONG] += prop_rows.too_long


def _batched_rows(
    records: Iterable[tuple[BatchHeader, Event]], batch_size: int, *, dropped: Counter[str] | None,
    salt_buckets: int, mark: bool,
) -> Iterator[tuple[str, list[Row]]]:
    """:func:`batched_rows` without the property rows."""
    builder = rowbuild.new_builder(batch_size=batch_size, salt_buckets=salt_buckets, mark=mark)
    if builder is not None:  # the C extension: the same rows, merged and batched the same way
        yield from rowbuild.feed(builder, records)
        if dropped is not None and builder.too_long:
            dropped[ROW_KEY_TOO_LONG] += builder.too_long
        # The last puts: the tables read back go first (index_records' ``deferred`` lets the others run on).
        yield from sorted(rowbuild.drain(builder), key=_read_back_first)
        return
    pending: dict[str, dict[bytes, Columns]] = {}
    too_long = 0
    limit = schema.MAX_ROW_KEY_BYTES
    event_rows = index_rows.event_rows  # looked up per run: the fallback pass counts its calls
    for header, event in records:
        for table, row, columns in event_rows(header, event, salt_buckets, mark):
            rows = pending.get(table)
            if rows is None:
                rows = pending[table] = {}
            existing = rows.get(row)
            if existing is None:
                if len(row) > limit:
                    too_long += 1
                    continue
                rows[row] = columns  # shared read-only cells are copied only when a row gets more
                if len(rows) >= batch_size:
                    yield table, list(rows.items())
                    del pending[table]
            elif existing is not columns:
                if type(existing) is not dict:
                    existing = rows[row] = dict(existing)
                existing.update(columns)
    if dropped is not None and too_long:
        dropped[ROW_KEY_TOO_LONG] += too_long
    for table, rows in sorted(pending.items(), key=_read_back_first):
        yield table, list(rows.items())


def index_records(
    store: Store, records: Iterable[tuple[BatchHeader, Event]], batch_size: int = DEFAULT_BATCH_SIZE,
    *, writers: int = DEFAULT_WRITERS, dropped: Counter[str] | None = None, touched: set[str] | None = None,
    deferred: list[Future[None]] | None = None,
) -> int:
    """Write every index row for ``records``; returns the number of events indexed.

    Rows :func:`rows_for` leaves out are counted in ``dropped`` by reason when given.
    Each event's msg id is kept for the rollups: :func:`finish_batch` on the same ``store``
    object reads those messages back and rebuilds their parts (in memory, no marker rows: a
    process that dies before :func:`finish_batch` indexes its batch again, as the index job
    replays an uncommitted batch; past :data:`MAX_UNFINISHED` ids they go to marker rows).
    With ``touched`` given the msg ids go there instead: the
    caller reads their parts back itself (the index job's tasks do, on their own connections,
    :func:`collector.index.rollup.read_parts`) and hands them to :func:`finish_batch`.
    Each writer thread uses one store connection at a time, so ``writers=1`` writes over
    a single connection while the calling thread builds the next batch.

    Each table's rows are written ``batch_size`` at a time (or the store's ``preferred_put_rows``
    when that is larger: the embedded store writes each put in one transaction) by ``writers``
    threads (at most the store's ``max_writers``: the embedded store takes one), so building the next
    batch overlaps with the store's work on the previous ones.  When this returns,
    every row is in the store; if a write fails, its error is raised (after the other
    writes in flight have finished) and the caller must assume nothing was indexed.
    With ``deferred`` (a list) it returns once the rows of :data:`READ_BACK_TABLES` are written and
    adds the puts still running to it: the caller reads the batch back meanwhile and must then
    :func:`finish_writes` them before the batch counts as written (the writer thread writes the
    index rows while the calling thread works on the rollups; the embedded store reads on a
    connection of its own).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, not {batch_size}")
    if writers < 1:
        raise ValueError(f"writers must be >= 1, not {writers}")
    fault = os.environ.get(FAULT_MSG_ID_ENV)
    if fault:
        records = _failing_at(records, fault)
    if touched is None:
        counted = _Counted(records, _unfinished(store), spill=lambda ids: _write_markers(store, ids))
    else:
        counted = _Counted(records, touched)
    writers = min(writers, store.max_writers)
    pool = ThreadPoolExecutor(max_workers=writers, thread_name_prefix="tracehook-index")
    in_flight: deque[tuple[str, Future[None]]] = deque()
    # The rows of a batch are many small containers and form no cycles: a collector pass every
    # 700 of them, walking the waiting rows, cost about a tenth of the CPU (measured).
    with wire.no_gc():
        try:
            # The count recorded with the store's tables: the one its queries scan.
            buckets = store.salt_buckets
            per_put = max(batch_size, store.preferred_put_rows)
            # The indexed property names: read with the store, re-read every few seconds (a long-running job).
            props = indexed_props.current(store)
            for table, rows in batched_rows(counted, per_put, dropped=dropped, salt_buckets=buckets,
                                            mark=False, props=props):
                in_flight.append((table, pool.submit(store.put_rows, table, rows)))
                # Bound memory: at most a couple of batches per writer wait to be written.
                while len(in_flight) > 2 * writers + (0 if deferred is None else DEFERRED_PUTS):
                    in_flight.popleft()[1].result()
            # With ``deferred``, the writes after the last one of a table read back go on meanwhile.
            keep = len(in_flight) if deferred is None else max(
                (i + 1 for i, (table, _) in enumerate(in_flight) if table in READ_BACK_TABLES), default=0)
            now = [future for _, future in itertools.islice(in_flight, keep)]
            finish_writes(now)
            if deferred is not None:
                deferred.extend(future for _, future in itertools.islice(in_flight, keep, None))
        except BaseException:
            # Let every started write finish (or fail) before reporting anything.
            wait([future for _, future in in_flight])
            raise
        finally:
            pool.shutdown(wait=False)  # its thread exits once the deferred writes are done
    return counted.count


FAULT_MSG_ID_ENV = "TRACEHOOK_INDEX_FAULT_MSG_ID"
"""Tests only: :func:`index_records` raises :class:`InjectedFault` at an event of this msg id."""


def _failing_at(records: Iterable[tuple[BatchHeader, Event]], msg_id: str) -> Iterator[tuple[BatchHeader, Event]]:
    for record in records:
        if record[1].msg_id == msg_id:
            raise InjectedFault(f"injected failure at msg_id {msg_id!r} ({FAULT_MSG_ID_ENV})")
        yield record


READ_BACK_TABLES = frozenset((schema.MESSAGES, schema.PENDING, schema.DEAD, schema.TIMEIDX))
"""The tables the read-back (:func:`collector.index.rollup.read_parts`) and :func:`finish_batch` read or
change (a minute's rollup rebuilt whole scans the time index): with ``deferred``, :func:`index_records`
returns once every put of theirs is written."""
DEFERRED_PUTS = 4
"""With ``deferred``, the puts :func:`index_records` lets wait for its writers beyond its usual couple
per writer (the other index tables' last puts, queued while the rollups are worked out, and the next
puts while the writer still writes the last ones): up to about 200 MB more with the embedded store's
200,000-row puts."""


def _read_back_first(item: tuple[str, list[Row]]) -> bool:
    return item[0] not in READ_BACK_TABLES


def finish_writes(futures: list[Future[None]]) -> None:
    """Wait for every one of these puts (``deferred`` ones of :func:`index_records`) and raise the first
    failure, then forget them."""
    try:
        wait(futures)
        for future in futures:
            future.result()
    finally:
        futures.clear()


_UNFINISHED: weakref.WeakKeyDictionary[Store, set[str]] = weakref.WeakKeyDictionary()
"""Per store object: the msg ids :func:`index_records` wrote since :func:`finish_batch` last refreshed them."""
MAX_UNFINISHED = 100_000
"""Msg ids kept in memory for :func:`finish_batch` at most (about 10 MB); past that they are
written as marker rows (``rollups`` DIRTY_MSG), which it reads too: a caller that indexes
millions of messages and never finishes (a bulk load for query benchmarks) stays bounded."""


def _unfinished(store: Store) -> set[str]:
    return _UNFINISHED.setdefault(store, set())


def _write_markers(store: Store, msg_ids: set[str]) -> None:
    """Move ``msg_ids`` from memory to marker rows, for :func:`finish_batch` to read (one put per
    :data:`DEFAULT_BATCH_SIZE` rows: one put of all 100,000 made HBase warn of a large batch)."""
    markers = [(schema.rollup_dirty_msg_row(m), MARK) for m in msg_ids]
    for i in range(0, len(markers), DEFAULT_BATCH_SIZE):
        store.put_rows(schema.ROLLUPS, markers[i:i + DEFAULT_BATCH_SIZE])
    msg_ids.clear()


class _Counted:
    """Iterates ``records``, counts them and adds their msg ids to ``touched``; when ``spill`` is
    given, hands ``touched`` to it whenever it holds more than :data:`MAX_UNFINISHED` ids."""

    def __init__(self, records: Iterable[tuple[BatchHeader, Event]], touched: set[str],
                 spill: Callable[[set[str]], None] | None = None) -> None:
        self._records = records
        self._touched = touched
        self._spill = spill
        self.count = 0

    def __iter__(self) -> Iterator[tuple[BatchHeader, Event]]:
        touched, spill = self._touched, self._spill
        add = touched.add
        for record in self._records:
            self.count += 1
            add(record[1].msg_id)
            if spill is not None and len(touched) > MAX_UNFINISHED:
                spill(touched)
            yield record


def finish_batch(
    store: Store, *, now_ms: int | None = None, chunk: int = DEFAULT_BATCH_SIZE, parts: MessageParts | None = None,
    written: list[Future[None]] | None = None,
) -> int:
    """Driver-side work after every index batch (one-shot run or streaming micro-batch) is written.

    Call it once per batch, after every partition's rows are in the store.  It files each
    pending dead letter under its message's placement time, now that the send may have been
    indexed (by another partition, or a later batch), and removes the rows it had under its
    own time.  Dead letters whose send is still unknown stay pending up to
    :data:`PENDING_MAX_AGE_MS`.  Then it recomputes the rollups of the minutes the batch
    touched (:func:`collector.index.rollup.refresh_rollups`): those of the messages
    :func:`index_records` wrote through this ``store`` object since the last call, and of
    ``parts``, the parts the batch's writers read back (``index_records(touched=...)``).
    Last, once the puts in ``written`` (:func:`index_records`' ``deferred`` ones) are done too,
    :meth:`~collector.store.base.Store.end_batch` (the embedded store checkpoints its WAL).
    Idempotent; returns the dead letters it placed.
    """
    with wire.no_gc():  # the read-back decodes every touched message's events: no cycles, many containers
        return _finish_batch(store, now_ms=now_ms, chunk=chunk, parts=parts, written=written or [])


def _finish_batch(store: Store, *, now_ms: int | None, chunk: int, parts: MessageParts | None,
                  written: list[Future[None]]) -> int:
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    placed = 0
    start, stop = keys.prefix_range(())
    pending = store.scan(schema.PENDING, start, stop)
    while chunk_rows := list(itertools.islice(pending, chunk)):
        messages = store.get_rows(schema.MESSAGES, [row for row, _ in chunk_rows])
        puts: list[Row] = []
        stale: list[bytes] = []
        done: list[bytes] = []
        for (row, columns), message in zip(chunk_rows, messages, strict=True):
            # Values this index wrote, from events the wire format accepted: not validated again, and
            # the placement read as the rollups read it (part_of: build_trace's placed_ms, tested so).
            msg_id = str(keys.unpack(row)[-1])  # the pending row is keyed as the message row
            deads = codec.decode_events(msg_id, columns.values())
            found = part_of(msg_id, codec.decode_events(msg_id, message.values()))
            if found is None:
                if all(now_ms - d.time_ms > PENDING_MAX_AGE_MS for d in deads):
                    done.append(row)
                continue
            placed_ms = found[1].placed_ms
            for dead in deads:
                # Rows over HBase's key limit were left out when the dead letter was indexed (rows_for):
                # leave them out here too (HBase refuses a put or delete of one, and the index would stop).
                puts += [(r, dict(schema.INDEX_CELLS))
                         for r in schema.dead_rows(dead.topic, dead.group, placed_ms, dead.msg_id) if _fits(r)]
                filed = schema.message_time(dead)
                if filed != placed_ms:
                    stale += [r for r in schema.dead_rows(dead.topic, dead.group, filed, dead.msg_id) if _fits(r)]
                placed += 1
            done.append(row)
        if puts:
            store.put_rows(schema.DEAD, puts)
        if stale:
            store.delete_rows(schema.DEAD, stale)
        if done:
            store.delete_rows(schema.PENDING, done)
    touched = _UNFINISHED.pop(store, set())  # ids written from now on go to a new set, for the next call
    try:
        refresh_rollups(store, read=parts, touched=touched)
    except BaseException:
        _unfinished(store).update(touched)  # not refreshed: the next call does them
        raise
    # Between batches, not inside one of the batch's writes (the embedded store's WAL checkpoint).
    finish_writes(written)
    store.end_batch()
    return placed


def _fits(row: bytes) -> bool:
    return len(row) <= schema.MAX_ROW_KEY_BYTES


def index_payloads(
    store: Store, payloads: Iterable[bytes], batch_size: int = DEFAULT_BATCH_SIZE,
    *, writers: int = DEFAULT_WRITERS, dropped: Counter[str] | None = None, touched: set[str] | None = None,
    deferred: list[Future[None]] | None = None,
) -> int:
    """:func:`index_records` for trace-log records (encoded batches): the one decode-and-index path.

    A record that does not decode is skipped and counted in ``dropped`` under the wire
    format's reason (``bad_version``, ``bad_field``...); the others are indexed.  Records are
    decoded as :func:`tracehook.wire.decode_batch` does, checked by the collector's C validator
    when it is built (:func:`collector.wirecheck.validate.decode_batch`).
    """
    from collector.wirecheck import validate  # only this trace-log path decodes batches

    bad: Counter[str] = dropped if dropped is not None else Counter()

    def records() -> Iterator[tuple[BatchHeader, Event]]:
        for payload in payloads:
            try:
                batch = validate.decode_batch(payload)
            except wire.WireError as exc:
                bad[exc.reason] += 1
                continue
            for event in batch.events:
                yield batch.header, event

    return index_records(store, records(), batch_size, writers=writers, dropped=bad, touched=touched,
                         deferred=deferred)
