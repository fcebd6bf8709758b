"""``tracehook replay``'s delivery loop with stand-ins for the broker: what is journaled, what is recorded, in which order."""

from __future__ import annotations

import bisect
import pathlib
from collections.abc import Iterator
from typing import Any

from collector.cli.replay import Pacer, deliver
from collector.cli.replay_journal import Journal
from collector.cli.replay_kafka import GONE, HandlerDelivery, Wanted


class FakeTracer:
    """Records the order of REPLAY events and consume spans (the real tracer is tested in tests/tracehook)."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def record_replay(self, topic: str, msg_id: str, group: str, target: str, **fields: Any) -> None:
        self.events.append(("replay", msg_id, group, target, fields["retry"]))

    def consume(self, topic: str, msg_id: str, group: str, **fields: Any) -> Any:
        events = self.events

        class Span:
            def __enter__(self) -> Span:
                events.append(("consume", msg_id, group, fields["retry"]))
                return self

            def finish(self, status: Any = None, error: Any = "") -> None:
                events.append(("failed", msg_id))

            def __exit__(self, *exc: Any) -> None:
                pass

        return Span()


class Record:
    """A stand-in ConsumerRecord; ``next(record)`` is the handler (``builtins:next``) and fails when ``bad``."""

    def __init__(self, w: Wanted, bad: bool = False) -> None:
        self.key, self.partition, self.offset, self.timestamp, self.headers = b"k", w.partition, w.offset, 1, []
        self.bad = bad

    def __next__(self) -> int:
        if self.bad:
            raise RuntimeError("sms gateway still down")
        return 1


W = [Wanted(f"m{i}", 0, i, retry=i % 2) for i in range(4)]


def test_handler_runs_journal_only_what_was_handled(tmp_path: pathlib.Path) -> None:
    tracer, journal = FakeTracer(), Journal(tmp_path / "j.jsonl")
    records = iter([(W[0], Record(W[0]), ""), (W[1], Record(W[1], bad=True), ""), (W[2], None, GONE),
                    (W[3], Record(W[3]), "")])
    delivery = HandlerDelivery("builtins:next", tracer, "orders", "sms")  # type: ignore[arg-type]
    out = deliver(len(W), records, delivery, journal, tracer, "orders", "sms")
    assert out.delivered == 2 and not out.stopped
    assert out.problems == [(W[2], GONE)]
    assert out.failures == [(W[1], "handler raised RuntimeError: sms gateway still down")]
    assert set(journal.delivered()) == {"m0", "m3"}  # the failed one is due again on the next run
    target = "handler:builtins:next"
    assert tracer.events == [
        ("replay", "m0", "sms", target, 0), ("consume", "m0", "sms", 0),
        ("replay", "m1", "sms", target, 1), ("consume", "m1", "sms", 1), ("failed", "m1"),
        ("replay", "m3", "sms", target, 1), ("consume", "m3", "sms", 1),
    ]


class FakeTopicDelivery:
    """Acknowledges every record but ``m1`` when settled, as a producer's futures would."""

    replay_event_first = False
    target = "topic:orders.sms-replay"

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.pending: list[Wanted] = []
        self.journaled_when_settled: list[set[str]] = []

    def deliver(self, wanted: Wanted, record: Any) -> None:
        self.pending.append(wanted)

    def settle(self) -> list[tuple[Wanted, str]]:
        self.journaled_when_settled.append(set(self.journal.delivered()))
        done, self.pending = self.pending, []
        return [(w, "KafkaTimeoutError: no ack" if w.msg_id == "m1" else "") for w in done]


def test_topic_runs_record_the_replay_after_the_broker_acknowledged_and_the_journal_has_it(tmp_path) -> None:
    tracer, journal = FakeTracer(), Journal(tmp_path / "j.jsonl")
    delivery = FakeTopicDelivery(journal)
    records = iter([(w, Record(w), "") for w in W])
    out = deliver(len(W), records, delivery, journal, tracer, "orders", "sms")
    assert out.delivered == 3 and [w.msg_id for w, _ in out.failures] == ["m1"]
    assert delivery.journaled_when_settled == [set()]  # one settle for the 4 records (fewer than SETTLE_EVERY)
    assert set(journal.delivered()) == {"m0", "m2", "m3"}
    assert [e[1] for e in tracer.events] == ["m0", "m2", "m3"] and {e[0] for e in tracer.events} == {"replay"}


