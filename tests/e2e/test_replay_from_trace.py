"""``tracehook replay --from-trace`` on real brokers: re-deliver from the bodies kept in the index what the
broker no longer has, each message exactly once with its original id, key and headers.

Kafka: a topic's records are sent with their bodies kept (``body_topics``), a group fails them all,
then ``delete_records`` empties the partition.  RabbitMQ: messages published to an exchange with a
routing key, consumed and acked by a group whose handler failed them.  One message each was sent by
a tracer that keeps no bodies (Kafka) or had a body over the cap (RabbitMQ): listed, never sent.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fixtures.brokers import to_end
from fixtures.collector_process import CollectorProcess

import tracehook
from collector.cli.main import main as cli_main
from collector.cli.replay_kafka import REPLAY_HEADERS
from tests.fixtures.indexing import index_sealed, seal_log

pytestmark = pytest.mark.slow
N = 5
BODY_TOPICS = "TRACEHOOK_COLLECTOR_BODY_TOPICS"


class World:
    """A collector keeping the bodies of ``topic``, its trace log indexed into a local store on demand."""

    def __init__(self, data_dir: str, topic: str) -> None:
        self.data_dir, self.topic = data_dir, topic
        self.collector = CollectorProcess(data_dir, "--durability", "os", store=None, env={BODY_TOPICS: topic})
        self.store = f"local:{data_dir}/index.sqlite3"

    def tracer(self, keep: bool = True) -> tracehook.Tracer:
        return tracehook.Tracer(tracehook.TracerConfig(
            app="shop", collectors=(self.collector.url,), linger_s=0.02, flush_at_exit=False,
            body_topics=frozenset({self.topic} if keep else ())))

    def index(self) -> None:
        seal_log(self.collector.url, f"{self.data_dir}/log")
        index_sealed(f"{self.data_dir}/log", self.store)

    def replay(self, capsys: pytest.CaptureFixture[str], group: str, journal: str, *extra: str
               ) -> tuple[int, str, str]:
        code = cli_main(["replay", self.topic, "--group", group, "--begin=-1h", "--end=now", "--from-trace",
                         "--store", self.store, "--trace-to", self.collector.url, "--journal", journal, *extra])
        out, err = capsys.readouterr()
        return code, out, err


def fail(tracer: tracehook.Tracer, topic: str, msg_id: str, group: str, **place: Any) -> None:
    """The group's handler failed the message (its consumer committed or acked it all the same)."""
    with tracer.consume(topic, msg_id, group, **place) as span:
        span.status, span.error = tracehook.Status.FAILED, "sms gateway down"


