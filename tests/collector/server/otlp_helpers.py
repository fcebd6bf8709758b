"""Build OTLP protobuf spans and requests by hand for the OTLP mapping and route tests."""

from __future__ import annotations

from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

TRACE_ID = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
T0_NS = 1_700_000_000_000_000_000
PRODUCER, CONSUMER, INTERNAL = Span.SPAN_KIND_PRODUCER, Span.SPAN_KIND_CONSUMER, Span.SPAN_KIND_INTERNAL


def kv(key: str, value: Any) -> KeyValue:
    if isinstance(value, bool):
        any_value = AnyValue(bool_value=value)
    elif isinstance(value, int):
        any_value = AnyValue(int_value=value)
    elif isinstance(value, bytes):
        any_value = AnyValue(bytes_value=value)
    else:
        any_value = AnyValue(string_value=str(value))
    return KeyValue(key=key, value=any_value)


def span(name: str, kind: int, attrs: dict[str, Any], *, span_id: int = 1, start_ns: int = T0_NS,
         duration_ns: int = 2_500_000, error: str | None = None, exception: tuple[str, str] | None = None) -> Span:
    s = Span(trace_id=TRACE_ID, span_id=span_id.to_bytes(8, "big"), name=name, kind=kind,
             start_time_unix_nano=start_ns, end_time_unix_nano=start_ns + duration_ns,
             attributes=[kv(k, v) for k, v in attrs.items()], flags=0x101)
    if error is not None:
        s.status.code = Status.STATUS_CODE_ERROR
        s.status.message = error
    if exception is not None:
        event = s.events.add(name="exception", time_unix_nano=start_ns + duration_ns)
        event.attributes.extend([kv("exception.type", exception[0]), kv("exception.message", exception[1])])
    return s


def request(*spans: Span, service: str = "shop", instance: str = "i-1", host: str = "web-1"
            ) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend([kv("service.name", service), kv("service.instance.id", instance),
                                   kv("host.name", host)])
    rs.scope_spans.add().spans.extend(spans)
    return req
