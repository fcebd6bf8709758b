"""The delivery loop of ``tracehook replay``, whatever the records come from (the broker or the trace):
pacing (``--rate``), Ctrl-C between records, the progress line, the journal and the REPLAY events::

    out = deliver(len(todo), records, delivery, journal, tracer, "orders", "sms", Pacer(25))

``records`` yields ``(wanted, record, problem)``; ``delivery`` is one of
:class:`collector.cli.replay_kafka.TopicDelivery`, :class:`~collector.cli.replay_kafka.HandlerDelivery` or
:class:`collector.cli.replay_amqp.AmqpDelivery`.
"""

from __future__ import annotations

import math
import signal
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from collector.cli.replay_journal import Entry, Journal
from collector.cli.replay_kafka import Wanted
from collector.query.timeparse import current_ms

SETTLE_EVERY = 100
"""Records re-published before waiting for the broker's acknowledgements (and journaling them)."""


def iso(ms: int) -> str:
    """Epoch ms as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


def age(ms: int, now_ms: int) -> str:
    """How long before ``now_ms`` the time ``ms`` was, as ``[Nd]HhMMm``."""
    seconds = max(now_ms - ms, 0) // 1000
    days, rest = divmod(seconds, 86400)
    return (f"{days}d" if days else "") + f"{rest // 3600}h{rest % 3600 // 60:02d}m"


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
