"""``POST /v1/traces``: OTLP/HTTP trace export into the trace log, durable like a native batch.

Token (ingest token as ``Authorization: Bearer``, or in the header named by
``otlp_token_header``) → the ingest admission checks → gunzip or zstd-decode (here, not by aiohttp:
the app turns its decoding off, see :func:`decompress`) → decode (protobuf or JSON)
→ map messaging spans to wire events (:mod:`collector.server.otlp`) → one wire batch per OTel
resource → :meth:`collector.server.ingest.Ingestor.append` (the same group commit, dedup window and
metrics as ``/v1/batches``) → 200 with an ``ExportTraceServiceResponse`` once every batch is on disk.

A batch's seq is a hash of its encoded events, so an exporter's retry of the same request
appends nothing twice. Spans that are not messaging spans are ignored; messaging spans
that cannot be placed come back as OTLP partial success (``rejected_spans``); both are
counted by reason in ``tracehook_otlp_spans_skipped_total``.
"""

from __future__ import annotations

import asyncio
import hashlib
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from collector.server import otlp
from collector.server.appkeys import CONFIG_KEY, INGESTOR_KEY, METRICS_KEY
from collector.server.auth import bearer_token, require_ingest_token
from collector.server.errors import ANSWERED, BadOtlpRequest, PayloadTooLarge, UnsupportedMediaType
from collector.server.ingest import INLINE_DECODE_BYTES
from collector.server.metrics import CollectorMetrics
from collector.wirecheck.validate import check_batch
from tracehook.wire import MAX_INT, BatchHeader, encode_batch_packed, encode_event

ROUTE = "/v1/traces"
MAX_EVENTS_PER_APPEND = 10_000
"""A resource's events go to the log in batches of at most this many (the wire format allows
100,000 per batch; a 16 MiB OTLP request can map to more)."""


MAX_MEMBERS = 64
"""Most gzip members / zstd frames one body may chain (an exporter sends one; each costs a decoder)."""


@dataclass(frozen=True)
class Codec:
    """A ``Content-Encoding`` the route decodes: a fresh decoder per gzip member or zstd frame
    (``decompress(data, max_length)``, ``eof``, ``unused_data``) and the error it raises."""

    reason: str
    new_decoder: Callable[[], Any]
    error: type[Exception]


def _zstd_codec() -> Codec | None:
    """zstd when a decoder is importable: the standard library's from 3.14, ``backports.zstd`` before."""
    try:
        from compression import zstd  # type: ignore[import-not-found]
    except ImportError:
        try:
            from backports import zstd  # type: ignore[no-redef]
        except ImportError:
            return None
    return Codec("bad_zstd", zstd.ZstdDecompressor, zstd.ZstdError)


CODECS: dict[str, Codec] = {"gzip": Codec("bad_gzip", lambda: zlib.decompressobj(wbits=31), zlib.error)}
_zstd = _zstd_codec()
if _zstd is not None:
    CODECS["zstd"] = _zstd


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """``body`` decoded as ``encoding`` (a key of :data:`CODECS`), at most ``limit`` bytes of it.

    The route decodes, not aiohttp: aiohttp answers an encoding it cannot decode (zstd without
    a decoder, br) with a plain-text 400 before any handler runs, and accepts a gzip stream that
    ends early as whatever it decoded so far. Here a stream that ends before its end marker (or
    a gzip member before its trailer) is ``BadOtlpRequest`` (``bad_gzip`` / ``bad_zstd``), output
    over ``limit`` is ``PayloadTooLarge``.
    """
    codec = CODECS[encoding]
    parts: list[bytes] = []
    size = 0
    rest = body
    for _ in range(MAX_MEMBERS):
        decoder = codec.new_decoder()
        try:
            part = decoder.decompress(rest, limit - size + 1)
        except codec.error as exc:
            raise BadOtlpRequest(f"the body does not decompress as {encoding}: {exc}", reason=codec.reason) from None
        size += len(part)
        if size > limit:
            raise PayloadTooLarge(f"the body decompresses to over the {limit} byte limit")
        if not decoder.eof:
            raise BadOtlpRequest(f"the {encoding} stream is truncated", reason=codec.reason)
        parts.append(part)
        rest = decoder.unused_data
        if not rest:
            return b"".join(parts)
    raise BadOtlpRequest(f"more than {MAX_MEMBERS} {encoding} members", reason=codec.reason)


class OtlpMetrics:
    """The route's own counters, registered with the collector's metrics."""

    def __init__(self, metrics: CollectorMetrics) -> None:
        self.spans = metrics.counter("tracehook_otlp_spans", "OTLP spans received in accepted requests.")
        self.accepted = metrics.counter(
            "tracehook_otlp_spans_accepted", "OTLP spans mapped to trace events and durably appended.")
        self.skipped = metrics.counter(
            "tracehook_otlp_spans_skipped", "OTLP spans that map to no trace event, by reason.", ["reason"])


