"""``tracehook replay`` on a real Kafka: re-deliver to one group exactly what it missed, nothing twice.

One topic of 24 records over 2 partitions, sent through the traced kafka-python producer.
Four groups read it: ``audit`` handles everything; ``sms``, ``push`` and ``mail`` fail the same window of
records (failed, timed out, dead-lettered, and two they never received: their consumer skipped
them untraced).  A collector keeps running for the module so the replays' events reach it;
the tests seal its log and index it when they want the trace to know.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

import pytest
import replay_handlers
from fixtures.brokers import to_end
from fixtures.collector_process import CollectorProcess
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic

import tracehook
from collector.cli.main import main as cli_main
from collector.store import open_store
from collector.store.reader import TraceQuery
from tests.fixtures.indexing import index_sealed, seal_log
from tracehook.adapters import kafka_python

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS, N, STEP_MS = 2, 24, 1000
WINDOW = range(8, 16)  # the failing groups' bad stretch: records 8..15
NEVER = {9, 14}  # received by no failing group (their consumer skipped them)
DEAD = {11}
TIMEOUT = {12}
FAILING = ("sms", "push", "mail")


class World:
    def __init__(self, bootstrap: str, data_dir: str) -> None:
        self.bootstrap = bootstrap
        self.data_dir = data_dir
        self.collector = CollectorProcess(data_dir, "--durability", "os", store=None)
        self.store = f"local:{data_dir}/index.sqlite3"
        self.topic = f"replay-{uuid.uuid4().hex[:8]}"
        self.records: list[Any] = []  # RecordMetadata of record i
        self.base = (int(time.time()) - 3600) * 1000

    def tracer(self) -> tracehook.Tracer:
        return tracehook.Tracer(tracehook.TracerConfig(app="shop", collectors=(self.collector.url,), linger_s=0.02))

    def index(self) -> None:
        seal_log(self.collector.url, f"{self.data_dir}/log")
        index_sealed(f"{self.data_dir}/log", self.store)

    def window_args(self) -> list[str]:
        return [f"--begin={self.base + WINDOW[0] * STEP_MS}", f"--end={self.base + WINDOW[-1] * STEP_MS}"]

    def missed(self) -> list[tuple[int, int]]:
        return sorted((self.records[i].partition, self.records[i].offset) for i in WINDOW)


def consume_all(bootstrap: str, topic: str, group: str, tracer: tracehook.Tracer, fail: bool) -> int:
    """Read the topic as ``group``, traced by hand (``tracer.consume``): a failing group fails the window."""
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=3000)
    seen = 0
    deadline = time.monotonic() + 30  # a hang guard: a new group's first join can be slow on a busy machine
    records = list(to_end(consumer))
    while len(records) < N and time.monotonic() < deadline:
        records += list(to_end(consumer))
    for record in records:
        seen += 1
        i = int(record.key[1:])
        if fail and i in NEVER:
            continue  # the consumer lost it before anything was traced
        with tracer.consume(topic, None, group, keys=record.key.decode(), queue=record.partition,
                            offset=record.offset, store_ms=record.timestamp, headers=record.headers) as span:
            if fail and i in WINDOW:
                span.status = tracehook.Status.TIMEOUT if i in TIMEOUT else tracehook.Status.FAILED
                span.error = "sms gateway down"
        if fail and i in DEAD:
            tracer.record_dead(topic, dict(record.headers)["tracehook-msg-id"].decode(),
                               group, error="max retries", queue=record.partition, offset=record.offset)
    consumer.commit()
    consumer.close()
    return seen


@pytest.fixture(scope="module")
def world(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Any:
    w = World(kafka_bootstrap, str(tmp_path_factory.mktemp("replay-kafka") / "data"))
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(w.topic, PARTITIONS, 1)])
    admin.close()
    tracer = w.tracer()
    producer = kafka_python.TracedProducer(KafkaProducer(bootstrap_servers=kafka_bootstrap), tracer)
    futures = [producer.send(w.topic, b"sms %d" % i, key=b"k%d" % i, partition=i % PARTITIONS,
                             timestamp_ms=w.base + i * STEP_MS) for i in range(N)]
    w.records = [f.get(10) for f in futures]
    producer.close()
    assert consume_all(kafka_bootstrap, w.topic, "audit", tracer, fail=False) == N
    for group in FAILING:
        assert consume_all(kafka_bootstrap, w.topic, group, tracer, fail=True) == N
    assert tracer.flush(10)
    tracer.close()
    w.index()
    yield w
    w.collector.stop()


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli_main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def replay_list(capsys: pytest.CaptureFixture[str], world: World, group: str) -> list[dict[str, Any]]:
    code, out, err = cli(capsys, "replay-list", world.topic, "--group", group, *world.window_args(),
                         "--store", world.store)
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def replay(capsys: pytest.CaptureFixture[str], world: World, group: str, journal: str, *extra: str
           ) -> tuple[int, str, str]:
    return cli(capsys, "replay", world.topic, "--group", group, *world.window_args(), "--bootstrap",
               world.bootstrap, "--store", world.store, "--trace-to", world.collector.url, "--journal", journal,
               *extra)


def read_topic(bootstrap: str, topic: str, at_least: int = 0) -> list[Any]:
    """Every record of the topic: read to its end offsets (or until 2 s pass without a record), and (a hang
    guard, not a speed assertion) until ``at_least`` arrived or 30 s passed; a fresh topic's metadata can be
    slow to come."""
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=2000)
    out = list(to_end(consumer))
    deadline = time.monotonic() + 30
    while len(out) < at_least and time.monotonic() < deadline:
        out += list(to_end(consumer))
    consumer.close()
    return out


def consumes_of(world: World, group: str) -> int:
    """How many consume attempts ``group`` has on the topic's messages, as indexed."""
    store = open_store(world.store)
    try:
        query = TraceQuery(store)
        ids = [dict(r.headers)["tracehook-msg-id"].decode() for r in read_topic(world.bootstrap, world.topic, N)]
        return sum(len((query.get_trace(m).consumes or {}).get(group, [])) for m in ids)
    finally:
        store.close()