def test_a_terminal_gets_a_progress_line(tmp_path, monkeypatch) -> None:
    import io
    import sys

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    tracer, journal = FakeTracer(), Journal(tmp_path / "j.jsonl")
    records = iter([(w, Record(w), "") for w in W])
    out = deliver(len(W), records, HandlerDelivery("builtins:next", tracer, "orders", "sms"),  # type: ignore[arg-type]
                  journal, tracer, "orders", "sms", Pacer(1000.0))
    assert out.delivered == 4
    lines = terminal.getvalue().split("\r")
    assert lines[-1].startswith("4/4 records, ") and "/s, eta 0s" in lines[-1] and lines[-1].endswith("\n")


class FakeClock:
    """Monotonic nanoseconds that only a sleep (or the test) moves."""

    def __init__(self) -> None:
        self.ns = 5 * 10**9

    def __call__(self) -> int:
        return self.ns

    def sleep(self, seconds: float) -> None:
        self.ns += round(seconds * 1e9)  # rounded either way: the pacer sleeps again if it woke early


def most_in_one_second(times: list[int]) -> int:
    """The most of ``times`` (sorted, ns) in any one-second window ``[t, t + 1 s)``."""
    return max(bisect.bisect_left(times, t + 10**9) - i for i, t in enumerate(times))


class TimedDelivery:
    """Notes the (fake) time of each delivery; the broker acknowledges everything."""

    replay_event_first = False
    target = "topic:orders.sms-replay"

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.times: list[int] = []
        self.pending: list[Wanted] = []

    def deliver(self, wanted: Wanted, record: Any) -> None:
        self.times.append(self.clock())
        self.clock.ns += 300_000 * (wanted.offset % 3)  # the send's own work: 0 to 0.6 ms
        self.pending.append(wanted)

    def settle(self) -> list[tuple[Wanted, str]]:
        done, self.pending = self.pending, []
        return [(w, "") for w in done]


def slow_reads(clock: FakeClock, count: int) -> Iterator[tuple[Wanted, Any, str]]:
    """``count`` records as the broker gives them: the first after 1.2 s, and a 2 s stall halfway."""
    clock.ns += 1_200_000_000  # assign, seek and the first poll
    for i in range(count):
        if i == count // 2:
            clock.ns += 2 * 10**9  # a range that took a while to read
        w = Wanted(f"m{i}", 0, i, 0)
        yield w, Record(w), ""


def test_rate_n_lets_at_most_n_deliveries_into_any_second(tmp_path) -> None:
    """--rate N: the clock starts at the first delivery, not before the broker's first read (that let
    31 out in the first second at --rate 25), and a slow read mid-run lets no burst out to catch up."""
    for rate in (1, 5, 25, 1000):
        clock, count = FakeClock(), 3 * rate + 2
        delivery, started = TimedDelivery(clock), clock()
        out = deliver(count, slow_reads(clock, count), delivery, Journal(tmp_path / f"j{rate}.jsonl"),
                      FakeTracer(), "orders", "sms", Pacer(rate, clock=clock, sleep=clock.sleep))
        times = delivery.times
        assert out.delivered == count and times == sorted(times)
        assert most_in_one_second(times) == rate, rate  # at most N, and not slower than needed
        assert times[0] == started + 1_200_000_000  # the first goes as soon as it is read
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert min(gaps) >= 10**9 / rate and max(gaps) < 10**9 / rate + 2 * 10**9 + 10**6  # the stall, no more
    # A fractional rate: one every two seconds.
    clock = FakeClock()
    pacer, times = Pacer(0.5, clock=clock, sleep=clock.sleep), []
    for _ in range(4):
        pacer.wait()
        times.append(clock())
    assert [b - a for a, b in zip(times, times[1:])] == [2 * 10**9] * 3
