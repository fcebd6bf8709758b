"""Message identity and trace context: generated ids, request ids and the headers that carry them.

A producer that has no broker-assigned id gets one from :func:`new_msg_id`;
:func:`inject_headers` writes it and a W3C ``traceparent`` into the message's
headers so the consumer side can read both back with :func:`extract_headers`::

    headers = {}
    msg_id = tracehook.inject_headers(headers, tracehook.new_msg_id())
    ctx = tracehook.extract_headers(headers)   # ctx.msg_id == msg_id

Trace context rules (docs/library.md, "Trace context"):

* Inside an active OpenTelemetry span the send continues that trace: the
  ``traceparent`` carries the span's trace id and a new span id (the send, a
  child of the active span) and the span's sampled flag.  OpenTelemetry is
  never imported here: the lookup runs only once the app has imported
  ``opentelemetry.trace`` itself (without it no span can be active).
* Otherwise the message starts its own trace, whose id is :func:`trace_id_for`
  of the message id: the id itself when it is exactly 32 lower-case hex digits
  (not all zero), else a hash of it.  Generated ids have random low 64 bits, so
  ratio samplers (OpenTelemetry's ``TraceIdRatioBased``) see a uniform spread;
  such traces set the W3C level-2 "random" trace flag (0x02).  The sampled flag
  is then :func:`sampled_by_ratio` at ``TracerConfig.trace_sample_ratio``.
* A ``traceparent`` already in the headers (an OpenTelemetry producer's) is kept.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
import re
import sys
from collections.abc import MutableMapping
from typing import Any, NamedTuple

HEADER_MSG_ID = "tracehook-msg-id"
HEADER_TRACEPARENT = "traceparent"
DEFAULT_SAMPLE_RATIO = 1.0
"""Sampled-flag ratio for traces tracehook starts (see ``TracerConfig.trace_sample_ratio``)."""
FLAG_SAMPLED = 0x01
FLAG_RANDOM = 0x02  # W3C trace-context level 2: the trace id's low 7+ bytes are random
DERIVED_ID_PREFIX = "kafka:"

_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_ZERO_TRACE_ID = "0" * 32
_ZERO_SPAN_ID = "0" * 16
_MASK64 = (1 << 64) - 1
_RATIO_SCALE = 1 << 64


class HeaderContext(NamedTuple):
    """What :func:`extract_headers` found; a field is None when its header is absent."""

    msg_id: str | None
    traceparent: str | None

    @property
    def trace_id(self) -> str | None:
        """The trace id of the traceparent, if it is a valid one."""
        parsed = parse_traceparent(self.traceparent) if self.traceparent else None
        return parsed[0] if parsed else None


class SendContext(NamedTuple):
    """A send's identity as :func:`inject_context` left it in the headers.

    ``trace_id`` is "" when the message is in its own trace (``trace_id_for(msg_id)``),
    as the wire records it; ``span_id`` is the send's span (the consumers' parent), "" if
    the headers carry no valid ``traceparent``; ``traceparent`` is the header's value (pass it
    to ``record_send(traceparent=...)`` when the PUB is recorded later, as adapters do).
    """

    msg_id: str
    trace_id: str
    span_id: str
    traceparent: str


class _IdSource:
    """Unique 128-bit ids whose low 64 bits are random: a counter from a random start, then 64 random bits.

    The high half is unique within a process (it counts), the low half is what
    OpenTelemetry's ratio sampler decides on, so it must be uniform.  Both are
    renewed in a forked child (see reseed()), which must not repeat the parent's ids.
    """

    def __init__(self) -> None:
        self.reseed()

    def reseed(self) -> None:
        # A seeded Mersenne Twister, as OpenTelemetry's own id generator uses: ids need to be
        # unique and uniform, not secret, and os.urandom per id costs a system call.
        self._random = random.Random(os.urandom(32))
        self.getrandbits = self._random.getrandbits
        self._counter = itertools.count(int.from_bytes(os.urandom(8), "big"))
        self._request_prefix = os.urandom(8).hex()
        self._request_counter = itertools.count(1)

    def next(self) -> str:
        return f"{(next(self._counter) & _MASK64) << 64 | self.getrandbits(64):032x}"

    def request_id(self) -> str:
        # Request ids are never trace ids: a random prefix and a counter, cheaper than next().
        return f"{self._request_prefix}{next(self._request_counter):016x}"

    def span_id(self) -> str:
        return f"{self.getrandbits(64) or 1:016x}"


_ids = _IdSource()
os.register_at_fork(after_in_child=_ids.reseed)


def new_msg_id() -> str:
    """A new unique message id: 32 lower-case hex digits, usable as a W3C trace id, low 64 bits random."""
    return _ids.next()


def new_request_id() -> str:
    """A new unique id pairing a SUB_BEFORE with its SUB_AFTER."""
    return f"{_ids._request_prefix}{next(_ids._request_counter):016x}"  # request_id(), one call less


def new_span_id() -> str:
    """A new random W3C span id (16 lower-case hex digits, never all zero)."""
    return _ids.span_id()


def is_trace_id(text: str) -> bool:
    """Whether ``text`` is a valid W3C trace id: exactly 32 lower-case hex digits, not all zero."""
    return len(text) == 32 and _TRACE_ID.fullmatch(text) is not None and text != _ZERO_TRACE_ID


def trace_id_for(msg_id: str) -> str:
    """The trace id of a message's own trace: the id itself when it is a valid trace id, else a hash of it."""
    if is_trace_id(msg_id):
        return msg_id
    return hashlib.blake2b(msg_id.encode("utf-8", "replace"), digest_size=16).hexdigest()


