"""pika adapter (BlockingChannel): PUB from ``basic_publish``, consume spans settled by ack/nack/reject.

Explicit wrapper::

    channel = TracedChannel(connection.channel())
    channel.confirm_delivery()                       # with confirms a broker nack is a FAILED send
    channel.basic_publish("", "orders", b"body", pika.BasicProperties(headers={"tracehook-keys": "order-1"}))
    channel.basic_consume("orders", on_message)      # the callback gets this traced channel
    # basic_ack -> OK; nack/reject with requeue -> RETRY_LATER; without requeue -> FAILED,
    # plus DEAD when the queue was declared (on this channel) with x-dead-letter-exchange
    # or named in dead_letter_queues; an exception from the callback -> EXCEPTION (re-raised).

Or ``instrument()`` to trace every BlockingChannel.  The topic is the exchange
(the routing key for the default exchange), the props ``amqp.exchange`` and
``amqp.routing_key`` both, keys/tags the ``tracehook-keys`` / ``tracehook-tags``
headers, the consumer group the queue name.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable
from typing import Any

import tracehook
from tracehook import Status
from tracehook.context import inject_context
from tracehook.hooks import ConsumeSpan

from ._common import (
    HEADER_KEYS,
    HEADER_TAGS,
    Instrumentation,
    Patcher,
    amqp_msg_id,
    amqp_place,
    body_len,
    captured_props,
    guarded,
    header_text,
    kept_amqp_record,
    rabbitmq_retry,
    tracer_or_global,
)

__all__ = ["TracedChannel", "instrument", "is_instrumented", "uninstrument"]

DEAD_LETTER_ARGUMENT = "x-dead-letter-exchange"


def _broker(channel: Any) -> str:
    params = getattr(getattr(channel, "connection", None), "_impl", None)
    params = getattr(params, "params", None)
    return f"{params.host}:{params.port}" if params is not None else ""


class ChannelTracker:
    """Per-channel tracing state: open consume spans by delivery tag, dead-lettering queues."""

    def __init__(self, tracer: tracehook.Tracer | None, dead_letter_queues: Iterable[str] = ()) -> None:
        self.tracer = tracer
        self.dead_letter_queues = set(dead_letter_queues)
        self.open: dict[int, tuple[ConsumeSpan, str, str, str, str, int]] = {}

    # -- publishing ---------------------------------------------------------------------------

    def publish(self, channel: Any, publish: Callable[..., Any], exchange: str, routing_key: str, body: Any,
                properties: Any = None, mandatory: bool = False) -> Any:
        import pika

        properties = copy.copy(properties) if properties is not None else pika.BasicProperties()
        properties.headers = dict(properties.headers or {})   # never mutate the caller's headers
        tracer = tracer_or_global(self.tracer)
        sent = guarded("inject", inject_context, properties.headers, None,
                       sample_ratio=tracer.config.trace_sample_ratio)
        started = time.perf_counter_ns()
        born_ms = time.time_ns() // 1_000_000
        status, error = Status.OK, ""
        try:
            return publish(exchange, routing_key, body, properties, mandatory)
        except Exception as exc:   # e.g. a broker nack or an unroutable return under confirms
            status, error = Status.FAILED, repr(exc)
            raise
        finally:
            if sent is not None:
                guarded("record_send", _record_publish, tracer, channel, exchange, routing_key, body, properties,
                        sent.msg_id, sent.traceparent, born_ms=born_ms,
                        cost_us=(time.perf_counter_ns() - started) // 1000, status=status, error=error)

    # -- consuming ----------------------------------------------------------------------------

    def wrap_callback(self, queue: str, callback: Callable[..., Any], auto_ack: bool,
                      channel_for_callback: Callable[[Any], Any]) -> Callable[..., Any]:
        def on_message(channel: Any, method: Any, properties: Any, body: Any) -> Any:
            guarded("start_consume", self._start, channel, queue, method, properties, body)
            try:
                result = callback(channel_for_callback(channel), method, properties, body)
            except BaseException as exc:
                self.settle(method.delivery_tag, False, Status.EXCEPTION, repr(exc), dead=False)
                raise
            if auto_ack:
                self.settle(method.delivery_tag, False, Status.OK)
            return result
        return on_message

    def _start(self, channel: Any, queue: str, method: Any, properties: Any, body: Any) -> None:
        headers = properties.headers or {}
        msg_id = amqp_msg_id(headers, properties.message_id)
        if not msg_id:   # neither tracehook's id nor an AMQP message-id: nothing to join, nothing to settle
            return
        topic, props = amqp_place(method.exchange, method.routing_key)
        keys, retry = header_text(headers, HEADER_KEYS), rabbitmq_retry(headers, queue, msg_id, method.redelivered)
        tracer = tracer_or_global(self.tracer)
        span = tracer.start_consume(
            topic, msg_id, queue, keys=keys, tags=header_text(headers, HEADER_TAGS), broker=_broker(channel),
            retry=retry, body_len=body_len(body), headers=headers,
            props=captured_props(tracer.config.capture_props, headers, properties, props),
        )
        self.open[method.delivery_tag] = (span, topic, msg_id, queue, keys, retry)

    def settle(self, delivery_tag: int, multiple: bool, status: int, error: str = "", dead: bool = False) -> None:
        """Finish the span(s) of an ack/nack/reject; record DEAD for a rejected message of a dead-letter queue.

        ``multiple`` settles every open tag up to ``delivery_tag``; with tag 0 it means all
        outstanding deliveries on the channel (AMQP 0-9-1 basic.ack/nack).
        """
        if multiple:
            tags = [t for t in self.open if delivery_tag == 0 or t <= delivery_tag]
        else:
            tags = [delivery_tag]
        tracer = tracer_or_global(self.tracer)
        for tag in tags:
            entry = self.open.pop(tag, None)
            if entry is None:
                continue
            span, topic, msg_id, queue, keys, retry = entry
            guarded("finish", span.finish, status, error)
            if dead and queue in self.dead_letter_queues:
                guarded("record_dead", tracer.record_dead, topic, msg_id, queue, error="rejected", retry=retry,
                        keys=keys)

    def nack(self, delivery_tag: int, multiple: bool, requeue: bool) -> None:
        if requeue:
            self.settle(delivery_tag, multiple, Status.RETRY_LATER)
        else:
            self.settle(delivery_tag, multiple, Status.FAILED, "rejected", dead=True)

    def declared(self, queue: str, arguments: Any) -> None:
        if arguments and DEAD_LETTER_ARGUMENT in arguments:
            self.dead_letter_queues.add(queue)


def _record_publish(tracer: tracehook.Tracer, channel: Any, exchange: str, routing_key: str, body: Any,
                    properties: Any, msg_id: str, traceparent: str, **fields: Any) -> None:
    """The PUB of a ``basic_publish``: place props, allowlisted header / property props, the kept record."""
    topic, props = amqp_place(exchange, routing_key)
    headers = properties.headers
    tracer.record_send(topic, msg_id, keys=header_text(headers, HEADER_KEYS), tags=header_text(headers, HEADER_TAGS),
                       broker=_broker(channel), body_len=body_len(body), traceparent=traceparent,
                       props=captured_props(tracer.config.capture_props, headers, properties, props),
                       **kept_amqp_record(tracer, topic, body, headers), **fields)


def _tracker_for(channel: Any, tracer: tracehook.Tracer | None = None) -> ChannelTracker:
    tracker = channel.__dict__.get("_tracehook_tracker")
    if tracker is None:
        tracker = ChannelTracker(tracer)
        channel.__dict__["_tracehook_tracker"] = tracker
    return tracker


class TracedChannel:
    """A pika BlockingChannel with traced publish/consume/settle; every other attribute is the channel's own."""

    def __init__(self, channel: Any, tracer: tracehook.Tracer | None = None,
                 dead_letter_queues: Iterable[str] = ()) -> None:
        self._channel = channel
        self._tracker = _tracker_for(channel, tracer)
        self._tracker.dead_letter_queues.update(dead_letter_queues)

    def basic_publish(self, exchange: str, routing_key: str, body: Any, properties: Any = None,
                      mandatory: bool = False) -> Any:
        """``basic_publish`` with the message id and traceparent added to a copy of the headers; PUB recorded."""
        return self._tracker.publish(self._channel, self._channel.basic_publish, exchange, routing_key, body,
                                     properties, mandatory)

    def basic_consume(self, queue: str, on_message_callback: Callable[..., Any], auto_ack: bool = False,
                      *args: Any, **kwargs: Any) -> Any:
        """``basic_consume``; the callback gets this traced channel and each traced message a span."""
        callback = self._tracker.wrap_callback(queue, on_message_callback, auto_ack, lambda _channel: self)
        return self._channel.basic_consume(queue, callback, auto_ack, *args, **kwargs)

    def basic_ack(self, delivery_tag: int = 0, multiple: bool = False) -> Any:
        """``basic_ack``; the settled span(s) end OK (``multiple`` with tag 0: all outstanding)."""
        result = self._channel.basic_ack(delivery_tag, multiple)
        self._tracker.settle(delivery_tag, multiple, Status.OK)
        return result

    def basic_nack(self, delivery_tag: int = 0, multiple: bool = False, requeue: bool = True) -> Any:
        """``basic_nack``; the settled span(s) end RETRY_LATER if requeued, else FAILED (+ DEAD)."""
        result = self._channel.basic_nack(delivery_tag, multiple, requeue)
        self._tracker.nack(delivery_tag, multiple, requeue)
        return result

    def basic_reject(self, delivery_tag: int = 0, requeue: bool = True) -> Any:
        """``basic_reject``; the span ends RETRY_LATER if requeued, else FAILED (+ DEAD)."""
        result = self._channel.basic_reject(delivery_tag, requeue)
        self._tracker.nack(delivery_tag, False, requeue)
        return result

    def queue_declare(self, queue: str, *args: Any, **kwargs: Any) -> Any:
        """``queue_declare``; a queue with ``x-dead-letter-exchange`` gets DEAD events on reject."""
        result = self._channel.queue_declare(queue, *args, **kwargs)
        self._tracker.declared(result.method.queue, kwargs.get("arguments") or (args[4] if len(args) > 4 else None))
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._channel, name)


