"""confluent-kafka adapter: PUB from delivery reports, SUB_BEFORE/SUB_AFTER around ``poll``/``consume``.

::

    producer = TracedProducer(confluent_kafka.Producer({"bootstrap.servers": bs}))
    producer.produce("orders", b"body", key=b"order-1", on_delivery=report)   # report still called
    producer.flush()                                 # delivery reports (and PUB events) arrive here
    consumer = TracedConsumer(confluent_kafka.Consumer({"group.id": "billing", ...}))
    msg = consumer.poll(1.0)                         # SUB_BEFORE; SUB_AFTER at the next poll/consume/close
    consumer.fail(msg, "bad order")                  # mark this attempt failed

confluent-kafka's classes are C types that cannot be patched, so ``instrument()``
replaces ``confluent_kafka.Producer``/``Consumer`` with traced subclasses: clients created
after it (through the module attribute) are traced; ``uninstrument()`` puts the originals back.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import tracehook
from tracehook import Status

from ._common import Instrumentation, Patcher, guarded, tracer_or_global
from .kafka_python import ConsumeTracker, _PendingSend, with_trace_headers

__all__ = ["TracedConsumer", "TracedProducer", "instrument", "is_instrumented", "uninstrument"]



class _Meta(NamedTuple):
    """A delivered message in the shape the PUB recorder reads (kafka-python's RecordMetadata)."""

    partition: int
    offset: int
    timestamp: int


class _Record(NamedTuple):
    """A consumed message in the shape the consume tracker reads (kafka-python's ConsumerRecord)."""

    topic: str
    partition: int
    offset: int
    key: Any
    headers: Any
    timestamp: int
    serialized_value_size: int


def _as_record(message: Any) -> _Record:
    value = message.value()
    return _Record(message.topic(), message.partition(), message.offset(), message.key(), message.headers() or [],
                   message.timestamp()[1], len(value) if value is not None else 0)


# Producer.produce's parameters in positional order (its C keyword list; "callback" is an alias of on_delivery).
PRODUCE_PARAMETERS = ("topic", "value", "key", "partition", "on_delivery", "callback", "timestamp", "headers")


def _bind_produce(args: tuple, kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The produce() arguments by name, or None when the call is one the client itself must judge."""
    if len(args) > len(PRODUCE_PARAMETERS):
        return None
    bound = dict(zip(PRODUCE_PARAMETERS, args))
    if any(name in bound or name not in PRODUCE_PARAMETERS for name in kwargs):
        return None
    bound.update(kwargs)
    return bound if isinstance(bound.get("topic"), str) else None


def traced_produce(tracer: tracehook.Tracer | None, client: Any, produce: Any, *args: Any,
                   config_callback: Any = None, **kwargs: Any) -> Any:
    """Call the client's ``produce`` with trace headers; the PUB is recorded from the delivery report.

    Arguments may be positional or keyword, as the client takes them, and are passed on the same
    way.  A call the client would reject (too many, duplicate or unknown arguments) goes to it
    unchanged and untraced, so its own error is raised.  ``config_callback`` is the producer
    config's ``on_delivery``: the per-message callback the adapter passes replaces it in the
    client, so the adapter calls it where the client would have.
    """
    bound = _bind_produce(args, kwargs)
    if bound is None:
        return produce(*args, **kwargs)
    topic, value, key = bound["topic"], bound.get("value"), bound.get("key")
    traced = tracer_or_global(tracer)
    headers, sent, tags = with_trace_headers(bound.get("headers"), traced.config.trace_sample_ratio)
    if sent is None:
        return produce(*args, **kwargs)
    # the client takes on_delivery over its alias callback, even when on_delivery is None
    user_callback = bound["on_delivery"] if "on_delivery" in bound else bound.get("callback")
    if user_callback is None:   # the client falls back to the config's callback for such a message
        user_callback = config_callback
    pending = _PendingSend(traced, client, topic, sent, key, value, tags, headers)

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            guarded("record_send", pending.on_success, _Meta(msg.partition(), msg.offset(), msg.timestamp()[1]))
        else:
            guarded("record_send", pending.on_error, err)
        if user_callback is not None:
            user_callback(err, msg)   # the app's callback and its exceptions, unchanged

    # Replace arguments where the caller put them (position or keyword), so the client parses
    # and reports errors about the call exactly as it would have; a set on_delivery wins over callback.
    call_args, call_kwargs = list(args), dict(kwargs)
    for name, replacement in (("headers", headers), ("on_delivery", on_delivery)):
        position = PRODUCE_PARAMETERS.index(name)
        if position < len(call_args):
            call_args[position] = replacement
        else:
            call_kwargs[name] = replacement
    return produce(*call_args, **call_kwargs)


def _poll(tracker: ConsumeTracker, poll: Any, *args: Any, **kwargs: Any) -> Any:
    tracker.finish_all()
    message = poll(*args, **kwargs)
    if message is not None and message.error() is None:
        tracker.start(_as_record(message))
    return message


def _consume(tracker: ConsumeTracker, consume: Any, *args: Any, **kwargs: Any) -> Any:
    tracker.finish_all()
    messages = consume(*args, **kwargs)
    for message in messages:
        if message.error() is None:
            tracker.start(_as_record(message))
    return messages


class TracedProducer:
    """A confluent-kafka Producer whose ``produce`` is traced; every other attribute is the producer's own."""

    def __init__(self, producer: Any, tracer: tracehook.Tracer | None = None, broker: str = "",
                 on_delivery: Any = None) -> None:
        """``on_delivery``: the callback set in the producer's config, if any (a config cannot be
        read back from a confluent-kafka Producer, and the traced per-message callback replaces it)."""
        self._producer = producer
        self._tracer = tracer
        self._tracehook_broker = broker   # read by the PUB recorder
        self._config_callback = on_delivery

    def produce(self, *args: Any, **kwargs: Any) -> Any:
        """``Producer.produce`` (same arguments) with trace headers; PUB recorded from the delivery report."""
        return traced_produce(self._tracer, self, self._producer.produce, *args,
                              config_callback=self._config_callback, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    def __len__(self) -> int:
        return len(self._producer)


class TracedConsumer:
    """A confluent-kafka Consumer whose ``poll``/``consume`` are traced; the rest is the consumer's own."""

    def __init__(self, consumer: Any, group: str, tracer: tracehook.Tracer | None = None, broker: str = "") -> None:
        self._consumer = consumer
        self._tracker = ConsumeTracker(tracer, group, broker)

    def poll(self, *args: Any, **kwargs: Any) -> Any:
        """``Consumer.poll``; a message gets SUB_BEFORE, the previous attempts SUB_AFTER."""
        return _poll(self._tracker, self._consumer.poll, *args, **kwargs)

    def consume(self, *args: Any, **kwargs: Any) -> Any:
        """``Consumer.consume``; each message gets SUB_BEFORE, the previous attempts SUB_AFTER."""
        return _consume(self._tracker, self._consumer.consume, *args, **kwargs)

    def fail(self, message: Any, error: Any = "", status: int = Status.FAILED) -> None:
        """Record this attempt at ``message`` as failed (or another :class:`~tracehook.Status`)."""
        self._tracker.fail(_as_record(message), error, status)

    def finish(self) -> None:
        """End the open attempts now (e.g. right after handling, before committing)."""
        self._tracker.finish_all()

    def close(self, *args: Any, **kwargs: Any) -> Any:
        """End the open attempts, then ``Consumer.close``."""
        self._tracker.finish_all()
        return self._consumer.close(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


def _apply(patcher: Patcher, tracer: tracehook.Tracer | None) -> None:
    """Make ``confluent_kafka.Producer``/``Consumer`` traced subclasses (the C classes cannot be patched)."""
    import confluent_kafka

    producer_cls, consumer_cls = confluent_kafka.Producer, confluent_kafka.Consumer

    class InstrumentedProducer(producer_cls):  # type: ignore[misc, valid-type]
        def __init__(self, config: dict, *args: Any, **kwargs: Any) -> None:
            super().__init__(config, *args, **kwargs)
            self._tracehook_broker = str(config.get("bootstrap.servers", ""))
            self._tracehook_config_callback = config.get("on_delivery")

        def produce(self, *args: Any, **kwargs: Any) -> Any:
            return traced_produce(tracer, self, super().produce, *args,
                                  config_callback=self._tracehook_config_callback, **kwargs)

    class InstrumentedConsumer(consumer_cls):  # type: ignore[misc, valid-type]
        def __init__(self, config: dict, *args: Any, **kwargs: Any) -> None:
            super().__init__(config, *args, **kwargs)
            self._tracehook_tracker = ConsumeTracker(tracer, str(config.get("group.id", "")),
                                                     str(config.get("bootstrap.servers", "")))

        def poll(self, *args: Any, **kwargs: Any) -> Any:
            return _poll(self._tracehook_tracker, super().poll, *args, **kwargs)

        def consume(self, *args: Any, **kwargs: Any) -> Any:
            return _consume(self._tracehook_tracker, super().consume, *args, **kwargs)

        def close(self, *args: Any, **kwargs: Any) -> Any:
            self._tracehook_tracker.finish_all()
            return super().close(*args, **kwargs)

    patcher.patch(confluent_kafka, "Producer", lambda original: InstrumentedProducer)
    patcher.patch(confluent_kafka, "Consumer", lambda original: InstrumentedConsumer)



_instrumentation = Instrumentation(_apply)
instrument = _instrumentation.instrument
uninstrument = _instrumentation.uninstrument
is_instrumented = _instrumentation.is_instrumented
