"""OTLP ingest vs native ingest, same events, same run: spans/s accepted and indexed vs events/s.

One request carries 1,000 Kafka messaging spans (half send spans with an offset, as Java's
instrumentation reports them, half process spans), which map to 1,500 trace events. The
native batch is exactly those 1,500 events in tracehook's msgpack format. Each format goes to
its own real collector (``python -m collector``, fsync group commit, no index store) from 1
and 4 concurrent clients; then each collector's log is indexed in process into a local
store (``collector.index.indexer.index_records``, what the Spark job runs per partition).::

    python benchmarks/otlp_ingest.py [--seconds 5] [--clients 1,4] [--index-events 150000]

Every OTLP request differs (its first span id), as real exports do: identical requests would be
deduplicated without an append.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence

import aiohttp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from collector_ingest import _collector_cmd, _free_port, _start, tree_cpu_seconds  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue  # noqa: E402
from opentelemetry.proto.trace.v1.trace_pb2 import Span  # noqa: E402

from collector.index.indexer import index_records  # noqa: E402
from collector.log import file as tracelog  # noqa: E402
from collector.server import otlp  # noqa: E402
from collector.store import open_store  # noqa: E402
from tracehook import wire  # noqa: E402

SPANS_PER_REQUEST = 1000


def _kv(key: str, value: str | int) -> KeyValue:
    v = AnyValue(int_value=value) if isinstance(value, int) else AnyValue(string_value=value)
    return KeyValue(key=key, value=v)


def make_request() -> ExportTraceServiceRequest:
    """1,000 Kafka spans: sends with partition/offset/key, and process spans of group "billing"."""
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend([_kv("service.name", "bench"), _kv("service.instance.id", "bench-1"),
                                   _kv("host.name", "bench-host")])
    spans = rs.scope_spans.add().spans
    now_ns = time.time_ns()
    for i in range(SPANS_PER_REQUEST):
        n = i // 2
        send = i % 2 == 0
        attrs = [_kv("messaging.system", "kafka"), _kv("messaging.destination.name", "orders"),
                 _kv("messaging.destination.partition.id", str(n % 8)), _kv("messaging.kafka.offset", 100_000 + n),
                 _kv("messaging.kafka.message.key", f"order-{n}"), _kv("server.address", "broker-a"),
                 _kv("server.port", 9092), _kv("messaging.message.body.size", 512)]
        attrs.append(_kv("messaging.operation.type", "send" if send else "process"))
        if not send:
            attrs.append(_kv("messaging.consumer.group.name", "billing"))
        spans.add(trace_id=os.urandom(16), span_id=os.urandom(8), name="send orders" if send else "process orders",
                  kind=Span.SPAN_KIND_PRODUCER if send else Span.SPAN_KIND_CONSUMER,
                  start_time_unix_nano=now_ns + i * 1000, end_time_unix_nano=now_ns + i * 1000 + 150_000,
                  attributes=attrs, flags=0x101)
    return req


def otlp_bodies(request: ExportTraceServiceRequest, encoding: str) -> Callable[[int], bytes]:
    """Request number → body, each with a distinct first span id."""
    first = request.resource_spans[0].scope_spans[0].spans[0]

    def body(seq: int) -> bytes:
        first.span_id = seq.to_bytes(8, "big")
        data = request.SerializeToString()
        return gzip.compress(data, 1) if encoding == "gzip" else data

    return body


def native_bodies(events: list[tuple]) -> Callable[[int], bytes]:
    packed = [wire.encode_event(e) for e in events]
    return lambda seq: wire.encode_batch_packed(wire.BatchHeader("bench-native", seq, "bench", "bench-host"), packed)


async def _client(session: aiohttp.ClientSession, url: str, headers: dict[str, str], body: Callable[[int], bytes],
                  first_seq: int, deadline: float) -> int:
    seq, requests = first_seq, 0
    while time.perf_counter() < deadline:
        seq += 1
        async with session.post(url, data=body(seq), headers=headers) as resp:
            await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{url}: HTTP {resp.status}: {await resp.text()}")
        requests += 1
    return requests


async def measure(url: str, headers: dict[str, str], body: Callable[[int], bytes], clients: int, seconds: float,
                  pid: int, seq_base: int) -> tuple[float, float]:
    """Requests/s acknowledged, and the server's CPU seconds per request."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as session:
        await _client(session, url, headers, body, seq_base, time.perf_counter() + 0.5)  # warm-up
        cpu_before, started = tree_cpu_seconds(pid), time.perf_counter()
        deadline = started + seconds
        counts = await asyncio.gather(*(_client(session, url, headers, body, seq_base + (c + 1) * 10_000_000,
                                                deadline) for c in range(clients)))
        elapsed = time.perf_counter() - started
        cpu = tree_cpu_seconds(pid) - cpu_before
    return sum(counts) / elapsed, cpu / max(sum(counts), 1)


