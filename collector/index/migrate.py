"""Store-to-store migration: a layout-1 or layout-2 index copied into a store of this release's layout.

A layout-2 store can instead be upgraded in place in O(1) (:mod:`collector.store.upgrade`); the
copy is for layout 1, and for whoever wants a new store (another backend, compacted, the old one
kept as it is).  No trace log is needed (it is kept 7 days by default, the index 30): the old
store's ``messages`` table holds every indexed event (:mod:`collector.store.layout_v1`,
:mod:`collector.store.layout_v2`: each frozen, with its own cell decoder), and the
events are indexed into the new store chunk by chunk with the indexer's row builder
(:func:`~collector.index.indexer.batched_rows`) and :func:`~collector.index.indexer.finish_batch`,
so every index row and rollup is the one a fresh index job writes (:func:`_copy`: rows built per
write time, written one table at a time; the rollups aggregated once, at the end).

- **Resumable**: after each chunk, the last old message row done is recorded in the new
  store's ``meta`` table (one record per old store); a rerun continues after it, and a rerun
  after the end changes nothing.  A chunk cut short is redone whole (re-indexing rewrites
  identical cells), and the rollups' final pass covers every minute with parts after a resume.
- **Retention**: the copies must not outlive the originals.  Each message is written with
  the write time of its oldest cell in the old store, rounded down to
  :data:`TIMESTAMP_STEP_MS` (the events of one step are indexed together), so every copied
  cell expires no later than the cell it copies, at most one step earlier.  The old cells'
  write times, not the events' own times, because an event's time is the app's clock (skewed,
  or long before it was indexed) while the cell's is when the index wrote it.  Rollups are
  the exception: aggregates over many messages, rewritten as messages arrive, they are written
  at migration time as the index job writes them (HBase would hide a rollup rewritten with an
  older timestamp than its previous version).

Example::

    report = migrate_store("local:/data/old.sqlite3", "local:/data/index.sqlite3")
    print(report.messages, report.events, report.seconds)
"""

from __future__ import annotations

import itertools
import operator
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import msgpack

from collector.index.errors import MigrationError
from collector.index.indexer import DEFAULT_BATCH_SIZE, batched_rows, finish_batch
from collector.index.rollup import read_parts, rewrite_minutes, write_part_cells
from collector.store import (
    absolute_store_url,
    keys,
    layout,
    layout_v1,
    layout_v2,
    local_path,
    open_store,
    resolve_store_url,
    schema,
)
from collector.store import props as indexed_props
from collector.store.base import Row, Store
from tracehook import wire
from tracehook.wire import BatchHeader, Event

Decoder = Callable[[Sequence[bytes]], tuple[list[tuple[BatchHeader, Event]], int]]
"""A layout's message-cell decoder: the header and event of each value that decodes, and how many did not."""
FROZEN_LAYOUTS: dict[int, Decoder] = {layout_v1.VERSION: layout_v1.decode_events, layout_v2.VERSION: layout_v2.decode_events}
"""The layouts a migration reads, each with its frozen message-cell decoder (the rows are read alike)."""
DEFAULT_CHUNK = 20_000
"""Old message rows per step: indexed, finished and recorded as done together."""
TIMESTAMP_STEP_MS = 3_600_000
"""Copies are written with their oldest original cell's write time rounded down to this (an hour)."""
PROGRESS_PREFIX = b"m:migrated_from "
"""The new store's meta column recording a migration's progress: this prefix and the old store's URL."""


@dataclass
class Progress:
    """How far a migration got: recorded in the new store after every chunk."""

    after: bytes | None = None
    """The last old message row done (None: none yet)."""
    messages: int = 0
    events: int = 0
    done: bool = False
    bad: int = 0
    """Old cells that did not decode (left out)."""

    def encode(self) -> bytes:
        return msgpack.packb([self.after, self.messages, self.events, self.done, self.bad], use_bin_type=True)

    @classmethod
    def decode(cls, value: bytes) -> Progress:
        return cls(*msgpack.unpackb(value, raw=False))


