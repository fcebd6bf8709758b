"""``tracehook replay``: re-deliver to one consumer group exactly the Kafka records it missed.

The replay list (``tracehook replay-list``: what the group never consumed successfully in a
window) comes from a collector or a store, the records from the broker, read again in offset
ranges; each goes to a topic only that group reads, or to the group's own handler, called here::

    tracehook replay orders --group sms --begin=-6h --end=-1h --bootstrap 127.0.0.1:9092 --to-topic orders.sms-replay
    tracehook replay orders --group sms --begin=-6h --end=-1h --bootstrap 127.0.0.1:9092 \\
        --handler sms.worker:handle --apply

With ``--from-trace`` the records come from the kept bodies in the index instead
(:mod:`collector.cli.replay_trace`): Kafka records the broker no longer holds, and RabbitMQ
messages, published to their recorded exchange and routing key (:mod:`collector.cli.replay_amqp`)::

    tracehook replay notify --group sms --begin=-8d --end=-7d --from-trace --amqp amqp://... --store local:data

A dry run by default: per partition how many, first and last offset, the oldest age; what the
broker no longer has, what cannot be replayed and why; the ``--apply`` command.  With
``--apply`` each delivered record is written to a local journal (:mod:`collector.cli.replay_journal`)
and recorded as a REPLAY event of the original message, so a rerun delivers only what is
still missing.  Exit: 0 done, 1 deliveries failed, 2 bad arguments or unreachable services,
4 done but some records could not be replayed, 130 interrupted (docs/exit-codes.md).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from collector.cli.backtrack import FAILURES, open_source
from collector.cli.errors import ReplayError, report
from collector.cli.kafka_reset import ENV_BOOTSTRAP, _kafka_errors, check_reachable
from collector.cli.query import add_source_arguments, table
from collector.cli.replay_amqp import AmqpDelivery, journal_name
from collector.cli.replay_amqp import check_reachable as amqp_reachable
from collector.cli.replay_journal import Journal, default_path
from collector.cli.replay_kafka import (
    GONE,
    PAST_END,
    Bounds,
    HandlerDelivery,
    TopicDelivery,
    Wanted,
    broker_bounds,
    off_the_broker,
    read_records,
)
from collector.cli.replay_run import Pacer, deliver
from collector.cli.replay_run import age as _age
from collector.cli.replay_run import iso as _iso
from collector.cli.replay_trace import destination_table, read_kept, survey, trace_counts
from collector.query.backtrack import REPLAYED
from collector.query.params import time_param, time_window
from collector.query.timeparse import current_ms

EXIT_OK, EXIT_FAILED, EXIT_ERROR, EXIT_INCOMPLETE, EXIT_INTERRUPTED = 0, 1, 2, 4, 130
APP = "tracehook-replay"
"""The app name REPLAY events (and ``--handler`` consumes) are recorded under."""
NO_PLACE = "no partition or offset in the trace (a send traced without them, or through OTLP)"
RABBITMQ = ("a consumed RabbitMQ message cannot be read again from the broker: replay it from its kept body "
            "with --from-trace --amqp URL, or see docs/backtracking.md for the dead-letter-queue route")
__all__ = ["Pacer", "add_replay_arguments", "apply_command", "deliver", "header", "make_plan", "run_replay"]


def add_replay_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``tracehook replay``."""
    parser.add_argument("topic")
    parser.add_argument("--group", required=True, help="the consumer group to re-deliver to")
    parser.add_argument("--begin", help="window start (default: end - 30 days)")
    parser.add_argument("--end", help="window end (default: now)")
    parser.add_argument("--bootstrap", default=os.environ.get(ENV_BOOTSTRAP),
                        help=f"Kafka bootstrap servers host:port (env {ENV_BOOTSTRAP})")
    to = parser.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-topic", help="re-publish each record to this topic (one only the group reads)")
    to.add_argument("--handler", help="call module:function with each record (a kafka-python ConsumerRecord; "
                                      "a coroutine function is awaited), traced as a consume of the group")
    to.add_argument("--amqp", metavar="URL", help="with --from-trace: publish each message to this RabbitMQ "
                                                  "(amqp://user:password@host:port/vhost)")
    parser.add_argument("--from-trace", action="store_true",
                        help="re-deliver from the bodies kept in the index, not from the broker (Kafka records "
                             "past retention, RabbitMQ messages after their ack)")
    parser.add_argument("--exchange", help="with --amqp: publish to this exchange (\"\" the default one) instead "
                                           "of each message's recorded one")
    parser.add_argument("--routing-key", help="with --amqp: publish with this routing key instead of the recorded one")
    parser.add_argument("--apply", action="store_true", help="deliver (default: a dry run that only reports)")
    parser.add_argument("--rate", type=float, help="at most this many records per second")
    parser.add_argument("--journal", help="the journal of delivered records (default: one per cluster, topic and "
                                          "group under ~/.local/state/tracehook/replay)")
    parser.add_argument("--trace-to", help="collector URL the REPLAY events go to (default: TRACEHOOK_COLLECTORS, "
                                           "else --collector)")
    parser.add_argument("--allow-unknown-group", action="store_true",
                        help="replay to a group that never consumed the topic (default: exit 2)")
    add_source_arguments(parser)


