"""aio-pika adapter: PUB from ``Exchange.publish``, consume spans settled by ack/nack/reject.

::

    instrument()                                     # every Exchange.publish / Queue.consume
    # or explicitly:
    exchange = TracedExchange(channel.default_exchange)
    await exchange.publish(aio_pika.Message(b"body", headers={"tracehook-keys": "order-1"}), "orders")
    await TracedQueue(queue).consume(on_message)     # on_message(message) as usual

Statuses follow the pika adapter: ack -> OK, nack/reject with requeue -> RETRY_LATER,
without requeue -> FAILED (+ DEAD when the queue has ``x-dead-letter-exchange``), an
exception from the callback -> EXCEPTION (re-raised).  ``message.process()`` settles
through ack/reject, so it is traced too; ``multiple=True`` settles every earlier traced
delivery on the channel as well.  A traced message's class becomes a same-named subclass
whose ack/nack/reject settle its span, so nothing is patched globally for settling and
``TracedQueue`` works whether or not ``instrument()`` is active.  The message id and
``traceparent`` are added to the published message's headers when absent.  Topic, props
(``amqp.exchange``, ``amqp.routing_key``), retry count and broker (``host:port`` of the
connection's URL) are recorded as the pika adapter records them.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import tracehook
from tracehook import Status
from tracehook.context import inject_context

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
from .pika import DEAD_LETTER_ARGUMENT, ChannelTracker, _tracker_for

__all__ = ["TracedExchange", "TracedQueue", "instrument", "is_instrumented", "uninstrument"]

_DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671}   # aio-pika keeps the URL as given, often without a port


def _broker(channel: Any) -> str:
    """``host:port`` of the connection of an aio-pika channel (an exchange's) or an aiormq one (a delivery's)."""
    connection = getattr(channel, "_connection", None) or getattr(channel, "connection", None)
    url = getattr(connection, "url", None)
    if url is None or not url.host:
        return ""
    return f"{url.host}:{url.port or _DEFAULT_PORTS.get(url.scheme, 5672)}"



async def traced_publish(tracer: tracehook.Tracer | None, exchange: Any, publish: Any, message: Any,
                         routing_key: str, **kwargs: Any) -> Any:
    """Await the client's own ``publish`` with trace headers added; record PUB (FAILED if it raises)."""
    headers = message.headers if message.headers is not None else {}
    traced = tracer_or_global(tracer)
    sent = guarded("inject", inject_context, headers, None, sample_ratio=traced.config.trace_sample_ratio)
    message.headers = headers
    started, born_ms = time.perf_counter_ns(), time.time_ns() // 1_000_000
    status, error = Status.OK, ""
    try:
        return await publish(message, routing_key, **kwargs)
    except Exception as exc:
        status, error = Status.FAILED, repr(exc)
        raise
    finally:
        if sent is not None:
            guarded("record_send", _record_publish, traced, exchange, message, routing_key, sent.msg_id,
                    sent.traceparent, born_ms=born_ms, cost_us=(time.perf_counter_ns() - started) // 1000,
                    status=status, error=error)


def _record_publish(tracer: tracehook.Tracer, exchange: Any, message: Any, routing_key: str, msg_id: str,
                    traceparent: str, **fields: Any) -> None:
    """The PUB of an ``Exchange.publish``: place props, allowlisted header / property props, the kept record."""
    topic, props = amqp_place(exchange.name, routing_key)
    headers = message.headers
    tracer.record_send(topic, msg_id, keys=header_text(headers, HEADER_KEYS), tags=header_text(headers, HEADER_TAGS),
                       broker=guarded("broker", _broker, getattr(exchange, "channel", None)) or "",
                       body_len=body_len(message.body), traceparent=traceparent,
                       props=captured_props(tracer.config.capture_props, headers, message, props),
                       **kept_amqp_record(tracer, topic, message.body, headers), **fields)


def wrap_callback(tracer: tracehook.Tracer | None, queue: Any, callback: Callable[[Any], Awaitable[Any]],
                  no_ack: bool) -> Callable[[Any], Awaitable[Any]]:
    """The consume callback with a span per traced message, settled by its ack/nack/reject."""
    dead_letters = DEAD_LETTER_ARGUMENT in (queue.arguments or {})

    async def on_message(message: Any) -> Any:
        tracker = guarded("start_consume", _start, tracer, queue.name, message, dead_letters)
        try:
            result = await callback(message)
        except BaseException as exc:
            if tracker is not None:
                tracker.settle(message.delivery_tag, False, Status.EXCEPTION, repr(exc))
            raise
        if no_ack and tracker is not None:
            tracker.settle(message.delivery_tag, False, Status.OK)
        return result
    return on_message


