"""A touched minute's rollup kept from batch to batch (collector.index.rollup_delta) equals a whole aggregation.

The reference is the aggregation of the whole parts row (tests/collector/store/test_rollup_parts.py checks
that against the definitions), and ``expected_groups`` again, on the parts as the test's own model holds them.
"""

from __future__ import annotations

import pathlib
import tempfile
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_rollup_parts import expected_groups

from collector.index.rollup import MOVED, MessageParts, Part, aggregate_cells, write_parts
from collector.index.rollup_delta import MinuteState, apply_changes
from collector.index.rollup_parts import aggregate_entries, cell_entries
from collector.store import schema
from collector.store.base import StoreOptions
from collector.store.local import LocalStore

T0 = 1_700_000_040_000  # a minute's start
TOPIC = "t"
MINUTES = [T0, T0 + 60_000]

_groups = st.dictionaries(st.sampled_from(["g1", "g2", "g3"]), st.tuples(
    st.sampled_from(["consumed", "retrying", "failed", "dead", "pending"]), st.booleans(),
    st.none() | st.sampled_from([0, 5, 6, 1_800_000, 1_800_001])), max_size=3)
_part = st.tuples(st.integers(0, 4), st.booleans(), _groups)  # (ms into the minute, stored, groups)


def _value(minute_ms: int, msg_id: str, part: tuple[int, bool, dict]) -> bytes:
    offset, stored, groups = part
    return Part(msg_id, minute_ms + offset, groups if stored else {}, stored=stored).encode()


def _col(n: int) -> bytes:
    return schema.rollup_part_column(f"m{n}")


def _state(cells: dict[bytes, bytes]) -> MinuteState:
    bucket, first_keys, last_key = aggregate_entries(TOPIC, T0, cell_entries(cells))
    return MinuteState(bucket, first_keys, last_key, {}, bool(cells))


# --- the pure update ------------------------------------------------------------------------------

@settings(max_examples=600, deadline=None)
@given(before=st.dictionaries(st.integers(0, 12), st.none() | _part, max_size=10),
       after=st.dictionaries(st.integers(0, 14), st.none() | _part, max_size=6))
def test_an_update_it_calls_exact_is_the_whole_aggregation(before: dict[int, Any], after: dict[int, Any]) -> None:
    cells = {_col(n): MOVED if p is None else _value(T0, f"m{n}", p) for n, p in before.items()}
    new = {_col(n): MOVED if p is None else _value(T0, f"m{n}", p) for n, p in after.items()}
    new = {c: v for c, v in new.items() if cells.get(c, MOVED) != v}
    state = _state(cells)
    if apply_changes(state, [(c, cells.get(c), v) for c, v in new.items()]):
        whole = _state(cells | new)
        assert state.bucket.columns() == whole.bucket.columns()
        assert list(state.bucket.groups) == list(whole.bucket.groups)
        assert (state.first_keys, state.last_key) == (whole.first_keys, whole.last_key)


@settings(max_examples=500, deadline=None)
@given(before=st.lists(_part, max_size=8), later=st.lists(_part, min_size=1, max_size=8))
def test_messages_placed_after_the_minutes_others_are_always_added_exactly(before: list, later: list) -> None:
    # What the sends of a live load are: each batch's messages follow the minute's others.
    cells = {_col(n): _value(T0, f"m{n}", (0, *p[1:])) for n, p in enumerate(before)}
    new = {_col(100 + n): _value(T0, f"m{100 + n}", (5, *p[1:])) for n, p in enumerate(later)}
    state = _state(cells)
    assert apply_changes(state, [(c, None, v) for c, v in new.items()])
    assert state.bucket.columns() == aggregate_cells(TOPIC, T0, cells | new).columns()


@settings(max_examples=500, deadline=None)
@given(before=st.lists(st.tuples(st.integers(0, 4), st.booleans()), max_size=8),
       later=st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=1, max_size=8), ids=st.randoms())
def test_parts_without_groups_are_added_exactly_in_any_order(before: list, later: list, ids: Any) -> None:
    # A minute of sends no one consumed yet: new parts among the old ones in time, failed sends too.
    cells = {_col(n): _value(T0, f"m{n}", (ms, stored, {})) for n, (ms, stored) in enumerate(before)}
    numbers = ids.sample(range(100, 200), len(later))  # new messages, in any order of their ids
    new = {_col(n): _value(T0, f"m{n}", (ms, stored, {})) for n, (ms, stored) in zip(numbers, later)}
    state = _state(cells)
    assert apply_changes(state, [(c, None, v) for c, v in new.items()])
    whole = _state(cells | new)
    assert state.bucket.columns() == whole.bucket.columns()
    assert (state.bucket.first_ms, state.first_keys, state.last_key) == (whole.bucket.first_ms, whole.first_keys,
                                                                         whole.last_key)


# --- batches through a store ----------------------------------------------------------------------

_batch = st.lists(st.tuples(
    st.integers(0, 15),                      # the message
    st.sampled_from(MINUTES),                # the minute it is placed in now
    st.none() | _part,                       # its part there (None: unplaced now)
), max_size=8, unique_by=lambda m: m[0])
# (written through a second store object on the same file, the batch)
_batches = st.lists(st.tuples(st.booleans(), _batch), min_size=1, max_size=8)


