"""What every adapter shares: header names for keys/tags, header reading, the tracer lookup, safe hooks,
and :class:`Instrumentation`, which gives every adapter its ``instrument()`` / ``uninstrument()``."""

from __future__ import annotations

import datetime
import decimal
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, NamedTuple

import tracehook
from tracehook.bodies import amqp_header_pairs
from tracehook.context import HEADER_MSG_ID, get_header
from tracehook.errors import Unkeepable

HEADER_KEYS = "tracehook-keys"
"""Header carrying the message keys where the broker has no key field (RabbitMQ)."""
HEADER_TAGS = "tracehook-tags"
"""Header carrying the message tags (both brokers)."""

PROP_EXCHANGE = "amqp.exchange"
"""RabbitMQ events: the prop naming the exchange a message was published to ("" = the default exchange)."""
PROP_ROUTING_KEY = "amqp.routing_key"
"""RabbitMQ events: the prop holding the routing key a message was published with."""

REDELIVERY_MEMORY = 10_000
"""How many redelivered (queue, message id) pairs the RabbitMQ adapters remember to count redeliveries."""

HEADER_REPLAY_OF = "tracehook-replay-of"
"""On a record ``tracehook replay`` re-published: where the original is, ``topic/partition/offset``."""
HEADER_REPLAY_RETRY = "tracehook-replay-retry"
"""On a re-published record: the attempt number its consume carries (continuing the original's)."""
HEADER_ORIGINAL_TIMESTAMP = "tracehook-original-timestamp"
"""On a re-published record: the original record's timestamp (epoch ms)."""

logger = logging.getLogger("tracehook.adapters")


class Replayed(NamedTuple):
    """Where a record re-published by ``tracehook replay`` came from."""

    topic: str
    partition: int
    offset: int
    retry: int
    timestamp: int


def replayed_from(headers: Any) -> Replayed | None:
    """The original of a ``tracehook replay`` re-publication (its consume is then traced as the
    original's: place, store time, retry count); None for other records or malformed headers."""
    place = header_text(headers, HEADER_REPLAY_OF)
    if not place:
        return None
    rest, _, offset = place.rpartition("/")
    topic, _, partition = rest.rpartition("/")
    try:
        return Replayed(topic, int(partition), int(offset), int(header_text(headers, HEADER_REPLAY_RETRY) or 0),
                        int(header_text(headers, HEADER_ORIGINAL_TIMESTAMP) or 0))
    except ValueError:
        return None
    topic, _, rest = place.rpartition("/")
    topic, _, partition = topic.rpartition("/")
    try:
        return topic, int(partition), int(rest), int(header_text(headers, HEADER_REPLAY_RETRY) or 0)
    except ValueError:
        return None


def tracer_or_global(tracer: tracehook.Tracer | None) -> tracehook.Tracer:
    """The explicit tracer, else the global one (looked up per call, so a later configure() takes effect)."""
    return tracer if tracer is not None else tracehook.get_tracer()


def text(value: Any) -> str:
    """A key or header value as text ("" for None); bytes are decoded leniently."""
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def header_text(headers: Any, name: str) -> str:
    """A header's value as text, "" when absent (headers may be a mapping, pairs, or None)."""
    try:
        return get_header(headers, name) or ""
    except Exception:  # noqa: BLE001  malformed headers are the app's business, not a hook failure
        return ""


def body_len(value: Any) -> int:
    """Length of a message body when it has one (bytes/str), else 0."""
    try:
        return len(value) if isinstance(value, (bytes, bytearray, memoryview, str)) else 0
    except Exception:  # noqa: BLE001  a body of an unexpected type has no length worth failing for
        return 0


MAX_CAPTURED_PROP_LEN = 256
"""Characters of a header or property value the adapters record as a prop (longer ones are cut)."""
AMQP_PROPERTIES = frozenset({"content_type", "content_encoding", "delivery_mode", "priority", "correlation_id",
                             "reply_to", "expiration", "message_id", "timestamp", "type", "user_id", "app_id",
                             "cluster_id"})
"""AMQP basic properties ``capture_props`` can name, as ``amqp.<property>``."""
_SCALARS = (str, int, float, decimal.Decimal, datetime.datetime)