def _apply(patcher: Patcher, tracer: tracehook.Tracer | None) -> None:
    """Trace every pika BlockingChannel."""
    from pika.adapters.blocking_connection import BlockingChannel

    def make_publish(original: Any) -> Any:
        def basic_publish(self: Any, exchange: str, routing_key: str, body: Any, properties: Any = None,
                          mandatory: bool = False) -> Any:
            return _tracker_for(self, tracer).publish(self, original.__get__(self), exchange, routing_key, body,
                                                      properties, mandatory)
        return basic_publish

    def make_consume(original: Any) -> Any:
        def basic_consume(self: Any, queue: str, on_message_callback: Any, auto_ack: bool = False,
                          *args: Any, **kwargs: Any) -> Any:
            callback = _tracker_for(self, tracer).wrap_callback(queue, on_message_callback, auto_ack,
                                                               lambda channel: channel)
            return original(self, queue, callback, auto_ack, *args, **kwargs)
        return basic_consume

    def make_ack(original: Any) -> Any:
        def basic_ack(self: Any, delivery_tag: int = 0, multiple: bool = False) -> Any:
            result = original(self, delivery_tag, multiple)
            _tracker_for(self, tracer).settle(delivery_tag, multiple, Status.OK)
            return result
        return basic_ack

    def make_nack(original: Any) -> Any:
        def basic_nack(self: Any, delivery_tag: int = 0, multiple: bool = False, requeue: bool = True) -> Any:
            result = original(self, delivery_tag, multiple, requeue)
            _tracker_for(self, tracer).nack(delivery_tag, multiple, requeue)
            return result
        return basic_nack

    def make_reject(original: Any) -> Any:
        def basic_reject(self: Any, delivery_tag: int = 0, requeue: bool = True) -> Any:
            result = original(self, delivery_tag, requeue)
            _tracker_for(self, tracer).nack(delivery_tag, False, requeue)
            return result
        return basic_reject

    def make_declare(original: Any) -> Any:
        def queue_declare(self: Any, queue: str, *args: Any, **kwargs: Any) -> Any:
            result = original(self, queue, *args, **kwargs)
            guarded("queue_declare", _tracker_for(self, tracer).declared, result.method.queue,
                    kwargs.get("arguments") or (args[4] if len(args) > 4 else None))
            return result
        return queue_declare

    for name, make in (("basic_publish", make_publish), ("basic_consume", make_consume), ("basic_ack", make_ack),
                       ("basic_nack", make_nack), ("basic_reject", make_reject), ("queue_declare", make_declare)):
        patcher.patch(BlockingChannel, name, make)



_instrumentation = Instrumentation(_apply)
instrument = _instrumentation.instrument
uninstrument = _instrumentation.uninstrument
is_instrumented = _instrumentation.is_instrumented
