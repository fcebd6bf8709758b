"""kafka-python adapter: PUB from ``KafkaProducer.send`` results, SUB_BEFORE/SUB_AFTER around consumption.

Explicit wrappers::

    producer = TracedProducer(KafkaProducer(bootstrap_servers=...))
    producer.send("orders", b"body", key=b"order-1")        # msg id + traceparent into headers
    consumer = TracedConsumer(KafkaConsumer("orders", group_id="billing", ...))
    for record in consumer:                                 # SUB_BEFORE on receipt
        if not handle(record):
            consumer.fail(record, "bad order")              # this attempt's SUB_AFTER says FAILED
    # SUB_AFTER when the next record is taken (or poll() called again, or close())

Or ``instrument()`` to trace every KafkaProducer/KafkaConsumer (``uninstrument()`` undoes it).
Keys are Kafka keys, tags the ``tracehook-tags`` header, the consumer group the group id.
"""

from __future__ import annotations

import time
from typing import Any

import tracehook
from tracehook import Status
from tracehook.context import DEFAULT_SAMPLE_RATIO, SendContext, inject_context
from tracehook.hooks import ConsumeSpan

from ._common import (
    HEADER_TAGS,
    Instrumentation,
    Patcher,
    body_len,
    captured_props,
    guarded,
    header_text,
    kept_record,
    replayed_from,
    text,
    tracer_or_global,
)

__all__ = ["TracedConsumer", "TracedProducer", "instrument", "is_instrumented", "uninstrument"]



# -- producing ------------------------------------------------------------------------------

def traced_send(tracer: tracehook.Tracer | None, producer: Any, send: Any, topic: str, value: Any = None,
                key: Any = None, headers: Any = None, partition: Any = None, timestamp_ms: Any = None) -> Any:
    """Call ``send`` (the client's own) with trace headers added; record PUB when its future resolves."""
    tracer = tracer_or_global(tracer)
    headers, sent, tags = with_trace_headers(headers, tracer.config.trace_sample_ratio)
    pending = _PendingSend(tracer, producer, topic, sent, key, value, tags, headers) if sent is not None else None
    future = send(topic, value=value, key=key, headers=headers, partition=partition, timestamp_ms=timestamp_ms)
    if pending is not None:
        guarded("attach", pending.attach, future)
    return future


def with_trace_headers(headers: Any, sample_ratio: float = DEFAULT_SAMPLE_RATIO) -> tuple[Any, SendContext | None, str]:
    """Headers with the message id and traceparent added, what they say (None: untraced), and the tags.

    The caller's headers are never mutated.  A copy keeps the caller's type (a dict stays a dict,
    a list or tuple of pairs stays one), so the client accepts or rejects it exactly as it would
    the original; any other type is passed on unchanged and the send is not traced.
    """
    if headers is None or (type(headers) is list and not headers):
        added: list[tuple[str, bytes]] = []
        sent = guarded("inject", inject_context, added, None, sample_ratio=sample_ratio)
        return added, sent, ""
    if isinstance(headers, dict):
        copied: Any = dict(headers)
    elif isinstance(headers, (list, tuple)):
        copied = list(headers)
    else:
        return headers, None, ""
    sent = guarded("inject", inject_context, copied, None, sample_ratio=sample_ratio)
    if isinstance(headers, tuple):
        copied = tuple(copied)
    return copied, sent, header_text(copied, HEADER_TAGS)


