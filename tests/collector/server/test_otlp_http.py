"""``POST /v1/traces`` over real HTTP: encodings, auth, errors, partial success, durability."""

from __future__ import annotations

import dataclasses
import gzip
import json

import pytest
from collector_service_helpers import read_log
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from otlp_helpers import CONSUMER, INTERNAL, PRODUCER, TRACE_ID, request, span

from collector.server import otlp_http
from collector.server.app import create_app
from collector.server.ingest import INLINE_DECODE_BYTES
from tracehook.wire import EventType, decode_batch

try:  # what [collector] installs: the standard library's from 3.14, the backport before
    from compression import zstd  # type: ignore[import-not-found]
except ImportError:
    from backports import zstd  # type: ignore[no-redef]

PROTO = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}
KAFKA = {"messaging.system": "kafka", "messaging.destination.name": "orders",
         "messaging.destination.partition.id": "1", "messaging.kafka.offset": 17,
         "messaging.kafka.message.key": "order-1"}


def _request():  # type: ignore[no-untyped-def]
    return request(
        span("send orders", PRODUCER, {**KAFKA, "messaging.operation.type": "send"}, span_id=1),
        span("process orders", CONSUMER, {**KAFKA, "messaging.operation.type": "process",
                                          "messaging.consumer.group.name": "billing"}, span_id=2),
        span("GET /orders", INTERNAL, {"http.method": "GET"}, span_id=3),
        span("orders send", PRODUCER, {"messaging.system": "kafka", "messaging.destination": "orders"}, span_id=4),
    )


def _logged_events(collector_config):  # type: ignore[no-untyped-def]
    return [(r.client_id, e) for r in read_log(collector_config.log_dir) for e in decode_batch(r.payload).events]


async def _metrics(client) -> str:  # type: ignore[no-untyped-def]
    return await (await client.get("/metrics")).text()


async def test_protobuf_export_is_logged_with_partial_success(aiohttp_client, collector_config) -> None:
    client = await aiohttp_client(create_app(collector_config))
    resp = await client.post("/v1/traces", data=_request().SerializeToString(), headers=PROTO)
    assert resp.status == 200 and resp.content_type == "application/x-protobuf"
    answer = ExportTraceServiceResponse.FromString(await resp.read())
    # The HTTP span is ignored; the Kafka send span without an offset cannot be placed: rejected.
    assert answer.partial_success.rejected_spans == 1
    assert "1 no_message_id" in answer.partial_success.error_message
    logged = _logged_events(collector_config)  # in the log once the 200 is out
    assert [(cid, e.type, e.msg_id, e.group) for cid, e in logged] == [
        ("otel:shop/i-1", EventType.PUB, "kafka:orders/1/17", ""),
        ("otel:shop/i-1", EventType.SUB_BEFORE, "kafka:orders/1/17", "billing"),
        ("otel:shop/i-1", EventType.SUB_AFTER, "kafka:orders/1/17", "billing"),
    ]
    assert all(e.trace_id == TRACE_ID.hex() for _, e in logged)
    text = await _metrics(client)
    assert 'tracehook_otlp_spans_skipped_total{reason="no_message_id"} 1' in text
    assert 'tracehook_otlp_spans_skipped_total{reason="not_messaging"} 1' in text
    assert "tracehook_otlp_spans_accepted_total 2" in text
    assert "tracehook_collector_events_total 3" in text


async def test_json_and_gzip_encodings(aiohttp_client, collector_config) -> None:
    client = await aiohttp_client(create_app(collector_config))
    doc = json_format.MessageToDict(_request())
    for i, s in enumerate(doc["resourceSpans"][0]["scopeSpans"][0]["spans"]):  # OTLP/JSON: hex ids
        s["traceId"], s["spanId"] = TRACE_ID.hex(), f"{i + 11:016x}"
    resp = await client.post("/v1/traces", data=gzip.compress(json.dumps(doc).encode()),
                             headers={**JSON, "Content-Encoding": "gzip"})
    assert resp.status == 200 and resp.content_type == "application/json"
    answer = await resp.json()
    assert int(answer["partialSuccess"]["rejectedSpans"]) == 1
    resp = await client.post("/v1/traces", data=gzip.compress(_request().SerializeToString()),
                             headers={**PROTO, "Content-Encoding": "gzip"})
    assert resp.status == 200
    types = [e.type for _, e in _logged_events(collector_config)]
    assert types == [EventType.PUB, EventType.SUB_BEFORE, EventType.SUB_AFTER] * 2


