"""RabbitMQ's side of ``tracehook replay --from-trace``: publish rebuilt messages with pika.

Each message goes to the exchange and routing key its send recorded (the ``amqp.exchange`` /
``amqp.routing_key`` props), or to the ``--exchange`` / ``--routing-key`` named, with its kept
``headers`` table (so the same ``tracehook-msg-id``) plus the marks every replay carries
(:func:`collector.cli.replay_kafka.replay_marks`, as text), persistent, ``mandatory`` and under
publisher confirms: a message no queue takes, or the broker refuses, is a failed delivery::

    delivery = AmqpDelivery("amqp://guest:guest@127.0.0.1:5672/%2F", "notify", routing_key="sms")
    delivery.deliver(wanted, record)      # a collector.cli.replay_trace.TraceRecord
    delivery.settle()                     # [(wanted, error or "")]
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from collector.cli.errors import ReplayError
from collector.cli.replay_kafka import REPLAY_HEADERS, Wanted, replay_marks
from tracehook.context import HEADER_MSG_ID

PERSISTENT = 2
"""AMQP ``delivery_mode`` of a replayed message (the original's properties are not kept)."""


def safe_url(url: str) -> str:
    """``url`` without its password, for messages."""
    parts = urllib.parse.urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def journal_name(url: str) -> str:
    """What names the broker in the journal's path: scheme, host, port and vhost (no credentials)."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port or (5671 if parts.scheme == "amqps" else 5672)
    return f"amqp:{parts.hostname}:{port}{parts.path or '/'}"


def connect(url: str) -> Any:
    """A blocking pika connection to ``url``; :class:`ReplayError` (one line, no password) when there is none."""
    import pika
    import pika.exceptions

    try:
        return pika.BlockingConnection(pika.URLParameters(url))
    except (pika.exceptions.AMQPError, ValueError, OSError) as exc:
        raise ReplayError(f"cannot reach RabbitMQ at {safe_url(url)}: {type(exc).__name__}: {exc}") from None


def check_reachable(url: str) -> None:
    """Connect and close (the dry run's check, as for Kafka)."""
    connect(url).close()


class AmqpDelivery:
    """Publish each record to RabbitMQ (a blocking pika connection, publisher confirms)."""

    replay_event_first = False  # recorded once the broker confirmed the publish

    def __init__(self, url: str, source_topic: str, exchange: str | None = None,
                 routing_key: str | None = None) -> None:
        self.source_topic = source_topic
        self._exchange, self._routing_key = exchange, routing_key
        shown = ["(recorded)" if v is None else v or "(default)" for v in (exchange, routing_key)]
        self.target = f"amqp:{shown[0]}/{shown[1]}"
        self._connection = connect(url)
        self._channel = self._open_channel()
        self._done: list[tuple[Wanted, str]] = []

    def _open_channel(self) -> Any:
        channel = self._connection.channel()
        channel.confirm_delivery()
        return channel

    def destination(self, record: Any) -> tuple[str, str]:
        """The exchange and routing key ``record`` goes to: the ones named, else the recorded ones."""
        exchange = record.exchange if self._exchange is None else self._exchange
        routing_key = record.routing_key if self._routing_key is None else self._routing_key
        return exchange or "", routing_key or ""

    def properties(self, wanted: Wanted, record: Any) -> Any:
        """The kept headers (replay marks replaced) and the original message id."""
        import pika

        headers = {name: value for name, value in record.headers if name not in REPLAY_HEADERS}
        headers.update((name, value.decode()) for name, value in replay_marks(self.source_topic, wanted, record))
        message_id = None if HEADER_MSG_ID in headers else wanted.msg_id  # an id the AMQP property gave
        return pika.BasicProperties(headers=headers, delivery_mode=PERSISTENT, message_id=message_id)

    def deliver(self, wanted: Wanted, record: Any) -> None:
        import pika.exceptions

        exchange, routing_key = self.destination(record)
        try:
            self._channel.basic_publish(exchange, routing_key, record.value, self.properties(wanted, record),
                                        mandatory=True)
        except pika.exceptions.UnroutableError:
            error = f"unroutable: no queue bound to exchange {exchange!r} with routing key {routing_key!r}"
        except pika.exceptions.NackError:
            error = "the broker refused it (nack)"
        except pika.exceptions.ChannelClosed as exc:  # e.g. no such exchange: the next one gets a new channel
            error = f"{type(exc).__name__}: {exc}"
            self._channel = self._open_channel()
        else:
            error = ""
        self._done.append((wanted, error))

    def settle(self) -> list[tuple[Wanted, str]]:
        """``(wanted, error or "")`` for every record since the last call (each publish was confirmed)."""
        done, self._done = self._done, []
        return done

    def close(self) -> None:
        if self._connection.is_open:
            self._connection.close()