class _PendingSend:
    """What a send's PUB event needs once the broker answers (one object instead of per-send closures)."""

    __slots__ = ("body_len", "born_ms", "broker", "keys", "msg_id", "props", "record", "started_ns", "tags", "topic",
                 "tracer", "traceparent")

    def __init__(self, tracer: tracehook.Tracer, producer: Any, topic: str, sent: SendContext, key: Any,
                 value: Any, tags: str, headers: Any = None) -> None:
        self.tracer, self.topic, self.msg_id, self.tags = tracer, topic, sent.msg_id, tags
        self.traceparent = sent.traceparent  # the PUB is recorded on the client's thread, outside the app's span
        self.broker = _bootstrap(producer)
        self.keys = text(key)
        self.body_len = body_len(value)
        self.born_ms = time.time_ns() // 1_000_000
        self.props = captured_props(tracer.config.capture_props, headers)
        self.record = kept_record(tracer, topic, value, key, headers)  # {}: the topic keeps no bodies
        self.started_ns = time.perf_counter_ns()

    def attach(self, future: Any) -> None:
        future.add_callback(self.on_success)
        future.add_errback(self.on_error)

    def on_done(self, future: Any) -> None:
        """For an asyncio future (aiokafka)."""
        if future.cancelled():
            self.on_error("cancelled")
        elif future.exception() is not None:
            self.on_error(future.exception())
        else:
            self.on_success(future.result())

    def on_success(self, meta: Any) -> None:
        guarded("record_send", self.tracer.record_send, self.topic, self.msg_id, keys=self.keys, tags=self.tags,
                broker=self.broker, queue=meta.partition, offset=meta.offset, born_ms=self.born_ms,
                store_ms=max(meta.timestamp, 0), cost_us=(time.perf_counter_ns() - self.started_ns) // 1000,
                body_len=self.body_len, traceparent=self.traceparent, props=self.props, **self.record)

    def on_error(self, exc: Any) -> None:
        guarded("record_send", self.tracer.record_send, self.topic, self.msg_id, keys=self.keys, tags=self.tags,
                broker=self.broker, born_ms=self.born_ms, status=Status.FAILED, error=repr(exc),
                cost_us=(time.perf_counter_ns() - self.started_ns) // 1000, body_len=self.body_len,
                traceparent=self.traceparent, props=self.props, **self.record)


def _bootstrap(client: Any) -> str:
    cached = client.__dict__.get("_tracehook_broker")
    if cached is None:
        servers = getattr(client, "config", {}).get("bootstrap_servers", "") if hasattr(client, "config") \
            else getattr(getattr(client, "client", getattr(client, "_client", None)), "_bootstrap_servers", "")
        cached = servers if isinstance(servers, str) else ",".join(servers)
        client.__dict__["_tracehook_broker"] = cached
    return cached


class TracedProducer:
    """A KafkaProducer whose ``send`` is traced; every other attribute is the producer's own."""

    def __init__(self, producer: Any, tracer: tracehook.Tracer | None = None) -> None:
        self._producer = producer
        self._tracer = tracer

    def send(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
             partition: Any = None, timestamp_ms: Any = None) -> Any:
        """``KafkaProducer.send``, returning its future unchanged."""
        return traced_send(self._tracer, self._producer, self._producer.send, topic, value, key, headers,
                           partition, timestamp_ms)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)


# -- consuming ------------------------------------------------------------------------------

class ConsumeTracker:
    """Open consume spans of one consumer: started on receipt, finished when the next records are taken."""

    def __init__(self, tracer: tracehook.Tracer | None, group: str, broker: str) -> None:
        self.tracer = tracer
        self.group = group
        self.broker = broker
        self.open: dict[tuple[str, int, int], ConsumeSpan] = {}
        self.taking = False   # inside __next__: its internal poll() must not be traced again

    def finish_all(self) -> None:
        spans, self.open = self.open, {}
        for span in spans.values():
            guarded("finish", span.finish)

    def start(self, record: Any) -> None:
        span = guarded("start_consume", self._start, record)
        if span is not None:
            self.open[(record.topic, record.partition, record.offset)] = span

    def _start(self, record: Any) -> ConsumeSpan:
        # Without a tracehook-msg-id header (an OpenTelemetry or untraced producer) the hook
        # records the message under derived_msg_id(topic, partition, offset).
        # A record re-published by ``tracehook replay`` is consumed as its original (place, retry count).
        topic, queue, offset, retry, store_ms = replayed_from(record.headers) or (
            record.topic, record.partition, record.offset, 0, record.timestamp)
        tracer = tracer_or_global(self.tracer)
        return tracer.start_consume(
            topic, None, self.group, keys=text(record.key), tags=header_text(record.headers, HEADER_TAGS),
            broker=self.broker, queue=queue, offset=offset, store_ms=max(store_ms, 0), retry=retry,
            body_len=max(getattr(record, "serialized_value_size", 0), 0), headers=record.headers or [],
            props=captured_props(tracer.config.capture_props, record.headers),
        )

    def fail(self, record: Any, error: Any, status: int) -> None:
        span = self.open.get((record.topic, record.partition, record.offset))
        if span is not None:
            span.status, span.error = status, text(error)

    def next(self, consumer: Any, take: Any) -> Any:
        if self.taking:  # a wrapper around an instrumented consumer: trace once
            return take(consumer)
        self.finish_all()
        self.taking = True
        try:
            record = take(consumer)
        finally:
            self.taking = False
        self.start(record)
        return record

    def poll(self, consumer: Any, poll: Any, *args: Any, **kwargs: Any) -> Any:
        if self.taking:
            return poll(consumer, *args, **kwargs)
        self.finish_all()
        batches = poll(consumer, *args, **kwargs)
        for records in batches.values():
            for record in records:
                self.start(record)
        return batches


