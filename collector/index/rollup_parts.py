"""A message's *part* of its minute's rollup, and a minute's rollup aggregated from its parts (pure: no store).

:mod:`collector.index.rollup` keeps one parts row per (topic, minute), one cell per message
placed in it, and rewrites the minute's rollup row from that row after every batch that
touches it.  Both paths here are the hot ones of that refresh, so each has a reference it is
tested against (tests/collector/store/test_rollup_parts.py): :func:`part_of` against
``Part.of(build_trace(...))``, :func:`aggregate` against the bucket's definitions.

Example::

    from collector.index.rollup_parts import aggregate, part_of
    topic, part = part_of(msg_id, codec.decode_events(msg_id, message_row_cells.values()))
    bucket = aggregate(topic, minute_ms, [part])
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from collector.index.readback import PartEvent
from collector.index.rollup_buckets import _VERSION, LATENCY_BOUNDS_MS, GroupBucket, MinuteBucket
from collector.store import schema
from collector.store.base import Columns
from collector.store.model import (
    CONSUMED,
    DEAD,
    FAILED,
    PENDING,
    RETRYING,
    MessageTrace,
    could_place,
    event_order,
    outcome_of,
    pair_attempts,
)
from tracehook.wire import Event, EventType, Status

Groups = dict[str, tuple[str, bool, int | None]]
"""A part's groups: group -> (outcome, retried, latency ms or None), as :class:`Part` holds them."""


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
        return _encode(self.placed_ms, self.stored, self.groups)

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


def _encode(placed_ms: int, stored: bool, groups: Groups) -> bytes:
    """A part's cell value (:meth:`Part.encode`)."""
    return msgpack.packb([_VERSION, placed_ms, stored, *_flat_groups(groups)])


def _flat_groups(groups: Groups) -> list[object]:
    """A part's groups as its encoding lists them: group, outcome code, retried, latency, for each."""
    flat: list[object] = []
    for group, (outcome, retried, latency) in groups.items():
        flat += [group, _OUTCOME_CODES[outcome], retried, latency]
    return flat


def aggregate(topic: str, minute_ms: int, parts: Iterable[Part]) -> MinuteBucket:
    """The rollup of one minute from the parts of the messages placed in it (pure).

    Failed sends are only counted: no group can consume them, so they make no backlog."""
    entries: list[_Entry] = [(p.placed_ms, p.msg_id, p.stored, _flat_groups(p.groups), 0) for p in parts]
    return _aggregate(topic, minute_ms, entries)


def aggregate_cells(topic: str, minute_ms: int, cells: Columns) -> MinuteBucket:
    """:func:`aggregate` of a minute's parts row as stored (its :data:`MOVED` cells left out),
    read straight from the encoded parts: a touched minute is re-aggregated after every batch."""
    return aggregate_entries(topic, minute_ms, cell_entries(cells))[0]


_Entry = tuple[int, object, bool, list, int]
"""A part as :func:`_aggregate` reads it: (placed ms, its msg id or parts column: the tie-break,
stored, a flat list holding (group, outcome code, retried, latency) from the given index on)."""
_RETRYING_CODE, _PENDING_CODE = _OUTCOME_CODES[RETRYING], _OUTCOME_CODES[PENDING]
_PLACED, _ID = operator.itemgetter(0), operator.itemgetter(1)
Key = tuple[int, object]
"""Where a part sorts in its minute: (placed ms, msg id or parts column)."""


def sort_entries(entries: list[_Entry]) -> None:
    """Sort parts in place by their :data:`Key`: (placed ms, then msg id or parts column).

    Two stable sorts, by the tie-break and then by the time, give exactly that order; each
    compares plain ints or bytes, where one sort by a ``(ms, column)`` key builds a tuple per part
    and compares tuples (measured on 200,000 parts: 0.75 vs 1.85 µs per part)."""
    entries.sort(key=_ID)
    entries.sort(key=_PLACED)


def cell_entry(column: bytes, value: bytes) -> _Entry:
    """A parts cell (not :data:`MOVED`) as :func:`_aggregate` reads it."""
    flat = msgpack.unpackb(value)
    if flat[0] >= 2:
        return flat[1], column, bool(flat[2]), flat, 3
    return flat[1], column, True, flat, 2  # format 1 had no stored flag


def cell_entries(cells: Columns) -> list[_Entry]:
    """The parts of a parts row as :func:`_aggregate` reads them (its :data:`MOVED` cells left out)."""
    return [cell_entry(column, value) for column, value in cells.items() if value != MOVED]


def _aggregate(topic: str, minute_ms: int, entries: list[_Entry]) -> MinuteBucket:
    """The bucket of :func:`aggregate_entries`."""
    return aggregate_entries(topic, minute_ms, entries)[0]


def aggregate_entries(
    topic: str, minute_ms: int, entries: list[_Entry],
) -> tuple[MinuteBucket, dict[str, Key], Key | None]:
    """The minute's bucket, each group's first part's :data:`Key` and the last stored part's (None
    without stored parts): what :mod:`collector.index.rollup_delta` starts from.

    One pass over the minute's parts in (placed ms, msg id) order (UTF-8 bytes of msg ids sort
    as the strings do).  A group a stored message never reached counts as open for that message."""
    sort_entries(entries)
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
    first_keys = {group: (stored[i][0], stored[i][1]) for group, i in first.items()}
    return out, first_keys, (stored[end][0], stored[end][1]) if stored else None


def _latency_ms(trace: MessageTrace, group: str) -> int | None:
    """From the message's time to the end of the group's first successful attempt."""
    for attempt in trace.consumes.get(group, []):
        if attempt["status"] == Status.OK and attempt["after"] is not None and trace.placed_ms is not None:
            return max(0, attempt["after"]["time_ms"] - trace.placed_ms)
    return None