@dataclass
class Plan:
    """The replay list sorted out: what to read, what cannot be replayed, what was already."""

    todo: list[Wanted] = field(default_factory=list)
    unplaceable: list[tuple[str, str]] = field(default_factory=list)  # (msg_id, why)
    already: list[tuple[str, str]] = field(default_factory=list)  # (msg_id, when and how it was known)


def make_plan(items: list[dict[str, Any]], delivered: dict[str, int], placed: bool = True) -> Plan:
    """Sort the replay list: a message replayed after the group's last attempt (the trace says
    REPLAYED, or the journal has it later than that attempt) is not delivered again; with ``placed``
    (read from the broker) a message needs a partition and offset."""
    plan = Plan()
    for item in items:
        msg_id = item["msg_id"]
        journaled = delivered.get(msg_id, 0)
        if item["status"] == REPLAYED:
            plan.already.append((msg_id, f"replayed at {_iso(item['replayed_ms'])}, not consumed since (trace)"))
        elif journaled > item["last_attempt_ms"]:
            plan.already.append((msg_id, f"delivered at {_iso(journaled)} (journal)"))
        elif placed and (item["queue"] < 0 or item["offset"] < 0):
            plan.unplaceable.append((msg_id, NO_PLACE))
        else:
            plan.todo.append(Wanted(msg_id, item["queue"], item["offset"], item["attempts"], item["time_ms"],
                                    item["keys"]))
    return plan


def apply_command(args: argparse.Namespace, begin: int, end: int) -> str:
    """The command that delivers (and, rerun, resumes) exactly this replay."""
    words = ["tracehook", "replay", args.topic, "--group", args.group, f"--begin={begin}", f"--end={end}"]
    words += ["--bootstrap", args.bootstrap] if args.bootstrap else []
    words += ["--from-trace"] if getattr(args, "from_trace", False) else []
    for flag in ("to_topic", "handler", "amqp", "exchange", "routing_key"):
        if getattr(args, flag, None) is not None:
            words += ["--" + flag.replace("_", "-"), getattr(args, flag)]
    words += ["--store", args.store] if args.store else ["--collector", args.collector]
    for flag, value in (("--rate", args.rate), ("--journal", args.journal), ("--trace-to", args.trace_to)):
        if value is not None:
            words += [flag, str(value)]
    if args.allow_unknown_group:
        words.append("--allow-unknown-group")
    return shlex.join(words + ["--apply"])


def partition_table(todo: list[Wanted], problems: dict[str, str], now_ms: int) -> str:
    """Per partition: messages to replay, first and last offset, oldest age, how many have a problem."""
    rows = []
    for p in sorted({w.partition for w in todo}):
        mine = [w for w in todo if w.partition == p]
        rows.append([p, len(mine), min(w.offset for w in mine), max(w.offset for w in mine),
                     _age(min(w.time_ms for w in mine), now_ms), sum(w.msg_id in problems for w in mine)])
    return table(["partition", "messages", "first", "last", "oldest age", "not replayable"], rows)


def _tracer(args: argparse.Namespace) -> Any:
    import tracehook
    from tracehook.config import ENV_COLLECTORS

    url = args.trace_to or os.environ.get(ENV_COLLECTORS) or (None if args.store else args.collector)
    if not url:
        raise ReplayError("nowhere to record the replay: pass --trace-to URL (a collector), or set "
                          f"{ENV_COLLECTORS}")
    return tracehook.Tracer(tracehook.TracerConfig.from_env(app=APP, collectors=tuple(url.split(","))))


def counts_line(plan: Plan, problems: list[tuple[Wanted, str]]) -> str:
    """What is not delivered, by reason: gone from the broker, cannot be replayed, already replayed."""
    gone = sum(1 for _, p in problems if p in (GONE, PAST_END))
    return (f"gone from the broker: {gone}; cannot be replayed: {len(problems) - gone + len(plan.unplaceable)}; "
            f"already replayed: {len(plan.already)}")


