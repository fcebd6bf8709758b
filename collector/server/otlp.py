"""OpenTelemetry in: OTLP trace requests → tracehook wire events (pure functions).

Messaging spans (OTel messaging semantic conventions, the current attribute names and the
older ones today's instrumentations still emit) become the events a tracehook hook would
have recorded: a send span one PUB, a receive span one SUB_BEFORE, a process span a
SUB_BEFORE + SUB_AFTER pair. Every other span is skipped and counted by reason::

    from collector.server import otlp
    request = otlp.decode_request(body, "application/x-protobuf")
    mapped = otlp.map_request(request)
    for resource in mapped.resources:      # one tracehook batch per OTel resource
        wire.encode_batch(wire.BatchHeader(resource.client_id, seq, resource.app, resource.host),
                          resource.events)

Kafka records have no message id: tracehook derives ``kafka:{topic}/{partition}/{offset}``
(:func:`derived_msg_id`), the same id its own Kafka consumers fall back to.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.proto.trace.v1.trace_pb2 import Status as SpanStatus

from collector.server.errors import BadOtlpRequest, UnsupportedMediaType
from tracehook.context import derived_msg_id
from tracehook.wire import DEFAULTS, MAX_INT, MAX_STR_LEN, MAX_TIME_MS, Event, EventType, Status

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
CONTENT_TYPES = (PROTOBUF, JSON)
MAX_ERROR_LEN = 512
"""Error texts are cut to this many characters, as the library's hooks cut them."""

# Skip reasons (the ``reason`` label of tracehook_otlp_spans_skipped_total).
NOT_MESSAGING = "not_messaging"
"""No ``messaging.*`` attributes: an HTTP or database span, say. Ignored, not rejected."""
NO_DESTINATION = "no_destination"
NO_OPERATION = "no_operation"
NO_MESSAGE_ID = "no_message_id"
BATCH_SPAN = "batch"
TOO_LONG = "too_long"
NESTED_SEND = "nested_send"
"""A send span inside another send span of the same message (pika wraps both of its channel layers):
the outer one is the send. Ignored, not rejected."""
REJECTED_REASONS = (NO_DESTINATION, NO_OPERATION, NO_MESSAGE_ID, BATCH_SPAN, TOO_LONG)
"""Messaging spans tracehook could not map: they are reported back as rejected (partial success)."""

# Attribute names, current first, then the older names instrumentations still emit.
SYSTEM = ("messaging.system",)
OPERATION = ("messaging.operation.type", "messaging.operation")
OPERATION_NAME = ("messaging.operation.name",)
DESTINATION = ("messaging.destination.name", "messaging.destination")
MESSAGE_ID = ("messaging.message.id", "messaging.message_id")
KEY = ("messaging.kafka.message.key", "messaging.kafka.message_key",
       "messaging.rabbitmq.destination.routing_key", "messaging.rabbitmq.routing_key")
PARTITION = ("messaging.destination.partition.id", "messaging.kafka.destination.partition",
             "messaging.kafka.partition")
OFFSET = ("messaging.kafka.offset", "messaging.kafka.message.offset")
GROUP = ("messaging.consumer.group.name", "messaging.kafka.consumer.group", "messaging.kafka.consumer_group",
         "messaging.destination.subscription.name")
BODY_SIZE = ("messaging.message.body.size", "messaging.message_payload_size_bytes")
BATCH_COUNT = ("messaging.batch.message_count",)
STORE_TIME = ("tracehook.store_time_ms",)
"""The broker's store time of the message (epoch ms), for a consume span to place a message whose send is
not traced: no messaging convention carries it, so an app sets it in its hook (docs/otel.md)."""
BROKER = ("server.address", "net.peer.name")
BROKER_PORT = ("server.port", "net.peer.port")

_SEND_OPS = frozenset({"publish", "create", "send"})
_RECEIVE_OPS = frozenset({"receive"})
_PROCESS_OPS = frozenset({"process", "deliver", "settle"})
_KNOWN_OPS = _SEND_OPS | _RECEIVE_OPS | _PROCESS_OPS
(_TYPE, _TIME, _GROUP, _MSG_ID, _KEYS, _BROKER, _QUEUE, _OFFSET, _BORN, _STORE, _COST, _STATUS, _ERROR, _BODY_LEN,
 _REQUEST_ID, _TRACE_ID, _SPAN_ID) = (Event._fields.index(f) for f in (
    "type", "time_ms", "group", "msg_id", "keys", "broker", "queue", "offset", "born_ms", "store_ms", "cost_us",
    "status", "error", "body_len", "request_id", "trace_id", "span_id"))