def captured_props(names: frozenset[str], headers: Any, properties: Any = None,
                   base: dict[str, str] | None = None) -> dict[str, str] | None:
    """``base`` (the props the adapter records itself) plus the allowlisted (``capture_props``) header values and,
    with ``properties`` (an AMQP message's), ``amqp.<property>`` values; names absent from the record are left out.

    A header name matches exactly; with repeated names the first counts.  Values become text (bytes as UTF-8,
    invalid sequences replaced), cut to :data:`MAX_CAPTURED_PROP_LEN` characters; a nested table or list is
    not recorded.  ``base`` names are never replaced (capture_props cannot name them: tracehook.config)."""
    if not names:
        return base
    props = dict(base) if base else {}
    for name in names:
        if name in props:
            continue
        if properties is not None and name.startswith("amqp.") and name[5:] in AMQP_PROPERTIES:
            value = getattr(properties, name[5:], None)
        else:
            value = _header_value(headers, name)
        if value is None:
            continue
        if isinstance(value, (bytes, bytearray, memoryview)):
            value = bytes(value).decode("utf-8", "replace")
        elif isinstance(value, _SCALARS) and not isinstance(value, str):
            value = str(int(value)) if isinstance(value, int) else str(value)  # int: an enum's number
        if isinstance(value, str):
            props[name] = value[:MAX_CAPTURED_PROP_LEN]
    return props or None


def _header_value(headers: Any, name: str) -> Any:
    """The first value of header ``name`` (exact name) in a mapping or a list of pairs, else None."""
    try:
        if isinstance(headers, dict):
            return headers.get(name)
        for key, value in headers or ():
            if key == name or (isinstance(key, bytes) and key == name.encode()):
                return value
    except (TypeError, ValueError):  # malformed headers are the app's business, not a hook failure
        return None
    return None


def kept_record(tracer: tracehook.Tracer, topic: str, body: Any, key: Any = None, headers: Any = None
                ) -> dict[str, Any]:
    """The ``record_send`` arguments that keep a Kafka record's body, key and headers, when ``topic``
    keeps bodies and the value is bytes or str ({} otherwise: a serializer's object is not the record)."""
    if not isinstance(body, (bytes, bytearray, memoryview, str)) or not tracer.keeps_body(topic):
        return {}
    return {"body": body, "raw_key": key, "raw_headers": headers}


def kept_amqp_record(tracer: tracehook.Tracer, topic: str, body: Any, headers: Any) -> dict[str, Any]:
    """As :func:`kept_record` for an AMQP message: its ``headers`` table's values encoded
    (:func:`tracehook.wire.amqp_header_bytes`); {} and counted ``unkeepable`` when one cannot be."""
    kept = kept_record(tracer, topic, body)
    if kept:
        try:
            kept["raw_headers"] = amqp_header_pairs(headers)
        except Unkeepable:
            tracer._bodies.counts["unkeepable"] += 1
            return {}
    return kept


def amqp_place(exchange: Any, routing_key: Any) -> tuple[str, dict[str, str]]:
    """The topic and props of a RabbitMQ send or delivery from its exchange and routing key.

    The topic is the exchange, or the routing key (the queue) for the default exchange: a
    delivery carries the exchange and routing key it was published with, so a consume gets
    the topic its send got.  The props keep both, so routing keys of one exchange stay apart
    and the trace says where the message was sent.
    """
    exchange, routing_key = text(exchange), text(routing_key)
    return exchange or routing_key, {PROP_EXCHANGE: exchange, PROP_ROUTING_KEY: routing_key}


def dead_letter_count(headers: Any, queue: str) -> int:
    """How often ``queue`` dead-lettered this message before, from the broker's ``x-death`` header (0 without).

    Only ``queue``'s own entries count (one per reason): in a retry loop through a delay queue
    the delay queue's entries are the same round trips again, and another queue's dead letters
    are no earlier deliveries to this one.
    """
    deaths = headers.get("x-death") if isinstance(headers, dict) else None
    if not isinstance(deaths, list):
        return 0
    # isinstance, not type(): pika decodes AMQP long-longs as its own int subclass.  A malformed
    # entry counts nothing rather than costing the delivery its trace.
    return sum(int(d["count"]) for d in deaths
               if isinstance(d, dict) and isinstance(d.get("count"), int) and text(d.get("queue")) == queue)