def header(args: argparse.Namespace, begin: int, end: int, listed: int, plan: Plan,
           problems: list[tuple[Wanted, str]], counts: str | None = None) -> str:
    """A run's first two lines: how many records ``--apply`` delivers (those of the plan without
    ``problems``), then the rest by reason (``counts``, default :func:`counts_line`); with what was
    already replayed they add up to ``listed``."""
    source = " from the trace" if getattr(args, "from_trace", False) else ""
    return (f"replay{source} of {args.topic} for group {args.group}, {_iso(begin)} .. {_iso(end)}: "
            f"{listed} message(s) in the replay list, {len(plan.todo) - len(problems)} to replay\n"
            + (counts_line(plan, problems) if counts is None else counts))


def _place(w: Wanted) -> str:
    return f" (partition {w.partition} offset {w.offset})" if w.partition >= 0 and w.offset >= 0 else ""


def _report(plan: Plan, problems: list[tuple[Wanted, str]]) -> list[str]:
    lines = [f"  {msg_id}: {why}" for msg_id, why in plan.unplaceable]
    lines += [f"  {w.msg_id}{_place(w)}: {why}" for w, why in problems]
    return lines


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse (:class:`ReplayError`, exit 2) what cannot work, before anything is read."""
    from_trace = getattr(args, "from_trace", False)
    if getattr(args, "amqp", None) and not from_trace:
        raise ReplayError("--amqp needs --from-trace: RabbitMQ keeps nothing after an ack, so the messages "
                          "come from their kept bodies")
    if (getattr(args, "exchange", None) is not None or getattr(args, "routing_key", None) is not None) \
            and not getattr(args, "amqp", None):
        raise ReplayError("--exchange and --routing-key name where --amqp publishes: pass --amqp URL")
    if not args.bootstrap and not (from_trace and not args.to_topic):
        needs = "--to-topic needs a" if from_trace else "no"
        raise ReplayError(f"{needs} Kafka broker (--bootstrap or {ENV_BOOTSTRAP})"
                          + ("" if from_trace else f": {RABBITMQ}"))
    if args.to_topic == args.topic:
        raise ReplayError(f"--to-topic {args.to_topic}: that is the topic itself, which every group reads; "
                          "pass a topic only group " + repr(args.group) + " reads")
    if args.rate is not None and not args.rate > 0:
        raise ReplayError(f"--rate must be a positive number of records per second, not {args.rate}")


def journal_for(args: argparse.Namespace) -> Journal:
    """``--journal``, else the one of (cluster, topic, group): a replay from the trace shares the broker's."""
    if args.journal:
        return Journal(pathlib.Path(args.journal))
    cluster = journal_name(args.amqp) if getattr(args, "amqp", None) else args.bootstrap or "trace"
    return Journal(default_path(cluster, args.topic, args.group))


def run_replay(args: argparse.Namespace) -> int:
    """Report (and with --apply, deliver) the replay; see the module docstring for the exit codes."""
    try:
        check_arguments(args)
        now = current_ms()
        begin = time_param("--begin", args.begin, now_ms=now)
        begin, end = time_window(begin, time_param("--end", args.end, now_ms=now), now_ms=now)
        if args.bootstrap and (args.to_topic or not args.from_trace):
            check_reachable(args.bootstrap)
        if args.amqp:
            amqp_reachable(args.amqp)
        source = open_source(args)
        try:
            items = list(source.replay(args.topic, {"group": args.group, "begin": begin, "end": end,
                                                    "allow_unknown_group": args.allow_unknown_group}))
            journal = journal_for(args)
            if args.from_trace:
                return _from_trace(args, source, items, journal, begin, end, now)
        finally:
            source.close()
        bounds = broker_bounds(args.bootstrap, args.topic)
        if bounds is None:
            placed = any(i["queue"] >= 0 and i["offset"] >= 0 for i in items)
            raise ReplayError(f"topic {args.topic!r} is not on the Kafka broker at {args.bootstrap}"
                              + ("" if placed else f"; its traces carry no partitions or offsets: {RABBITMQ}"))
        plan = make_plan(items, journal.delivered())
        if not args.apply:
            return _dry_run(args, plan, bounds, begin, end, now, len(items))
        gone = off_the_broker(plan.todo, bounds)
        return _apply(args, plan, journal, begin, end, len(items), read_records(args.bootstrap, args.topic,
                      plan.todo, bounds), gone, lambda problems: counts_line(plan, problems))
    except (*FAILURES, ReplayError, ValueError, ConnectionError, OSError) as exc:
        return report(exc)
    except ImportError as exc:
        client = "pika" if getattr(args, "amqp", None) else "kafka-python"
        extra = "rabbitmq" if getattr(args, "amqp", None) else "kafka"
        print(f"error: {client} is not installed ({exc}); pip install 'tracehook[{extra}]'", file=sys.stderr)
        return EXIT_ERROR
    except _kafka_errors() as exc:
        print(f"error: Kafka at {args.bootstrap}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _dry_run(args: argparse.Namespace, plan: Plan, bounds: Bounds, begin: int, end: int, now: int,
             listed: int) -> int:
    problems = [(w, p) for w, _, p in read_records(args.bootstrap, args.topic, plan.todo, bounds) if p]
    print(header(args, begin, end, listed, plan, problems))
    print(partition_table(plan.todo, {w.msg_id: p for w, p in problems}, now) if plan.todo else "nothing to replay")
    _details(plan, problems)
    if args.to_topic and plan.todo and broker_bounds(args.bootstrap, args.to_topic) is None:
        print(f"note: topic {args.to_topic} does not exist yet: create it (the broker creates it on the first "
              "write only with auto.create.topics.enable) and let the group subscribe to it")
    print(f"dry run; to deliver: {apply_command(args, begin, end)}")
    return EXIT_INCOMPLETE if problems or plan.unplaceable else EXIT_OK