def _found(batch: list, model: dict[int, int]) -> MessageParts:
    """The read-back of a batch: each message's part in its minute and MOVED in the one it was placed in before."""
    found: MessageParts = {}
    for n, minute_ms, part in batch:
        values: dict[tuple[str, int], bytes] = {}
        if part is not None:
            values[(TOPIC, minute_ms)] = _value(minute_ms, f"m{n}", part)
        for there in MINUTES:
            if there in (model.get(n), minute_ms) and (TOPIC, there) not in values:
                values[(TOPIC, there)] = MOVED
        if part is not None:
            model[n] = minute_ms
        found[f"m{n}"] = (1, values)
    return found


def _apply(cells: dict[int, dict[bytes, bytes]], found: MessageParts) -> None:
    """The parts rows as the test's model has them: a cell written only when it changes, MOVED only over a part."""
    for msg_id, (_, values) in found.items():
        for (_, minute_ms), value in values.items():
            row, col = cells.setdefault(minute_ms, {}), schema.rollup_part_column(msg_id)
            if row.get(col, MOVED) != value:
                row[col] = value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=_batches)
def test_rollups_after_any_batches_equal_a_whole_aggregation(batches: list) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(pathlib.Path(tmp) / "i.sqlite3")
        store, other = LocalStore(path), LocalStore(path)
        model: dict[int, int] = {}
        cells: dict[int, dict[bytes, bytes]] = {}
        try:
            for by_other, batch in batches:
                found = _found(batch, model)
                write_parts(other if by_other else store, found)
                _apply(cells, found)
                for minute_ms in MINUTES:
                    assert store.get_row(schema.ROLLUPS, schema.rollup_parts_row(TOPIC, minute_ms)) == cells.get(
                        minute_ms, {})
                    rollup = store.get_row(schema.ROLLUPS, schema.rollup_row(TOPIC, minute_ms))
                    whole = aggregate_cells(TOPIC, minute_ms, cells.get(minute_ms, {}))
                    assert rollup == (whole.columns() if whole.placed else {})
                    parts = [Part.decode(schema.rollup_part_msg_id(c), v)
                             for c, v in cells.get(minute_ms, {}).items() if v != MOVED]
                    assert {g: (b.first_ms, b.oldest_open_ms, b.oldest_open_after_first_ms)
                            for g, b in whole.groups.items()} == {
                        g: e[3:] for g, e in expected_groups(parts).items()}
        finally:
            store.close()
            other.close()


def _parts_row_reads(store: LocalStore) -> list[bytes]:
    reads: list[bytes] = []
    get_rows = store.get_rows

    def spy(table: str, rows: Any) -> Any:
        reads.extend(r for r in rows if r == schema.rollup_parts_row(TOPIC, T0))
        return get_rows(table, rows)

    store.get_rows = spy  # type: ignore[method-assign]
    return reads


def _sends(first: int, count: int, offset: int) -> MessageParts:
    return {f"m{n}": (1, {(TOPIC, T0): _value(T0, f"m{n}", (offset, True, {"g1": ("pending", False, None)}))})
            for n in range(first, first + count)}


def test_a_minute_it_keeps_is_not_read_again_until_another_connection_writes(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "i.sqlite3")
    store, other = LocalStore(path), LocalStore(path)
    reads = _parts_row_reads(store)
    write_parts(store, _sends(0, 5, 0))
    write_parts(store, _sends(5, 5, 1))
    assert len(reads) == 1  # the first batch found the minute empty; the second used what it kept
    write_parts(other, _sends(10, 5, 2))
    write_parts(store, _sends(15, 5, 3))
    assert len(reads) == 2  # another connection committed: the whole row is read again
    cells = store.get_row(schema.ROLLUPS, schema.rollup_parts_row(TOPIC, T0))
    assert len(cells) == 20
    assert store.get_row(schema.ROLLUPS, schema.rollup_row(TOPIC, T0)) == aggregate_cells(TOPIC, T0, cells).columns()
    store.close()
    other.close()


def test_a_kept_minute_whose_cells_expired_is_read_again(tmp_path: pathlib.Path) -> None:
    now = [T0]
    store = LocalStore(str(tmp_path / "i.sqlite3"), StoreOptions(ttl_s=60), clock=lambda: now[0])
    write_parts(store, _sends(0, 5, 0))
    now[0] += 61_000  # the first batch's cells expired
    write_parts(store, _sends(5, 5, 1))
    bucket = aggregate_cells(TOPIC, T0, _sends_cells(5, 5, 1))
    assert (bucket.sent, store.get_row(schema.ROLLUPS, schema.rollup_row(TOPIC, T0))) == (5, bucket.columns())
    store.close()


def _sends_cells(first: int, count: int, offset: int) -> dict[bytes, bytes]:
    return {schema.rollup_part_column(m): v[(TOPIC, T0)] for m, (_, v) in _sends(first, count, offset).items()}
