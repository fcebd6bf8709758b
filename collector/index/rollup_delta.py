"""A touched minute's rollup updated from the batch's changed parts alone, when that is exact.

:func:`collector.index.rollup.write_parts` used to re-aggregate every touched minute from its whole
parts row after each batch: at 50,000 sends/s a minute holds 3M parts and every batch touches it,
so the refresh cost grew with the minute, not the batch.  A store object now keeps, per minute
it refreshed lately (:class:`KeptMinutes`, at most :data:`MAX_KEPT_MINUTES`, a few KB each: no
parts), the minute's bucket as its parts row aggregates (:class:`MinuteState`), and the next batch
applies only its changed cells to it (:func:`apply_changes`): counts and latencies add and
subtract; the times (``first_ms``, each group's ``first_ms``, ``oldest_open_ms`` and
``oldest_open_after_first_ms``) are minima, exact for a part added, but not always for one removed
or added before a group's first part.  When a change is not provably exact :func:`apply_changes`
says so and the caller aggregates the whole row as before.

A kept minute is used only while it is provably what the store holds (:meth:`KeptMinutes.current`):
the store tells whether another connection or process committed anything since
(:meth:`collector.store.base.Store.change_mark`: SQLite's ``PRAGMA data_version``; HBase cannot
tell, so there every minute is read as now), and no cell of the minute has reached its TTL (only
minutes whose cells this store object wrote are kept, so their age is known).

Example::

    state = kept_minutes(store).current(("orders", minute_ms), store.change_mark(), store.options.ttl_s)
    if state is not None and apply_changes(state, [(column, old_value, new_value)]):
        columns = state.bucket.columns()      # the rollup row a full aggregation would give
"""

from __future__ import annotations

import bisect
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from collector.index.rollup_buckets import LATENCY_BOUNDS_MS, GroupBucket, MinuteBucket
from collector.index.rollup_parts import (
    _PENDING_CODE,
    _PLACED,
    _RETRYING_CODE,
    MOVED,
    Key,
    _Entry,
    cell_entry,
    sort_entries,
)
from collector.store.base import ChangeMark, Columns, Store

MAX_KEPT_MINUTES = 256
"""Minutes a store object keeps at most (the least recently refreshed go first): a bucket and a
key per group each, about 1-3 KB with a few groups, so well under 1 MB."""

Minute = tuple[str, int]
Change = tuple[bytes, bytes | None, bytes]
"""A parts cell that changes: (column, its value before or None when absent, its new value)."""


@dataclass(slots=True)
class MinuteState:
    """What a minute's rows hold now, and what :func:`apply_changes` needs besides the bucket."""

    bucket: MinuteBucket
    """The aggregate of the parts row as stored."""
    first_keys: dict[str, Key]
    """Per group: the :data:`~collector.index.rollup_parts.Key` of the first stored part that has it."""
    last_key: Key | None
    """The last stored part's key; None without stored parts."""
    rollup: Columns
    """The rollup row as stored (``{}`` when there is none)."""
    has_cells: bool
    """Whether the parts row has any cell (:data:`MOVED` ones included)."""
    version: int = 0
    """The store's :attr:`ChangeMark.version` this state was read or written under."""
    born_ms: int = 0
    """No cell of the minute's rows was written before this (the store's clock)."""


def _open(code: int) -> bool:
    return code == _RETRYING_CODE or code == _PENDING_CODE


def _min(a: int | None, b: int) -> int:
    return b if a is None or b < a else a


def _groups(flat: list, start: int) -> Iterable[tuple[str, int, bool, int | None]]:
    for j in range(start, len(flat), 4):
        yield flat[j], flat[j + 1], flat[j + 2], flat[j + 3]


