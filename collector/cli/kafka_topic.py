"""``tracehook kafka-topic create``: the Kafka trace topic with the partition count you chose.

A broker with ``auto.create.topics.enable`` creates a topic on first use with its default
partition count (``num.partitions``), which is rarely the index job's parallelism; this creates
it first, through kafka-python's admin client (no Kafka distribution needed)::

    tracehook kafka-topic create --bootstrap k1:9092 --topic traces --partitions 12 \\
        --replication-factor 3 --config min.insync.replicas=2

Idempotent: a topic that already exists with that partition count (and replication factor, when
given) is left as it is, exit 0. One that exists with another count is not changed: one line,
exit 1. Bad arguments, an unreachable broker or a request the broker refuses: one line, exit 2.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from collector.cli.errors import TopicMismatchError, TopicRefusedError
from collector.cli.kafka_reset import ENV_BOOTSTRAP, check_reachable

REQUEST_TIMEOUT_MS = 30_000
METADATA_WAIT_S = 30.0
TOPIC_ALREADY_EXISTS = 36
"""Kafka's error code for a CreateTopics request naming a topic that exists."""


@dataclass(frozen=True)
class TopicShape:
    """A topic's partition count and replication factor."""

    partitions: int
    replication_factor: int

    def __str__(self) -> str:
        return f"{self.partitions} partition(s), replication factor {self.replication_factor}"


def _admin(bootstrap: str) -> Any:
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, client_id="tracehook-kafka-topic",
                            request_timeout_ms=REQUEST_TIMEOUT_MS)


def topic_shape(admin: Any, topic: str) -> TopicShape | None:
    """The topic's shape on the cluster, None when it does not exist."""
    (described,) = admin.describe_topics([topic])
    partitions = described.get("partitions") or []
    if described.get("error_code") or not partitions:
        return None
    first = partitions[0]
    replicas = first.get("replica_nodes", first.get("replicas", []))  # kafka-python 3 / 2
    return TopicShape(len(partitions), len(replicas))


def _visible_shape(admin: Any, topic: str) -> TopicShape:
    """The topic's shape once the brokers' metadata shows it (a new topic's may lag its creation)."""
    deadline = time.monotonic() + METADATA_WAIT_S
    while (shape := topic_shape(admin, topic)) is None:
        if time.monotonic() > deadline:
            raise TopicRefusedError(f"topic {topic} is not in the cluster's metadata {METADATA_WAIT_S:.0f} s "
                                    "after creating it")
        time.sleep(0.2)
    return shape


def _create(admin: Any, new_topic: Any) -> tuple[int, str]:
    """(Kafka error code, the broker's message) of one CreateTopics request: (0, "") when created."""
    from kafka.errors import BrokerResponseError

    if "raise_errors" in inspect.signature(admin.create_topics).parameters:  # kafka-python >= 3
        result = admin.create_topics([new_topic], timeout_ms=REQUEST_TIMEOUT_MS, raise_errors=False)
        (entry,) = result["topics"]
        return entry["error_code"], entry.get("error_message") or ""
    try:  # kafka-python 2 raises the topic's error
        admin.create_topics([new_topic], timeout_ms=REQUEST_TIMEOUT_MS)
    except BrokerResponseError as exc:
        return exc.errno or -1, exc.description or ""
    return 0, ""


def ensure_topic(bootstrap: str, topic: str, partitions: int, replication_factor: int | None = None,
                 configs: dict[str, str] | None = None) -> tuple[bool, TopicShape]:
    """Create ``topic`` unless it exists with ``partitions`` (and ``replication_factor`` when given).

    Returns (created, its shape). Raises :class:`TopicMismatchError` when it exists with
    another shape (nothing is changed), :class:`TopicRefusedError` when the broker refuses it.
    ``replication_factor`` None is the broker's ``default.replication.factor``; ``configs``
    (e.g. ``min.insync.replicas``) apply only when the topic is created.
    """
    from kafka.admin import NewTopic
    from kafka.errors import for_code

    admin = _admin(bootstrap)
    try:
        code, message = _create(admin, NewTopic(topic, partitions, replication_factor or -1,
                                                topic_configs=dict(configs or {})))
        if code not in (0, TOPIC_ALREADY_EXISTS):
            detail = message or for_code(code).description
            raise TopicRefusedError(f"Kafka refused to create topic {topic}: {for_code(code).__name__}: {detail}")
        shape = _visible_shape(admin, topic)
    finally:
        admin.close()
    wanted_rf = replication_factor or shape.replication_factor
    if code == TOPIC_ALREADY_EXISTS and (shape.partitions, shape.replication_factor) != (partitions, wanted_rf):
        wanted = TopicShape(partitions, wanted_rf)
        raise TopicMismatchError(f"topic {topic} exists with {shape}, not {wanted}: left as it is "
                                 "(change it with Kafka's own tools, or choose another topic name)")
    return code == 0, shape


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _config(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``tracehook kafka-topic``."""
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    summary = "create the topic, unless it exists with this partition count (then nothing changes)"
    create = actions.add_parser("create", help=summary, description=summary)
    create.add_argument("--bootstrap", default=os.environ.get(ENV_BOOTSTRAP),
                        help=f"Kafka bootstrap servers host:port[,host:port] (env {ENV_BOOTSTRAP})")
    create.add_argument("--topic", required=True)
    create.add_argument("--partitions", required=True, type=_positive,
                        help="partition count: the index job's parallelism (docs/deploy.md)")
    create.add_argument("--replication-factor", type=_positive,
                        help="replicas per partition (default: the broker's default.replication.factor)")
    create.add_argument("--config", action="append", type=_config, default=[], metavar="KEY=VALUE",
                        help="a topic config set at creation, e.g. min.insync.replicas=2 (repeatable)")


def run(args: argparse.Namespace) -> int:
    """Create the topic (or find it as asked): 0; it exists with another shape: 1; errors: 2."""
    if not args.bootstrap:
        print(f"error: --bootstrap (or {ENV_BOOTSTRAP}) is required", file=sys.stderr)
        return 2
    try:
        from kafka.errors import KafkaError
    except ImportError as exc:
        print(f"error: kafka-python is not installed ({exc}); pip install 'tracehook[kafka]'", file=sys.stderr)
        return 2
    try:
        check_reachable(args.bootstrap)
        created, shape = ensure_topic(args.bootstrap, args.topic, args.partitions, args.replication_factor,
                                      dict(args.config))
    except TopicMismatchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (TopicRefusedError, ConnectionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KafkaError as exc:  # NoBrokersAvailable, timeouts...
        print(f"error: Kafka at {args.bootstrap}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(f"{'created topic' if created else 'topic'} {args.topic}{'' if created else ' already exists'}: {shape}")
    return 0
