"""``tracehook replay``: re-deliver to one consumer group exactly the Kafka records it missed.

The replay list (``tracehook replay-list``: what the group never consumed successfully in a
window) comes from a collector or a store, the records from the broker, read again in offset
ranges; each goes to a topic only that group reads, or to the group's own handler, called here::

    tracehook replay orders --group sms --begin=-6h --end=-1h --bootstrap 127.0.0.1:9092 --to-topic orders.sms-replay
    tracehook replay orders --group sms --begin=-6h --end=-1h --bootstrap 127.0.0.1:9092 \\
        --handler sms.worker:handle --apply

A dry run by default: per partition how many, first and last offset, the oldest age; what the
broker no longer has, what cannot be replayed and why; the ``--apply`` command.  With
``--apply`` each delivered record is written to a local journal (:mod:`collector.cli.replay_journal`)
and recorded as a REPLAY event of the original message, so a rerun delivers only what is
still missing.  Exit: 0 done, 1 deliveries failed, 2 bad arguments or unreachable services,
4 done but some records could not be replayed, 130 interrupted (docs/exit-codes.md).
"""

from __future__ import annotations

import argparse
import math
import os
import pathlib
import shlex
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from collector.cli.backtrack import FAILURES, open_source
from collector.cli.errors import ReplayError, report
from collector.cli.kafka_reset import ENV_BOOTSTRAP, _kafka_errors, check_reachable
from collector.cli.query import add_source_arguments, table
from collector.cli.replay_journal import Entry, Journal, default_path
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
from collector.query.backtrack import REPLAYED
from collector.query.params import time_param, time_window
from collector.query.timeparse import current_ms

EXIT_OK, EXIT_FAILED, EXIT_ERROR, EXIT_INCOMPLETE, EXIT_INTERRUPTED = 0, 1, 2, 4, 130
APP = "tracehook-replay"
"""The app name REPLAY events (and ``--handler`` consumes) are recorded under."""
SETTLE_EVERY = 100
"""Records re-published before waiting for the broker's acknowledgements (and journaling them)."""
NO_PLACE = "no partition or offset in the trace (a send traced without them, or through OTLP)"
RABBITMQ = ("a consumed RabbitMQ message cannot be read again: tracehook replay works on Kafka topics; "
            "see docs/backtracking.md for the dead-letter-queue route")


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


def make_plan(items: list[dict[str, Any]], delivered: dict[str, int]) -> Plan:
    """Sort the replay list: a message replayed after the group's last attempt (the trace says
    REPLAYED, or the journal has it later than that attempt) is not delivered again."""
    plan = Plan()
    for item in items:
        msg_id = item["msg_id"]
        journaled = delivered.get(msg_id, 0)
        if item["status"] == REPLAYED:
            plan.already.append((msg_id, f"replayed at {_iso(item['replayed_ms'])}, not consumed since (trace)"))
        elif journaled > item["last_attempt_ms"]:
            plan.already.append((msg_id, f"delivered at {_iso(journaled)} (journal)"))
        elif item["queue"] < 0 or item["offset"] < 0:
            plan.unplaceable.append((msg_id, NO_PLACE))
        else:
            plan.todo.append(Wanted(msg_id, item["queue"], item["offset"], item["attempts"], item["time_ms"],
                                    item["keys"]))
    return plan


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def _age(ms: int, now_ms: int) -> str:
    seconds = max(now_ms - ms, 0) // 1000
    days, rest = divmod(seconds, 86400)
    return (f"{days}d" if days else "") + f"{rest // 3600}h{rest % 3600 // 60:02d}m"


def apply_command(args: argparse.Namespace, begin: int, end: int) -> str:
    """The command that delivers (and, rerun, resumes) exactly this replay."""
    words = ["tracehook", "replay", args.topic, "--group", args.group, f"--begin={begin}", f"--end={end}",
             "--bootstrap", args.bootstrap]
    words += ["--to-topic", args.to_topic] if args.to_topic else ["--handler", args.handler]
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