def test_the_dry_run_reports_the_window_and_delivers_nothing(world, capsys, tmp_path) -> None:
    assert sorted((i["queue"], i["offset"]) for i in replay_list(capsys, world, "sms")) == world.missed()
    target = f"{world.topic}-dry"
    code, out, err = replay(capsys, world, "sms", str(tmp_path / "journal"), "--to-topic", target)
    assert code == 0, err
    assert f"{len(WINDOW)} message(s) in the replay list, {len(WINDOW)} to replay" in out
    rows = {int(m[0]): tuple(map(int, m[1:4])) for m in re.findall(r"^(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s", out, re.M)}
    expected = {}
    for p in range(PARTITIONS):
        offsets = [o for q, o in world.missed() if q == p]
        expected[p] = (len(offsets), min(offsets), max(offsets))
    assert rows == expected
    assert "gone from the broker: 0; cannot be replayed: 0" in out
    assert "--apply" in out.splitlines()[-1] and f"--to-topic {target}" in out
    assert f"note: topic {target} does not exist yet" in out
    assert not (tmp_path / "journal").exists()


def test_apply_to_topic_then_the_group_consumes_the_copies(world, capsys, tmp_path) -> None:
    journal, target = str(tmp_path / "journal"), f"{world.topic}-sms-replay"
    audit_before = consumes_of(world, "audit")
    end_before = read_topic(world.bootstrap, world.topic, N)
    code, out, err = replay(capsys, world, "sms", journal, "--to-topic", target, "--apply")
    assert code == 0, err + out
    assert f"delivered {len(WINDOW)} of {len(WINDOW)} to topic:{target}" in out
    copies = read_topic(world.bootstrap, target, len(WINDOW))
    assert sorted((r.key, r.value) for r in copies) == sorted((b"k%d" % i, b"sms %d" % i) for i in WINDOW)
    # A rerun before anything is indexed: the journal knows; nothing goes out twice.
    code, out, _ = replay(capsys, world, "sms", journal, "--to-topic", target, "--apply")
    assert code == 0 and f"{len(WINDOW)} message(s) in the replay list, 0 to replay" in out
    assert len(read_topic(world.bootstrap, target, len(WINDOW))) == len(WINDOW)

    world.index()  # the REPLAY events: the list shows the window as replayed, not missed
    items = replay_list(capsys, world, "sms")
    assert {i["status"] for i in items} == {"REPLAYED"} and len(items) == len(WINDOW)
    # A rerun with a fresh journal: the trace alone knows.
    code, out, _ = replay(capsys, world, "sms", str(tmp_path / "other"), "--to-topic", target, "--apply")
    assert code == 0 and "0 to replay" in out and len(read_topic(world.bootstrap, target, len(WINDOW))) == len(WINDOW)

    # The group reads its replay topic through the adapter: each consume attaches to the original message.
    tracer = world.tracer()
    consumer = kafka_python.TracedConsumer(KafkaConsumer(
        target, bootstrap_servers=world.bootstrap, group_id="sms", auto_offset_reset="earliest",
        enable_auto_commit=False, consumer_timeout_ms=3000), tracer)
    handled = list(to_end(consumer))
    deadline = time.monotonic() + 30  # a hang guard: a new group's first join can be slow on a busy machine
    while len(handled) < len(WINDOW) and time.monotonic() < deadline:
        handled += list(to_end(consumer))
    assert len(handled) == len(WINDOW)
    consumer.close()
    assert tracer.flush(10)
    tracer.close()
    world.index()
    assert replay_list(capsys, world, "sms") == []
    assert len(replay_list(capsys, world, "push")) == len(WINDOW)  # the other failing group: untouched
    assert consumes_of(world, "audit") == audit_before  # nothing new for the group that was fine
    assert len(read_topic(world.bootstrap, world.topic, N)) == len(end_before)  # nothing sent to the topic itself
    store = open_store(world.store)
    try:
        trace = TraceQuery(store).get_trace(dict(copies[0].headers)["tracehook-msg-id"].decode())
    finally:
        store.close()
    assert trace is not None and trace.outcomes["sms"].outcome == "consumed"
    assert [(r["group"], r["props"]["replay.target"]) for r in trace.replays] == [("sms", f"topic:{target}")]
    assert trace.topic == world.topic and trace.outcomes["sms"].replay_target == f"topic:{target}"


