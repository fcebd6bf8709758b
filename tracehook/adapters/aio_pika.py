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
through ack/reject, so it is traced too.  The message id and ``traceparent`` are added
to the published message's headers when absent.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import tracehook
from tracehook import Status
from tracehook.hooks import ConsumeSpan

from ._common import (
    HEADER_KEYS,
    HEADER_TAGS,
    Patcher,
    body_len,
    guarded,
    header_text,
    tracer_or_global,
)
from .pika import DEAD_LETTER_ARGUMENT

__all__ = ["TracedExchange", "TracedQueue", "instrument", "is_instrumented", "uninstrument"]

_patcher = Patcher()
_settle_patcher = Patcher()
# IncomingMessage has __slots__ (no attributes, no weakrefs): open spans by id(message), popped when settled.
_open: dict[int, tuple[tracehook.Tracer, ConsumeSpan, str, str, str, str, int, bool]] = {}


async def traced_publish(tracer: tracehook.Tracer | None, exchange: Any, publish: Any, message: Any,
                         routing_key: str, **kwargs: Any) -> Any:
    """Await the client's own ``publish`` with trace headers added; record PUB (FAILED if it raises)."""
    headers = message.headers if message.headers is not None else {}
    msg_id = guarded("inject", tracehook.inject_headers, headers, tracehook.new_msg_id())
    message.headers = headers
    started, born_ms = time.perf_counter_ns(), time.time_ns() // 1_000_000
    status, error = Status.OK, ""
    try:
        return await publish(message, routing_key, **kwargs)
    except Exception as exc:
        status, error = Status.FAILED, repr(exc)
        raise
    finally:
        if msg_id:
            guarded("record_send", tracer_or_global(tracer).record_send, exchange.name or routing_key, msg_id,
                    keys=header_text(headers, HEADER_KEYS), tags=header_text(headers, HEADER_TAGS),
                    born_ms=born_ms, cost_us=(time.perf_counter_ns() - started) // 1000, status=status,
                    error=error, body_len=body_len(message.body))


def wrap_callback(tracer: tracehook.Tracer | None, queue: Any, callback: Callable[[Any], Awaitable[Any]],
                  no_ack: bool) -> Callable[[Any], Awaitable[Any]]:
    dead_letters = DEAD_LETTER_ARGUMENT in (queue.arguments or {})

    async def on_message(message: Any) -> Any:
        guarded("start_consume", _start, tracer, queue.name, message, dead_letters)
        try:
            result = await callback(message)
        except BaseException as exc:
            settle(message, Status.EXCEPTION, repr(exc))
            raise
        if no_ack:
            settle(message, Status.OK)
        return result
    return on_message


def _start(tracer: tracehook.Tracer | None, group: str, message: Any, dead_letters: bool) -> None:
    headers = message.headers or {}
    msg_id = tracehook.extract_headers(headers).msg_id
    if not msg_id:
        return
    deaths = headers.get("x-death") or []
    retry = sum(int(d.get("count", 0)) for d in deaths if isinstance(d, dict)) + (1 if message.redelivered else 0)
    topic, keys = message.exchange or message.routing_key or "", header_text(headers, HEADER_KEYS)
    tracer = tracer_or_global(tracer)
    span = tracer.start_consume(topic, msg_id, group, keys=keys, tags=header_text(headers, HEADER_TAGS),
                                retry=retry, body_len=body_len(message.body))
    _open[id(message)] = (tracer, span, topic, msg_id, group, keys, retry, dead_letters)


def settle(message: Any, status: int, error: str = "", dead: bool = False) -> None:
    """Finish the message's open span (if any); DEAD when rejected from a dead-lettering queue."""
    entry = _open.pop(id(message), None)
    if entry is None:
        return
    tracer, span, topic, msg_id, group, keys, retry, dead_letters = entry
    guarded("finish", span.finish, status, error)
    if dead and dead_letters:
        guarded("record_dead", tracer.record_dead, topic, msg_id, group, error="rejected", retry=retry, keys=keys)


def _rejected(message: Any, requeue: bool) -> None:
    if requeue:
        settle(message, Status.RETRY_LATER)
    else:
        settle(message, Status.FAILED, "rejected", dead=True)


def _ensure_settle_patches() -> None:
    """Patch IncomingMessage ack/nack/reject (no-ops for messages without an open span)."""
    if _settle_patcher.active:
        return
    from aio_pika.message import IncomingMessage

    def make_ack(original: Any) -> Any:
        async def ack(self: Any, multiple: bool = False) -> None:
            await original(self, multiple)
            settle(self, Status.OK)
        return ack

    def make_nack(original: Any) -> Any:
        async def nack(self: Any, multiple: bool = False, requeue: bool = True) -> None:
            await original(self, multiple, requeue)
            _rejected(self, requeue)
        return nack

    def make_reject(original: Any) -> Any:
        async def reject(self: Any, requeue: bool = False) -> None:
            await original(self, requeue)
            _rejected(self, requeue)
        return reject

    _settle_patcher.patch(IncomingMessage, "ack", make_ack)
    _settle_patcher.patch(IncomingMessage, "nack", make_nack)
    _settle_patcher.patch(IncomingMessage, "reject", make_reject)


class TracedExchange:
    """An aio-pika Exchange whose ``publish`` is traced; every other attribute is the exchange's own."""

    def __init__(self, exchange: Any, tracer: tracehook.Tracer | None = None) -> None:
        self._exchange = exchange
        self._tracer = tracer

    async def publish(self, message: Any, routing_key: str, **kwargs: Any) -> Any:
        return await traced_publish(self._tracer, self._exchange, self._exchange.publish, message, routing_key,
                                    **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._exchange, name)


class TracedQueue:
    """An aio-pika Queue whose ``consume`` callbacks are traced; every other attribute is the queue's own."""

    def __init__(self, queue: Any, tracer: tracehook.Tracer | None = None) -> None:
        self._queue = queue
        self._tracer = tracer
        _ensure_settle_patches()

    async def consume(self, callback: Callable[[Any], Awaitable[Any]], no_ack: bool = False, **kwargs: Any) -> Any:
        return await self._queue.consume(wrap_callback(self._tracer, self._queue, callback, no_ack), no_ack,
                                         **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


def instrument(tracer: tracehook.Tracer | None = None) -> None:
    """Trace every aio-pika Exchange.publish and Queue.consume; calling it again does nothing."""
    if _patcher.active:
        return
    import aio_pika

    def make_publish(original: Any) -> Any:
        async def publish(self: Any, message: Any, routing_key: str, **kwargs: Any) -> Any:
            return await traced_publish(tracer, self, original.__get__(self), message, routing_key, **kwargs)
        return publish

    def make_consume(original: Any) -> Any:
        async def consume(self: Any, callback: Any, no_ack: bool = False, *args: Any, **kwargs: Any) -> Any:
            return await original(self, wrap_callback(tracer, self, callback, no_ack), no_ack, *args, **kwargs)
        return consume

    _patcher.patch(aio_pika.Exchange, "publish", make_publish)
    _patcher.patch(aio_pika.Queue, "consume", make_consume)
    _ensure_settle_patches()


def uninstrument() -> None:
    """Undo :func:`instrument` (and the ack/nack/reject patches); calling it again does nothing."""
    _patcher.restore()
    _settle_patcher.restore()
    _open.clear()


def is_instrumented() -> bool:
    return _patcher.active
