"""Rollups: what the index job keeps per (topic, minute, group), checked against a reference built
from the events themselves, and identical however often (or how interrupted) the log is indexed."""

from __future__ import annotations

from typing import Any

import pytest
from index_helpers import CONSUMER, PRODUCER, ev, unique

from collector.index.indexer import finish_batch, index_records
from collector.index.rollup import read_minutes
from collector.query.overview import overview
from collector.store import Store, keys, schema
from tracehook.wire import EventType, Status

pytestmark = pytest.mark.fallback

T0 = 1_700_000_000_000 - 1_700_000_000_000 % 60_000  # a minute boundary
MINUTE = 60_000

# Per message: (store time offset from T0, {group: plan}).  Plans: "ok" consumed at +latency,
# "retry_ok" failed once then consumed, "fail" finished with an error, "dead", "pending" (received,
# unfinished), "retry_later" (asked for a redelivery).  A group missing from a plan never received it.
PLANS: list[tuple[int, dict[str, tuple[str, int]]]] = [
    (1_000, {"g1": ("ok", 3), "g2": ("ok", 40)}),
    (2_000, {"g1": ("retry_ok", 700), "g2": ("fail", 0)}),
    (30_000, {"g1": ("dead", 0)}),
    (59_999, {"g1": ("ok", 20_000), "g2": ("pending", 0)}),
    (MINUTE + 5, {"g2": ("retry_later", 0)}),                  # g1 never received it
    (MINUTE + 6, {"g1": ("ok", 9), "g2": ("ok", 2_000_000)}),  # beyond the last latency bound
    (3 * MINUTE, {}),                                          # nobody consumed it
    # Latencies on the histogram's bounds and just either side of them.
    (4 * MINUTE, {"g1": ("ok", 4), "g2": ("ok", 5)}),
    (4 * MINUTE + 1, {"g1": ("ok", 6), "g2": ("ok", 10)}),
    (4 * MINUTE + 2, {"g1": ("ok", 11), "g2": ("ok", 1_799_999)}),
    (4 * MINUTE + 3, {"g1": ("ok", 1_800_000), "g2": ("ok", 1_800_001)}),
]
# The latency buckets as docs/console-overview.md lists them: inclusive upper bounds in ms, then the rest.
BUCKETS = (5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 1_800_000, "rest")
# The bucket of every latency planned above, by hand.
BUCKET_OF = {3: 5, 4: 5, 5: 5, 6: 10, 9: 10, 10: 10, 11: 25, 40: 50, 700: 1_000, 20_000: 30_000,
             1_799_999: 1_800_000, 1_800_000: 1_800_000, 1_800_001: "rest", 2_000_000: "rest"}
LATE = {1, 3}
"""Messages whose consume events come in the second batch, minutes after their send, without a store time."""


def events(topic: str) -> tuple[list[Any], list[Any]]:
    """The sends (and early consumes) of batch 1, and the late consume events of batch 2."""
    first: list[Any] = []
    second: list[Any] = []
    for i, (offset, plan) in enumerate(PLANS):
        t, msg_id = T0 + offset, f"{topic}-m{i}"
        first.append((PRODUCER, ev(EventType.PUB, t + 1, "pg", topic, msg_id, store_ms=t, born_ms=t - 1)))
        for group, (kind, latency) in plan.items():
            out = second if i in LATE else first
            place = {} if i in LATE else {"store_ms": t}

            def attempt(retry: int, status: Status | None, at: int, group: str = group, out: list = out,
                        place: dict = place, msg_id: str = msg_id) -> None:
                rid = f"{msg_id}/{group}/{retry}"
                out.append((CONSUMER, ev(EventType.SUB_BEFORE, at, group, topic, msg_id, retry=retry,
                                         request_id=rid, **place)))
                if status is not None:
                    out.append((CONSUMER, ev(EventType.SUB_AFTER, at + 1, group, topic, msg_id, retry=retry,
                                             request_id=rid, status=status, **place)))

            if kind == "ok":
                attempt(0, Status.OK, t + latency - 1)
            elif kind == "retry_ok":
                attempt(0, Status.FAILED, t + 1)
                attempt(1, Status.OK, t + latency - 1)
            elif kind == "fail":
                attempt(0, Status.FAILED, t + 1)
            elif kind == "dead":
                attempt(0, Status.FAILED, t + 1)
                out.append((CONSUMER, ev(EventType.DEAD, t + 5, group, topic, msg_id, **place)))
            elif kind == "pending":
                attempt(0, None, t + 1)
            elif kind == "retry_later":
                attempt(0, Status.RETRY_LATER, t + 1)
    return first, second


