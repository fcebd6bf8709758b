"""Rollups kept across batches equal rollups computed from scratch, and both equal an independent
reference worked out from the events (rollup_reference.py), however the events are split into
batches and whatever order they come in: sends that fail and are retried in another minute,
consumes that place a message before its send is seen, sends seen only late, dead letters."""

from __future__ import annotations

import pathlib
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from index_helpers import CONSUMER, PRODUCER, ev
from rollup_reference import expected_minutes, observed_minutes

from collector.index.indexer import finish_batch, index_records
from collector.index.rollup import MessageParts, Part, compute_minute, merge_parts, read_minutes, read_parts, rows_of
from collector.store import Store, open_store, schema
from tracehook.wire import EventType, Status

pytestmark = pytest.mark.fallback

T0 = 1_700_000_000_000 - 1_700_000_000_000 % 60_000
MINUTE = 60_000
TOPIC = "t"

# One event of a message: (kind, minute offset, seconds into it, group, with the store time?).
_event = st.tuples(
    st.sampled_from(["pub_ok", "pub_failed", "consume_ok", "consume_failed", "consume_pending", "dead"]),
    st.integers(0, 2), st.integers(0, 59), st.sampled_from(["g1", "g2"]), st.booleans(),
)
_messages = st.lists(st.lists(_event, min_size=1, max_size=4), min_size=1, max_size=6)


def events_of(messages: list[list[tuple[Any, ...]]]) -> list[Any]:
    out: list[Any] = []
    for i, plan in enumerate(messages):
        msg_id = f"m{i}"
        for j, (kind, minute, second, group, with_store) in enumerate(plan):
            t = T0 + minute * MINUTE + second * 1000 + j
            place = {"store_ms": t} if with_store else {}
            rid = {"request_id": f"{msg_id}/{j}"}
            if kind.startswith("pub"):
                status = Status.OK if kind == "pub_ok" else Status.FAILED
                out.append((PRODUCER, ev(EventType.PUB, t + 1, "pg", TOPIC, msg_id, status=status, **place)))
            elif kind == "dead":
                out.append((CONSUMER, ev(EventType.DEAD, t, group, TOPIC, msg_id, **place)))
            else:
                out.append((CONSUMER, ev(EventType.SUB_BEFORE, t, group, TOPIC, msg_id, **rid, **place)))
                if kind != "consume_pending":
                    status = Status.OK if kind == "consume_ok" else Status.FAILED
                    out.append((CONSUMER, ev(EventType.SUB_AFTER, t + 5, group, TOPIC, msg_id, status=status,
                                             **rid, **place)))
    return out


def from_scratch(store: Store) -> list[Any]:
    """Every minute's rollup recomputed from the indexed messages alone."""
    buckets = [compute_minute(store, TOPIC, T0 + m * MINUTE, salt_buckets=store.salt_buckets) for m in range(3)]
    return rows_of(b for b in buckets if b.placed)  # a minute of failed sends only has a row too


def batches(messages: list[list[tuple[Any, ...]]], cuts: list[int], order: Any) -> Iterator[tuple[Store, list[Any]]]:
    """The events of ``messages`` shuffled by ``order`` and cut at ``cuts``: each batch with one
    fresh store for them all, which is checked against a recompute after each batch."""
    events = events_of(messages)
    order.shuffle(events)
    bounds = sorted({0, len(events), *(c % (len(events) + 1) for c in cuts)})
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"local:{pathlib.Path(tmp) / 'index.sqlite3'}")
        try:
            for lo, hi in zip(bounds, bounds[1:], strict=False):
                yield store, events[lo:hi]
                minutes = read_minutes(store, TOPIC, T0, T0 + 3 * MINUTE)
                assert rows_of(minutes) == from_scratch(store), f"after events {lo}..{hi}"
                indexed = [e for _, e in events[:hi]]
                assert observed_minutes(minutes) == expected_minutes(indexed, TOPIC), f"after events {lo}..{hi}"
        finally:
            store.close()


_cuts = st.lists(st.integers(0, 30), max_size=3)
_order = st.randoms(use_true_random=False)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=_messages, cuts=_cuts, order=_order)
def test_rollups_after_any_split_into_batches_equal_a_recompute(
    messages: list[list[tuple[Any, ...]]], cuts: list[int], order: Any,
) -> None:
    for store, batch in batches(messages, cuts, order):
        index_records(store, batch)
        finish_batch(store, now_ms=T0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=_messages, cuts=_cuts, order=_order, tasks=st.integers(1, 3))
def test_parts_read_back_by_concurrent_writers_equal_a_recompute(
    messages: list[list[tuple[Any, ...]]], cuts: list[int], order: Any, tasks: int,
) -> None:
    """The index job's way (no markers): each batch is written by several tasks, each reading its
    messages' parts back right after its own writes, in any interleaving with the other tasks'
    writes; the driver merges the reads (merge_parts) and finish_batch writes the rollups."""
    for store, batch in batches(messages, cuts, order):
        shares = [batch[i::tasks] for i in range(tasks)]
        # Each task writes, then reads; other tasks' steps fall anywhere in between.
        schedule = _interleave([[(i, "write"), (i, "read")] for i in range(tasks)], order)
        touched: list[set[str]] = [set() for _ in range(tasks)]
        reads: dict[int, MessageParts] = {}
        for i, step in schedule:
            if step == "write":
                index_records(store, shares[i], touched=touched[i])
            else:
                reads[i] = read_parts(store, touched[i])
        merged: MessageParts = {}
        for i in range(tasks):  # in task order, as Spark's collect() returns them, not read order
            merge_parts(merged, reads[i])
        finish_batch(store, now_ms=T0, parts=merged)


def _interleave(steps: list[list[tuple[int, str]]], rng: Any) -> list[tuple[int, str]]:
    """A random interleaving of the tasks' step lists that keeps each task's own order."""
    queues = [list(task) for task in steps]
    out: list[tuple[int, str]] = []
    while queues:
        queue = rng.choice(queues)
        out.append(queue.pop(0))
        if not queue:
            queues.remove(queue)
    return out


def test_a_store_rolled_up_before_parts_rows_is_brought_up_to_date(store: Store) -> None:
    """An index whose rollups predate parts rows (a rollup row, no parts): a new message in a
    minute rebuilds that minute from its messages, so the earlier messages still count."""
    first = [(PRODUCER, ev(EventType.PUB, T0 + i, "pg", TOPIC + "-old", f"old{i}", store_ms=T0 + i)) for i in range(3)]
    index_records(store, first)
    finish_batch(store, now_ms=T0)
    parts = [schema.rollup_parts_row(TOPIC + "-old", T0)]
    assert store.get_rows(schema.ROLLUPS, parts) != [{}]
    store.delete_rows(schema.ROLLUPS, parts)  # as an older indexer left it
    index_records(store, [(PRODUCER, ev(EventType.PUB, T0 + 9, "pg", TOPIC + "-old", "new", store_ms=T0 + 9))])
    finish_batch(store, now_ms=T0)
    (bucket,) = read_minutes(store, TOPIC + "-old", T0, T0)
    assert bucket.sent == 4


@given(placed_ms=st.integers(0, 2**62), groups=st.dictionaries(
    st.text(min_size=1, max_size=20),
    st.tuples(st.sampled_from(["consumed", "retrying", "failed", "dead", "pending"]), st.booleans(),
              st.none() | st.integers(0, 2**62)), max_size=5))
def test_a_part_decodes_to_what_was_encoded(placed_ms: int, groups: dict[str, Any]) -> None:
    part = Part("m-1", placed_ms, groups)
    assert Part.decode("m-1", part.encode()) == part
