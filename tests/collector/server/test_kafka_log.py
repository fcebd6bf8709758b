"""The collector with ``--log kafka://``: each batch one record, 200 only after Kafka acknowledged,
503 + Retry-After while Kafka is unreachable (real broker from scripts/kafka)."""

from __future__ import annotations

import os
import pathlib
import uuid

import pytest
from collector_service_helpers import make_batch
from fixtures.ports import free_port

from collector.server.app import create_app
from collector.server.config import CollectorConfig, load_config
from collector.server.errors import CollectorConfigError

MSGPACK = {"Content-Type": "application/msgpack"}


def _consume_all(bootstrap: str, topic: str, expected: int) -> list:  # type: ignore[type-arg]
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    records = []
    try:
        for _ in range(300):  # a hang guard, not a timing assertion
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                records.append(msg)
            if len(records) >= expected and msg is None:
                break
    finally:
        consumer.close()
    return records


def _config(tmp_path: pathlib.Path, log_url: str) -> CollectorConfig:
    return CollectorConfig(data_dir=str(tmp_path / "data"), store_url="none", log_url=log_url)


@pytest.mark.kafka
async def test_each_batch_is_one_acknowledged_record_keyed_by_client(aiohttp_client, tmp_path, kafka_bootstrap) -> None:
    topic = f"trace-{uuid.uuid4().hex[:8]}"
    client = await aiohttp_client(create_app(_config(tmp_path, f"kafka://{kafka_bootstrap}/{topic}")))
    bodies = {("c1", 1): make_batch("c1", 1, n=3), ("c2", 9): make_batch("c2", 9, n=2)}
    for body in bodies.values():
        resp = await client.post("/v1/batches", data=body, headers=MSGPACK)
        assert resp.status == 200, await resp.text()
    again = await client.post("/v1/batches", data=bodies[("c1", 1)], headers=MSGPACK)
    assert (await again.json())["duplicate"] is True  # the dedup window works as with the file log

    records = _consume_all(kafka_bootstrap, topic, 2)
    assert len(records) == 2  # the retried batch was not produced twice
    for msg in records:
        headers = dict(msg.headers())
        client_id, seq = headers["client_id"].decode(), int(headers["seq"])
        assert msg.key() == client_id.encode()
        assert msg.value() == bodies[(client_id, seq)]
        assert msg.timestamp()[1] == int(headers["receive_ms"])  # the record time is the receive time
    health = await (await client.get("/healthz")).json()
    assert health["status"] == "ok"
    assert health["log"]["kind"] == "kafka" and health["log"]["state"] == "ok" and health["log"]["topic"] == topic
    assert health["log"]["produced_records"] == 2
    # Nothing of the file log's: no backlog, size, segments or disk (docs/collector.md, "/healthz").
    assert set(health) == {"status", "log", "store"}
    metrics = await (await client.get("/metrics")).text()
    assert "tracehook_collector_log_available 1" in metrics
    assert not os.path.exists(os.path.join(str(tmp_path / "data"), "log", "manifest.json"))  # no file log


async def test_unreachable_kafka_answers_503_with_retry_after(aiohttp_client, tmp_path) -> None:
    app = create_app(_config(tmp_path, f"kafka://127.0.0.1:{free_port()}/trace"))
    client = await aiohttp_client(app)
    resp = await client.post("/v1/batches", data=make_batch("c1", 1), headers=MSGPACK)
    assert resp.status == 503
    assert resp.headers["Retry-After"] == "5"
    assert (await resp.json())["error"] == "log_unavailable"
    health = await (await client.get("/healthz")).json()
    assert health["status"] == "log_unavailable" and health["log"]["state"] == "unavailable"
    assert set(health) == {"status", "log", "store"} and health["store"] == "none"
    assert "tracehook_collector_log_available 0" in await (await client.get("/metrics")).text()


def test_log_url_from_flag_env_and_toml(tmp_path: pathlib.Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text('log = "kafka://k1:9092,k2:9092/traces"\n')
    assert load_config(env={}, config_file=str(toml)).log_url == "kafka://k1:9092,k2:9092/traces"
    assert load_config(env={"TRACEHOOK_COLLECTOR_LOG": "kafka://k:1/t"}).log_url == "kafka://k:1/t"
    assert load_config({"log_url": "file"}, env={}).log_url == "file"
    for bad in ("kafka://k:9092", "kafka://k/t", "kafka://k:9092/a b", "kafka:k:9092/t", "nats://x:1/t"):
        with pytest.raises(CollectorConfigError):
            load_config({"log_url": bad}, env={})
