"""``tracehook kafka-reset``: apply a trace-based reset plan to a consumer group on a real Kafka broker.

Dry run by default (prints the plan); ``--apply`` commits it, and only for a stopped group
(no members), as Kafka's own ``kafka-consumer-groups --reset-offsets`` requires::

    tracehook kafka-reset --bootstrap 127.0.0.1:9092 --group billing --topic orders --time=-2h
    tracehook kafka-reset --bootstrap 127.0.0.1:9092 --group billing --topic orders --time=-2h --apply

Targets (first offset stored at or after the time, per partition) come from the index,
through a collector (``--collector``) or the store directly (``--store``); the group's
current positions come from the broker's committed offsets.  Rewind-only unless ``--force``.

The replay helper re-reads exactly the offsets of a replay list and hands each record to a callback::

    replay(bootstrap, "orders", [(0, 41), (2, 7)], handle)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

from tracehook.errors import TracehookError

__all__ = ["GroupActiveError", "apply_plan", "committed_offsets", "replay", "run_kafka_reset"]

ENV_BOOTSTRAP = "KAFKA_BOOTSTRAP_SERVERS"
DEFAULT_POLL_MS = 5000
STOPPED_STATES = ("Empty", "Dead")


class GroupActiveError(TracehookError):
    """The consumer group still has members: its offsets cannot be reset now."""


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


# -- the CLI ------------------------------------------------------------------------------------

def add_kafka_reset_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``tracehook kafka-reset``."""
    from collector.backtrack_cli import add_source_arguments

    parser.add_argument("--bootstrap", default=os.environ.get(ENV_BOOTSTRAP),
                        help=f"Kafka bootstrap servers host:port (env {ENV_BOOTSTRAP})")
    parser.add_argument("--group", required=True, help="consumer group id")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--time", required=True, help="epoch ms, ISO-8601, now, or relative like -2h")
    parser.add_argument("--force", action="store_true", help="also move partitions forward (default: rewind only)")
    parser.add_argument("--apply", action="store_true", help="commit the plan (default: print it only)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    add_source_arguments(parser)


def run_kafka_reset(args: argparse.Namespace) -> int:
    """Print (and with --apply, commit) the reset plan; exit 0 on success, 2 on errors."""
    from collector import backtrack
    from collector.backtrack_cli import FAILURES, format_offsets, open_source
    from collector.timeparse import parse_time

    if not args.bootstrap:
        print(f"error: --bootstrap (or {ENV_BOOTSTRAP}) is required", file=sys.stderr)
        return 2
    try:
        time_ms = parse_time(args.time, name="--time")
        source = open_source(args)
        try:
            doc = source.offsets(args.topic, {"time": time_ms, "queue": None, "group": None, "force": False})
        finally:
            source.close()
        targets = {q["queue"]: q["offset"] for q in doc["queues"]}
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
    except (*FAILURES, GroupActiveError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
