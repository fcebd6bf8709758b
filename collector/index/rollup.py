"""Per-minute rollups of every topic and consumer group, kept as a function of the indexed messages.

A rollup bucket is never an incremented counter, so indexing the same log twice, a
replayed Spark batch or a restart half-way through gives identical rows.  Each placed
message has a *part* of its minute's rollup (:class:`Part`: its placement time and each
group's outcome, retried flag and latency), kept as one cell of the minute's parts row.
After a batch, :func:`refresh_rollups` writes the part of every message the batch touched
into its minute (and :data:`MOVED` into a minute it was placed in before), aggregates each
touched minute from its parts row and overwrites the minute's rollup row (then re-merges its
hour: :mod:`collector.index.rollup_hours`).  The parts come
from reading each touched message back (:func:`read_parts`, then :func:`part_of`, which
computes a part from the stored events without building the whole trace): the index job's
tasks do that right after their writes and hand the parts over (:func:`merge_parts` picks,
per message, the read that saw the most events); an in-process indexer hands
:func:`refresh_rollups` the msg ids it wrote (:func:`collector.index.indexer.index_records`
keeps them with the store object) and it reads them back.  A crash before that leaves an
uncommitted Spark batch, or an in-process batch to index again, so the work is redone.
``rollups`` rows of kind DIRTY_MSG (markers of older indexers) are still read back and
removed.  A batch costs one read per touched message plus, per touched minute, the old values
of the cells it changes when the store object refreshed the minute lately and can update its
rollup from them exactly (:mod:`collector.index.rollup_delta`), else the minute's whole parts
row, aggregated in one pass (:func:`aggregate_cells`); never the touched minutes' other messages.

Example::

    from collector.index.rollup import refresh_rollups, read_minutes
    refresh_rollups(store)                                   # after index_records(...)
    for bucket in read_minutes(store, "orders", begin_ms, end_ms):
        print(bucket.minute_ms, bucket.sent, {g: b.consumed for g, b in bucket.groups.items()})

A message counts in the minute it is placed at (its send's store time, as the time
index files it); messages whose send was never traced and that carry no store time
are in no rollup.  A failed send (:attr:`collector.store.model.MessageTrace.never_stored`:
the broker never stored it) counts in ``failed_sends``, never in ``sent`` nor in any
group's backlog: no group can consume it.  A store in layout 2 (:mod:`collector.store.layout`)
only ever holds rollups of the current format; older stores are migrated, never upgraded in place.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from collector.index import readback
from collector.index.rollup_buckets import (  # noqa: F401 -- re-exported: the rollups' public names live here
    _VERSION,
    LATENCY_BOUNDS_MS,
    OPEN_OUTCOMES,
    ROLLUP_FORMAT,
    GroupBucket,
    MinuteBucket,
)
from collector.index.rollup_delta import MinuteState, apply_changes, kept_minutes
from collector.index.rollup_hours import hour_of, rewrite_hours
from collector.index.rollup_parts import (  # noqa: F401 -- re-exported too
    MOVED,
    EventOrder,
    Part,
    PlacingEvent,
    aggregate,
    aggregate_cells,
    aggregate_entries,
    cell_entries,
    encoded_part_and_places,
    encoded_part_of,
    part_of,
)
from collector.store import codec, keys, schema
from collector.store.base import Columns, Row, Store
from collector.store.model import MessageTrace, build_trace, event_order
from tracehook import wire

DEFAULT_CHUNK = 1000
"""Message rows read per round trip while recomputing."""


def compute_bucket(topic: str, minute_ms: int, traces: Iterable[MessageTrace]) -> MinuteBucket:
    """The rollup of the messages placed in one minute (pure: tested without a store)."""
    return aggregate(topic, minute_ms, [Part.of(t) for t in traces if t.placed_ms is not None])


# --- writing ---------------------------------------------------------------

def minute_traces(
    store: Store, topic: str, minute_ms: int, *, salt_buckets: int = schema.DEFAULT_SALT_BUCKETS,
    chunk: int = DEFAULT_CHUNK,
) -> list[MessageTrace]:
    """The messages of ``topic`` placed in the minute starting at ``minute_ms`` (a scan of each salt bucket)."""
    msg_ids: set[str] = set()
    for bucket in range(salt_buckets):
        prefix = keys.pack(schema.time_prefix(bucket, topic))
        start = prefix + keys.pack_one(minute_ms)
        stop = prefix + keys.pack_one(minute_ms + schema.MINUTE_MS)
        for row, _ in store.scan(schema.TIMEIDX, start, stop):
            msg_ids.add(str(keys.unpack(row)[-1]))
    ordered = sorted(msg_ids)
    out: list[MessageTrace] = []
    for i in range(0, len(ordered), chunk):
        rows = store.get_rows(schema.MESSAGES, [schema.message_row(m) for m in ordered[i:i + chunk]])
        for msg_id, columns in zip(ordered[i:i + chunk], rows, strict=True):
            trace = build_trace(msg_id, [codec.decode_event_value(msg_id, v) for v in columns.values()])
            if (trace is not None and trace.topic == topic and trace.placed_ms is not None
                    and schema.minute_of(trace.placed_ms) == minute_ms):
                out.append(trace)
    return out


def compute_minute(
    store: Store, topic: str, minute_ms: int, *, salt_buckets: int = schema.DEFAULT_SALT_BUCKETS,
) -> MinuteBucket:
    """What the rollup of (``topic``, minute) is, given the indexed messages now (a full recompute)."""
    return compute_bucket(topic, minute_ms, minute_traces(store, topic, minute_ms, salt_buckets=salt_buckets))


Minute = tuple[str, int]


PartCells = dict[Minute, Columns]
"""Part cells by minute, as the parts rows hold them."""
MessageParts = dict[str, tuple[int, dict[Minute, bytes]]]
"""Per message: how many stored events its part was read from, and its part value in each
minute (:data:`MOVED` in minutes it left); what :func:`read_parts` gives, merged by :func:`merge_parts`."""
DELETE_WRITERS = 2
"""Threads deleting the markers after a batch (the store's round trips release the GIL)."""


def read_parts(store: Store, msg_ids: Iterable[str], *, chunk: int = DEFAULT_CHUNK) -> MessageParts:
    """Each message's part, read back from its message row now (one multi-get per ``chunk`` ids).

    The index job's tasks call it right after writing their rows instead of leaving markers.
    Tasks of one batch may write events of the same message concurrently, so a task's read may
    miss another's events; but each task reads after its own writes, so the read that saw the
    most events saw them all, and :func:`merge_parts` keeps that one.
    """
    # In row-key order: the message rows are hash-keyed, so each multi-get then reads a narrow key
    # range of the table rather than pages all over it (measured: about 40 % less CPU per row).
    rows, ids = readback.sorted_message_rows(set(msg_ids))
    out: MessageParts = {}
    with wire.no_gc():  # every event decoded is a few containers, none in a cycle
        for i in range(0, len(rows), chunk):
            found = store.get_rows(schema.MESSAGES, rows[i:i + chunk])
            # The indexer wrote these values from events the wire format accepted: not validated again.
            for msg_id, columns, got in zip(ids[i:i + chunk], found, readback.parts(found), strict=True):
                out[msg_id] = (len(columns), got if type(got) is dict else _part_values(got, readback.ORDER))
    return out


def merge_parts(into: MessageParts, more: MessageParts) -> None:
    """Add ``more`` to ``into``, keeping for each message the part read from the most events."""
    for msg_id, found in more.items():
        have = into.get(msg_id)
        if have is None or found[0] > have[0]:
            into[msg_id] = found


def _part_values(events: Sequence[PlacingEvent], order: EventOrder = event_order) -> dict[Minute, bytes]:
    """The part of a message with these stored events in the minute it is placed in, and
    :data:`MOVED` in every other minute it could have been placed in by an earlier batch
    (``order``: the key its events are read in, :data:`collector.index.rollup_parts.EventOrder`)."""
    values: dict[Minute, bytes] = {}
    placed, places = encoded_part_and_places(events, order)
    here: Minute | None = None
    if placed is not None:
        topic, placed_ms, value = placed
        here = (topic, schema.minute_of(placed_ms))
        values[here] = value
    for topic, time_ms in places:
        there = (topic, schema.minute_of(time_ms))
        if there != here:
            values[there] = MOVED
    return values


def marked_messages(store: Store) -> list[str]:
    """The msg ids the markers (DIRTY_MSG rows) name."""
    start, stop = keys.prefix_range((schema.ROLLUP_DIRTY_MSG,))
    return [str(keys.unpack(row)[-1]) for row, _ in store.scan(schema.ROLLUPS, start, stop)]


def refresh_rollups(
    store: Store, *, chunk: int = DEFAULT_CHUNK, read: MessageParts | None = None, touched: Iterable[str] = (),
) -> int:
    """Bring the rollups of the messages in ``read`` and ``touched`` and of every message the
    markers name up to date, then drop the markers.

    Returns the minutes rewritten.  ``read`` holds parts the caller read back already (the
    index job's tasks, :func:`read_parts`); each message of ``touched`` (the in-process indexer's,
    :func:`collector.index.indexer.index_records`) and each marked one has its :class:`Part`
    rebuilt from its message row now, which wins over ``read`` as the later read.  The parts are
    merged into their minutes' parts rows, and each touched minute's rollup is then brought up
    to date from its parts row alone (only from the changed cells where that is exact).
    Idempotent, and safe to interrupt: markers go only after their minutes are written.
    """
    found = dict(read or {})
    marked = marked_messages(store)
    found.update(read_parts(store, [*marked, *touched], chunk=chunk))
    done = [schema.rollup_dirty_msg_row(m) for m in marked]
    # Minutes marked whole: by an indexer older than the parts rows (its sends marked minutes).
    full: set[Minute] = set()
    start, stop = keys.prefix_range((schema.ROLLUP_DIRTY,))
    for row, _ in store.scan(schema.ROLLUPS, start, stop):
        _, topic, minute_ms = keys.unpack(row)
        full.add((str(topic), int(minute_ms)))
        done.append(row)
    written = write_parts(store, found, full, chunk=chunk)
    if done:  # the markers go last, over a few connections at once (one delete per ``chunk`` rows)
        with ThreadPoolExecutor(max_workers=DELETE_WRITERS, thread_name_prefix="tracehook-rollup") as pool:
            list(pool.map(lambda i: store.delete_rows(schema.ROLLUPS, done[i:i + chunk]),
                          range(0, len(done), chunk)))
    return written


def write_parts(store: Store, found: MessageParts, full: Iterable[Minute] = (), *, chunk: int = DEFAULT_CHUNK) -> int:
    """Merge the parts in ``found`` into their minutes' parts rows and rewrite those minutes' rollups.

    The minutes in ``full`` are rebuilt from the messages placed in them (a scan of the time
    index), as is any touched minute with a rollup but no parts row.  Returns the minutes rewritten.
    """
    parts = _part_cells(found)
    whole = set(full)
    minutes = sorted(set(parts) | whole)
    for i in range(0, len(minutes), chunk):
        _write_minutes(store, minutes[i:i + chunk], parts, whole)
    return len(minutes)


def _part_cells(found: MessageParts) -> PartCells:
    """The parts in ``found`` as the cells of their minutes' parts rows."""
    parts: PartCells = {}
    prefix = schema.rollup_part_column("")  # + the msg id's UTF-8: rollup_part_column, inlined (a call per message)
    for msg_id, (_, values) in found.items():
        column = prefix + msg_id.encode("utf-8")
        for minute, value in values.items():
            cells = parts.get(minute)
            if cells is None:
                cells = parts[minute] = {}
            cells[column] = value
    return parts


def write_part_cells(store: Store, found: MessageParts) -> set[Minute]:
    """:func:`write_parts` without the rollups: only the parts rows get the cells of ``found`` that
    change; the minutes' rollup and hour rows are left for :func:`rewrite_minutes`.  For a bulk
    copy (:mod:`collector.index.migrate`), whose batches each touch a few messages of every
    minute: a minute's rollup is then aggregated once, not once per batch.  Returns the minutes touched."""
    parts = _part_cells(found)
    kept = kept_minutes(store)
    puts: list[Row] = []
    for (topic, minute_ms), new in sorted(parts.items()):
        kept.states.pop((topic, minute_ms), None)  # its rollup no longer aggregates its parts row
        row = schema.rollup_parts_row(topic, minute_ms)
        old = store.get_cells(schema.ROLLUPS, row, new)
        new = {c: v for c, v in new.items() if old.get(c, MOVED) != v}  # as _write_minutes: only cells that change
        if new:
            puts.append((row, new))
    if puts:
        store.put_rows(schema.ROLLUPS, puts)
    return set(parts)


def rewrite_minutes(store: Store, touched: Iterable[Minute] | None = None, *, chunk: int = DEFAULT_CHUNK) -> int:
    """Each minute of ``touched`` (None: every minute that has a parts row): its rollup row aggregated
    from its whole parts row and its hour re-merged (after :func:`write_part_cells`).  Returns the
    minutes rewritten."""
    minutes: list[Minute] = []
    if touched is None:
        start, stop = keys.prefix_range((schema.ROLLUP_PARTS,))
        for row, _ in store.scan(schema.ROLLUPS, start, stop):
            _, topic, minute_ms = keys.unpack(row)
            minutes.append((str(topic), int(minute_ms)))  # type: ignore[arg-type]
    else:
        minutes = sorted(touched)
    for i in range(0, len(minutes), chunk):
        _write_minutes(store, minutes[i:i + chunk], {}, set())
    return len(minutes)


def _write_minutes(store: Store, minutes: list[Minute], parts: dict[Minute, Columns], full: set[Minute]) -> None:
    """Merge the new part cells into each minute's parts row and rewrite the minute's rollup (and its hour's).

    A minute this store object refreshed lately is updated from the changed cells alone when that is
    exact (:mod:`collector.index.rollup_delta`); any other is aggregated from its whole parts row."""
    kept = kept_minutes(store)
    mark = store.change_mark()
    ttl_s = store.options.ttl_s
    states = {m: kept.current(m, mark, ttl_s) for m in minutes}  # (taken out, each: kept again once written)
    part_puts: list[Row] = []
    topics = sorted({t for t, _ in minutes})
    rollup_puts: list[Row] = [(schema.rollup_topic_row(t), {schema.ROLLUP_COLUMN: b"1"}) for t in topics]
    stale: list[bytes] = []
    whole: list[Minute] = []
    keep: list[tuple[Minute, MinuteState]] = []  # kept once written
    for minute, state in states.items():
        new = parts.get(minute, {})
        if minute in full or state is None or (state.rollup and not state.has_cells):
            whole.append(minute)
            continue
        old = store.get_cells(schema.ROLLUPS, schema.rollup_parts_row(*minute), new)
        new = {c: v for c, v in new.items() if old.get(c, MOVED) != v}  # as below: only cells that change
        if not apply_changes(state, [(c, old.get(c), v) for c, v in new.items()]):
            whole.append(minute)  # read whole, and kept again: this object wrote every cell since it was born
            continue
        _write_minute(minute, new, state, part_puts, rollup_puts, stale)
        state.has_cells = state.has_cells or bool(new)
        assert mark is not None  # the state was current
        state.born_ms = min(state.born_ms, mark.now_ms)
        keep.append((minute, state))
    part_rows = [schema.rollup_parts_row(t, m) for t, m in whole]
    both = store.get_rows(schema.ROLLUPS, part_rows + [schema.rollup_row(t, m) for t, m in whole])
    existing, rollups = both[:len(whole)], both[len(whole):]
    for (topic, minute_ms), cells, rollup in zip(whole, existing, rollups, strict=True):
        minute = (topic, minute_ms)
        # A minute rolled up before parts rows existed (a rollup, no parts): its parts are rebuilt
        # from the messages once, and written in the same row put as this batch's cells.
        rebuild = minute in full or bool(rollup and not cells)
        if rebuild:
            rebuilt = {schema.rollup_part_column(t.msg_id): Part.of(t).encode()
                       for t in minute_traces(store, topic, minute_ms, salt_buckets=store.salt_buckets)}
            new = {c: MOVED for c in cells} | rebuilt
        else:
            new = parts.get(minute, {})
        # Only cells that change are written (a MOVED cell only over a part).
        new = {c: v for c, v in new.items() if cells.get(c, MOVED) != v}
        merged = cells | new
        bucket, first_keys, last_key = aggregate_entries(topic, minute_ms, cell_entries(merged))
        state = MinuteState(bucket, first_keys, last_key, rollup, bool(merged))
        _write_minute(minute, new, state, part_puts, rollup_puts, stale)
        # Kept when every cell of its rows is known to be younger than its TTL: this object wrote them all.
        was = states[minute]
        born = (None if rebuild or mark is None else was.born_ms if was is not None
                else None if cells or rollup else mark.now_ms)
        if born is not None and mark is not None:
            state.version, state.born_ms = mark.version, min(born, mark.now_ms)
            keep.append((minute, state))
    if stale:
        store.delete_rows(schema.ROLLUPS, stale)
    store.put_rows(schema.ROLLUPS, part_puts + rollup_puts)
    for minute, state in keep:
        kept.keep(minute, state)
    rewrite_hours(store, {(t, hour_of(m)) for t, m in minutes})  # the hours merge the minutes just written


def _write_minute(minute: Minute, new: Columns, state: MinuteState, part_puts: list[Row], rollup_puts: list[Row],
                  stale: list[bytes]) -> None:
    """Add the minute's changed parts cells and its rollup row (when it changed) to the puts; record
    in ``state`` the rollup row as it will be stored."""
    topic, minute_ms = minute
    if new:
        part_puts.append((schema.rollup_parts_row(topic, minute_ms), new))
    bucket, rollup = state.bucket, state.rollup
    columns = bucket.columns()
    if rollup and (not bucket.placed or not rollup.keys() <= columns.keys()):
        # Emptied, or a group left with a message placed elsewhere now: the old row goes first.
        stale.append(schema.rollup_row(topic, minute_ms))
    if bucket.placed and columns != rollup:  # an unchanged rollup row is not written again
        rollup_puts.append((schema.rollup_row(topic, minute_ms), columns))
    state.rollup = columns if bucket.placed else {}


# --- reading ---------------------------------------------------------------

def topics(store: Store) -> list[str]:
    """Every topic that has rollups, in order."""
    start, stop = keys.prefix_range((schema.ROLLUP_TOPIC,))
    return [str(keys.unpack(row)[1]) for row, _ in store.scan(schema.ROLLUPS, start, stop)]


def read_minutes(store: Store, topic: str, begin_ms: int, end_ms: int) -> list[MinuteBucket]:
    """The rollups of ``topic`` for the minutes from the one holding ``begin_ms`` to the one holding ``end_ms``."""
    start = schema.rollup_row(topic, schema.minute_of(begin_ms))
    stop = schema.rollup_row(topic, schema.minute_of(end_ms) + schema.MINUTE_MS)
    return [MinuteBucket.from_row(topic, row, cols) for row, cols in store.scan(schema.ROLLUPS, start, stop)]


def rows_of(buckets: Iterable[MinuteBucket]) -> list[Row]:
    """Rollup rows as the store holds them (tests compare against these)."""
    return [(schema.rollup_row(b.topic, b.minute_ms), b.columns()) for b in buckets]
