"""What the per-minute rollups must hold, worked out from the events alone.

An independent reference for the rollup tests: the product's two ways (kept across batches,
recomputed by ``compute_minute``) share ``build_trace`` and ``Part.of``, so comparing them with
each other cannot catch a wrong classification. This module reads plain events and follows
the documented definitions (docs/query.md's message model, docs/console-overview.md's
"Definitions"); it imports nothing from ``collector``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tracehook.wire import Event, EventType, Status

MINUTE_MS = 60_000
# The latency histogram's inclusive upper bounds in ms (docs/console-overview.md), then one bucket for the rest.
LATENCY_BOUNDS_MS = (5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 1_800_000)


@dataclass(frozen=True)
class GroupFate:
    outcome: str  # consumed, retrying, failed, dead or pending
    retried: bool  # more than one attempt, or being retried
    latency_ms: int | None  # for consumed messages


@dataclass(frozen=True)
class Message:
    placed_ms: int
    send_failed: bool  # traced sends, and none of them succeeded
    groups: dict[str, GroupFate]


def add_message(minute: dict[str, Any], message: Message) -> None:
    """Count ``message`` in its minute: ``sent`` and its groups' outcomes."""
    if message.send_failed:
        count_failed_send(minute, message)
        return
    minute["sent"] += 1
    _count_groups(minute, message)


def count_failed_send(minute: dict[str, Any], message: Message) -> None:
    """FAILED SENDS, the one place the reference decides about them (docs/console-overview.md): a
    message whose traced sends all failed is placed at its last send (docs/query.md). If no group
    received or dead-lettered it, the broker never stored it: a failed send, not in ``sent`` and in
    no group's counts. A group that did receive it proves it stored: then it counts as sent."""
    if message.groups:
        minute["sent"] += 1
        _count_groups(minute, message)
    else:
        minute["failed_sends"] += 1


def _count_groups(minute: dict[str, Any], message: Message) -> None:
    for group, fate in message.groups.items():
        g = minute["groups"].setdefault(group, _empty_group())
        g[fate.outcome] += 1
        g["retried"] += fate.retried
        if fate.latency_ms is not None:
            g["latency"][_bucket(fate.latency_ms)] += 1
            g["latency_sum_ms"] += fate.latency_ms


def expected_minutes(events: Iterable[Event], topic: str) -> dict[int, dict[str, Any]]:
    """Per minute start: ``sent``, ``failed_sends`` and per group the outcome counts, ``retried`` and the latency histogram."""
    by_msg: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        if e.topic == topic:
            by_msg[e.msg_id].append(e)
    out: dict[int, dict[str, Any]] = {}
    for msg_events in by_msg.values():
        message = classify(msg_events)
        if message is not None:
            minute_ms = message.placed_ms - message.placed_ms % MINUTE_MS
            add_message(out.setdefault(minute_ms, {"sent": 0, "failed_sends": 0, "groups": {}}), message)
    return out


def observed_minutes(buckets: Iterable[Any]) -> dict[int, dict[str, Any]]:
    """The same view of the product's ``MinuteBucket`` rows."""
    return {b.minute_ms: {"sent": b.sent, "failed_sends": b.failed_sends, "groups": {g: {
        "consumed": x.consumed, "retrying": x.retrying, "failed": x.failed, "dead": x.dead, "pending": x.pending,
        "retried": x.retried, "latency": list(x.latency), "latency_sum_ms": x.latency_sum_ms,
    } for g, x in b.groups.items()}} for b in buckets}


def classify(events: list[Event]) -> Message | None:
    """One message's placement and each group's fate; None when nothing places it."""
    placed_ms = _placement(events)
    if placed_ms is None:
        return None
    sends = [e for e in events if e.type == EventType.PUB]
    send_failed = bool(sends) and all(e.status != Status.OK for e in sends)
    groups = sorted({e.group for e in events if e.type in (EventType.SUB_BEFORE, EventType.SUB_AFTER, EventType.DEAD)})
    return Message(placed_ms, send_failed, {g: _fate(events, g, placed_ms) for g in groups})


def _message_time(e: Event) -> int:
    return e.store_ms or e.born_ms or e.time_ms


def _placement(events: list[Event]) -> int | None:
    """Placed by its send alone: the first successful one, else the last one (a failed send retried).
    A message whose send was never traced is placed by the broker store time its earliest consume or
    dead event recorded, never at a consume time; without one it is in no rollup."""
    sends = sorted((e for e in events if e.type == EventType.PUB), key=lambda e: e.time_ms)
    ok = [e for e in sends if e.status == Status.OK]
    if sends:
        return _message_time(ok[0] if ok else sends[-1])
    filing = sorted((e for e in events if e.type in (EventType.SUB_BEFORE, EventType.DEAD) and e.store_ms > 0),
                    key=lambda e: e.time_ms)
    return filing[0].store_ms if filing else None


def _fate(events: list[Event], group: str, placed_ms: int) -> GroupFate:
    # An attempt is a request id: begun at its SUB_BEFORE (or, while that is not indexed yet, at its
    # SUB_AFTER), finished by its SUB_AFTER.
    begun: dict[str, int] = {}
    finished: dict[str, Event] = {}
    for e in events:
        if e.group != group:
            continue
        if e.type == EventType.SUB_BEFORE:
            begun[e.request_id] = e.time_ms  # over a SUB_AFTER's time seen first
        elif e.type == EventType.SUB_AFTER:
            finished[e.request_id] = e
            begun.setdefault(e.request_id, e.time_ms)
    attempts = sorted(begun, key=begun.__getitem__)
    ok = [rid for rid in attempts if rid in finished and finished[rid].status == Status.OK]
    last = attempts[-1] if attempts else None
    latency = None
    if any(e.type == EventType.DEAD and e.group == group for e in events):
        outcome = "dead"  # a dead letter decides, whatever the attempts said
    elif ok:
        outcome = "consumed"
        latency = max(0, finished[ok[0]].time_ms - placed_ms)  # a consume stamped before the send counts 0
    elif last is not None and last in finished and finished[last].status == Status.RETRY_LATER:
        outcome = "retrying"
    elif last is not None and last not in finished:
        outcome = "retrying" if _retry(events, group, last) > 0 else "pending"
    else:
        outcome = "failed"
    return GroupFate(outcome, len(attempts) > 1 or outcome == "retrying", latency)


def _retry(events: list[Event], group: str, request_id: str) -> int:
    return max(e.retry for e in events if e.group == group and e.request_id == request_id)


def _bucket(latency_ms: int) -> int:
    for i, bound in enumerate(LATENCY_BOUNDS_MS):
        if latency_ms <= bound:
            return i
    return len(LATENCY_BOUNDS_MS)


def _empty_group() -> dict[str, Any]:
    return {"consumed": 0, "retrying": 0, "failed": 0, "dead": 0, "pending": 0, "retried": 0,
            "latency": [0] * (len(LATENCY_BOUNDS_MS) + 1), "latency_sum_ms": 0}