def index_log(log_dir: str, store_url: str, limit: int) -> tuple[int, float]:
    """Index up to ``limit`` events of a log in process: (events, seconds)."""
    records = []
    for seg in tracelog.sealed_segments(log_dir):
        for rec in tracelog.read_segment(seg.path):
            batch = wire.decode_batch(rec.payload)
            records.extend((batch.header, e) for e in batch.events)
            if len(records) >= limit:
                break
        if len(records) >= limit:
            break
    records = records[:limit]
    store = open_store(store_url)
    try:
        started = time.perf_counter()
        index_records(store, records)
        return len(records), time.perf_counter() - started
    finally:
        store.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", default="1,4")
    parser.add_argument("--index-events", type=int, default=150_000)
    args = parser.parse_args(argv)
    request = make_request()
    mapped = otlp.map_request(request)
    events = mapped.resources[0].events
    assert mapped.rejected == 0
    kinds = {
        "native msgpack": ({"Content-Type": "application/msgpack"}, "/v1/batches", native_bodies(events)),
        "OTLP protobuf": ({"Content-Type": otlp.PROTOBUF}, "/v1/traces", otlp_bodies(request, "identity")),
        "OTLP protobuf+gzip": ({"Content-Type": otlp.PROTOBUF, "Content-Encoding": "gzip"}, "/v1/traces",
                               otlp_bodies(request, "gzip")),
    }
    print(f"OTLP vs native ingest: {SPANS_PER_REQUEST} spans per OTLP request = {len(events)} events per "
          f"native batch; fsync; {args.seconds:g} s per cell")
    print("| clients | input | body bytes | requests/s | spans/s | events/s | server CPU µs per event |")
    print("|--:|---|--:|--:|--:|--:|--:|")
    with tempfile.TemporaryDirectory(prefix="otlp-bench-") as tmp:
        servers = {}
        try:
            for name in kinds:
                port = _free_port()
                data_dir = os.path.join(tmp, f"collector-{len(servers)}")
                servers[name] = (port, data_dir, _start(_collector_cmd(data_dir, port, "fsync"), port))
            for clients in (int(c) for c in args.clients.split(",")):
                for name, (headers, path, body) in kinds.items():
                    port, _, proc = servers[name]
                    rate, cpu = asyncio.run(measure(f"http://127.0.0.1:{port}{path}", headers, body, clients,
                                                    args.seconds, proc.pid, clients * 100_000_000))
                    spans = "" if name.startswith("native") else f"{rate * SPANS_PER_REQUEST:,.0f}"
                    print(f"| {clients} | {name} | {len(body(1)):,} | {rate:,.1f} | {spans} | "
                          f"{rate * len(events):,.0f} | {cpu * 1e6 / len(events):.2f} |", flush=True)
            print()
            print(f"indexing the first {args.index_events:,} events of each log in process (local store):")
            print("| input | events | seconds | events/s |")
            print("|---|--:|--:|--:|")
            for i, (name, (port, data_dir, _)) in enumerate(servers.items()):
                urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/admin/roll",
                                                              method="POST"), timeout=30).read()
                n, secs = index_log(os.path.join(data_dir, "log"), f"local:{os.path.join(tmp, f'index-{i}.sqlite3')}",
                                    args.index_events)
                print(f"| {name} | {n:,} | {secs:.1f} | {n / secs:,.0f} |", flush=True)
        finally:
            for _, _, proc in servers.values():
                proc.terminate()
                proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