@pytest.mark.parametrize("handler", ["replay_handlers:handle_async"])
def test_apply_with_the_groups_handler(world, capsys, tmp_path, handler) -> None:
    replay_handlers.HANDLED.clear()
    journal = str(tmp_path / "journal")
    code, out, err = replay(capsys, world, "push", journal, "--handler", handler, "--apply")
    assert code == 0, err + out
    assert sorted((r.partition, r.offset) for r in replay_handlers.HANDLED) == world.missed()
    code, out, _ = replay(capsys, world, "push", journal, "--handler", handler, "--apply")
    assert code == 0 and "0 to replay" in out and len(replay_handlers.HANDLED) == len(WINDOW)
    world.index()
    assert replay_list(capsys, world, "push") == []  # the handler's consumes were traced as push
    store = open_store(world.store)
    try:
        first = replay_handlers.HANDLED[0]
        trace = TraceQuery(store).get_trace(dict(first.headers)["tracehook-msg-id"].decode())
    finally:
        store.close()
    assert trace is not None and trace.outcomes["push"].outcome == "consumed"
    attempts = trace.consumes["push"]
    assert attempts[-1]["retry"] == len(attempts) - 1  # the replayed attempt continues the count
    assert [r["props"]["replay.target"] for r in trace.replays if r["group"] == "push"] == [f"handler:{handler}"]


def test_ctrl_c_stops_between_records_and_the_printed_command_resumes(world, capsys, tmp_path) -> None:
    replay_handlers.HANDLED.clear()
    journal = str(tmp_path / "journal")
    code, out, err = replay(capsys, world, "mail", journal, "--handler", "replay_handlers:interrupt_after_three",
                            "--rate", "1000", "--apply")
    assert code == 130 and "delivered 3 of 8" in out
    resume = err.split("resume with: ", 1)[1].strip()
    assert "--apply" in resume and "--journal" in resume
    argv = resume.split()[1:]
    argv[argv.index("replay_handlers:interrupt_after_three")] = "replay_handlers:handle"
    code, out, err = cli(capsys, *argv)
    assert code == 0 and "delivered 5 of 5" in out, err
    assert sorted((r.partition, r.offset) for r in replay_handlers.HANDLED) == world.missed()  # each once


