"""``tracehook replay``'s delivery loop with stand-ins for the broker: what is journaled, what is recorded, in which order."""

from __future__ import annotations

import pathlib
from typing import Any

from collector.cli.replay import deliver
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
    out = deliver(W, records, delivery, journal, tracer, "orders", "sms", None)
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
    out = deliver(W, records, delivery, journal, tracer, "orders", "sms", None)
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
    out = deliver(W, records, HandlerDelivery("builtins:next", tracer, "orders", "sms"),  # type: ignore[arg-type]
                  journal, tracer, "orders", "sms", 1000.0)
    assert out.delivered == 4
    lines = terminal.getvalue().split("\r")
    assert lines[-1].startswith("4/4 records, ") and "/s, eta 0s" in lines[-1] and lines[-1].endswith("\n")