def _start(tracer: tracehook.Tracer | None, group: str, message: Any, dead_letters: bool) -> ChannelTracker | None:
    headers = message.headers or {}
    msg_id = amqp_msg_id(headers, message.message_id)
    if not msg_id:
        return None
    # Open spans live with the AMQP channel, keyed by delivery tag (unique per channel), exactly as
    # in the pika adapter: multiple=True can find every earlier delivery, and they go with the channel.
    tracker = _tracker_for(message.channel, tracer)
    if dead_letters:
        tracker.dead_letter_queues.add(group)
    retry = rabbitmq_retry(headers, group, msg_id, message.redelivered)
    topic, props = amqp_place(message.exchange, message.routing_key)
    keys = header_text(headers, HEADER_KEYS)
    traced = tracer_or_global(tracer)
    span = traced.start_consume(topic, msg_id, group, keys=keys, tags=header_text(headers, HEADER_TAGS),
                                broker=_broker(message.channel), retry=retry, body_len=body_len(message.body),
                                props=captured_props(traced.config.capture_props, headers, message, props),
                                headers=headers)
    tracker.open[message.delivery_tag] = (span, topic, msg_id, group, keys, retry)
    message.__class__ = _settling_class(type(message))
    return tracker


def _settled(message: Any, multiple: bool, requeue: bool | None) -> None:
    """After a successful ack (``requeue`` None) or nack/reject: finish the span(s) it settled."""
    tracker = _tracker_for(message.channel)
    if requeue is None:
        tracker.settle(message.delivery_tag, multiple, Status.OK)
    else:
        tracker.nack(message.delivery_tag, multiple, requeue)


@functools.cache
def _settling_class(cls: type) -> type:
    """A subclass of the message's class whose ack/nack/reject also settle spans.

    Traced messages are switched to it (IncomingMessage has ``__slots__``, so a class with no
    new slots is layout-compatible) instead of patching IncomingMessage globally: the explicit
    wrappers then need no global state, and ``uninstrument()`` cannot strand open spans.
    """
    if getattr(cls, "_tracehook_settling", False):
        return cls

    class Settling(cls):  # type: ignore[misc, valid-type]
        __slots__ = ()
        _tracehook_settling = True

        async def ack(self, multiple: bool = False) -> None:
            await super().ack(multiple)
            guarded("settle", _settled, self, multiple, None)

        async def nack(self, multiple: bool = False, requeue: bool = True) -> None:
            await super().nack(multiple, requeue)
            guarded("settle", _settled, self, multiple, requeue)

        async def reject(self, requeue: bool = False) -> None:
            await super().reject(requeue)
            guarded("settle", _settled, self, False, requeue)

    Settling.__name__, Settling.__qualname__, Settling.__module__ = cls.__name__, cls.__qualname__, cls.__module__
    return Settling


class TracedExchange:
    """An aio-pika Exchange whose ``publish`` is traced; every other attribute is the exchange's own."""

    def __init__(self, exchange: Any, tracer: tracehook.Tracer | None = None) -> None:
        self._exchange = exchange
        self._tracer = tracer

    async def publish(self, message: Any, routing_key: str, **kwargs: Any) -> Any:
        """``Exchange.publish`` with the message id and traceparent added to ``message.headers``; PUB recorded."""
        return await traced_publish(self._tracer, self._exchange, self._exchange.publish, message, routing_key,
                                    **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._exchange, name)


class TracedQueue:
    """An aio-pika Queue whose ``consume`` callbacks are traced; every other attribute is the queue's own."""

    def __init__(self, queue: Any, tracer: tracehook.Tracer | None = None) -> None:
        self._queue = queue
        self._tracer = tracer

    async def consume(self, callback: Callable[[Any], Awaitable[Any]], no_ack: bool = False, **kwargs: Any) -> Any:
        """``Queue.consume`` with a span per traced message, ended by its ack/nack/reject (or the callback)."""
        return await self._queue.consume(wrap_callback(self._tracer, self._queue, callback, no_ack), no_ack,
                                         **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


def _apply(patcher: Patcher, tracer: tracehook.Tracer | None) -> None:
    """Trace every aio-pika Exchange.publish and Queue.consume."""
    import aio_pika

    def make_publish(original: Any) -> Any:
        async def publish(self: Any, message: Any, routing_key: str, **kwargs: Any) -> Any:
            return await traced_publish(tracer, self, original.__get__(self), message, routing_key, **kwargs)
        return publish

    def make_consume(original: Any) -> Any:
        async def consume(self: Any, callback: Any, no_ack: bool = False, *args: Any, **kwargs: Any) -> Any:
            return await original(self, wrap_callback(tracer, self, callback, no_ack), no_ack, *args, **kwargs)
        return consume

    patcher.patch(aio_pika.Exchange, "publish", make_publish)
    patcher.patch(aio_pika.Queue, "consume", make_consume)



_instrumentation = Instrumentation(_apply)
instrument = _instrumentation.instrument
uninstrument = _instrumentation.uninstrument
is_instrumented = _instrumentation.is_instrumented