def _count(bucket: GroupBucket, code: int, retried: bool, ms: int | None, sign: int) -> None:
    """Add (``sign`` 1) or take away (-1) one part's outcome in a group's counts."""
    if code == 0:
        bucket.consumed += sign
    elif code == 1:
        bucket.retrying += sign
    elif code == 2:
        bucket.failed += sign
    elif code == 3:
        bucket.dead += sign
    else:
        bucket.pending += sign
    bucket.retried += sign * retried
    if ms is not None:
        bucket.latency[bisect.bisect_left(LATENCY_BOUNDS_MS, ms)] += sign
        bucket.latency_sum_ms += sign * ms


def _remove(state: MinuteState, entry: _Entry) -> bool:
    placed, column, stored, flat, start = entry
    out = state.bucket
    if not stored:  # a failed send has no groups (Part): only counted
        out.failed_sends -= 1
        return True
    key = (placed, column)
    # The minute's or a group's first part, or the last part: the next one is not known here.
    if placed == out.first_ms or key == state.last_key:
        return False
    has = set()
    for group, code, retried, ms in _groups(flat, start):
        bucket = out.groups.get(group)
        if bucket is None or key == state.first_keys[group]:
            return False
        if _open(code) and placed in (bucket.oldest_open_ms, bucket.oldest_open_after_first_ms):
            return False  # maybe the oldest open one: the next oldest is not known here
        _count(bucket, code, retried, ms, -1)
        has.add(group)
    for group, bucket in out.groups.items():
        if group not in has and (placed == bucket.oldest_open_ms or (
                key > state.first_keys[group] and placed == bucket.oldest_open_after_first_ms)):
            return False  # open for the group (never received): maybe its oldest
    out.sent -= 1
    return True


def _add(state: MinuteState, entry: _Entry) -> bool:
    placed, column, stored, flat, start = entry
    out = state.bucket
    if not stored:
        out.failed_sends += 1
        return True
    key = (placed, column)
    before_last, before_first = state.last_key, out.first_ms
    if len(flat) == start and not out.groups:  # no groups at all (a minute of sends no one consumed yet)
        out.sent += 1
        out.first_ms = _min(before_first, placed)
        if before_last is None or key > before_last:
            state.last_key = key
        return True
    has: dict[str, tuple[int, bool, int | None]] = {g: (c, r, ms) for g, c, r, ms in _groups(flat, start)}
    for group, (_code, _, _) in has.items():
        if group in out.groups:
            if key < state.first_keys[group]:
                return False  # the group's new first part: which parts then follow it is not known here
        elif before_last is not None and key < before_last:
            return False  # a new group: the parts after this one never received it, and are not known here
    for group, bucket in out.groups.items():
        if group not in has:  # open for the group (never received)
            bucket.oldest_open_ms = _min(bucket.oldest_open_ms, placed)
            if key > state.first_keys[group]:
                bucket.oldest_open_after_first_ms = _min(bucket.oldest_open_after_first_ms, placed)
    new_groups = False
    for group, (code, retried, ms) in has.items():
        bucket = out.groups.get(group)
        if bucket is None:  # every other stored part is open for it; none follows this one
            bucket = out.groups[group] = GroupBucket(first_ms=placed, oldest_open_ms=before_first)
            state.first_keys[group] = key
            new_groups = True
        if _open(code):
            bucket.oldest_open_ms = _min(bucket.oldest_open_ms, placed)
            bucket.oldest_open_after_first_ms = _min(bucket.oldest_open_after_first_ms, placed)
        _count(bucket, code, retried, ms, 1)
    if new_groups:  # in group order, as a whole aggregation lists them
        out.groups = dict(sorted(out.groups.items()))
    out.sent += 1
    out.first_ms = _min(out.first_ms, placed)
    if before_last is None or key > before_last:
        state.last_key = key
    return True