async def test_a_retried_export_is_appended_once(aiohttp_client, collector_config) -> None:
    client = await aiohttp_client(create_app(collector_config))
    body = _request().SerializeToString()
    for _ in range(2):
        assert (await client.post("/v1/traces", data=body, headers=PROTO)).status == 200
    assert len(read_log(collector_config.log_dir)) == 1


async def test_only_messaging_free_spans_give_an_empty_success(aiohttp_client, collector_config) -> None:
    client = await aiohttp_client(create_app(collector_config))
    body = request(span("GET /", INTERNAL, {"http.method": "GET"})).SerializeToString()
    resp = await client.post("/v1/traces", data=body, headers=PROTO)
    assert resp.status == 200
    assert not ExportTraceServiceResponse.FromString(await resp.read()).HasField("partial_success")
    assert read_log(collector_config.log_dir) == []


async def test_ingest_token_as_bearer_or_configured_header(aiohttp_client, collector_config) -> None:
    cfg = dataclasses.replace(collector_config, ingest_token="in-tok", query_token="q-tok",
                              otlp_token_header="X-Tracehook-Token")
    client = await aiohttp_client(create_app(cfg))
    body = _request().SerializeToString()
    resp = await client.post("/v1/traces", data=body, headers=PROTO)
    assert resp.status == 401 and (await resp.json())["error"] == "unauthorized"
    resp = await client.post("/v1/traces", data=body, headers={**PROTO, "Authorization": "Bearer q-tok"})
    assert resp.status == 403
    resp = await client.post("/v1/traces", data=body, headers={**PROTO, "X-Tracehook-Token": "wrong"})
    assert resp.status == 401
    assert read_log(cfg.log_dir) == []
    for headers in ({"Authorization": "Bearer in-tok"}, {"X-Tracehook-Token": "in-tok"}):
        assert (await client.post("/v1/traces", data=body, headers={**PROTO, **headers})).status == 200


async def test_bad_bodies_are_400_with_a_reason(aiohttp_client, collector_config) -> None:
    client = await aiohttp_client(create_app(collector_config))
    cases = [
        (b"\x0a\xff\xff\xff\xff", PROTO, "bad_protobuf"),
        (b'{"resourceSpans": 3}', JSON, "bad_json"),
        (b"not gzip", {**PROTO, "Content-Encoding": "gzip"}, "bad_gzip"),
        (b"\x1f\x8b garbage", {**PROTO, "Content-Encoding": "gzip"}, "bad_gzip"),
        (gzip.compress(b"\x0a\xff\xff\xff\xff"), {**PROTO, "Content-Encoding": "gzip"}, "bad_protobuf"),
    ]
    for body, headers, reason in cases:
        resp = await client.post("/v1/traces", data=body, headers=headers)
        assert resp.status == 400, reason
        assert (await resp.json())["error"] == reason
    resp = await client.post("/v1/traces", data=b"x", headers={"Content-Type": "text/plain"})
    assert resp.status == 415
    assert 'tracehook_collector_rejected_total{reason="bad_gzip"} 2' in await _metrics(client)
    assert read_log(collector_config.log_dir) == []


@pytest.mark.parametrize("encoding", ["br", "snappy", "deflate"])
async def test_an_encoding_it_cannot_decode_is_415_json(aiohttp_client, collector_config, encoding) -> None:
    client = await aiohttp_client(create_app(collector_config))
    resp = await client.post("/v1/traces", data=b"\x8b\x00\x80 not decoded",
                             headers={**PROTO, "Content-Encoding": encoding})
    assert (resp.status, resp.content_type) == (415, "application/json")
    assert (await resp.json())["error"] == "unsupported_encoding"
    assert read_log(collector_config.log_dir) == []


async def test_zstd_is_decoded_when_a_decoder_is_installed(aiohttp_client, collector_config, monkeypatch) -> None:
    client = await aiohttp_client(create_app(collector_config))
    body = _request().SerializeToString()
    resp = await client.post("/v1/traces", data=zstd.compress(body), headers={**PROTO, "Content-Encoding": "zstd"})
    assert resp.status == 200
    assert [e.type for _, e in _logged_events(collector_config)] == [EventType.PUB, EventType.SUB_BEFORE,
                                                                     EventType.SUB_AFTER]
    # Without a decoder (Python < 3.14 and no backports.zstd) it is an encoding like any other it cannot read.
    monkeypatch.delitem(otlp_http.CODECS, "zstd")
    resp = await client.post("/v1/traces", data=zstd.compress(body), headers={**PROTO, "Content-Encoding": "zstd"})
    assert (resp.status, (await resp.json())["error"]) == (415, "unsupported_encoding")


