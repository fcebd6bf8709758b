"""``tracehook kafka-reset``: apply a trace-based reset plan to a consumer group on a real Kafka broker.

Dry run by default (prints the plan); ``--apply`` commits it, and only for a stopped group
(no members), as Kafka's own ``kafka-consumer-groups --reset-offsets`` requires::

    tracehook kafka-reset --bootstrap 127.0.0.1:9092 --group billing --topic orders --time=-2h
    tracehook kafka-reset --bootstrap 127.0.0.1:9092 --group billing --topic orders --time=-2h --apply

Targets (first offset stored at or after the time, per partition) come from the index,
through a collector (``--collector``) or the store directly (``--store``); the group's
current positions come from the broker's committed offsets.  Rewind-only unless ``--force``.
Where the time is after the newest indexed message of a partition the index may just lag,
so the broker's own time index (``offsets_for_times``) decides there; every target is
clamped to the partition's ``[beginning, end]`` offsets on the broker (see :func:`reconcile_targets`).

The replay helper re-reads exactly the offsets of a replay list and hands each record to a callback::

    replay(bootstrap, "orders", [(0, 41), (2, 7)], handle)
    replay_items(bootstrap, "orders", items, handle)   # items: the replay list (JSON dicts or ReplayItems)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from collector.cli.errors import GroupActiveError, report

__all__ = [
    "BrokerOffsets", "GroupActiveError", "apply_plan", "broker_offsets", "committed_offsets", "reconcile_targets",
    "replay", "replay_items", "run_kafka_reset",
]

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP_SERVERS"
DEFAULT_POLL_MS = 5000
STOPPED_STATES = ("Empty", "Dead")
INDEX_END_MS = 2**62
"""A time after every indexed message: offsets at it are the index's end (last indexed + 1) per partition."""



def _consumer(bootstrap: str, group: str | None) -> Any:
    from kafka import KafkaConsumer

    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)


def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets on ``topic``: {partition: next offset to read} (absent: none committed)."""
    from kafka import TopicPartition

    consumer = _consumer(bootstrap, group)
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        out = {}
        for partition in sorted(partitions):
            offset = consumer.committed(TopicPartition(topic, partition))
            if offset is not None:
                out[partition] = offset
        return out
    finally:
        consumer.close()


def group_state(bootstrap: str, group: str) -> str:
    """The group's state on the broker ("" when the broker does not know it)."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        return next((g.get("group_state", "") for g in admin.list_groups() if g.get("group_id") == group), "")
    finally:
        admin.close()


@dataclass(frozen=True)
class BrokerOffsets:
    """One topic's partitions on the broker: log start, end, and the broker's answer for a time."""

    beginning: dict[int, int]
    end: dict[int, int]
    at_time: dict[int, int]  # first offset with timestamp >= T; the end offset when none is that new


def broker_offsets(bootstrap: str, topic: str, time_ms: int) -> BrokerOffsets:
    """Ask the broker for ``topic``'s beginning/end offsets and its ``offsets_for_times(time_ms)``."""
    from kafka import TopicPartition

    consumer = _consumer(bootstrap, None)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        beginning, end = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        found = consumer.offsets_for_times({tp: time_ms for tp in tps})
        return BrokerOffsets(
            {tp.partition: beginning[tp] for tp in tps}, {tp.partition: end[tp] for tp in tps},
            {tp.partition: found[tp].offset if found.get(tp) is not None else end[tp] for tp in tps})
    finally:
        consumer.close()


def reconcile_targets(index_targets: Mapping[int, int], index_ends: Mapping[int, int],
                      broker: BrokerOffsets) -> tuple[dict[int, int], list[str]]:
    """The offsets to reset to, per partition on the broker, and warnings about where they differ from the index.

    The index answers where the time is at or before its newest message on a partition.
    Past that (or with nothing indexed) the index cannot tell a quiet partition from one it
    has not caught up with, so the broker's ``offsets_for_times`` (the same lower bound over
    the same broker timestamps) decides.  Every target is then clamped to ``[beginning, end]``:
    a committed offset outside the log makes the consumer fall back to ``auto.offset.reset``.
    """
    targets: dict[int, int] = {}
    warnings = [f"partition {p}: in the index but not on the broker; left out"
                for p in sorted(set(index_targets) - set(broker.end))]
    for p in sorted(broker.end):
        target, indexed_end = index_targets.get(p), index_ends.get(p)
        if target is None or indexed_end is None or target >= indexed_end:
            if target is None:
                warnings.append(f"partition {p}: nothing indexed; the broker's offset for the time is "
                                f"{broker.at_time[p]}")
            elif broker.at_time[p] != target:
                warnings.append(f"partition {p}: the time is after the newest indexed message (the index may "
                                f"lag, it says {target}); the broker's offset for the time is {broker.at_time[p]}")
            target = broker.at_time[p]
        low, high = broker.beginning[p], broker.end[p]
        if not low <= target <= high:
            clamped = min(max(target, low), high)
            warnings.append(f"partition {p}: offset {target} is outside the broker's [{low}, {high}]; using {clamped}")
            target = clamped
        targets[p] = target
    return targets, warnings