def reference(topic: str) -> dict[int, dict[str, Any]]:
    """Per minute: sent and, per group, the outcome counts and latency buckets, straight from PLANS."""
    outcome = {"ok": "consumed", "retry_ok": "consumed", "fail": "failed", "dead": "dead", "pending": "pending",
               "retry_later": "retrying"}
    out: dict[int, dict[str, Any]] = {}
    for offset, plan in PLANS:
        minute = T0 + offset - offset % MINUTE
        m = out.setdefault(minute, {"sent": 0, "groups": {}})
        m["sent"] += 1
        for group, (kind, latency) in plan.items():
            g = m["groups"].setdefault(group, {"consumed": 0, "retrying": 0, "failed": 0, "dead": 0, "pending": 0,
                                               "retried": 0, "latency": [0] * len(BUCKETS)})
            g[outcome[kind]] += 1
            g["retried"] += kind in ("retry_ok", "retry_later")
            if outcome[kind] == "consumed":
                g["latency"][BUCKETS.index(BUCKET_OF[latency])] += 1
    return out


def observed(store: Store, topic: str) -> dict[int, dict[str, Any]]:
    out = {}
    for m in read_minutes(store, topic, T0 - MINUTE, T0 + 10 * MINUTE):
        out[m.minute_ms] = {"sent": m.sent, "groups": {
            g: {"consumed": b.consumed, "retrying": b.retrying, "failed": b.failed, "dead": b.dead,
                "pending": b.pending, "retried": b.retried, "latency": b.latency} for g, b in m.groups.items()}}
    return out


def rollup_rows(store: Store) -> list:
    return list(store.scan(schema.ROLLUPS, b"", b"\xff"))


def test_rollups_match_the_events_and_reindexing_changes_nothing(store: Store) -> None:
    topic = unique("ro")
    first, second = events(topic)
    index_records(store, first)
    finish_batch(store, now_ms=T0)
    index_records(store, second)  # the late consumes: their messages' minutes are recomputed too
    finish_batch(store, now_ms=T0)
    assert observed(store, topic) == reference(topic)
    rows = rollup_rows(store)
    kinds = {keys.unpack(row)[0] for row, _ in rows}
    assert kinds == {schema.ROLLUP_TOPIC, schema.ROLLUP_MINUTE, schema.ROLLUP_HOUR, schema.ROLLUP_PARTS}, "the markers are gone"

    # The whole log again (a replayed checkpoint), and a run that dies before finish_batch then restarts.
    index_records(store, first + second)
    finish_batch(store, now_ms=T0)
    assert rollup_rows(store) == rows
    index_records(store, second)
    index_records(store, second)
    finish_batch(store, now_ms=T0)
    assert rollup_rows(store) == rows


def test_group_lag_in_time_from_rollups_only(store: Store) -> None:
    topic = unique("lag")
    first, second = events(topic)
    index_records(store, first + second)
    finish_batch(store, now_ms=T0)
    now = T0 + 10 * MINUTE
    ov = overview(store, T0, now, now_ms=now, topic=topic)
    (stats,) = ov.topics
    groups = {g.group: g for g in stats.groups}
    # g1: the oldest message it has not consumed is m4 (never received; m2 is dead = finished).
    assert groups["g1"].lag_ms == now - (T0 + MINUTE + 5)
    # g2: m2 (only g1 received it), before m3 (still pending: received, unfinished).
    assert groups["g2"].lag_ms == now - (T0 + 30_000)
    assert stats.sent == len(PLANS)
    assert groups["g1"].to_json()["not_received"] == 2  # m4 and m6
    # A narrow window: only the second minute's counts, the lag stays what the horizon gives.
    narrow = overview(store, T0 + MINUTE, T0 + MINUTE + 30_000, now_ms=now, topic=topic)
    (n,) = narrow.topics
    assert n.sent == 2 and {g.group: g.counts["consumed"] for g in n.groups} == {"g1": 1, "g2": 1}
    assert {g.group: g.lag_ms for g in n.groups} == {"g1": groups["g1"].lag_ms, "g2": groups["g2"].lag_ms}


def test_ids_past_the_in_memory_bound_are_kept_as_markers(store: Store, monkeypatch: Any) -> None:
    """An in-process indexer keeps the msg ids it wrote in memory for finish_batch, up to a bound;
    past it they go to marker rows, and finish_batch rolls both up (then no marker is left)."""
    from collector.index import indexer

    monkeypatch.setattr(indexer, "MAX_UNFINISHED", 3)
    topic = unique("spill")
    first, second = events(topic)
    index_records(store, first)
    index_records(store, second)
    start, stop = keys.prefix_range((schema.ROLLUP_DIRTY_MSG,))
    assert list(store.scan(schema.ROLLUPS, start, stop)), "ids were spilled to marker rows"
    finish_batch(store, now_ms=T0)
    assert observed(store, topic) == reference(topic)
    assert not list(store.scan(schema.ROLLUPS, start, stop))