@pytest.mark.kafka
def test_kafka_records_deleted_from_the_broker_are_replayed_once_from_the_trace(
        kafka_bootstrap: str, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    from tracehook.adapters import kafka_python

    w = World(str(tmp_path / "data"), f"ft-{uuid.uuid4().hex[:8]}")
    target = f"{w.topic}-sms-replay"
    try:
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        admin.create_topics([NewTopic(w.topic, 1, 1), NewTopic(target, 1, 1)])
        keeping, plain = w.tracer(), w.tracer(keep=False)
        sent = []
        for i, tracer in enumerate([keeping] * N + [plain]):
            producer = kafka_python.TracedProducer(KafkaProducer(bootstrap_servers=kafka_bootstrap), tracer)
            sent.append(producer.send(w.topic, b"sms \xff%d" % i, key=b"k%d" % i,
                                      headers=[("orderId", b"%d" % (40 + i))]).get(10))
            producer.close()
        consumer = KafkaConsumer(w.topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
                                 group_id="sms", consumer_timeout_ms=5000)
        originals = {}
        for record in to_end(consumer):
            msg_id = dict(record.headers)["tracehook-msg-id"].decode()
            originals[msg_id] = record
            fail(keeping, w.topic, msg_id, "sms", queue=record.partition, offset=record.offset,
                 store_ms=record.timestamp)
        consumer.close()
        assert len(originals) == N + 1
        for tracer in (keeping, plain):
            assert tracer.flush(10)
            tracer.close()
        w.index()
        admin.delete_records({TopicPartition(w.topic, 0): sent[-1].offset + 1})  # the broker has none of them
        admin.close()
        unkept = next(m for m, r in originals.items() if r.key == b"k%d" % N)

        journal = str(tmp_path / "journal")
        args = ("--bootstrap", kafka_bootstrap, "--to-topic", target)
        code, out, err = w.replay(capsys, "sms", journal, *args)
        assert code == 4, err + out
        assert f"{N + 1} message(s) in the replay list, {N} to replay" in out
        assert f"  {unkept} (partition 0 offset {sent[-1].offset}): no body kept" in out
        code, out, err = w.replay(capsys, "sms", journal, *args, "--apply")
        assert code == 4 and f"delivered {N} of {N} to topic:{target}" in out, err + out
        assert "not replayable from the trace: 1 (no body kept 1)" in out

        def copies() -> list[Any]:
            reader = KafkaConsumer(target, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
                                   consumer_timeout_ms=3000)
            found = list(to_end(reader))
            reader.close()
            return found

        first = copies()
        by_id = {dict(r.headers)["tracehook-msg-id"].decode(): r for r in first}
        assert len(first) == N and unkept not in by_id and set(by_id) == set(originals) - {unkept}
        for msg_id, copy in by_id.items():
            original = originals[msg_id]
            assert (copy.key, copy.value) == (original.key, original.value)
            assert copy.headers[:len(original.headers)] == original.headers  # orderId, id and traceparent as sent
            marks = dict(copy.headers[len(original.headers):])
            assert marks == {"tracehook-replay-of": f"{w.topic}/0/{original.offset}".encode(),
                             "tracehook-replay-retry": b"1",
                             "tracehook-original-timestamp": str(original.timestamp).encode()}
        # Reruns deliver nothing new: the journal knows, then (a fresh journal) the indexed REPLAY events.
        code, out, _ = w.replay(capsys, "sms", journal, *args, "--apply")
        assert code == 4 and f"{N + 1} message(s) in the replay list, 0 to replay" in out
        w.index()
        code, out, _ = w.replay(capsys, "sms", str(tmp_path / "fresh"), *args, "--apply")
        assert code == 4 and "0 to replay" in out and f"already replayed: {N}" in out
        assert len(copies()) == N
    finally:
        w.collector.stop()


@pytest.mark.rabbitmq
def test_rabbitmq_messages_acked_are_replayed_once_to_the_recorded_exchange(
        rabbitmq_url: str, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import pika

    from tracehook.adapters.pika import TracedChannel

    suffix = uuid.uuid4().hex[:8]
    exchange, queue = f"notify-{suffix}", f"sms-{suffix}"
    w = World(str(tmp_path / "data"), exchange)  # the topic of a send to a named exchange is the exchange
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    try:
        channel = connection.channel()
        channel.exchange_declare(exchange, "direct")
        channel.queue_declare(queue)
        channel.queue_bind(queue, exchange, "sms.send")
        tracer = w.tracer()
        traced = TracedChannel(channel, tracer)
        bodies = [b"sms %d" % i for i in range(N)] + [b"L" * 3000]  # the last one is over the 1 KiB cap
        for i, body in enumerate(bodies):
            traced.basic_publish(exchange, "sms.send", body, pika.BasicProperties(headers={"orderId": 40 + i}))
        originals = {}
        for _ in bodies:
            method, properties, body = channel.basic_get(queue)
            assert method is not None
            msg_id = properties.headers["tracehook-msg-id"]
            originals[msg_id] = (body, properties.headers)
            channel.basic_ack(method.delivery_tag)  # the broker forgets it
            fail(tracer, exchange, msg_id, queue)
        assert tracer.flush(10)
        tracer.close()
        w.index()
        cut = next(m for m, (body, _) in originals.items() if len(body) == 3000)

        journal = str(tmp_path / "journal")
        code, out, err = w.replay(capsys, queue, journal, "--amqp", rabbitmq_url)
        assert code == 4 and f"{exchange} / sms.send" in out and f"{N} to replay" in out, err + out
        assert f"  {cut}: its body was kept truncated (1024 of 3000 bytes)" in out
        code, out, err = w.replay(capsys, queue, journal, "--amqp", rabbitmq_url, "--apply")
        assert code == 4 and f"delivered {N} of {N}" in out and "(truncated 1)" in out, err + out
        replayed = {}
        while (got := channel.basic_get(queue, auto_ack=True))[0] is not None:
            _, properties, body = got
            assert properties.headers["tracehook-msg-id"] not in replayed  # exactly once
            replayed[properties.headers["tracehook-msg-id"]] = (body, properties.headers)
        assert set(replayed) == set(originals) - {cut}
        for msg_id, (body, headers) in replayed.items():
            assert body == originals[msg_id][0]
            assert {k: v for k, v in headers.items() if k not in REPLAY_HEADERS} == originals[msg_id][1]
            assert headers["tracehook-replay-of"] == f"{exchange}/-1/-1" and headers["tracehook-replay-retry"] == "1"
        code, out, _ = w.replay(capsys, queue, journal, "--amqp", rabbitmq_url, "--apply")
        assert code == 4 and "0 to replay" in out
        assert channel.basic_get(queue)[0] is None  # nothing new
    finally:
        connection.close()
        w.collector.stop()