class _Stop:
    """Ctrl-C sets a flag the run checks between records (the first one; a second one interrupts at once)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def __enter__(self) -> _Stop:
        self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc: Any) -> None:
        signal.signal(signal.SIGINT, self._previous)


class Pacer:
    """``--rate``: deliveries at least ``1/rate`` s apart, from the first one on, so no one-second window
    ever holds more than ``rate`` of them: neither the broker reads before the first delivery nor a
    slow read between two lets a burst out to catch up.

    ``clock`` counts nanoseconds: whole numbers, so ``rate`` gaps add up to a full second exactly::

        pacer = Pacer(25)
        for record in records:
            pacer.wait()
            deliver(record)
    """

    def __init__(self, rate: float, clock: Callable[[], int] = time.monotonic_ns,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not rate > 0:
            raise ValueError(f"rate must be a positive number of records per second, not {rate}")
        self.gap_ns = math.ceil(Fraction(10**9) / Fraction(rate))  # rounded up: never a hair over the rate
        self._clock, self._sleep = clock, sleep
        self._last: int | None = None

    def wait(self) -> None:
        """Return when the next delivery may go (at once for the first); call it just before each one."""
        now = self._clock()
        if self._last is not None:
            due = self._last + self.gap_ns
            while now < due:  # a loop: the seconds slept may round a nanosecond short
                self._sleep((due - now) / 1e9)
                now = self._clock()
        self._last = now


class _Progress:
    """``N/M records, R/s, eta S`` on stderr when it is a terminal."""

    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0
        self.start = time.monotonic()
        self.tty = sys.stderr.isatty()

    def tick(self) -> None:
        self.done += 1
        if self.tty:
            elapsed = max(time.monotonic() - self.start, 1e-6)
            speed = self.done / elapsed
            eta = (self.total - self.done) / speed if speed else 0
            print(f"\r{self.done}/{self.total} records, {speed:.0f}/s, eta {eta:.0f}s ", end="", file=sys.stderr)

    def end(self) -> None:
        if self.tty and self.done:
            print(file=sys.stderr)


@dataclass
class Outcome:
    """What an ``--apply`` run did."""

    delivered: int = 0
    problems: list[tuple[Wanted, str]] = field(default_factory=list)  # not readable as listed
    failures: list[tuple[Wanted, str]] = field(default_factory=list)  # read, but the delivery failed
    stopped: bool = False  # Ctrl-C


def deliver(total: int, records: Iterator[tuple[Wanted, Any, str]], delivery: Any, journal: Journal,
            tracer: Any, topic: str, group: str, pacer: Pacer | None = None) -> Outcome:
    """Deliver the readable records (``total`` of them expected, for the progress line): journal each
    delivered one, record its REPLAY event; ``pacer`` spaces the deliveries (``--rate``)."""
    run = uuid.uuid4().hex[:12]
    out = Outcome()
    progress = _Progress(total)

    def replay_event(w: Wanted) -> None:
        tracer.record_replay(topic, w.msg_id, group, delivery.target, retry=w.retry, keys=w.keys,
                             queue=w.partition, offset=w.offset, run_id=run)

    def settle() -> None:
        done = delivery.settle()
        ok = [w for w, error in done if not error]
        out.failures.extend((w, error) for w, error in done if error)
        journal.append(Entry(w.msg_id, w.partition, w.offset, delivery.target, run, current_ms()) for w in ok)
        if not delivery.replay_event_first:
            for w in ok:
                replay_event(w)
        out.delivered += len(ok)

    with _Stop() as stop:
        try:
            for wanted, record, problem in records:
                if stop.requested:  # between records: the one in hand is left for the resumed run
                    out.stopped = True
                    break
                if problem:
                    out.problems.append((wanted, problem))
                    continue
                if pacer is not None:
                    pacer.wait()
                if delivery.replay_event_first:
                    replay_event(wanted)
                delivery.deliver(wanted, record)
                progress.tick()
                if delivery.replay_event_first or progress.done % SETTLE_EVERY == 0:
                    settle()
        finally:
            close = getattr(records, "close", None)  # a generator: its consumer closes with it
            if close is not None:
                close()
            settle()
            progress.end()
    return out


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
           problems: list[tuple[Wanted, str]]) -> str:
    """A run's first two lines: how many records ``--apply`` delivers (those of the plan without
    ``problems``), then the rest by reason; with what was already replayed they add up to ``listed``."""
    return (f"replay of {args.topic} for group {args.group}, {_iso(begin)} .. {_iso(end)}: "
            f"{listed} message(s) in the replay list, {len(plan.todo) - len(problems)} to replay\n"
            + counts_line(plan, problems))


def _report(plan: Plan, problems: list[tuple[Wanted, str]]) -> list[str]:
    lines = [f"  {msg_id}: {why}" for msg_id, why in plan.unplaceable]
    lines += [f"  {w.msg_id} (partition {w.partition} offset {w.offset}): {why}" for w, why in problems]
    return lines


def run_replay(args: argparse.Namespace) -> int:
    """Report (and with --apply, deliver) the replay; see the module docstring for the exit codes."""
    try:
        if not args.bootstrap:
            raise ReplayError(f"no Kafka broker (--bootstrap or {ENV_BOOTSTRAP}): {RABBITMQ}")
        if args.to_topic == args.topic:
            raise ReplayError(f"--to-topic {args.to_topic}: that is the topic itself, which every group reads; "
                              "pass a topic only group " + repr(args.group) + " reads")
        if args.rate is not None and not args.rate > 0:
            raise ReplayError(f"--rate must be a positive number of records per second, not {args.rate}")
        now = current_ms()
        begin = time_param("--begin", args.begin, now_ms=now)
        begin, end = time_window(begin, time_param("--end", args.end, now_ms=now), now_ms=now)
        check_reachable(args.bootstrap)
        source = open_source(args)
        try:
            items = list(source.replay(args.topic, {"group": args.group, "begin": begin, "end": end,
                                                    "allow_unknown_group": args.allow_unknown_group}))
        finally:
            source.close()
        bounds = broker_bounds(args.bootstrap, args.topic)
        if bounds is None:
            placed = any(i["queue"] >= 0 and i["offset"] >= 0 for i in items)
            raise ReplayError(f"topic {args.topic!r} is not on the Kafka broker at {args.bootstrap}"
                              + ("" if placed else f"; its traces carry no partitions or offsets: {RABBITMQ}"))
        journal = Journal(pathlib.Path(args.journal) if args.journal
                          else default_path(args.bootstrap, args.topic, args.group))
        plan = make_plan(items, journal.delivered())
        if not args.apply:
            return _dry_run(args, plan, bounds, begin, end, now, len(items))
        return _apply(args, plan, bounds, journal, begin, end, len(items))
    except (*FAILURES, ReplayError, ValueError, ConnectionError, OSError) as exc:
        return report(exc)
    except ImportError as exc:
        print(f"error: kafka-python is not installed ({exc}); pip install 'tracehook[kafka]'", file=sys.stderr)
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


def _details(plan: Plan, problems: list[tuple[Wanted, str]]) -> None:
    """Each record not delivered, with why."""
    for line in _report(plan, problems) + [f"  {m}: {why}" for m, why in plan.already]:
        print(line)


def _apply(args: argparse.Namespace, plan: Plan, bounds: Bounds, journal: Journal, begin: int, end: int,
           listed: int) -> int:
    # What the broker no longer has is known from its bounds; a record refused (another message id
    # at its offset) only once read, so the header cannot count those yet.
    gone = off_the_broker(plan.todo, bounds)
    deliverable = len(plan.todo) - len(gone)
    print(header(args, begin, end, listed, plan, gone))
    command = apply_command(args, begin, end)
    tracer = _tracer(args)
    delivery: Any = None
    try:
        delivery = (TopicDelivery(args.bootstrap, args.topic, args.to_topic) if args.to_topic
                    else HandlerDelivery(args.handler, tracer, args.topic, args.group))
        records = read_records(args.bootstrap, args.topic, plan.todo, bounds)
        out = deliver(deliverable, records, delivery, journal, tracer, args.topic, args.group,
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
    print(counts_line(plan, out.problems))
    _details(plan, out.problems)
    for w, why in out.failures:
        print(f"  {w.msg_id} (partition {w.partition} offset {w.offset}): not delivered: {why}")
    if out.stopped:
        print(f"interrupted after {out.delivered} record(s); resume with: {command}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if out.failures:
        print(f"{len(out.failures)} delivery(ies) failed; rerun to retry them: {command}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_INCOMPLETE if out.problems or plan.unplaceable else EXIT_OK