def derived_msg_id(topic: str, partition: int, offset: int) -> str:
    """The message id of a message that has none but a place in a log: ``kafka:{topic}/{partition}/{offset}``.

    A consumer that finds no ``tracehook-msg-id`` header (the producer is traced by
    OpenTelemetry, or not at all) records its events under this id; the OTLP ingest
    derives the same id from a producer span's topic, partition and offset, so both sides
    meet.  Kafka topic names cannot contain "/", and the last two parts are integers, so
    ``rsplit("/", 2)`` takes it apart again.
    """
    return f"{DERIVED_ID_PREFIX}{topic}/{int(partition)}/{int(offset)}"


def sampled_by_ratio(trace_id: str, ratio: float) -> bool:
    """OpenTelemetry's ``TraceIdRatioBased`` decision: the low 64 bits of the trace id below ``ratio`` * 2**64."""
    if ratio >= 1.0:
        return True
    if ratio <= 0.0:
        return False
    return int(trace_id[16:], 16) < round(ratio * _RATIO_SCALE)


def parse_traceparent(value: str) -> tuple[str, str, int] | None:
    """(trace id, parent span id, flags) of a valid W3C ``traceparent``, else None.

    Accepts what OpenTelemetry's ``TraceContextTextMapPropagator`` accepts: version
    00 with exactly four fields, a later version with possibly more; never ``ff``, an
    all-zero trace id or an all-zero span id.
    """
    match = _TRACEPARENT.fullmatch(value.strip(" \t"))
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest) or trace_id == _ZERO_TRACE_ID or span_id == _ZERO_SPAN_ID:
        return None
    return trace_id, span_id, int(flags, 16)


def format_traceparent(trace_id: str, span_id: str, flags: int) -> str:
    """A version-00 ``traceparent`` header value."""
    return f"00-{trace_id}-{span_id}-{flags & 0xFF:02x}"


def active_otel_span() -> tuple[str, int] | None:
    """(trace id, trace flags) of the active OpenTelemetry span, or None (no valid span, or OTel not imported).

    Never imports OpenTelemetry: an app that has not imported ``opentelemetry.trace``
    cannot have an active span, and one dict lookup is all this costs it.
    """
    otel_trace = sys.modules.get("opentelemetry.trace")
    if otel_trace is None:
        return None
    try:
        span = otel_trace.get_current_span()
        if span is otel_trace.INVALID_SPAN:  # no span active: the common case, skip the rest
            return None
        context = span.get_span_context()
        if not context.is_valid:
            return None
        return f"{context.trace_id:032x}", context.trace_flags & (FLAG_SAMPLED | FLAG_RANDOM)
    except Exception:  # a broken or partial OpenTelemetry install: behave as if absent
        return None


def new_trace_context(msg_id: str, *, generated: bool = False,
                      sample_ratio: float = DEFAULT_SAMPLE_RATIO) -> tuple[str, str, int, bool]:
    """(trace id, span id, flags, own) for a new send of ``msg_id``.

    Continues the active OpenTelemetry span if there is one (``own`` False), else
    starts the message's own trace (``own`` True).  ``generated`` says ``msg_id`` came
    from :func:`new_msg_id`, so its low 64 bits are random.
    """
    span = active_otel_span()
    if span is not None:
        return span[0], _ids.span_id(), span[1], False
    if generated:
        trace_id, flags = msg_id, FLAG_RANDOM
    elif is_trace_id(msg_id):
        trace_id, flags = msg_id, 0  # the caller's id: nothing is known about its randomness
    else:
        trace_id, flags = trace_id_for(msg_id), FLAG_RANDOM  # a hash is uniform over the ids
    if sampled_by_ratio(trace_id, sample_ratio):
        flags |= FLAG_SAMPLED
    return trace_id, _ids.span_id(), flags, True