OTLP_METRICS_KEY = web.AppKey("otlp_metrics", OtlpMetrics)


def setup(app: web.Application) -> None:
    """Register the route and its metrics (``create_app`` calls this)."""

    app[OTLP_METRICS_KEY] = OtlpMetrics(app[METRICS_KEY])
    app.router.add_post(ROUTE, post_traces)


def require_otlp_token(request: web.Request) -> None:
    """A token with the ingest scope, as a bearer token or (when configured) in ``otlp_token_header``."""

    config = request.app[CONFIG_KEY]
    presented = bearer_token(request)
    if presented is None and config.otlp_token_header:
        presented = request.headers.get(config.otlp_token_header, "").strip() or None
    require_ingest_token(request, presented)


def batch_seq(payload: bytes) -> int:
    """A batch's seq from its encoded events: a retried export gets the same (client id, seq) and is deduplicated."""
    return int.from_bytes(hashlib.blake2b(payload, digest_size=8).digest(), "big") & MAX_INT


@dataclass(frozen=True)
class Prepared:
    """A request made ready to append: wire batches ``(header, payload, events)`` and the span counts;
    or (``error_reason`` set) why the body does not decode. A value, so it crosses process boundaries."""

    batches: list[tuple[BatchHeader, bytes, int]] = field(default_factory=list)
    spans: int = 0
    mapped_spans: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    rejected: int = 0
    error_message: str = ""
    error_reason: str = ""
    error_detail: str = ""


def prepare(body: bytes, content_type: str) -> Prepared:
    """Decode, map and encode one OTLP body (on the event loop, a thread or a decode worker)."""
    try:
        mapped = otlp.map_request(otlp.decode_request(body, content_type))
    except BadOtlpRequest as exc:
        return Prepared(error_reason=exc.reason, error_detail=exc.detail)
    batches = []
    for resource in mapped.resources:
        for start in range(0, len(resource.events), MAX_EVENTS_PER_APPEND):
            packed = [encode_event(e) for e in resource.events[start:start + MAX_EVENTS_PER_APPEND]]
            header = BatchHeader(resource.client_id, batch_seq(b"".join(packed)), resource.app, resource.host)
            payload = encode_batch_packed(header, packed)
            check_batch(payload)  # the mapping's output must be what the index job reads (WireError: a bug)
            batches.append((header, payload, len(packed)))
    return Prepared(batches, mapped.spans, mapped.mapped_spans, dict(mapped.skipped), mapped.rejected,
                    mapped.error_message)


async def post_traces(request: web.Request) -> web.Response:
    """``POST /v1/traces``: 200 with an ExportTraceServiceResponse once the mapped events are durable."""

    ingestor = request.app[INGESTOR_KEY]
    counters = request.app[OTLP_METRICS_KEY]
    try:
        require_otlp_token(request)
        content_type = request.content_type
        if content_type not in otlp.CONTENT_TYPES:
            raise UnsupportedMediaType(f"expected {' or '.join(otlp.CONTENT_TYPES)}, got {content_type}")
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding != "identity" and encoding not in CODECS:
            raise UnsupportedMediaType(f"Content-Encoding {encoding} ({', '.join(CODECS)} or none)",
                                       reason="unsupported_encoding")
        body = await ingestor.read_body(request)
        if encoding != "identity":
            limit = request.app[CONFIG_KEY].max_body_bytes
            body = (decompress(body, encoding, limit) if len(body) <= INLINE_DECODE_BYTES
                    else await ingestor.offload(decompress, body, encoding, limit))
        # Mapping costs ~20-40 us per span in Python: a large body must not hold up the event loop.
        if len(body) <= INLINE_DECODE_BYTES:
            prepared = prepare(body, content_type)
        else:
            prepared = await ingestor.offload(prepare, body, content_type)
        if prepared.error_reason:
            raise BadOtlpRequest(prepared.error_detail, reason=prepared.error_reason)
        for header, _, events in prepared.batches:
            ingestor.limiter.check(header.client_id, events)
        # One group commit normally takes them all; every one is durable before the 200.
        await asyncio.gather(*(ingestor.append(h.client_id, h.seq, p, n) for h, p, n in prepared.batches))
    except ANSWERED as exc:
        ingestor.metrics.rejected.labels(reason=exc.reason).inc()
        raise
    counters.spans.inc(prepared.spans)
    counters.accepted.inc(prepared.mapped_spans)
    for reason, count in prepared.skipped.items():
        counters.skipped.labels(reason=reason).inc(count)
    return web.Response(body=otlp.encode_response(prepared.rejected, prepared.error_message, content_type),
                        content_type=content_type)
