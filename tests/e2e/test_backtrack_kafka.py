"""Backtracking on a real Kafka: traced producer and group -> collector -> index -> offsets, plans, replay, kafka-reset.

One scenario (module fixture, never changed by the tests): 30 records over 3 partitions
with explicit broker timestamps one second apart, sent through the traced kafka-python
producer; the traced group ``ledger`` consumes them all and fails a known subset; the
traces are indexed; then 6 more records are produced untraced (the index lags behind them).

Every test that moves committed offsets works on its own copy of ``ledger``'s position
(a fresh group id), so the tests do not depend on their order.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, NamedTuple

import pytest
from adapter_helpers import collect_and_index
from fixtures.brokers import to_end
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

import tracehook
from collector.cli.kafka_reset import apply_plan, committed_offsets, replay_items
from collector.cli.main import main as cli_main
from tracehook.adapters import kafka_python

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS, N, TAIL, STEP_MS, GROUP = 3, 30, 6, 1000, "ledger"
FAILED = {i for i in range(N) if i % 4 == 1}  # the group's handler fails these (8 records)


class Rec(NamedTuple):
    """A produced record as the broker filed it."""

    i: int
    partition: int
    offset: int
    timestamp: int


def brute_offsets(records: list[Rec], time_ms: int) -> dict[int, int]:
    """Per partition, the first offset with timestamp >= time_ms; the end offset when none is."""
    out = {}
    for p in range(PARTITIONS):
        mine = [r for r in records if r.partition == p]
        later = [r.offset for r in mine if r.timestamp >= time_ms]
        out[p] = min(later) if later else max(r.offset for r in mine) + 1
    return out


@pytest.fixture(scope="module")
def world(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data_dir = tmp_path_factory.mktemp("backtrack-kafka")
    topic = f"backtrack-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    admin.close()
    base = (int(time.time()) - 3600) * 1000
    traced: list[Rec] = []

    def run(tracer: tracehook.Tracer) -> None:
        producer = kafka_python.TracedProducer(KafkaProducer(bootstrap_servers=kafka_bootstrap), tracer)
        futures = [producer.send(topic, b"m%d" % i, key=b"k%d" % i, partition=i % PARTITIONS,
                                 timestamp_ms=base + i * STEP_MS) for i in range(N)]
        traced.extend(Rec(i, m.partition, m.offset, m.timestamp) for i, m in enumerate(f.get(10) for f in futures))
        producer.close()

        consumer = kafka_python.TracedConsumer(KafkaConsumer(
            topic, bootstrap_servers=kafka_bootstrap, group_id=GROUP, auto_offset_reset="earliest",
            enable_auto_commit=False, consumer_timeout_ms=3000), tracer)
        seen = 0
        for record in to_end(consumer):
            seen += 1
            if int(record.key[1:]) in FAILED:
                consumer.fail(record, "ledger unavailable")  # moves on: the offset advances, the work is lost
        consumer.commit()
        consumer.close()
        assert seen == N
        assert tracer.flush(10) and tracer.stats()["dropped_total"] == 0

    store = collect_and_index(data_dir, run)

    # Produced after indexing and untraced: the index lags behind these.
    plain = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    futures = [plain.send(topic, b"t%d" % j, key=b"t%d" % j, partition=j % PARTITIONS,
                          timestamp_ms=base + (N + 10 + j) * STEP_MS) for j in range(TAIL)]
    tail = [Rec(N + j, m.partition, m.offset, m.timestamp) for j, m in enumerate(f.get(10) for f in futures)]
    plain.close()
    ledger = committed_offsets(kafka_bootstrap, GROUP, topic)
    assert ledger == brute_offsets(traced, base + N * STEP_MS)  # ledger read and committed every traced record
    return {"topic": topic, "store": store, "traced": traced, "all": traced + tail, "ledger": ledger}


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def copy_of_ledger(bootstrap: str, world: dict[str, Any], offsets: dict[int, int] | None = None) -> str:
    """A fresh group committed at ``offsets`` (default: where ledger is)."""
    group = f"{GROUP}-{uuid.uuid4().hex[:8]}"
    apply_plan(bootstrap, group, world["topic"], world["ledger"] if offsets is None else offsets)
    return group


def kafka_reset(capsys: pytest.CaptureFixture[str], bootstrap: str, world: dict[str, Any], group: str,
                time_ms: int, *extra: str) -> tuple[int, dict[str, Any] | None, str]:
    code, out, err = cli(capsys, "kafka-reset", "--bootstrap", bootstrap, "--group", group, "--topic",
                         world["topic"], f"--time={time_ms}", "--store", world["store"], "--json", *extra)
    return code, (json.loads(out) if out.strip() else None), err


def test_offsets_at_times_match_the_produced_records(world, capsys) -> None:
    traced = world["traced"]
    first, middle, last = traced[0].timestamp, traced[N // 2].timestamp, traced[-1].timestamp
    for time_ms in (first - 60_000, first, first + 1, middle, middle + 500, last - 1, last, last + 1,
                    last + 3_600_000):
        code, out, _ = cli(capsys, "offsets", world["topic"], f"--time={time_ms}", "--json", "--store", world["store"])
        assert code == 0
        assert {q["queue"]: q["offset"] for q in json.loads(out)["queues"]} == brute_offsets(traced, time_ms), time_ms


def test_reset_plan_from_traces_rewinds(world, capsys) -> None:
    # ledger finished every record (failed ones too: the offset moved on), so its position is each partition's end.
    middle = world["traced"][N // 2].timestamp
    code, out, _ = cli(capsys, "offsets", world["topic"], f"--time={middle}", "--group", GROUP, "--json",
                       "--store", world["store"])
    targets = brute_offsets(world["traced"], middle)
    assert code == 0
    assert {q["queue"]: (q["target"], q["current"], q["planned"], q["action"]) for q in json.loads(out)["queues"]} == {
        p: (targets[p], world["ledger"][p], targets[p], "rewind") for p in range(PARTITIONS)}


def test_replay_list_is_the_failed_subset_and_replays_exactly_it(kafka_bootstrap, world, capsys) -> None:
    traced = world["traced"]
    code, out, _ = cli(capsys, "replay-list", world["topic"], "--group", GROUP, f"--begin={traced[0].timestamp}",
                       f"--end={traced[-1].timestamp}", "--store", world["store"])
    items = [json.loads(line) for line in out.splitlines()]
    failed = sorted((r.partition, r.offset) for r in traced if r.i in FAILED)
    assert code == 0
    assert sorted((i["queue"], i["offset"], i["status"]) for i in items) == [(p, o, "FAILED") for p, o in failed]
    got: list[Any] = []
    assert replay_items(kafka_bootstrap, world["topic"], items, got.append) == len(failed)
    assert sorted((r.partition, r.offset, r.key) for r in got) == sorted(
        (r.partition, r.offset, b"k%d" % r.i) for r in traced if r.i in FAILED)


def test_kafka_reset_moves_the_committed_offsets(kafka_bootstrap, world, capsys) -> None:
    group = copy_of_ledger(kafka_bootstrap, world)
    t = world["traced"][17].timestamp + 500  # between two records
    code, plan, err = kafka_reset(capsys, kafka_bootstrap, world, group, t)
    expected = brute_offsets(world["all"], t)
    assert code == 0 and "dry run" in err and plan is not None
    assert {q["queue"]: (q["planned"], q["action"]) for q in plan["queues"]} == {
        p: (expected[p], "rewind") for p in range(PARTITIONS)}
    assert committed_offsets(kafka_bootstrap, group, world["topic"]) == world["ledger"]  # a dry run commits nothing

    assert kafka_reset(capsys, kafka_bootstrap, world, group, t, "--apply")[0] == 0
    assert committed_offsets(kafka_bootstrap, group, world["topic"]) == expected
    consumer = KafkaConsumer(world["topic"], bootstrap_servers=kafka_bootstrap, group_id=group,
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    reread = sorted((r.partition, r.offset) for r in to_end(consumer))
    consumer.close()
    assert reread == sorted((r.partition, r.offset) for r in world["all"] if r.timestamp >= t)


def test_kafka_reset_rewinds_only_unless_forced(kafka_bootstrap, world, capsys) -> None:
    behind = {p: 1 for p in range(PARTITIONS)}
    group = copy_of_ledger(kafka_bootstrap, world, behind)
    t = world["traced"][N // 2].timestamp
    code, plan, _ = kafka_reset(capsys, kafka_bootstrap, world, group, t, "--apply")
    assert code == 0 and plan is not None and {q["action"] for q in plan["queues"]} == {"keep"}
    assert committed_offsets(kafka_bootstrap, group, world["topic"]) == behind  # moving forward would skip records
    code, plan, _ = kafka_reset(capsys, kafka_bootstrap, world, group, t, "--apply", "--force")
    assert code == 0 and plan is not None and {q["action"] for q in plan["queues"]} == {"forward"}
    assert committed_offsets(kafka_bootstrap, group, world["topic"]) == brute_offsets(world["all"], t)


def test_a_lagging_index_defers_to_the_broker(kafka_bootstrap, world, capsys) -> None:
    # After the newest indexed record and between the untraced ones: the index would say "its end".
    t = world["all"][N + 2].timestamp - 500
    index_end = brute_offsets(world["traced"], t)
    expected = brute_offsets(world["all"], t)
    assert expected != index_end
    group = copy_of_ledger(kafka_bootstrap, world, {p: o + 2 for p, o in world["ledger"].items()})  # past the tail
    code, plan, err = kafka_reset(capsys, kafka_bootstrap, world, group, t, "--apply")
    assert code == 0 and plan is not None and "lag" in err
    assert {q["queue"]: q["target"] for q in plan["queues"]} == expected
    assert committed_offsets(kafka_bootstrap, group, world["topic"]) == expected


def test_kafka_reset_refuses_a_group_with_live_members(kafka_bootstrap, world, capsys) -> None:
    group = copy_of_ledger(kafka_bootstrap, world)
    member = KafkaConsumer(world["topic"], bootstrap_servers=kafka_bootstrap, group_id=group,
                           enable_auto_commit=False)
    try:
        deadline = time.monotonic() + 20
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(timeout_ms=200, max_records=1)
        assert member.assignment(), "the consumer never joined its group"
        code, _, err = kafka_reset(capsys, kafka_bootstrap, world, group, world["traced"][0].timestamp, "--apply")
        assert code == 2 and "stop its consumers first" in err
    finally:
        member.close(autocommit=False)
    assert committed_offsets(kafka_bootstrap, group, world["topic"]) == world["ledger"]
