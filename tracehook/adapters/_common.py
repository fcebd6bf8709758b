"""What every adapter shares: header names for keys/tags, header reading, the tracer lookup, safe hooks."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import tracehook
from tracehook.context import HEADER_MSG_ID, get_header

HEADER_KEYS = "tracehook-keys"
"""Header carrying the message keys where the broker has no key field (RabbitMQ)."""
HEADER_TAGS = "tracehook-tags"
"""Header carrying the message tags (both brokers)."""

logger = logging.getLogger("tracehook.adapters")


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


def rabbitmq_retry(headers: Any, redelivered: bool) -> int:
    """A RabbitMQ delivery's retry number: the ``x-death`` counts (dead-letter round trips) plus one if redelivered.

    Shared by the pika and aio-pika adapters so both count retries the same way.
    """
    deaths = (headers or {}).get("x-death") or []
    return sum(int(d.get("count", 0)) for d in deaths if isinstance(d, dict)) + (1 if redelivered else 0)


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
        self._originals: list[tuple[type, str, Any]] = []

    @property
    def active(self) -> bool:
        return bool(self._originals)

    def patch(self, cls: type, name: str, make: Callable[[Any], Any]) -> None:
        """Set ``cls.name = make(original)``."""
        original = cls.__dict__[name]
        self._originals.append((cls, name, original))
        setattr(cls, name, make(original))

    def restore(self) -> None:
        while self._originals:
            cls, name, original = self._originals.pop()
            setattr(cls, name, original)