def part_of(msg_id: str, events: Iterable[Event]) -> tuple[str, Part] | None:
    """The topic and :class:`Part` of a message from its stored events; None while unplaced.

    What ``Part.of(build_trace(msg_id, stored))`` gives (and the topic of that trace) for the
    stored events' :class:`Event` (as :func:`collector.store.codec.decode_events` reads them
    back), without building the trace's dicts.
    """
    found, _ = _placed_groups(events)
    if found is None:
        return None
    topic, placed_ms, groups, stored = found
    return topic, Part(msg_id, placed_ms, groups, stored=stored)


def encoded_part_of(events: Sequence[Event]) -> tuple[str, int, bytes] | None:
    """:func:`part_of`'s topic, ``placed_ms`` and :meth:`Part.encode`, without the :class:`Part`:
    the rollups read every touched message back after each batch and store only its encoding."""
    return encoded_part_and_places(events)[0]


PlacingEvent = Event | PartEvent
"""What a part is computed from: stored events as :func:`collector.store.codec.decode_events` reads
them, or cut down to the fields a part reads (:func:`collector.index.readback.part_events`)."""
EventOrder = Callable[[Any], tuple[int, int, str]]
"""The key a message's events are read in, (time ms, type, request id), for the kind of event given:
:data:`collector.store.model.event_order` for an :class:`Event`, :data:`collector.index.readback.ORDER`
for a :class:`PartEvent`."""
Places = set[tuple[str, int]]
"""The (topic, message time) of each event that could place a message (:func:`collector.store.model.could_place`)."""


def encoded_part_and_places(
    events: Sequence[PlacingEvent], order: EventOrder = event_order,
) -> tuple[tuple[str, int, bytes] | None, Places]:
    """:func:`encoded_part_of`, and the :data:`Places` of the events, from one pass over them: the
    read-back files a message's part in its minute and :data:`MOVED` in the other minutes it could
    have been placed in.  ``order`` is the key the events are read in (:data:`EventOrder`)."""
    if len(events) == 1 and events[0].type == _PUB:  # a message only sent so far: the common shape
        send = events[0]
        placed_ms = schema.message_time(send)
        # What _placed_groups gives for it: placed by its send, no groups, stored unless the send failed.
        return (send.topic, placed_ms, _encode(placed_ms, send.status == _OK, {})), {(send.topic, placed_ms)}
    found, places = _placed_groups(events, order)
    if found is None:
        return None, places
    topic, placed_ms, groups, stored = found
    return (topic, placed_ms, _encode(placed_ms, stored, groups)), places


def _placed_groups(
    events: Iterable[PlacingEvent], order: EventOrder = event_order,
) -> tuple[tuple[str, int, Groups, bool] | None, Places]:
    """A placed message's topic, placed ms, groups and stored flag (:class:`Part`'s fields), None
    while unplaced; and the events' :data:`Places`."""
    events = sorted(events, key=order)  # as build_trace reads them
    ok_send = last_send = None
    consumes: list[tuple[Event, Event]] = []
    dead_ms: dict[str, list[int]] = {}
    replay_ms: dict[str, int] = {}
    places: Places = set()
    for event in events:  # one pass: what send_of, the groups' outcomes and the places read
        kind = event.type
        if kind == _SUB_BEFORE or kind == _SUB_AFTER:
            consumes.append((event, event))
        elif kind == _PUB:
            last_send = event
            if ok_send is None and event.status == _OK:
                ok_send = event
        elif kind == _DEAD:
            dead_ms.setdefault(event.group, []).append(event.time_ms)
        elif kind == _REPLAY:
            replay_ms[event.group] = event.time_ms  # the group's last replay wins
        if could_place(event):
            places.add((event.topic, schema.message_time(event)))
    send = ok_send or last_send  # send_of: the first successful PUB, else the last PUB
    placing = send or next((e for e in events if could_place(e)), None)  # placing_event
    if placing is None:
        return None, places
    placed_ms = schema.message_time(placing)
    groups: Groups = {}
    attempts_by_group = pair_attempts(consumes) if consumes else {}
    for group in sorted(attempts_by_group.keys() | dead_ms.keys() if dead_ms else attempts_by_group):
        # (time of the attempt's first event, status or None while unfinished, retry, its SUB_AFTER)
        attempts: list[tuple[int, int | None, int, Event | None]] = []
        for a in attempts_by_group.get(group, ()):
            after = a["after"]
            first = a["before"] or after
            attempts.append((first.time_ms, None if after is None else after.status, first.retry, after))
        if len(attempts) > 1:
            attempts.sort(key=_FIRST)
        outcome = outcome_of([a[:3] for a in attempts], dead_ms.get(group, []), replay_ms.get(group, 0))
        latency = None
        if outcome == CONSUMED:
            for _, status, _, after in attempts:  # the first successful attempt's
                if status == _OK and after is not None:
                    latency = max(0, after.time_ms - placed_ms)
                    break
        groups[group] = (outcome, len(attempts) > 1 or outcome == RETRYING, latency)
    never_stored = send is not None and send.status != _OK and not (consumes or dead_ms)
    return (placing.topic, placed_ms, groups, not never_stored), places


_FIRST = operator.itemgetter(0)
# Plain ints: an enum member's lookup costs more than the comparison (once per event read back).
_PUB, _SUB_BEFORE, _SUB_AFTER, _DEAD, _REPLAY = (
    int(t) for t in (EventType.PUB, EventType.SUB_BEFORE, EventType.SUB_AFTER, EventType.DEAD, EventType.REPLAY))
_OK = int(Status.OK)