def _replace(state: MinuteState, old: _Entry, new: _Entry) -> bool:
    """A stored part changed in place (same key, still stored): a consume indexed since, mostly."""
    placed, column = new[0], new[1]
    key = (placed, column)
    out = state.bucket
    had = {g: (c, r, ms) for g, c, r, ms in _groups(old[3], old[4])}
    has = {g: (c, r, ms) for g, c, r, ms in _groups(new[3], new[4])}
    if has.keys() - out.groups.keys():
        return False  # a new group: see _add
    for group, bucket in out.groups.items():
        before, now = had.get(group), has.get(group)
        first = state.first_keys[group]
        if (before is not None and now is None and key == first) or (now is not None and key < first):
            return False  # the group's first part changes: which parts follow it is not known here
        was_open = before is None or _open(before[0])
        is_open = now is None or _open(now[0])
        after = key >= first  # (the first part itself counts as after it)
        if was_open and not is_open and (placed == bucket.oldest_open_ms or (
                after and placed == bucket.oldest_open_after_first_ms)):
            return False  # maybe the oldest open one: the next oldest is not known here
        if is_open and not was_open:
            bucket.oldest_open_ms = _min(bucket.oldest_open_ms, placed)
            if after:
                bucket.oldest_open_after_first_ms = _min(bucket.oldest_open_after_first_ms, placed)
        if before is not None:
            _count(bucket, *before, -1)
        if now is not None:
            _count(bucket, *now, 1)
    return True


def apply_changes(state: MinuteState, changes: Iterable[Change]) -> bool:
    """Update ``state`` (in place) for these changed parts cells; False when that is not provably
    what a whole aggregation gives (``state`` is then left half-updated: aggregate the row instead).

    Old parts go first, then the new ones in key order (a batch's new messages usually follow
    the minute's others, where an addition is always exact)."""
    added: list[_Entry] = []
    for column, old, new in changes:
        before = None if old is None or old == MOVED else cell_entry(column, old)
        now = None if new == MOVED else cell_entry(column, new)
        if before is not None and now is not None and before[2] and now[2] and before[0] == now[0]:
            if not _replace(state, before, now):
                return False
            continue
        if before is not None and not _remove(state, before):
            return False
        if now is not None:
            added.append(now)
    if not state.bucket.groups and all(e[4] == len(e[3]) for e in added):
        _add_groupless(state, added)
        return True
    sort_entries(added)
    for entry in added:
        if not _add(state, entry):
            return False
    return True


def _add_groupless(state: MinuteState, added: list[_Entry]) -> None:
    """:func:`_add` of each entry, for a minute without groups and parts without groups (a minute
    of sends no one consumed yet): then each one only counts, and the first time and the last key
    are a minimum and a maximum, so no order is needed (the sort cost more than the rest of the
    update; measured)."""
    out = state.bucket
    stored = [e for e in added if e[2]]
    out.failed_sends += len(added) - len(stored)
    if not stored:
        return
    out.sent += len(stored)
    out.first_ms = _min(out.first_ms, min(map(_PLACED, stored)))
    top = max(map(_PLACED, stored))
    last = (top, max(e[1] for e in stored if e[0] == top))
    if state.last_key is None or last > state.last_key:
        state.last_key = last


@dataclass
class KeptMinutes:
    """The :class:`MinuteState` of the minutes one store object refreshed lately."""

    states: OrderedDict[Minute, MinuteState] = field(default_factory=OrderedDict)

    def current(self, minute: Minute, mark: ChangeMark | None, ttl_s: int) -> MinuteState | None:
        """The minute's kept state if it is provably what the store holds now (taken out: put it back
        with :meth:`keep` once written), else None (and forgotten)."""
        state = self.states.pop(minute, None)
        if (state is None or mark is None or mark.version != state.version
                or state.born_ms < mark.now_ms - ttl_s * 1000):
            return None
        return state

    def keep(self, minute: Minute, state: MinuteState) -> None:
        self.states[minute] = state
        self.states.move_to_end(minute)
        while len(self.states) > MAX_KEPT_MINUTES:
            self.states.popitem(last=False)


_KEPT: weakref.WeakKeyDictionary[Store, KeptMinutes] = weakref.WeakKeyDictionary()


def kept_minutes(store: Store) -> KeptMinutes:
    """The minutes this store object keeps (a store opened again starts with none)."""
    return _KEPT.setdefault(store, KeptMinutes())
