"""``tracehook replay`` without a broker: offset ranges, the plan from the list and the journal, the journal file."""

from __future__ import annotations

import pathlib
import shlex
from types import SimpleNamespace

from collector.cli.main import build_parser
from collector.cli.replay import NO_PLACE, apply_command, header, make_plan
from collector.cli.replay_journal import Entry, Journal, default_path
from collector.cli.replay_kafka import GONE, PAST_END, Bounds, Wanted, msg_id_problem, off_the_broker, ranges
from tracehook.context import derived_msg_id


def item(msg_id: str, queue: int = 0, offset: int = 0, *, status: str = "FAILED", last: int = 100,
         attempts: int = 1, replayed: int = 0) -> dict:
    return {"msg_id": msg_id, "queue": queue, "offset": offset, "status": status, "last_attempt_ms": last,
            "attempts": attempts, "replayed_ms": replayed, "time_ms": 50, "keys": "k"}


def test_ranges_join_offsets_up_to_the_gap() -> None:
    assert ranges([], 2) == []
    assert ranges([5], 2) == [(5, 5)]
    assert ranges([1, 2, 3, 6, 10, 11], 2) == [(1, 6), (10, 11)]  # 3 -> 6 skips 2 records: joined
    assert ranges([1, 5], 2) == [(1, 1), (5, 5)]
    assert ranges(list(range(0, 1000, 7)), 0) == [(o, o) for o in range(0, 1000, 7)]


def test_the_plan_skips_what_was_replayed_and_keeps_what_failed_after_it() -> None:
    items = [item("a", 0, 1), item("b", 1, 2, status="REPLAYED", replayed=150), item("c", 0, 3, last=300),
             item("d", -1, -1), item("e", 0, 4, status="NOT_RECEIVED", last=0, attempts=0)]
    plan = make_plan(items, {"c": 200, "e": 10})  # c failed again after its journaled delivery
    assert plan.todo == [Wanted("a", 0, 1, 1, 50, "k"), Wanted("c", 0, 3, 1, 50, "k")]
    assert plan.unplaceable == [("d", NO_PLACE)]
    assert [m for m, _ in plan.already] == ["b", "e"]
    assert "(trace)" in plan.already[0][1] and "(journal)" in plan.already[1][1]


def test_the_journal_survives_a_torn_line(tmp_path: pathlib.Path) -> None:
    journal = Journal(tmp_path / "deep" / "j.jsonl")
    assert journal.delivered() == {}
    journal.append([Entry("a", 0, 1, "topic:r", "run1", 10), Entry("b", 0, 2, "topic:r", "run1", 11)])
    with open(journal.path, "a", encoding="utf-8") as out:
        out.write('{"msg_id": "c", "at_')  # a crash mid-write
    journal.append([Entry("a", 0, 1, "topic:r", "run2", 30)])
    assert journal.delivered() == {"a": 30, "b": 11}


def test_default_journal_paths_are_per_cluster_topic_and_group(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    path = default_path("k:9092", "orders/x", "sms")
    assert path.parent == tmp_path / "tracehook" / "replay" and "/" not in path.name[:-6]
    assert len({path, default_path("k:9093", "orders/x", "sms"), default_path("k:9092", "orders/x", "push")}) == 3


def test_a_record_with_another_message_id_is_refused() -> None:
    wanted = Wanted("m-1", 0, 7, 0)
    record = SimpleNamespace(headers=[("tracehook-msg-id", b"m-1")], partition=0, offset=7)
    assert msg_id_problem("t", wanted, record) == ""
    assert "refused" in msg_id_problem("t", wanted, SimpleNamespace(headers=[("tracehook-msg-id", b"m-2")],
                                                                    partition=0, offset=7))
    # No header: the id the adapters derive from the record's place.
    derived = Wanted(derived_msg_id("t", 0, 7), 0, 7, 0)
    assert msg_id_problem("t", derived, SimpleNamespace(headers=[], partition=0, offset=7)) == ""


def test_the_apply_command_parses_back_to_the_same_replay() -> None:
    args = build_parser().parse_args(["replay", "orders", "--group", "sms", "--begin=-2h", "--bootstrap", "k:1",
                                      "--handler", "app.sms:handle", "--store", "local:x", "--rate", "5"])
    command = apply_command(args, 1000, 2000)
    again = build_parser().parse_args(shlex.split(command)[1:])
    assert (again.topic, again.group, again.begin, again.end, again.handler, again.store, again.rate, again.apply) \
        == ("orders", "sms", "1000", "2000", "app.sms:handle", "local:x", 5.0, True)


def test_the_header_counts_what_apply_delivers_and_puts_the_rest_on_their_own_line() -> None:
    """17 listed: 14 placed and due, of which the broker lost 6 to retention and never had 1 (past its
    end), and 1 refused once read; 1 without a place, 2 already replayed. --apply delivers 6."""
    items = [item(f"m{i}", 0, 100 + i) for i in range(13)] + [item("far", 0, 500), item("nowhere", -1, -1)]
    items += [item("r1", status="REPLAYED", replayed=150), item("r2", status="REPLAYED", replayed=150)]
    plan = make_plan(items, {})
    gone = off_the_broker(plan.todo, Bounds({0: 106}, {0: 200}))
    assert [(w.msg_id, p) for w, p in gone] == [(f"m{i}", GONE) for i in range(6)] + [("far", PAST_END)]
    args = build_parser().parse_args(["replay", "orders", "--group", "sms", "--to-topic", "r"])
    refused = (plan.todo[9], "the record there has message id 'x', not the trace's: refused")
    lines = header(args, 1_795_341_600_000, 1_795_347_000_000, len(items), plan, [*gone, refused]).splitlines()
    assert lines == [
        "replay of orders for group sms, 2026-11-22T10:00:00Z .. 2026-11-22T11:30:00Z: "
        "17 message(s) in the replay list, 6 to replay",
        "gone from the broker: 7; cannot be replayed: 2; already replayed: 2",
    ]
