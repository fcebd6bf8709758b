"""Per-minute rollups of every topic and consumer group, kept as a function of the indexed messages.

A rollup bucket is never an incremented counter, so indexing the same log twice, a
replayed Spark batch or a restart half-way through gives identical rows.  Each placed
message has a *part* of its minute's rollup (:class:`Part`: its placement time and each
group's outcome, retried flag and latency), kept as one cell of the minute's parts row.
After a batch, :func:`refresh_rollups` writes the part of every message the batch touched
into its minute (and :data:`MOVED` into a minute it was placed in before), aggregates each
touched minute from its parts row and overwrites the minute's rollup row (then re-merges its
hour: :mod:`collector.store.rollup_hours`).  The parts come
from reading each touched message back (:func:`read_parts`, then
:func:`collector.store.model.build_trace`): the index job's tasks do that right after their
writes and hand the parts over (:func:`merge_parts` picks, per message, the read that saw
the most events); any other indexer marks the messages (``rollups`` rows of kind
DIRTY_MSG) and :func:`refresh_rollups` reads the marked ones back, then removes the
markers.  A crash before that leaves the markers (or an uncommitted Spark batch), so the
work is redone.  A batch costs one read per touched message plus one parts row per touched
minute, never the touched minutes' other messages.

Example::

    from collector.store.rollup import refresh_rollups, read_minutes
    refresh_rollups(store)                                   # after index_records(...)
    for bucket in read_minutes(store, "orders", begin_ms, end_ms):
        print(bucket.minute_ms, bucket.sent, {g: b.consumed for g, b in bucket.groups.items()})

A message counts in the minute it is placed at (its send's store time, as the time
index files it); messages whose send was never traced and that carry no store time
are in no rollup.  A failed send (:attr:`collector.store.model.MessageTrace.never_stored`:
the broker never stored it) counts in ``failed_sends``, never in ``sent`` nor in any
group's backlog: no group can consume it.  Rollups written before that distinction
(format 1) are brought up to :data:`ROLLUP_FORMAT` once, by
:mod:`collector.store.rollup_upgrade`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import msgpack

from collector.store import keys, schema
from collector.store.base import Columns, Row, Store
from collector.store.model import (
    CONSUMED,
    DEAD,
    FAILED,
    PENDING,
    RETRYING,
    MessageTrace,
    build_trace,
    could_place,
    outcome_of,
    pair_attempts,
    placing_event,
    send_of,
    sort_events,
)
from collector.store.rollup_buckets import (  # noqa: F401 -- re-exported: the rollups' public names live here
    _VERSION,
    LATENCY_BOUNDS_MS,
    OPEN_OUTCOMES,
    ROLLUP_FORMAT,
    GroupBucket,
    MinuteBucket,
)
from collector.store.rollup_hours import hour_of, rewrite_hours
from collector.store.schema import StoredEvent
from tracehook.wire import Event, EventType, Status

DEFAULT_CHUNK = 1000
"""Message rows read per round trip while recomputing."""


@dataclass(frozen=True, slots=True)
class Part:
    """What one message adds to its minute's rollup: when it is placed, and each group's outcome.

    ``groups`` maps a group to ``(outcome, retried, latency_ms)``: ``retried`` when the group
    needed more than one attempt (or is retrying), ``latency_ms`` from the message's time to the
    end of the group's first successful attempt (None unless consumed).  ``stored`` is False for
    a failed send (no group received it, so its ``groups`` is empty).
    """

    msg_id: str
    placed_ms: int
    groups: dict[str, tuple[str, bool, int | None]]
    stored: bool = True

    @classmethod
    def of(cls, trace: MessageTrace) -> Part:
        """The part of a placed message (``trace.placed_ms`` is not None)."""
        assert trace.placed_ms is not None
        return cls(trace.msg_id, trace.placed_ms, {
            group: (o.outcome, o.attempts > 1 or o.outcome == RETRYING,
                    _latency_ms(trace, group) if o.outcome == CONSUMED else None)
            for group, o in sorted(trace.outcomes.items())
        }, stored=not trace.never_stored)

    def encode(self) -> bytes:
        flat: list[object] = [_VERSION, self.placed_ms, self.stored]
        for group, (outcome, retried, latency) in self.groups.items():
            flat += [group, _OUTCOME_CODES[outcome], retried, latency]
        return msgpack.packb(flat)

    @classmethod
    def decode(cls, msg_id: str, value: bytes) -> Part:
        flat = msgpack.unpackb(value)
        # Format 1 had no stored flag; its parts of failed sends are rewritten on upgrade.
        first = 3 if flat[0] >= 2 else 2
        groups = {flat[i]: (_OUTCOMES[flat[i + 1]], flat[i + 2], flat[i + 3]) for i in range(first, len(flat), 4)}
        return cls(msg_id, flat[1], groups, stored=bool(flat[2]) if first == 3 else True)


_OUTCOMES = (CONSUMED, RETRYING, FAILED, DEAD, PENDING)
_OUTCOME_CODES = {name: code for code, name in enumerate(_OUTCOMES)}
MOVED = b""
"""The part value of a message that was placed in this minute once and is placed elsewhere now."""


def compute_bucket(topic: str, minute_ms: int, traces: Iterable[MessageTrace]) -> MinuteBucket:
    """The rollup of the messages placed in one minute (pure: tested without a store)."""
    return aggregate(topic, minute_ms, [Part.of(t) for t in traces if t.placed_ms is not None])


def aggregate(topic: str, minute_ms: int, parts: Iterable[Part]) -> MinuteBucket:
    """The rollup of one minute from the parts of the messages placed in it (pure).

    Failed sends are only counted: no group can consume them, so they make no backlog."""
    entries: list[_Entry] = []
    for p in parts:
        flat: list[object] = []
        for group, (outcome, retried, latency) in p.groups.items():
            flat += [group, _OUTCOME_CODES[outcome], retried, latency]
        entries.append((p.placed_ms, p.msg_id, p.stored, flat, 0))
    return _aggregate(topic, minute_ms, entries)


def aggregate_cells(topic: str, minute_ms: int, cells: Columns) -> MinuteBucket:
    """:func:`aggregate` of a minute's parts row as stored (its :data:`MOVED` cells left out),
    read straight from the encoded parts: a touched minute is re-aggregated after every batch."""
    entries: list[_Entry] = []
    for column, value in cells.items():
        if value == MOVED:
            continue
        flat = msgpack.unpackb(value)
        if flat[0] >= 2:
            entries.append((flat[1], column, bool(flat[2]), flat, 3))
        else:  # format 1 had no stored flag
            entries.append((flat[1], column, True, flat, 2))
    return _aggregate(topic, minute_ms, entries)


_Entry = tuple[int, object, bool, list, int]
"""A part as :func:`_aggregate` reads it: (placed ms, its msg id or parts column: the tie-break,
stored, a flat list holding (group, outcome code, retried, latency) from the given index on)."""
_CONSUMED_CODE, _RETRYING_CODE, _PENDING_CODE = 0, 1, 4  # indexes in _OUTCOMES


def _aggregate(topic: str, minute_ms: int, entries: list[_Entry]) -> MinuteBucket:
    """One pass over the minute's parts in (placed ms, msg id) order (UTF-8 bytes of msg ids sort
    as the strings do).  A group a stored message never reached counts as open for that message."""
    entries.sort(key=lambda e: (e[0], e[1]))
    stored = [e for e in entries if e[2]]
    out = MinuteBucket(topic, minute_ms, sent=len(stored), first_ms=stored[0][0] if stored else None,
                       failed_sends=len(entries) - len(stored))
    counts: dict[str, list[int]] = {}  # consumed, retrying, failed, dead, pending (outcome codes), retried
    latency: dict[str, list[int]] = {}
    latency_sum: dict[str, int] = {}
    first: dict[str, int] = {}  # per group: the index (in ``stored``) of the first part it has,
    last: dict[str, int] = {}  # of the last one it has,
    open_at: dict[str, int] = {}  # of the first part it has open,
    missing: dict[str, int] = {}  # of the first part it does not have,
    missing_after: dict[str, int] = {}  # and of the first such after its first part
    for i, (_, _, _, flat, start) in enumerate(stored):
        for j in range(start, len(flat), 4):
            group, code, retried, ms = flat[j], flat[j + 1], flat[j + 2], flat[j + 3]
            seen = last.get(group)
            if seen is None:
                first[group] = i
                counts[group] = [0, 0, 0, 0, 0, 0]
                latency[group] = [0] * (len(LATENCY_BOUNDS_MS) + 1)
                latency_sum[group] = 0
                if i > 0:
                    missing[group] = 0
            elif seen != i - 1:
                missing.setdefault(group, seen + 1)
                missing_after.setdefault(group, seen + 1)
            last[group] = i
            c = counts[group]
            c[code] += 1
            c[5] += retried
            if (code == _RETRYING_CODE or code == _PENDING_CODE) and group not in open_at:
                open_at[group] = i
            if ms is not None:
                latency[group][bisect.bisect_left(LATENCY_BOUNDS_MS, ms)] += 1
                latency_sum[group] += ms
    end = len(stored) - 1
    for group in sorted(counts):
        c = counts[group]
        if last[group] != end:
            missing.setdefault(group, last[group] + 1)
            missing_after.setdefault(group, last[group] + 1)
        oldest = min(open_at.get(group, end + 1), missing.get(group, end + 1))
        oldest_after = min(open_at.get(group, end + 1), missing_after.get(group, end + 1))
        out.groups[group] = GroupBucket(
            consumed=c[0], retrying=c[1], failed=c[2], dead=c[3], pending=c[4], retried=c[5],
            first_ms=stored[first[group]][0],
            oldest_open_ms=stored[oldest][0] if oldest <= end else None,
            oldest_open_after_first_ms=stored[oldest_after][0] if oldest_after <= end else None,
            latency_sum_ms=latency_sum[group], latency=latency[group],
        )
    return out


def _latency_ms(trace: MessageTrace, group: str) -> int | None:
    """From the message's time to the end of the group's first successful attempt."""
    for attempt in trace.consumes.get(group, []):
        if attempt["status"] == Status.OK and attempt["after"] is not None and trace.placed_ms is not None:
            return max(0, attempt["after"]["time_ms"] - trace.placed_ms)
    return None


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
            trace = build_trace(msg_id, [schema.decode_event_value(v) for v in columns.values()])
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
    ordered = sorted(set(msg_ids))
    out: MessageParts = {}
    for i in range(0, len(ordered), chunk):
        ids = ordered[i:i + chunk]
        rows = store.get_rows(schema.MESSAGES, [schema.message_row(m) for m in ids])
        for msg_id, columns in zip(ids, rows, strict=True):
            stored = [schema.decode_event_value(v) for v in columns.values()]
            out[msg_id] = (len(stored), _part_values(msg_id, stored))
    return out


def merge_parts(into: MessageParts, more: MessageParts) -> None:
    """Add ``more`` to ``into``, keeping for each message the part read from the most events."""
    for msg_id, found in more.items():
        have = into.get(msg_id)
        if have is None or found[0] > have[0]:
            into[msg_id] = found


def _part_values(msg_id: str, stored: list[StoredEvent]) -> dict[Minute, bytes]:
    """The part of a message with these stored events in the minute it is placed in, and
    :data:`MOVED` in every other minute it could have been placed in by an earlier batch."""
    values: dict[Minute, bytes] = {}
    placed = part_of(msg_id, stored)
    here: Minute | None = None
    if placed is not None:
        topic, part = placed
        here = (topic, schema.minute_of(part.placed_ms))
        values[here] = part.encode()
    for e in stored:
        if could_place(e.event):
            there = (e.event.topic, schema.minute_of(schema.message_time(e.event)))
            if there != here:
                values[there] = MOVED
    return values


def part_of(msg_id: str, stored: Iterable[StoredEvent]) -> tuple[str, Part] | None:
    """The topic and :class:`Part` of a message from its stored events; None while unplaced.

    What ``Part.of(build_trace(msg_id, stored))`` gives (and the topic of that trace), without
    building the trace's dicts: the rollups read every touched message back after each batch.
    """
    events = sort_events(stored)
    send = send_of(events)
    placing = placing_event(events, send)
    if placing is None:
        return None
    placed_ms = schema.message_time(placing.event)
    consumes: list[tuple[Event, Event]] = []
    dead_ms: dict[str, list[int]] = {}
    replay_ms: dict[str, int] = {}
    for e in events:
        event = e.event
        kind = event.type
        if kind == EventType.SUB_BEFORE or kind == EventType.SUB_AFTER:
            consumes.append((event, event))
        elif kind == EventType.DEAD:
            dead_ms.setdefault(event.group, []).append(event.time_ms)
        elif kind == EventType.REPLAY:
            replay_ms[event.group] = event.time_ms  # the group's last replay wins
    attempts_by_group = pair_attempts(consumes)
    groups: dict[str, tuple[str, bool, int | None]] = {}
    for group in sorted(attempts_by_group.keys() | dead_ms.keys()):
        # (time of the attempt's first event, status or None while unfinished, retry, its SUB_AFTER)
        attempts = sorted(((first.time_ms, after.status if after else None, first.retry, after)
                           for first, after in ((a["before"] or a["after"], a["after"])
                                                for a in attempts_by_group.get(group, ()))),
                          key=lambda a: a[0])
        outcome = outcome_of([a[:3] for a in attempts], dead_ms.get(group, []), replay_ms.get(group, 0))
        latency = None
        if outcome == CONSUMED:
            latency = next((max(0, after.time_ms - placed_ms) for _, status, _, after in attempts
                            if status == Status.OK and after is not None), None)
        groups[group] = (outcome, len(attempts) > 1 or outcome == RETRYING, latency)
    never_stored = send is not None and send.event.status != Status.OK and not (consumes or dead_ms)
    return placing.event.topic, Part(msg_id, placed_ms, groups, stored=not never_stored)


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
    :func:`collector.store.indexer.index_records`) and each marked one has its :class:`Part`
    rebuilt from its message row now, which wins over ``read`` as the later read.  The parts are
    merged into their minutes' parts rows, and each touched minute is then aggregated from
    its parts row alone.
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
    parts: PartCells = {}
    for msg_id, (_, values) in found.items():
        column = schema.rollup_part_column(msg_id)
        for minute, value in values.items():
            parts.setdefault(minute, {})[column] = value
    whole = set(full)
    minutes = sorted(set(parts) | whole)
    for i in range(0, len(minutes), chunk):
        _write_minutes(store, minutes[i:i + chunk], parts, whole)
    return len(minutes)


def _write_minutes(store: Store, minutes: list[Minute], parts: dict[Minute, Columns], full: set[Minute]) -> None:
    """Merge the new part cells into each minute's parts row and rewrite the minute's rollup (and its hour's)."""
    part_rows = [schema.rollup_parts_row(t, m) for t, m in minutes]
    existing = store.get_rows(schema.ROLLUPS, part_rows)
    rollups = store.get_rows(schema.ROLLUPS, [schema.rollup_row(t, m) for t, m in minutes])
    part_puts: list[Row] = []
    topics = sorted({t for t, _ in minutes})
    rollup_puts: list[Row] = [(schema.rollup_topic_row(t), {schema.ROLLUP_COLUMN: b"1"}) for t in topics]
    stale: list[bytes] = []
    for (topic, minute_ms), row, cells, rollup in zip(minutes, part_rows, existing, rollups, strict=True):
        # A minute rolled up before parts rows existed (a rollup, no parts): its parts are rebuilt
        # from the messages once, and written in the same row put as this batch's cells.
        if (topic, minute_ms) in full or (rollup and not cells):
            rebuilt = {schema.rollup_part_column(t.msg_id): Part.of(t).encode()
                       for t in minute_traces(store, topic, minute_ms, salt_buckets=store.salt_buckets)}
            new = {c: MOVED for c in cells} | rebuilt
        else:
            new = parts.get((topic, minute_ms), {})
        # Only cells that change are written (a MOVED cell only over a part).
        new = {c: v for c, v in new.items() if cells.get(c, MOVED) != v}
        if new:
            part_puts.append((row, new))
        merged = cells | new
        bucket = aggregate_cells(topic, minute_ms, merged)
        columns = bucket.columns()
        if rollup and (not bucket.placed or not rollup.keys() <= columns.keys()):
            # Emptied, or a group left with a message placed elsewhere now: the old row goes first.
            stale.append(schema.rollup_row(topic, minute_ms))
        if bucket.placed:
            rollup_puts.append((schema.rollup_row(topic, minute_ms), columns))
    if part_puts:
        store.put_rows(schema.ROLLUPS, part_puts)
    if stale:
        store.delete_rows(schema.ROLLUPS, stale)
    store.put_rows(schema.ROLLUPS, rollup_puts)
    rewrite_hours(store, {(t, hour_of(m)) for t, m in minutes})  # the hours merge the minutes just written


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
