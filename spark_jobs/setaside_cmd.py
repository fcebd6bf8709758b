"""``tracehook set-aside``: list, show and re-index the events an index checkpoint set aside.

The index job sets aside an event it cannot store and indexes the rest (docs/index-job.md,
"Events set aside"); they are recorded beside its checkpoint (:mod:`collector.log.setaside`).
After a fix (an upgrade, a store that accepts the row again), ``reindex`` reads each one's record
from the trace log (or the Kafka topic) and indexes it in this process, no Spark needed::

    tracehook set-aside list --log-dir /data/log --store local:/data/index.sqlite3
    tracehook set-aside show 1 --log-dir /data/log --store local:/data/index.sqlite3
    tracehook set-aside reindex --log-dir /data/log --store local:/data/index.sqlite3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from typing import Any

from collector.log import setaside
from collector.log.setaside import SetAside
from spark_jobs.errors import IndexJobError, RecordGoneError

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_STILL_SET_ASIDE = 4
"""``reindex``: done, but some events still cannot be indexed (they stay set aside)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tracehook set-aside``."""
    parser.add_argument("action", choices=("list", "show", "reindex"),
                        help="list the set-aside events, show some in full, or index them again")
    parser.add_argument("which", nargs="*", type=int, metavar="N",
                        help="show/reindex: the entries' numbers in the list (default: every one)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--log-dir", help="the trace-log directory the index job reads")
    source.add_argument("--source", metavar="kafka://HOST:PORT[,HOST:PORT]/TOPIC", help="its Kafka trace topic")
    parser.add_argument("--store", required=True, help="the index job's store URL")
    parser.add_argument("--checkpoint", default=None, metavar="DIR",
                        help="the index job's checkpoint directory, when it was given one (default: the job's default)")
    parser.add_argument("--json", action="store_true", help="one JSON object per entry")


def run(args: argparse.Namespace) -> int:
    """Run the command; errors a user can cause are one line on stderr (docs/exit-codes.md)."""
    try:
        checkpoint = _checkpoint(args)
        entries = setaside.read(checkpoint)
        chosen = _chosen(entries, args.which)
        if args.action == "list":
            return _list(entries, args.json)
        if args.action == "show":
            return _show(args, chosen)
        return _reindex(args, checkpoint, chosen)
    except (IndexJobError, ValueError) as exc:
        print(f"tracehook set-aside: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _checkpoint(args: argparse.Namespace) -> str:
    from collector.store import absolute_store_url, resolve_store_url

    store_url = absolute_store_url(resolve_store_url(args.store))
    args.store = store_url
    if args.checkpoint:
        return os.path.abspath(args.checkpoint)
    if args.source:
        from collector.log.url import parse_kafka_url
        from spark_jobs.kafka_source import default_checkpoint

        return default_checkpoint(parse_kafka_url(args.source), store_url)
    from spark_jobs.checkpoint import default_checkpoint as log_checkpoint

    return log_checkpoint(args.log_dir, store_url)


def _chosen(entries: list[SetAside], which: list[int]) -> list[tuple[int, SetAside]]:
    numbered = list(enumerate(entries, 1))
    if not which:
        return numbered
    wrong = [n for n in which if not 1 <= n <= len(entries)]
    if wrong:
        raise ValueError(f"no entry {wrong[0]}: there are {len(entries)} (tracehook set-aside list)")
    return [numbered[n - 1] for n in which]


def _list(entries: list[SetAside], as_json: bool) -> int:
    if as_json:
        for n, e in enumerate(entries, 1):
            print(json.dumps({"n": n, **asdict(e)}, sort_keys=True))
        return EXIT_OK
    print(f"{len(entries)} event(s) set aside")
    for n, e in enumerate(entries, 1):
        print(f"{n:>4}  record {e.base}/{e.offset} event {e.event}  {e.type:<10} {e.topic!r} {e.msg_id!r}: {e.reason}")
    return EXIT_OK


def _show(args: argparse.Namespace, chosen: list[tuple[int, SetAside]]) -> int:
    for n, entry in chosen:
        out: dict[str, Any] = {"n": n, **asdict(entry)}
        try:
            _, event = _read_event(args, entry)
        except RecordGoneError as exc:
            out["record"] = str(exc)
        else:
            fields = event._asdict() if hasattr(event, "_asdict") else {"raw": repr(event)[:2000]}
            if isinstance(fields.get("body"), bytes):  # a body is not printed: only its size
                fields["body"] = f"<{len(fields['body'])} bytes>"
            out["event"] = fields
        print(json.dumps(out, sort_keys=True, default=str) if args.json else _pretty(out))
    return EXIT_OK


def _pretty(doc: dict[str, Any]) -> str:
    lines = [f"#{doc['n']}: record {doc['base']}/{doc['offset']} event {doc['event']}: {doc['reason']}"]
    for name, value in doc.get("event", {}).items():
        lines.append(f"  {name}: {value!r}")
    if "record" in doc:
        lines.append(f"  {doc['record']}")
    return "\n".join(lines)


def _reindex(args: argparse.Namespace, checkpoint: str, chosen: list[tuple[int, SetAside]]) -> int:
    from collector.index.isolate import Item, index_isolating
    from collector.store import StoreError, open_store
    from tracehook.wire import WireError

    items: list[tuple[SetAside, Item]] = []
    failed: list[SetAside] = []
    gone: list[SetAside] = []
    for _, entry in chosen:
        try:
            header, event = _read_event(args, entry)
        except RecordGoneError as exc:
            print(f"  {entry.msg_id!r}: {exc}; forgotten")
            gone.append(entry)
            continue
        if isinstance(event, WireError):
            failed.append(_with_reason(entry, f"refused by the wire format: {event}"))
            continue
        items.append((entry, Item(entry.key, header, event)))
    try:
        store = open_store(args.store)
    except StoreError as exc:
        raise IndexJobError(f"store {args.store}: {exc}") from exc
    try:
        still = {f.item.position: f.reason for f in index_isolating(store, [item for _, item in items])}
    except StoreError as exc:
        raise IndexJobError(f"store {args.store} unavailable; nothing changed: {exc}") from exc
    finally:
        store.close()
    failed += [_with_reason(entry, still[entry.key]) for entry, _ in items if entry.key in still]
    indexed = [entry for entry, _ in items if entry.key not in still]
    setaside.update(checkpoint, remove=[e.key for e in indexed + gone + failed], add=failed)
    print(f"indexed {len(indexed)} event(s); {len(failed)} still set aside; {len(gone)} forgotten (record gone)")
    for e in failed:
        print(f"  still set aside: {e.msg_id!r}: {e.reason}")
    return EXIT_STILL_SET_ASIDE if failed else EXIT_OK


def _with_reason(entry: SetAside, reason: str) -> SetAside:
    return SetAside(**{**asdict(entry), "reason": reason})


def _read_event(args: argparse.Namespace, entry: SetAside) -> tuple[Any, Any]:
    """(batch header, Event or the WireError refusing it) of a set-aside entry, from its record."""
    from tracehook import wire

    payload = _read_record(args, entry)
    header, events = wire.decode_events_separately(payload)
    if entry.event >= len(events):
        raise RecordGoneError(f"record {entry.base}/{entry.offset} has no event {entry.event}")
    return header, events[entry.event][1]


def _read_record(args: argparse.Namespace, entry: SetAside) -> bytes:
    if args.source:
        return _read_kafka_record(args.source, entry)
    from collector.log.format import read_segment, segment_name

    path = os.path.join(os.path.abspath(args.log_dir), segment_name(entry.base))
    if not os.path.exists(path):
        raise RecordGoneError(f"segment {segment_name(entry.base)} is gone from the trace log")
    for record in read_segment(path):
        if record.offset == entry.offset:
            return bytes(record.payload)
    raise RecordGoneError(f"record {entry.offset} is not in segment {segment_name(entry.base)}")


def _read_kafka_record(source: str, entry: SetAside) -> bytes:
    from collector.log.url import parse_kafka_url

    try:
        from kafka import KafkaConsumer, TopicPartition
    except ImportError:
        raise IndexJobError("reading a Kafka source needs kafka-python: pip install 'tracehook[kafka]'") from None
    topic = parse_kafka_url(source)
    consumer = KafkaConsumer(bootstrap_servers=topic.bootstrap.split(","), enable_auto_commit=False,
                             consumer_timeout_ms=10_000)
    try:
        partition = TopicPartition(topic.topic, entry.base)
        consumer.assign([partition])
        consumer.seek(partition, entry.offset)
        for message in consumer:
            if message.offset == entry.offset:
                return bytes(message.value)
            break
    finally:
        consumer.close()
    raise RecordGoneError(f"offset {entry.offset} of partition {entry.base} is gone from topic {topic.topic}")