def _from_trace(args: argparse.Namespace, source: Any, items: list[dict[str, Any]], journal: Journal,
                begin: int, end: int, now: int) -> int:
    """The replay with records rebuilt from the kept bodies (read once, before the first delivery)."""
    plan = make_plan(items, journal.delivered(), placed=False)

    def records() -> Iterator[tuple[Wanted, Any, str]]:
        return read_kept(source, args.topic, plan.todo, amqp=bool(args.amqp), exchange=args.exchange,
                         routing_key=args.routing_key)

    def counts(listed: list[tuple[Wanted, str]]) -> str:
        return trace_counts(len(plan.already), listed)

    problems, places = survey(records())  # --apply reads them again, as the broker path does
    if args.apply:
        return _apply(args, plan, journal, begin, end, len(items), records(), problems, counts)
    print(header(args, begin, end, len(items), plan, problems, counts(problems)))
    print(destination_table(places, now) if plan.todo else "nothing to replay")
    _details(plan, problems)
    if args.amqp and args.exchange is None:
        print("note: a message published to its recorded exchange reaches every queue bound to it with that "
              "routing key; to reach only this group's queue: --exchange '' --routing-key QUEUE")
    print(f"dry run; to deliver: {apply_command(args, begin, end)}")
    return EXIT_INCOMPLETE if problems else EXIT_OK


def _details(plan: Plan, problems: list[tuple[Wanted, str]]) -> None:
    """Each record not delivered, with why."""
    for line in _report(plan, problems) + [f"  {m}: {why}" for m, why in plan.already]:
        print(line)


def _delivery(args: argparse.Namespace, tracer: Any) -> Any:
    if args.to_topic:
        return TopicDelivery(args.bootstrap, args.topic, args.to_topic)
    if getattr(args, "amqp", None):
        return AmqpDelivery(args.amqp, args.topic, args.exchange, args.routing_key)
    return HandlerDelivery(args.handler, tracer, args.topic, args.group)


def _apply(args: argparse.Namespace, plan: Plan, journal: Journal, begin: int, end: int, listed: int,
           records: Iterable[tuple[Wanted, Any, str]], known: list[tuple[Wanted, str]],
           counts: Callable[[list[tuple[Wanted, str]]], str]) -> int:
    """Deliver ``records``; ``known``: the problems known before reading them (what the broker no
    longer has; from the trace, all of them), so the header counts what is to be delivered."""
    deliverable = len(plan.todo) - len(known)
    print(header(args, begin, end, listed, plan, known, counts(known)))
    command = apply_command(args, begin, end)
    tracer = _tracer(args)
    delivery: Any = None
    try:
        delivery = _delivery(args, tracer)
        out = deliver(deliverable, iter(records), delivery, journal, tracer, args.topic, args.group,
                      Pacer(args.rate) if args.rate else None)
    finally:
        if delivery is not None:
            delivery.close()
        flushed = tracer.flush(10)
        tracer.close()
    if not flushed:
        print("warning: not every REPLAY event reached the collector; the journal "
              f"({journal.path}) still knows what was delivered", file=sys.stderr)
    print(f"delivered {out.delivered} of {deliverable} to {delivery.target}")
    print(counts(out.problems))
    _details(plan, out.problems)
    for w, why in out.failures:
        print(f"  {w.msg_id}{_place(w)}: not delivered: {why}")
    if out.stopped:
        print(f"interrupted after {out.delivered} record(s); resume with: {command}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if out.failures:
        print(f"{len(out.failures)} delivery(ies) failed; rerun to retry them: {command}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_INCOMPLETE if out.problems or plan.unplaceable else EXIT_OK