def apply_plan(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """Commit ``{partition: offset}`` for a stopped ``group``; raises :class:`GroupActiveError` otherwise."""
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    state = group_state(bootstrap, group)
    if state and state not in STOPPED_STATES:
        raise GroupActiveError(f"group {group!r} is {state}: stop its consumers first")
    consumer = _consumer(bootstrap, group)
    try:
        consumer.commit({TopicPartition(topic, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})
    finally:
        consumer.close()


def replay(bootstrap: str, topic: str, positions: Iterable[tuple[int, int]], callback: Callable[[Any], Any],
           poll_ms: int = DEFAULT_POLL_MS) -> int:
    """Read exactly the records at ``(partition, offset)`` and call ``callback(record)`` for each, in order.

    No consumer group is involved (nothing is committed).  Returns how many were handed over;
    positions no longer on the broker (retention) are skipped.
    """
    from kafka import TopicPartition

    consumer = _consumer(bootstrap, None)
    count = 0
    try:
        for partition, offset in sorted(set(positions)):
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            consumer.seek(tp, offset)
            records = consumer.poll(timeout_ms=poll_ms, max_records=1).get(tp, [])
            if records and records[0].offset == offset:
                callback(records[0])
                count += 1
    finally:
        consumer.close()
    return count


def replay_items(bootstrap: str, topic: str, items: Iterable[Any], callback: Callable[[Any], Any],
                 poll_ms: int = DEFAULT_POLL_MS) -> int:
    """:func:`replay` for a replay list (``tracehook replay-list`` JSON lines, the API's items, or ReplayItems)."""
    from collector.query.backtrack import offsets_by_queue

    by_queue = offsets_by_queue(items)
    return replay(bootstrap, topic, [(q, o) for q, offsets in by_queue.items() for o in offsets], callback, poll_ms)


# -- the CLI ------------------------------------------------------------------------------------

def _kafka_errors() -> tuple[type[BaseException], ...]:
    """kafka-python's error base, when kafka-python is installed."""
    try:
        from kafka.errors import KafkaError
    except ImportError:
        return ()
    return (KafkaError,)


def add_kafka_reset_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``tracehook kafka-reset``."""
    from collector.cli.backtrack import add_source_arguments

    parser.add_argument("--bootstrap", default=os.environ.get(ENV_BOOTSTRAP),
                        help=f"Kafka bootstrap servers host:port (env {ENV_BOOTSTRAP})")
    parser.add_argument("--group", required=True, help="consumer group id")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--time", required=True, help="epoch ms, ISO-8601, now, or relative like -2h")
    parser.add_argument("--force", action="store_true", help="also move partitions forward (default: rewind only)")
    parser.add_argument("--apply", action="store_true", help="commit the plan (default: print it only)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    add_source_arguments(parser)


def check_reachable(bootstrap: str, timeout_s: float = 5.0) -> None:
    """Raise ConnectionError unless one of the bootstrap servers accepts a TCP connection.

    kafka-python retries an unreachable bootstrap for about 30 s before giving up; this says so at once.
    """
    import socket

    errors = []
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout_s).close()
            return
        except (OSError, ValueError) as exc:
            errors.append(f"{server.strip()}: {getattr(exc, 'strerror', None) or exc}")
    raise ConnectionError(f"cannot reach Kafka ({'; '.join(errors)})")


def run_kafka_reset(args: argparse.Namespace) -> int:
    """Print (and with --apply, commit) the reset plan; exit 0 on success, 2 on errors."""
    from collector.cli.backtrack import FAILURES, format_offsets, open_source
    from collector.query import backtrack
    from collector.query.timeparse import parse_time

    if not args.bootstrap:
        print(f"error: --bootstrap (or {ENV_BOOTSTRAP}) is required", file=sys.stderr)
        return 2
    try:
        time_ms = parse_time(args.time, name="--time")
        check_reachable(args.bootstrap)
        source = open_source(args)
        try:
            doc = source.offsets(args.topic, {"time": time_ms, "queue": None, "group": None, "force": False})
            ends = source.offsets(args.topic, {"time": INDEX_END_MS, "queue": None, "group": None, "force": False})
        finally:
            source.close()
        targets, warnings = reconcile_targets({q["queue"]: q["offset"] for q in doc["queues"]},
                                              {q["queue"]: q["offset"] for q in ends["queues"]},
                                              broker_offsets(args.bootstrap, args.topic, time_ms))
        for warning in warnings:
            print(f"warning: {warning}", file=sys.stderr)
        current = committed_offsets(args.bootstrap, args.group, args.topic)
        entries = backtrack.plan_reset(targets, current, force=args.force)
        plan = backtrack.ResetPlan(args.topic, args.group, time_ms, args.force, tuple(entries))
        print(json.dumps(plan.to_json(), indent=2) if args.json else format_offsets(plan.to_json()))
        if not args.apply:
            print("dry run: add --apply to commit these offsets", file=sys.stderr)
            return 0
        apply_plan(args.bootstrap, args.group, args.topic, plan.changes())
        print(f"committed {len(plan.changes())} partition offsets for group {args.group}", file=sys.stderr)
        return 0
    except (*FAILURES, GroupActiveError, ValueError, ConnectionError) as exc:
        return report(exc)
    except ImportError as exc:
        print(f"error: kafka-python is not installed ({exc}); pip install 'tracehook[kafka]'", file=sys.stderr)
        return 2
    except _kafka_errors() as exc:  # NoBrokersAvailable, timeouts...
        print(f"error: Kafka at {args.bootstrap}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