def make_traceparent(msg_id: str, sample_ratio: float = DEFAULT_SAMPLE_RATIO) -> str:
    """A W3C ``traceparent`` for a new send of ``msg_id`` (see :func:`new_trace_context`)."""
    trace_id, span_id, flags, _ = new_trace_context(msg_id, sample_ratio=sample_ratio)
    return format_traceparent(trace_id, span_id, flags)


def recorded_trace(traceparent: str | None, msg_id: str) -> tuple[str, str]:
    """(trace_id, span_id) as an event records them from a ``traceparent``: ("", "") when it is
    missing or invalid, and trace_id "" when it is the message's own trace (``trace_id_for(msg_id)``)."""
    parsed = parse_traceparent(traceparent) if traceparent else None
    if parsed is None:
        return "", ""
    trace_id = parsed[0]
    if trace_id == msg_id or trace_id == trace_id_for(msg_id):
        trace_id = ""
    return trace_id, parsed[1]


def _as_str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def get_header(headers: Any, name: str) -> str | None:
    """A header's value as str from a mapping or a list of (name, value) pairs; names match case-insensitively."""
    if headers is None:
        return None
    if type(headers) is dict:  # the common case first: an ABC isinstance check costs ~0.5 µs
        value = headers.get(name)
        if value is not None:
            return value if type(value) is str else _as_str(value)
        if not headers:
            return None
        pairs: Any = headers.items()
    elif type(headers) is list:
        pairs = headers
    elif isinstance(headers, MutableMapping) or hasattr(headers, "items"):
        value = headers.get(name)
        if value is not None:
            return _as_str(value)
        pairs = headers.items()
    else:
        pairs = headers
    lowered = name.lower()
    for key, value in pairs:
        key_text = _as_str(key)
        if key_text is not None and key_text.lower() == lowered:
            return _as_str(value)
    return None


def _put_header(headers: Any, name: str, value: str) -> None:
    if isinstance(headers, list):
        headers.append((name, value.encode("utf-8")))
    else:
        headers[name] = value


def set_header(headers: Any, name: str, value: str) -> None:
    """Set a header unless present: mappings get a str, lists of pairs get (name, utf-8 bytes) as Kafka wants."""
    if get_header(headers, name) is None:
        _put_header(headers, name, value)


def inject_context(headers: Any, msg_id: str | None = None, *,
                   sample_ratio: float = DEFAULT_SAMPLE_RATIO) -> SendContext:
    """Write the message id and a ``traceparent`` into ``headers`` where absent; return what is in effect.

    ``msg_id`` None generates one.  An id already in the headers wins (a re-send of
    the same message keeps its identity), and an existing traceparent (e.g. from
    OpenTelemetry) is kept and reported.
    """
    generated = False
    existing = get_header(headers, HEADER_MSG_ID)
    if existing:
        msg_id = existing
    else:
        if msg_id is None:
            msg_id, generated = new_msg_id(), True
        _put_header(headers, HEADER_MSG_ID, msg_id)
    traceparent = get_header(headers, HEADER_TRACEPARENT)
    if traceparent is not None:
        trace_id, span_id = recorded_trace(traceparent, msg_id)
        return SendContext(msg_id, trace_id, span_id, traceparent)
    trace_id, span_id, flags, own = new_trace_context(msg_id, generated=generated, sample_ratio=sample_ratio)
    traceparent = format_traceparent(trace_id, span_id, flags)
    _put_header(headers, HEADER_TRACEPARENT, traceparent)
    return SendContext(msg_id, "" if own else trace_id, span_id, traceparent)


def inject_headers(headers: Any, msg_id: str, *, sample_ratio: float = DEFAULT_SAMPLE_RATIO) -> str:
    """:func:`inject_context`, returning only the message id in effect."""
    return inject_context(headers, msg_id, sample_ratio=sample_ratio).msg_id


def extract_headers(headers: Any) -> HeaderContext:
    """Read the message id and traceparent from a mapping or list of pairs (str or bytes values)."""
    return HeaderContext(get_header(headers, HEADER_MSG_ID) or None, get_header(headers, HEADER_TRACEPARENT) or None)