@dataclass(frozen=True)
class MigrationReport:
    """A migration's outcome: totals over every run of it, and this run's share."""

    messages: int
    events: int
    seconds: float
    """This run's wall time."""
    resumed_at: int = 0
    """Messages done by earlier runs when this one started."""
    already_done: bool = False
    """The migration had finished before this run: nothing was written."""
    bad: int = 0


@dataclass
class _Chunk:
    """One chunk's events, grouped by the timestamp their copies are written with."""

    by_ts: dict[int, list[tuple[BatchHeader, Event]]] = field(default_factory=dict)
    msg_ts: dict[str, int] = field(default_factory=dict)
    """Each message's write time."""
    events: int = 0
    bad: int = 0


def progress_column(old_url: str) -> bytes:
    return PROGRESS_PREFIX + absolute_store_url(old_url).encode("utf-8")


def recorded_progress(store: Store, old_url: str) -> Progress:
    """The progress of migrating ``old_url`` into ``store`` (an empty one when it never started)."""
    value = store.get_meta(progress_column(old_url))
    return Progress() if value is None else Progress.decode(value)


def migrate_store(
    old_url: str, new_url: str, *, chunk: int = DEFAULT_CHUNK,
    on_chunk: Callable[[Progress, float], None] | None = None, max_chunks: int | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> MigrationReport:
    """Copy every live event of the layout-1 or layout-2 store at ``old_url`` into the store at ``new_url``.

    ``on_chunk(progress, fraction)`` is called after each chunk (``fraction``: about how far
    through the old store).  ``max_chunks`` stops after that many chunks (as an interruption
    would; a rerun resumes).  Raises :class:`MigrationError` for an old store in no layout of
    :data:`FROZEN_LAYOUTS`, :class:`~collector.store.OldLayoutError` for a new one that is not this release's,
    and the stores' errors when one fails (the progress of the chunks done stays recorded).
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, not {chunk}")
    if _identity(old_url) == _identity(new_url):
        raise MigrationError(f"--from and --to name the same store ({old_url}): migrate into a new one")
    started = clock()
    old = open_store(resolve_store_url(old_url, must_exist=True), create_tables=False, any_layout=True)
    try:
        decode = FROZEN_LAYOUTS.get(old.layout_version)
        if decode is None:
            known = " or ".join(map(str, sorted(FROZEN_LAYOUTS)))
            also = (" (or holds no index)" if old.layout_version == layout.LAYOUT_VERSION else
                    f" (newer than this release's {layout.LAYOUT_VERSION}: upgrade tracehook)"
                    if old.layout_version > layout.LAYOUT_VERSION else "")
            raise MigrationError(f"{old_url} is in layout {old.layout_version}, not {known}{also}: nothing to migrate")
        new = open_store(new_url)
        try:
            return _run(old, new, old_url, decode, chunk, on_chunk, max_chunks, clock, started)
        finally:
            new.close()
    finally:
        old.close()


def _identity(url: str) -> tuple[str, ...]:
    """What names a store's tables: a ``local:`` file, or an HBase address and namespace (options aside)."""
    path = local_path(url)
    if path is not None:
        return ("local", os.path.realpath(path))
    parts = urlsplit(url)
    return ("hbase", parts.netloc, *parse_qs(parts.query).get("namespace", []))


def _run(old: Store, new: Store, old_url: str, decode: Decoder, chunk: int,
         on_chunk: Callable[[Progress, float], None] | None, max_chunks: int | None, clock: Callable[[], float],
         started: float) -> MigrationReport:
    column = progress_column(old_url)
    progress = recorded_progress(new, old_url)
    resumed_at = progress.messages
    if progress.done:
        return MigrationReport(progress.messages, progress.events, clock() - started, resumed_at, True, progress.bad)
    read = layout_v1.message_reader(old)
    # The minutes whose rollups the copy leaves to its end: this run's, or every one after a resume.
    minutes: set[tuple[str, int]] | None = set() if progress.after is None else None
    for _ in itertools.count() if max_chunks is None else range(max_chunks):
        rows = read(progress.after, chunk)
        if rows:
            with wire.no_gc():  # a chunk's events and rows: many containers, no cycle
                batch = _decode(rows, decode)
                touched = _copy(new, batch)
            if minutes is not None:
                minutes |= touched
            progress.after = rows[-1][0]
            progress.messages += len(rows)
            progress.events += batch.events
            progress.bad += batch.bad
        progress.done = len(rows) < chunk
        if progress.done:  # every message's part is in: each touched minute's rollup aggregated once
            rewrite_minutes(new, minutes)
        new.put_meta(column, progress.encode())
        if on_chunk is not None:
            on_chunk(progress, 1.0 if progress.done else layout_v1.row_hash_fraction(rows[-1][0]))
        if progress.done:
            break
    return MigrationReport(progress.messages, progress.events, clock() - started, resumed_at, False, progress.bad)


def _copy(new: Store, batch: _Chunk) -> set[tuple[str, int]]:
    """Index one chunk's events into ``new``, each message's rows written with its write time.

    The rows are built by the indexer's row builder (:func:`~collector.index.indexer.batched_rows`,
    the rows :func:`~collector.index.indexer.index_records` writes) one write time at a time, and
    each table's rows of every write time are written together (one write transaction per table
    in the embedded store: a chunk's messages have write times spread over the old store's whole
    TTL, and a write per time and table dirtied the same pages hundreds of times over).  Then
    :func:`~collector.index.indexer.finish_batch` files the dead letters under their sends' times,
    and each message's part of its minute's rollup goes into the minute's parts row only
    (:func:`~collector.index.rollup.write_part_cells`): :func:`migrate_store` aggregates the
    rollups once, at the end, where every chunk would otherwise rewrite every minute it touches.
    Returns the minutes whose parts it wrote."""
    per_put = max(DEFAULT_BATCH_SIZE, new.preferred_put_rows)
    props = indexed_props.current(new)
    puts: dict[str, list[tuple[int, list[Row]]]] = {}
    for ts in sorted(batch.by_ts):
        for table, rows in batched_rows(batch.by_ts[ts], per_put, salt_buckets=new.salt_buckets, mark=False,
                                        props=props):
            puts.setdefault(table, []).append((ts, rows))
    put_dated = getattr(new, "put_dated_rows", None)
    for table, dated in puts.items():
        if put_dated is not None:
            put_dated(table, dated)
        else:
            for ts, rows in dated:
                new.put_rows(table, rows, ts=ts)
    finish_batch(_Dated(new, batch.msg_ts))
    return write_part_cells(new, read_parts(new, batch.msg_ts))


def _decode(rows: Sequence[layout_v1.MessageRow], decode: Decoder) -> _Chunk:
    """The events of ``rows``, each message's under its oldest cell's write time rounded down."""
    out = _Chunk()
    by_ts, msg_ts, step, write_time = out.by_ts, out.msg_ts, TIMESTAMP_STEP_MS, operator.itemgetter(1)
    for _, cells in rows:
        events, bad = decode([value for value, _ in cells])  # a damaged cell is counted and left out
        out.bad += bad
        if events:
            oldest = min(map(write_time, cells))
            oldest -= oldest % step
            group = by_ts.get(oldest)
            if group is None:
                group = by_ts[oldest] = []
            group += events
            msg_ts[events[0][1].msg_id] = oldest
            out.events += len(events)
    return out


class _Dated:
    """The new store for :func:`~collector.index.indexer.finish_batch` after a chunk: a dead letter it
    files under its send's time is written with its message's write time (an index row's key holds
    the msg id); the rollups at migration time, as the index job writes them."""

    def __init__(self, store: Store, msg_ts: dict[str, int]) -> None:
        self._store, self._msg_ts = store, msg_ts

    def put_rows(self, table: str, rows: Sequence[Row], *, ts: int | None = None) -> None:
        if table == schema.ROLLUPS or ts is not None:
            self._store.put_rows(table, rows, ts=ts)
            return
        by_ts: dict[int | None, list[Row]] = {}
        for row in rows:
            by_ts.setdefault(self._ts_of(row[0]), []).append(row)
        for when, some in by_ts.items():
            self._store.put_rows(table, some, ts=when)

    def _ts_of(self, row: bytes) -> int | None:
        """The write time of the copied message whose id ``row`` holds (None, now: no message copied)."""
        msg_ts = self._msg_ts
        return min((msg_ts[e] for e in keys.unpack(row) if type(e) is str and e in msg_ts), default=None)

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)  # every other primitive, undated
