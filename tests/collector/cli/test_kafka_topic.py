"""``tracehook kafka-topic create`` against the real broker: the chosen partition count (not the
broker's default of 3), idempotent, and one line with the documented exit status otherwise.
The topic is read back with confluent-kafka's admin client, not the command's own."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import uuid

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

ROOT = pathlib.Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.kafka


def _tracehook(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"} | {"PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "collector.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def _on_broker(bootstrap: str, topic: str) -> tuple[int, str]:
    """(partitions, retention.ms) of the topic as the broker reports them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = len(admin.list_topics(topic, timeout=30).topics[topic].partitions)
    (future,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
    return partitions, future.result(timeout=30)["retention.ms"].value


def test_create_is_idempotent_and_keeps_the_chosen_partition_count(kafka_bootstrap: str) -> None:
    topic = f"traces-{uuid.uuid4().hex[:8]}"
    create = ("kafka-topic", "create", "--bootstrap", kafka_bootstrap, "--topic", topic)
    done = _tracehook(*create, "--partitions", "5", "--replication-factor", "1", "--config", "retention.ms=3600000")
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == f"created topic {topic}: 5 partition(s), replication factor 1\n"
    assert _on_broker(kafka_bootstrap, topic) == (5, "3600000")

    again = _tracehook(*create, "--partitions", "5")  # as a provisioning script runs it on every deploy
    assert (again.returncode, again.stderr) == (0, "")
    assert again.stdout == f"topic {topic} already exists: 5 partition(s), replication factor 1\n"

    other = _tracehook(*create, "--partitions", "8")
    assert other.returncode == 1 and other.stdout == ""
    assert other.stderr.splitlines() == [
        f"error: topic {topic} exists with 5 partition(s), replication factor 1, not 8 partition(s), replication "
        "factor 1: left as it is (change it with Kafka's own tools, or choose another topic name)"]
    assert _on_broker(kafka_bootstrap, topic) == (5, "3600000")


def test_a_request_the_broker_refuses_is_one_line_and_exit_2(kafka_bootstrap: str) -> None:
    topic = f"traces-{uuid.uuid4().hex[:8]}"
    done = _tracehook("kafka-topic", "create", "--bootstrap", kafka_bootstrap, "--topic", topic,
                      "--partitions", "4", "--replication-factor", "3")  # the test broker is one node
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"error: Kafka refused to create topic {topic}: InvalidReplicationFactorError: ")
    assert topic not in AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=30).topics
