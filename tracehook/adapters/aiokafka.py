"""aiokafka adapter: the async twin of :mod:`tracehook.adapters.kafka_python` (same events, same rules).

::

    producer = TracedAIOProducer(AIOKafkaProducer(bootstrap_servers=...))
    await producer.start()
    await producer.send_and_wait("orders", b"body", key=b"order-1")
    consumer = TracedAIOConsumer(AIOKafkaConsumer("orders", group_id="billing", ...))
    async for record in consumer:          # SUB_BEFORE on receipt, SUB_AFTER when the next is taken
        if not await handle(record):
            consumer.fail(record, "bad order")

Or ``instrument()`` / ``uninstrument()`` for every AIOKafkaProducer/AIOKafkaConsumer.
"""

from __future__ import annotations

from typing import Any

import tracehook
from tracehook import Status

from ._common import Instrumentation, Patcher, guarded, tracer_or_global
from .kafka_python import ConsumeTracker, _bootstrap, _PendingSend, with_trace_headers

__all__ = ["TracedAIOConsumer", "TracedAIOProducer", "instrument", "is_instrumented", "uninstrument"]



async def traced_send(tracer: tracehook.Tracer | None, producer: Any, send: Any, topic: str, value: Any = None,
                      key: Any = None, partition: Any = None, timestamp_ms: Any = None, headers: Any = None) -> Any:
    """Await the client's own ``send`` with trace headers added; PUB is recorded when its future resolves."""
    tracer = tracer_or_global(tracer)
    headers, sent, tags = with_trace_headers(headers, tracer.config.trace_sample_ratio)
    pending = _PendingSend(tracer, producer, topic, sent, key, value, tags, headers) if sent is not None else None
    future = await send(topic, value=value, key=key, partition=partition, timestamp_ms=timestamp_ms, headers=headers)
    if pending is not None:
        future.add_done_callback(lambda done: guarded("record_send", pending.on_done, done))
    return future


def _tracker_for(consumer: Any, tracer: tracehook.Tracer | None = None) -> ConsumeTracker:
    tracker = consumer.__dict__.get("_tracehook_tracker")
    if tracker is None:
        tracker = ConsumeTracker(tracer, str(getattr(consumer, "_group_id", "") or ""), _bootstrap(consumer))
        consumer.__dict__["_tracehook_tracker"] = tracker
    return tracker


async def traced_getone(tracker: ConsumeTracker, getone: Any, *partitions: Any) -> Any:
    tracker.finish_all()
    record = await getone(*partitions)
    tracker.start(record)
    return record


async def traced_getmany(tracker: ConsumeTracker, getmany: Any, *partitions: Any, **kwargs: Any) -> Any:
    tracker.finish_all()
    batches = await getmany(*partitions, **kwargs)
    for records in batches.values():
        for record in records:
            tracker.start(record)
    return batches


class TracedAIOProducer:
    """An AIOKafkaProducer whose sends are traced; every other attribute is the producer's own."""

    def __init__(self, producer: Any, tracer: tracehook.Tracer | None = None) -> None:
        self._producer = producer
        self._tracer = tracer

    async def send(self, topic: str, value: Any = None, key: Any = None, partition: Any = None,
                   timestamp_ms: Any = None, headers: Any = None) -> Any:
        """``AIOKafkaProducer.send`` with trace headers; returns its future, PUB recorded when it resolves."""
        return await traced_send(self._tracer, self._producer, self._producer.send, topic, value, key, partition,
                                 timestamp_ms, headers)

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, partition: Any = None,
                            timestamp_ms: Any = None, headers: Any = None) -> Any:
        """:meth:`send`, then await the broker's answer (``RecordMetadata``)."""
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await future

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)


class TracedAIOConsumer:
    """An AIOKafkaConsumer whose ``getone``/``getmany``/iteration are traced; the rest is the consumer's own."""

    def __init__(self, consumer: Any, tracer: tracehook.Tracer | None = None, group: str | None = None) -> None:
        self._consumer = consumer
        self._tracker = _tracker_for(consumer, tracer)
        if group is not None:
            self._tracker.group = group

    async def getone(self, *partitions: Any) -> Any:
        """``AIOKafkaConsumer.getone``; the record gets SUB_BEFORE, the previous attempts SUB_AFTER."""
        return await traced_getone(self._tracker, self._consumer.getone, *partitions)

    async def getmany(self, *partitions: Any, **kwargs: Any) -> Any:
        """``AIOKafkaConsumer.getmany``; each record gets SUB_BEFORE, the previous attempts SUB_AFTER."""
        return await traced_getmany(self._tracker, self._consumer.getmany, *partitions, **kwargs)

    def __aiter__(self) -> TracedAIOConsumer:
        return self

    async def __anext__(self) -> Any:
        return await self.getone()

    def fail(self, record: Any, error: Any = "", status: int = Status.FAILED) -> None:
        """Record this attempt at ``record`` as failed (or another :class:`~tracehook.Status`)."""
        self._tracker.fail(record, error, status)

    def finish(self) -> None:
        """End the open attempts now."""
        self._tracker.finish_all()

    async def stop(self) -> None:
        """End the open attempts, then ``AIOKafkaConsumer.stop``."""
        self._tracker.finish_all()
        await self._consumer.stop()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


def _apply(patcher: Patcher, tracer: tracehook.Tracer | None) -> None:
    """Trace every AIOKafkaProducer/AIOKafkaConsumer."""
    import aiokafka

    def make_send(original: Any) -> Any:
        async def send(self: Any, topic: str, value: Any = None, key: Any = None, partition: Any = None,
                       timestamp_ms: Any = None, headers: Any = None) -> Any:
            return await traced_send(tracer, self, original.__get__(self), topic, value, key, partition,
                                     timestamp_ms, headers)
        return send

    def make_getone(original: Any) -> Any:
        async def getone(self: Any, *partitions: Any) -> Any:
            return await traced_getone(_tracker_for(self, tracer), original.__get__(self), *partitions)
        return getone

    def make_getmany(original: Any) -> Any:
        async def getmany(self: Any, *partitions: Any, **kwargs: Any) -> Any:
            return await traced_getmany(_tracker_for(self, tracer), original.__get__(self), *partitions, **kwargs)
        return getmany

    def make_stop(original: Any) -> Any:
        async def stop(self: Any) -> Any:
            _tracker_for(self, tracer).finish_all()
            return await original(self)
        return stop

    patcher.patch(aiokafka.AIOKafkaProducer, "send", make_send)
    patcher.patch(aiokafka.AIOKafkaConsumer, "getone", make_getone)
    patcher.patch(aiokafka.AIOKafkaConsumer, "getmany", make_getmany)
    patcher.patch(aiokafka.AIOKafkaConsumer, "stop", make_stop)



_instrumentation = Instrumentation(_apply)
instrument = _instrumentation.instrument
uninstrument = _instrumentation.uninstrument
is_instrumented = _instrumentation.is_instrumented
