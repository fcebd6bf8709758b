"""Adapters: trace real message-queue clients by adding two lines to an app.

Kafka (kafka-python)::

    import tracehook
    from tracehook.adapters import kafka_python

    tracehook.configure(app="shop", collectors=["http://127.0.0.1:7070"])
    kafka_python.instrument()            # every KafkaProducer/KafkaConsumer is traced from now on
    # or explicitly: producer = kafka_python.TracedProducer(KafkaProducer(...))

RabbitMQ (pika)::

    from tracehook.adapters import pika as traced_pika
    channel = traced_pika.TracedChannel(connection.channel())

Each adapter module has ``instrument()``/``uninstrument()`` (idempotent) and
explicit wrapper classes; an adapter never changes the client's results or
exceptions.  Adapters import their client library lazily, so importing this
package needs none of them.  See docs/adapters.md.
"""

from __future__ import annotations

from ._common import HEADER_KEYS, HEADER_TAGS, PROP_EXCHANGE, PROP_ROUTING_KEY

__all__ = ["HEADER_KEYS", "HEADER_TAGS", "PROP_EXCHANGE", "PROP_ROUTING_KEY"]
