"""Kept bodies: which sends keep theirs, and in what form (issue 43; docs/library.md, "Bodies").

Nothing is kept unless the app names the topic (``body_topics``, or the older global
``capture_body``).  The work is split so the app's thread pays little:

* the hook (:meth:`BodyPolicy.take`, on the app's thread): the topic check, the app's
  redaction callback, the cut to ``max_body_bytes`` (:data:`~tracehook.wire.BODY_TRUNCATED`
  when it cuts) and a shallow copy of the record's headers;
* the dispatcher (:meth:`BodyPolicy.finish`, on its own thread, which zlib leaves the GIL
  to): the headers made wire pairs, the caps checked, and the body zlib-compressed when
  that makes it smaller (:data:`~tracehook.wire.BODY_ZLIB`).

A record whose key or headers cannot be kept exactly (over :data:`~tracehook.wire.MAX_RAW_HEADERS`
or :data:`~tracehook.wire.MAX_RAW_HEADERS_BYTES`, a key over :data:`~tracehook.wire.MAX_BODY_LEN`,
a header name that is not UTF-8, a value that is neither bytes nor str) keeps no body at all,
so a replay from the trace never sends half a record; it is counted as ``unkeepable``.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping
from typing import Any

from . import wire
from .errors import Unkeepable

MIN_COMPRESS = 32
"""Bodies shorter than this are never worth compressing (zlib adds 6 bytes of its own)."""
COMPRESS_LEVEL = 6
_BODY, _FLAGS = wire.Event._fields.index("body"), wire.Event._fields.index("body_flags")
_KEY, _HEADERS = wire.Event._fields.index("raw_key"), wire.Event._fields.index("raw_headers")
_BYTES_LIKE = (bytes, bytearray, memoryview)
COUNTERS = ("kept", "truncated", "compressed", "unkeepable")
"""``stats()["bodies"]``: bodies kept (sent or queued), cut to the cap, compressed, and not kept
because the record's key or headers were over the caps."""


class BodyPolicy:
    """A tracer's body rules, from its config (``body_topics``, ``capture_body``, ``max_body_bytes``, ``redact_body``)."""

    def __init__(self, topics: frozenset[str] | Callable[[str], bool] | None, every_topic: bool, max_bytes: int,
                 redact: Callable[[bytes], bytes | None] | None) -> None:
        self.every_topic = every_topic
        self.topics = topics if isinstance(topics, frozenset) else frozenset()
        self.decide = topics if callable(topics) else None
        self.max_bytes = max_bytes
        self.redact = redact
        self.active = every_topic or bool(self.topics) or self.decide is not None
        self.counts = dict.fromkeys(COUNTERS, 0)

    def keeps(self, topic: str) -> bool:
        """Whether a send to ``topic`` keeps its body (and, for replay, its key and headers)."""
        if self.every_topic or topic in self.topics:
            return True
        return self.decide is not None and bool(self.decide(topic))

    def take(self, body: Any) -> bytes | None:
        """The body to keep, on the app's thread: redacted (the hook cuts it to ``max_bytes`` and marks
        it truncated); None: keep nothing.  Raises what the redaction callback raises (the hook logs it
        and keeps nothing)."""
        if type(body) is not bytes:
            if isinstance(body, str):
                body = body.encode()
            elif isinstance(body, (bytearray, memoryview)):
                body = bytes(body)
            else:  # not a body (bytes(5) would make one of five zero bytes)
                return None
        data = body
        if self.redact is not None:
            redacted = self.redact(data)
            if redacted is None:
                return None
            data = bytes(redacted)
        return data

    def finish(self, event: tuple) -> tuple:
        """On the dispatcher's thread: a kept record's event made wire-ready (headers as pairs, caps
        checked, body compressed when that helps), or with nothing kept when it cannot be kept exactly."""
        body, flags = event[_BODY], event[_FLAGS]
        if body is None:
            return event
        try:
            key = _raw_key(event[_KEY])
            headers = raw_header_pairs(event[_HEADERS])
        except Unkeepable:
            self.counts["unkeepable"] += 1
            return event[:_BODY] + (None,) + event[_BODY + 1:_FLAGS] + (0, None, None)
        if len(body) >= MIN_COMPRESS:
            packed = zlib.compress(body, COMPRESS_LEVEL)
            if len(packed) < len(body):
                body, flags = packed, flags | wire.BODY_ZLIB
                self.counts["compressed"] += 1
        self.counts["kept"] += 1
        if flags & wire.BODY_TRUNCATED:
            self.counts["truncated"] += 1
        return event[:_BODY] + (body,) + event[_BODY + 1:_FLAGS] + (flags, key, headers)


def _raw_key(key: Any) -> bytes | None:
    if key is None:
        return None
    if isinstance(key, str):
        key = key.encode("utf-8")
    elif not isinstance(key, _BYTES_LIKE):
        raise Unkeepable("a key that is neither bytes nor str")
    key = bytes(key)
    if len(key) > wire.MAX_BODY_LEN:
        raise Unkeepable("a key over the cap")
    return key


def raw_header_pairs(headers: Any) -> list[list[Any]] | None:
    """Record headers as wire pairs ``[[name (str), value (bytes)], ...]``: Kafka's (name, bytes) pairs or a
    mapping of them (confluent-kafka); str values as UTF-8.  Raises :class:`Unkeepable` past the caps."""
    if headers is None:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    pairs: list[list[Any]] = []
    size = 0
    for name, value in items:
        if isinstance(name, _BYTES_LIKE):
            try:
                name = bytes(name).decode("utf-8")
            except UnicodeDecodeError:
                raise Unkeepable("a header name that is not UTF-8") from None
        if isinstance(value, str):
            value = value.encode("utf-8")
        elif isinstance(value, _BYTES_LIKE):
            value = bytes(value)
        else:
            raise Unkeepable("a header value that is neither bytes nor str")
        if not isinstance(name, str):
            raise Unkeepable("a header name that is not a str")
        try:
            size += len(name.encode("utf-8")) + len(value)
        except UnicodeEncodeError:
            raise Unkeepable("a header name that is not UTF-8") from None
        pairs.append([name, value])
        if len(pairs) > wire.MAX_RAW_HEADERS or size > wire.MAX_RAW_HEADERS_BYTES:
            raise Unkeepable("headers over the caps")
    return pairs


def amqp_header_pairs(headers: Mapping[str, Any] | None) -> list[list[Any]] | None:
    """An AMQP ``headers`` table as raw_headers pairs, each value :func:`tracehook.wire.amqp_header_bytes`
    (a value of a type AMQP tables do not hold makes it :class:`Unkeepable`)."""
    if headers is None:
        return None
    try:
        return [[str(name), wire.amqp_header_bytes(value)] for name, value in headers.items()]
    except (TypeError, ValueError, OverflowError) as exc:
        raise Unkeepable(str(exc)) from None


def strip(event: tuple, fields: int) -> tuple:
    """``event`` as a collector that accepts ``fields`` event fields takes it: the newer fields left off,
    and the body too when it is compressed or cut and that collector cannot be told (no body_flags)."""
    if fields <= _FLAGS and event[_FLAGS]:
        return event[:_BODY] + (None,) + event[_BODY + 1:fields]
    return event[:fields]