def _tracker_for(consumer: Any, tracer: tracehook.Tracer | None = None) -> ConsumeTracker:
    tracker = consumer.__dict__.get("_tracehook_tracker")
    if tracker is None:
        config = getattr(consumer, "config", {})
        tracker = ConsumeTracker(tracer, text(config.get("group_id")), _bootstrap(consumer))
        consumer.__dict__["_tracehook_tracker"] = tracker
    return tracker


class TracedConsumer:
    """A KafkaConsumer whose iteration and ``poll`` are traced; every other attribute is the consumer's own.

    A record's attempt ends (SUB_AFTER) when the app takes the next record, polls
    again or closes; mark it failed first with :meth:`fail`.
    """

    def __init__(self, consumer: Any, tracer: tracehook.Tracer | None = None, group: str | None = None) -> None:
        self._consumer = consumer
        self._tracker = _tracker_for(consumer, tracer)
        if group is not None:
            self._tracker.group = group

    def __iter__(self) -> TracedConsumer:
        return self

    def __next__(self) -> Any:
        return self._tracker.next(self._consumer, type(self._consumer).__next__)

    def poll(self, *args: Any, **kwargs: Any) -> Any:
        """``KafkaConsumer.poll``; each returned record gets SUB_BEFORE, the previous poll's SUB_AFTER."""
        return self._tracker.poll(self._consumer, type(self._consumer).poll, *args, **kwargs)

    def fail(self, record: Any, error: Any = "", status: int = Status.FAILED) -> None:
        """Record this attempt at ``record`` as failed (or another :class:`~tracehook.Status`)."""
        self._tracker.fail(record, error, status)

    def finish(self) -> None:
        """End the open attempts now (e.g. right after handling, before committing)."""
        self._tracker.finish_all()

    def close(self, *args: Any, **kwargs: Any) -> None:
        """End the open attempts, then ``KafkaConsumer.close``."""
        self._tracker.finish_all()
        self._consumer.close(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


def fail(consumer: Any, record: Any, error: Any = "", status: int = Status.FAILED) -> None:
    """:meth:`TracedConsumer.fail` for an instrumented plain KafkaConsumer."""
    _tracker_for(consumer).fail(record, error, status)


# -- instrument -----------------------------------------------------------------------------

def _apply(patcher: Patcher, tracer: tracehook.Tracer | None) -> None:
    """Trace every KafkaProducer/KafkaConsumer (existing and new)."""
    import kafka

    def make_send(original: Any) -> Any:
        def send(self: Any, topic: str, value: Any = None, key: Any = None, headers: Any = None,
                 partition: Any = None, timestamp_ms: Any = None) -> Any:
            return traced_send(tracer, self, original.__get__(self), topic, value, key, headers, partition,
                               timestamp_ms)
        return send

    def make_next(original: Any) -> Any:
        def __next__(self: Any) -> Any:
            return _tracker_for(self, tracer).next(self, original)
        return __next__

    def make_poll(original: Any) -> Any:
        def poll(self: Any, *args: Any, **kwargs: Any) -> Any:
            return _tracker_for(self, tracer).poll(self, original, *args, **kwargs)
        return poll

    def make_close(original: Any) -> Any:
        def close(self: Any, *args: Any, **kwargs: Any) -> Any:
            _tracker_for(self, tracer).finish_all()
            return original(self, *args, **kwargs)
        return close

    patcher.patch(kafka.KafkaProducer, "send", make_send)
    patcher.patch(kafka.KafkaConsumer, "__next__", make_next)
    patcher.patch(kafka.KafkaConsumer, "poll", make_poll)
    patcher.patch(kafka.KafkaConsumer, "close", make_close)



_instrumentation = Instrumentation(_apply)
instrument = _instrumentation.instrument
uninstrument = _instrumentation.uninstrument
is_instrumented = _instrumentation.is_instrumented