_PLAIN_DEFAULTS = tuple(int(v) if isinstance(v, IntEnum) else v for v in DEFAULTS)


# -- decoding -----------------------------------------------------------------------------

def decode_request(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    """An OTLP/HTTP trace request from its (already decompressed) body.

    Raises :class:`~collector.server.errors.UnsupportedMediaType` for another content type and
    :class:`~collector.server.errors.BadOtlpRequest` (reason ``bad_protobuf`` / ``bad_json``) for a bad body.
    """
    if content_type == PROTOBUF:
        try:
            return ExportTraceServiceRequest.FromString(body)
        except (DecodeError, ValueError, RecursionError) as exc:
            raise BadOtlpRequest(f"not an OTLP protobuf ExportTraceServiceRequest: {exc}"[:300],
                                 reason="bad_protobuf") from None
    if content_type == JSON:
        try:
            doc = json.loads(body)
            if not isinstance(doc, dict):
                raise ValueError("the body is not a JSON object")
            return json_format.ParseDict(_hex_ids_to_base64(doc), ExportTraceServiceRequest(),
                                         ignore_unknown_fields=True)
        except (ValueError, json_format.ParseError, RecursionError, TypeError) as exc:
            raise BadOtlpRequest(f"not an OTLP JSON ExportTraceServiceRequest: {exc}"[:300],
                                 reason="bad_json") from None
    raise UnsupportedMediaType(f"expected {PROTOBUF} or {JSON}, got {content_type or 'none'}")


_ID_FIELDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def _hex_ids_to_base64(doc: Any) -> Any:
    """OTLP/JSON writes trace and span ids as hex, protobuf's JSON mapping expects base64."""
    if isinstance(doc, dict):
        out = {}
        for key, value in doc.items():
            if key in _ID_FIELDS and isinstance(value, str):
                try:
                    value = base64.b64encode(bytes.fromhex(value)).decode()
                except ValueError:
                    raise ValueError(f"{key} {value[:40]!r} is not hex") from None
            else:
                value = _hex_ids_to_base64(value)
            out[key] = value
        return out
    if isinstance(doc, list):
        return [_hex_ids_to_base64(v) for v in doc]
    return doc


def encode_response(rejected: int, error_message: str, content_type: str) -> bytes:
    """The ExportTraceServiceResponse body, partial success filled in when spans were rejected."""
    response = ExportTraceServiceResponse()
    if rejected:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = error_message
    if content_type == JSON:
        return json_format.MessageToJson(response, indent=None).encode()
    return response.SerializeToString()


# -- mapping ------------------------------------------------------------------------------

@dataclass(frozen=True)
class MappedResource:
    """The events of one OTel resource (one service instance), appended as tracehook batches of its client id."""

    client_id: str
    app: str
    host: str
    events: list[tuple]


@dataclass
class MappedRequest:
    """What :func:`map_request` made of a request."""

    resources: list[MappedResource] = field(default_factory=list)
    spans: int = 0
    mapped_spans: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def rejected(self) -> int:
        """Messaging spans that could not be mapped (OTLP's ``rejected_spans``)."""
        return sum(n for reason, n in self.skipped.items() if reason in REJECTED_REASONS)

    @property
    def error_message(self) -> str:
        """OTLP's partial-success ``error_message``: the rejected spans by reason."""
        parts = [f"{n} {reason}" for reason, n in sorted(self.skipped.items()) if reason in REJECTED_REASONS]
        return ("messaging spans tracehook cannot place: " + ", ".join(parts)) if parts else ""


def map_request(request: ExportTraceServiceRequest) -> MappedRequest:
    """Map every span of a request; spans that cannot be mapped are counted in ``skipped``."""
    out = MappedRequest()
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        mapped_spans: list[tuple[Span, list[tuple]]] = []
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.spans += 1
                mapped = map_span(span, resource)
                if isinstance(mapped, str):
                    out.skipped[mapped] += 1
                else:
                    mapped_spans.append((span, mapped))
        sends = {(s.trace_id, s.span_id): e[0][_MSG_ID] for s, e in mapped_spans if e[0][_TYPE] == EventType.PUB}
        events: list[tuple] = []
        for span, mapped in mapped_spans:
            first = mapped[0]
            if first[_TYPE] == EventType.PUB and sends.get((span.trace_id, span.parent_span_id)) == first[_MSG_ID]:
                out.skipped[NESTED_SEND] += 1
                continue
            out.mapped_spans += 1
            events.extend(mapped)
        if events:
            out.resources.append(MappedResource(client_id_for(resource), _cut(_text(resource.get("service.name"))),
                                                _cut(_text(resource.get("host.name"))), events))
    return out


def client_id_for(resource: Mapping[str, Any]) -> str:
    """A batch client id for a resource: ``otel:`` + service.name + service.instance.id (else host and pid)."""
    name = _text(resource.get("service.name")) or "unknown_service"
    instance = _text(resource.get("service.instance.id"))
    if not instance:
        host, pid = _text(resource.get("host.name")), _text(resource.get("process.pid"))
        instance = f"{host}:{pid}" if host or pid else ""
    return _cut(f"otel:{name}/{instance}" if instance else f"otel:{name}")


def map_span(span: Span, resource: Mapping[str, Any]) -> list[tuple] | str:
    """The wire events of one span, or the reason it maps to none."""
    attrs = attributes(span.attributes)
    if not any(name.startswith("messaging.") for name in attrs):
        return NOT_MESSAGING
    topic = _first_text(attrs, DESTINATION)
    if not topic:
        return NO_DESTINATION
    operation = operation_of(span, attrs)
    if operation is None:
        return NO_OPERATION
    system = _first_text(attrs, SYSTEM)
    key = _first_text(attrs, KEY)
    if system == "rabbitmq" and "," in topic:
        # aio-pika's send spans name the destination "exchange,routing_key" (AMQP names have no
        # commas); its consume spans, pika and tracehook use the exchange, or the routing key
        # on the default exchange.
        exchange, _, routing_key = topic.partition(",")
        topic = exchange or routing_key
        key = key or (routing_key if exchange else "")
    partition = _first_int(attrs, PARTITION)
    offset = _first_int(attrs, OFFSET)
    given = _first_text(attrs, MESSAGE_ID)
    if system == "kafka" and offset < 0:
        offset = _synthetic_offset(topic, partition, given)
    msg_id = _message_id(system, topic, partition, offset, given)
    if not msg_id:
        count = _first_int(attrs, BATCH_COUNT)
        return BATCH_SPAN if count > 1 else NO_MESSAGE_ID
    if max(len(topic), len(msg_id)) > MAX_STR_LEN:
        return TOO_LONG

    start_ns, end_ns = span.start_time_unix_nano, span.end_time_unix_nano
    end_ms = end_ns // 1_000_000
    start_ms = start_ns // 1_000_000 or end_ms
    end_ms = max(end_ms, start_ms)
    cost_us = min(max(end_ns - start_ns, 0) // 1000, MAX_INT)
    status, error = outcome_of(span)
    # The fields every event of this span shares, by wire position (make_event's by-name lookup
    # costs more than the rest of the mapping).
    base = list(_PLAIN_DEFAULTS)
    base[1:5] = [0, "", topic, msg_id]
    base[_KEYS], base[_BROKER], base[_QUEUE], base[_OFFSET] = _cut(key), _cut(_broker(attrs)), partition, offset
    base[_BODY_LEN] = max(_first_int(attrs, BODY_SIZE, 0), 0)
    # A store time after the year 9999 is none a broker gave (the wire format refuses it): as if unset.
    base[_STORE] = _first_int(attrs, STORE_TIME, 0, high=MAX_TIME_MS)
    base[_TRACE_ID] = trace_id_of_span(span)
    # span_id is the send's span (tracehook.wire): a send's own, the parent a consumer continued.
    base[_SPAN_ID] = _span_hex(span.span_id if operation in _SEND_OPS else span.parent_span_id)
    if operation in _SEND_OPS:
        if status != Status.OK:
            status = Status.FAILED  # a send that ended in error did not reach the broker as intended
        base[_TYPE], base[_TIME], base[_BORN], base[_COST] = int(EventType.PUB), end_ms, start_ms, cost_us
        base[_STATUS], base[_ERROR] = int(status), error
        return [tuple(base)]
    base[_GROUP] = _cut(_first_text(attrs, GROUP) or _text(resource.get("service.name")))
    base[_REQUEST_ID] = span.span_id.hex()
    base[_TYPE], base[_TIME] = int(EventType.SUB_BEFORE), start_ms
    before = tuple(base)
    if operation in _RECEIVE_OPS and status == Status.OK:
        return [before]
    # A process span covers the handler; a receive span that failed says the attempt failed.
    base[_TYPE], base[_TIME], base[_COST], base[_STATUS], base[_ERROR] = (
        int(EventType.SUB_AFTER), end_ms, cost_us, int(status), error)
    return [before, tuple(base)]


def operation_of(span: Span, attrs: Mapping[str, Any]) -> str | None:
    """The messaging operation: the attribute, else the span name's verb, else the span kind."""
    for value in (_first_text(attrs, OPERATION), _first_text(attrs, OPERATION_NAME)):
        if value.lower() in _KNOWN_OPS:
            return value.lower()
    words = span.name.lower().split()
    for word in (words[-1:] + words[:1]):  # "{destination} {operation}" (older), "{operation} {destination}"
        if word in _KNOWN_OPS:
            return word
    if span.kind == Span.SPAN_KIND_PRODUCER:
        return "publish"
    if span.kind == Span.SPAN_KIND_CONSUMER:
        return "receive"
    return None


def outcome_of(span: Span) -> tuple[Status, str]:
    """Status and short error text: an exception event → EXCEPTION, status ERROR alone → FAILED."""
    exceptions = [attributes(e.attributes) for e in span.events if e.name == "exception"]
    if exceptions:
        exc = exceptions[-1]
        kind, message = _text(exc.get("exception.type")), _text(exc.get("exception.message"))
        text = f"{kind}: {message}" if kind and message else kind or message or span.status.message
        return Status.EXCEPTION, text[:MAX_ERROR_LEN]
    if span.status.code == SpanStatus.STATUS_CODE_ERROR:
        return Status.FAILED, (span.status.message or "error")[:MAX_ERROR_LEN]
    return Status.OK, ""


def _message_id(system: str, topic: str, partition: int, offset: int, given: str) -> str:
    if system == "kafka" and partition >= 0 and offset >= 0:
        # Kafka has no message ids; a given one is either the instrumentation's own rendering of
        # topic/partition/offset (aiokafka, confluent-kafka) or an app's choice. The derived form
        # replaces the former so every instrumentation and the library agree on one id.
        if not given or given == f"{topic}.{partition}.{offset}":
            return derived_msg_id(topic, partition, offset)
    return given


def _synthetic_offset(topic: str, partition: int, given: str) -> int:
    """The offset in an instrumentation's ``topic.partition.offset`` id (confluent-kafka's process
    spans carry it only there), else -1."""
    prefix = f"{topic}.{partition}."
    rest = given[len(prefix):] if partition >= 0 and given.startswith(prefix) else ""
    return int(rest) if rest.isdigit() and int(rest) <= MAX_INT else -1


def trace_id_of_span(span: Span) -> str:
    """The span's trace id as 32 lower-case hex digits; "" when it is not a valid W3C trace id."""
    trace_id = span.trace_id.hex()
    return trace_id if len(trace_id) == 32 and trace_id != "0" * 32 else ""


def _span_hex(span_id: bytes) -> str:
    text = span_id.hex()
    return text if len(text) == 16 and text != "0" * 16 else ""


def _broker(attrs: Mapping[str, Any]) -> str:
    host = _first_text(attrs, BROKER)
    port = _first_int(attrs, BROKER_PORT)
    return f"{host}:{port}" if host and port >= 0 else host


# -- attribute values ---------------------------------------------------------------------

def attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    """OTLP key/values as a plain dict (scalars as Python values, arrays as lists)."""
    out = {}
    for kv in pairs:
        value = kv.value
        kind = value.WhichOneof("value")
        # Scalars inline: this loop runs for every attribute of every span.
        out[kv.key] = getattr(value, kind) if kind in _SCALARS else any_value(value)
    return out


_SCALARS = frozenset({"string_value", "int_value", "bool_value", "double_value", "bytes_value"})


def any_value(value: AnyValue) -> Any:
    """One OTLP AnyValue as a Python value (None when unset)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    return getattr(value, kind)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _cut(text: str) -> str:
    return text[:MAX_STR_LEN]


def _first_text(attrs: Mapping[str, Any], names: tuple[str, ...]) -> str:
    for name in names:
        text = _text(attrs.get(name))
        if text:
            return text
    return ""


def _first_int(attrs: Mapping[str, Any], names: tuple[str, ...], default: int = -1, *, high: int = MAX_INT) -> int:
    """The first attribute that is an integer in ``[0, high]`` (ints, or strings such as partition ids)."""
    for name in names:
        value = attrs.get(name)
        if isinstance(value, bool) or value is None:
            continue
        try:
            number = int(value)
        except (TypeError, ValueError):
            continue
        if 0 <= number <= high:
            return number
    return default