async def test_a_truncated_stream_is_400_and_nothing_is_appended(aiohttp_client, collector_config) -> None:
    client = await aiohttp_client(create_app(collector_config))
    body = _request().SerializeToString()
    gz, zs = gzip.compress(body), zstd.compress(body)
    cases = [
        (gz[:-8], "gzip", "bad_gzip"),  # every byte of the data, only the CRC32 and length trailer missing
        (gz[:len(gz) // 2], "gzip", "bad_gzip"),
        (gz + gz[:len(gz) // 2], "gzip", "bad_gzip"),  # a whole member, then half of another
        (zs[:-4], "zstd", "bad_zstd"),
        (zs[:len(zs) // 2], "zstd", "bad_zstd"),
        (gzip.compress(b"") * (otlp_http.MAX_MEMBERS + 1), "gzip", "bad_gzip"),
    ]
    for data, encoding, reason in cases:
        resp = await client.post("/v1/traces", data=data, headers={**PROTO, "Content-Encoding": encoding})
        assert (resp.status, (await resp.json())["error"]) == (400, reason), (encoding, len(data))
    assert read_log(collector_config.log_dir) == []
    # Whole gzip members one after another are one valid body (RFC 1952), here the request in two halves.
    half = len(body) // 2
    resp = await client.post("/v1/traces", data=gzip.compress(body[:half]) + gzip.compress(body[half:]),
                             headers={**PROTO, "Content-Encoding": "gzip"})
    assert resp.status == 200 and len(_logged_events(collector_config)) == 3


@pytest.mark.parametrize("encoding, compress", [("gzip", gzip.compress), ("zstd", zstd.compress)])
async def test_a_compression_bomb_is_413(aiohttp_client, collector_config, encoding, compress) -> None:
    cfg = dataclasses.replace(collector_config, max_body_bytes=64 * 1024)
    client = await aiohttp_client(create_app(cfg))
    resp = await client.post("/v1/traces", data=compress(b"\0" * (1024 * 1024)),
                             headers={**PROTO, "Content-Encoding": encoding})
    assert (resp.status, (await resp.json())["error"]) == (413, "payload_too_large")
    assert read_log(cfg.log_dir) == []


async def test_a_large_export_is_split_into_several_log_batches(aiohttp_client, collector_config,
                                                                 monkeypatch) -> None:
    monkeypatch.setattr(otlp_http, "MAX_EVENTS_PER_APPEND", 4)
    client = await aiohttp_client(create_app(collector_config))
    spans = [span("q send", PRODUCER, {"messaging.system": "rabbitmq", "messaging.destination": "q",
                                       "messaging.message.id": f"m{i}"}, span_id=i + 1) for i in range(10)]
    resp = await client.post("/v1/traces", data=request(*spans).SerializeToString(), headers=PROTO)
    assert resp.status == 200
    records = read_log(collector_config.log_dir)
    assert [len(decode_batch(r.payload).events) for r in records] == [4, 4, 2]
    assert [e.msg_id for r in records for e in decode_batch(r.payload).events] == [f"m{i}" for i in range(10)]


async def test_a_large_body_is_mapped_off_the_event_loop(aiohttp_client, collector_config) -> None:
    # Over INLINE_DECODE_BYTES: mapped in a thread.
    cfg = collector_config
    client = await aiohttp_client(create_app(cfg))
    spans = [span("q send", PRODUCER, {"messaging.system": "rabbitmq", "messaging.destination": "q",
                                       "messaging.message.id": f"m{i}"}, span_id=i + 1) for i in range(400)]
    body = request(*spans).SerializeToString()
    assert len(body) > INLINE_DECODE_BYTES
    resp = await client.post("/v1/traces", data=body, headers=PROTO)
    assert resp.status == 200
    assert len(_logged_events(cfg)) == 400
    resp = await client.post("/v1/traces", data=b"\x0a\xff" + body, headers=PROTO)
    assert (resp.status, (await resp.json())["error"]) == (400, "bad_protobuf")