def test_records_the_broker_no_longer_has_are_reported(kafka_bootstrap, capsys, tmp_path) -> None:
    w = World(kafka_bootstrap, str(tmp_path / "data"))
    try:
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        admin.create_topics([NewTopic(w.topic, 1, 1)])
        tracer = w.tracer()
        producer = kafka_python.TracedProducer(KafkaProducer(bootstrap_servers=kafka_bootstrap), tracer)
        w.records = [producer.send(w.topic, b"v%d" % i, key=b"k%d" % i, timestamp_ms=w.base + i * STEP_MS).get(10)
                     for i in range(N)]
        producer.close()
        consume_all(kafka_bootstrap, w.topic, "sms", tracer, fail=True)
        assert tracer.flush(10)
        tracer.close()
        w.index()
        admin.delete_records({TopicPartition(w.topic, 0): w.records[12].offset})  # 8..11 gone
        admin.close()
        journal, target = str(tmp_path / "journal"), f"{w.topic}-replay"
        # The header counts what --apply delivers; the gone ones have the next line (dry run and --apply alike).
        head = "8 message(s) in the replay list, 4 to replay\ngone from the broker: 4; cannot be replayed: 0;"
        code, out, _ = replay(capsys, w, "sms", journal, "--to-topic", target)
        assert code == 4 and head in out and out.index(head) < out.index("partition ")
        for i in range(8, 12):
            assert f"partition 0 offset {w.records[i].offset}): gone from the broker" in out
        code, out, _ = replay(capsys, w, "sms", journal, "--to-topic", target, "--apply")
        assert code == 4 and out.startswith("replay of ") and head in out and "delivered 4 of 4" in out
        assert "gone from the broker: 4;" in out.split("delivered 4 of 4", 1)[1]
        copies = read_topic(kafka_bootstrap, target, 4)
        assert sorted(r.key for r in copies) == sorted(b"k%d" % i for i in range(12, 16))
    finally:
        w.collector.stop()


def test_a_topic_not_on_kafka_is_one_line_pointing_to_the_rabbitmq_route(world, capsys, tmp_path) -> None:
    code, out, err = cli(capsys, "replay", "orders-on-rabbitmq", "--group", "sms", "--bootstrap", world.bootstrap,
                         "--store", world.store, "--allow-unknown-group", "--to-topic", "x",
                         "--journal", str(tmp_path / "j"))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "not on the Kafka broker" in err and "RabbitMQ" in err and "dead-letter-queue route" in err


def test_a_record_whose_message_id_differs_from_the_trace_is_refused(kafka_bootstrap, capsys, tmp_path) -> None:
    w = World(kafka_bootstrap, str(tmp_path / "data"))
    try:
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        admin.create_topics([NewTopic(w.topic, 1, 1)])
        admin.close()
        plain = KafkaProducer(bootstrap_servers=kafka_bootstrap)
        sent = [plain.send(w.topic, b"v%d" % i, key=b"k%d" % i, headers=[("tracehook-msg-id", b"real-%d" % i)],
                           timestamp_ms=w.base + (WINDOW[0] + i) * STEP_MS).get(10) for i in range(2)]
        plain.close()
        tracer = w.tracer()
        # The trace places "wrong-0" at record 0's offset (which holds real-0) and real-1 where it is.
        for msg_id, meta in (("wrong-0", sent[0]), ("real-1", sent[1])):
            tracer.record_send(w.topic, msg_id, keys=msg_id, queue=meta.partition, offset=meta.offset,
                               store_ms=meta.timestamp)
            with tracer.consume(w.topic, msg_id, "sms", queue=meta.partition, offset=meta.offset,
                                store_ms=meta.timestamp) as span:
                span.status = tracehook.Status.FAILED
        assert tracer.flush(10)
        tracer.close()
        w.index()
        journal, target = str(tmp_path / "journal"), f"{w.topic}-replay"
        code, out, _ = replay(capsys, w, "sms", journal, "--to-topic", target)
        assert code == 4 and "cannot be replayed: 1;" in out
        assert f"wrong-0 (partition 0 offset {sent[0].offset}): the record there has message id 'real-0'" in out
        code, out, _ = replay(capsys, w, "sms", journal, "--to-topic", target, "--apply")
        assert code == 4 and "delivered 1 of 2" in out
        assert [dict(r.headers)["tracehook-msg-id"] for r in read_topic(kafka_bootstrap, target, 1)] == [b"real-1"]
    finally:
        w.collector.stop()