class RedeliveryCounter:
    """Redeliveries seen per (queue, message id) in this process, remembering the ``limit`` latest pairs.

    The broker marks a requeued delivery only as redelivered, not how often: the count is the
    consumer's own.  Only redelivered messages take an entry; the oldest is forgotten first.
    """

    def __init__(self, limit: int = REDELIVERY_MEMORY) -> None:
        self._limit = limit
        self._seen: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._lock = threading.Lock()   # pika consumers may run in several threads

    def count(self, queue: str, msg_id: str, redelivered: bool) -> int:
        """The redeliveries of ``msg_id`` on ``queue`` seen so far, this delivery included."""
        key = (queue, msg_id)
        if not redelivered:   # kept, not reset: a dead-letter round trip comes back as a fresh delivery
            return self._seen.get(key, 0)
        with self._lock:
            seen = self._seen.pop(key, 0) + 1
            self._seen[key] = seen
            if len(self._seen) > self._limit:
                self._seen.popitem(last=False)
        return seen


_redeliveries = RedeliveryCounter()


def rabbitmq_retry(headers: Any, queue: str, msg_id: str, redelivered: bool) -> int:
    """A RabbitMQ delivery's retry number: ``queue``'s ``x-death`` counts plus the requeued redeliveries seen.

    Shared by the pika and aio-pika adapters so both count retries the same way.
    """
    return dead_letter_count(headers, queue) + _redeliveries.count(queue, msg_id, redelivered)


def amqp_msg_id(headers: Any, message_id: Any) -> str:
    """A RabbitMQ delivery's message id: tracehook's header, else the AMQP ``message-id`` property ("" if neither).

    A publisher traced only by OpenTelemetry writes no ``tracehook-msg-id``; its AMQP
    ``message-id`` (OpenTelemetry's ``messaging.message.id``) names the message instead.
    Unlike a Kafka record, a delivery has no place to derive an id from.
    """
    return header_text(headers, HEADER_MSG_ID) or text(message_id)


def guarded(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run tracing code so that its failure is logged, never raised into the app."""
    try:
        return fn(*args, **kwargs)
    except Exception:  # tracing must never break the app
        logger.debug("tracehook adapter: %s failed", what, exc_info=True)
        return None


class Patcher:
    """Replace attributes on classes and put them back: the core of instrument()/uninstrument().

    Idempotent: patching twice keeps the first originals; restoring twice does nothing.
    """

    def __init__(self) -> None:
        self._originals: list[tuple[Any, str, Any]] = []

    @property
    def active(self) -> bool:
        return bool(self._originals)

    def patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        """Set ``owner.name = make(original)``; ``owner`` is a class (a method) or a module (a class)."""
        original = vars(owner)[name]
        self._originals.append((owner, name, original))
        setattr(owner, name, make(original))

    def restore(self) -> None:
        while self._originals:
            cls, name, original = self._originals.pop()
            setattr(cls, name, original)


class Instrumentation:
    """One adapter's ``instrument()`` / ``uninstrument()`` / ``is_instrumented()``.

    ``apply(patcher, tracer)`` imports the client library and patches it through ``patcher``;
    every adapter module exposes the three bound methods as its public functions::

        _instrumentation = Instrumentation(_apply)
        instrument = _instrumentation.instrument
    """

    def __init__(self, apply: Callable[[Patcher, tracehook.Tracer | None], None]) -> None:
        self._apply = apply
        self._patcher = Patcher()

    def instrument(self, tracer: tracehook.Tracer | None = None) -> None:
        """Trace the client library's producers and consumers (``tracer``: default the global one).

        Calling it again does nothing."""
        if not self._patcher.active:
            self._apply(self._patcher, tracer)

    def uninstrument(self) -> None:
        """Undo :meth:`instrument`; calling it again does nothing."""
        self._patcher.restore()

    def is_instrumented(self) -> bool:
        """Whether :meth:`instrument` is in effect."""
        return self._patcher.active
