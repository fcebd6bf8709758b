"""Hook overhead: tracehook vs OpenTelemetry's Python SDK, side by side in one run.

Measures, on the app's thread, the cost of recording one message event while
the background exporter delivers to a local stub collector (a separate
process that answers 200 to ``POST /v1/batches`` and ``POST /v1/traces``):

* tracehook ``record_send`` with 8 messaging fields, and a consume span
  (``with tracer.consume(...)``: SUB_BEFORE + SUB_AFTER);
* the same ``record_send`` with OpenTelemetry in the process: imported but no span
  active, and inside an active span (the send continues its trace), each with and
  without headers (message id + ``traceparent`` written);
* OpenTelemetry ``start_span`` with 8 messaging attributes + ``end``, with a
  BatchSpanProcessor and (a) a no-op exporter, (b) the OTLP/HTTP exporter.

Then end-to-end: N events recorded as fast as the app can, flushed, and the
number delivered (acknowledged), dropped, events/s and bytes per event on the wire.

Needs (not project dependencies)::

    pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
    python benchmarks/hook_overhead.py [--events 1000000] [--otel-events 50000]
"""

from __future__ import annotations

import argparse
import collections
import http.server
import json
import os
import queue
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tracehook  # noqa: E402

CHUNK = 100  # calls timed together; per-call cost = chunk time / CHUNK (timer overhead amortised)
ATTRS = dict(keys="order-1", tags="created", broker="broker-a:10911", queue=3, offset=123456,
             born_ms=1_700_000_000_000, store_ms=1_700_000_000_002, cost_us=1500)  # 8 fields besides topic/id


# -- the stub collector (own process, so it does not share the measured process's GIL) --------

class _StubHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as both exporters use persistent connections
    totals: dict[str, int] = collections.Counter()

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes; without this, Nagle + delayed ACK adds 40 ms per request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length", 0))
        self.rfile.read(length)
        kind = "tracehook" if self.path == "/v1/batches" else "otlp"
        self.totals[f"{kind}_bytes"] += length
        self.totals[f"{kind}_requests"] += 1
        self._answer(b"{}")

    def do_GET(self) -> None:  # noqa: N802
        self._answer(json.dumps(self.totals).encode())

    def _answer(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def serve_stub(port: int) -> None:
    """Run the stub collector until killed (``--serve PORT``)."""
    http.server.ThreadingHTTPServer(("127.0.0.1", port), _StubHandler).serve_forever()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_stub() -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", str(port)])
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(url + "/stats", timeout=1).read()
            return proc, url
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("stub collector did not start")


def stub_totals(url: str) -> dict[str, int]:
    return collections.Counter(json.loads(urllib.request.urlopen(url + "/stats", timeout=5).read()))


# -- measuring ---------------------------------------------------------------------------------

def per_call_us(call: Callable[[int], None], n: int,
                clock: Callable[[], int] = time.perf_counter_ns) -> tuple[float, float]:
    """(median, p99) microseconds per call, over chunks of CHUNK calls (wall time; ``time.thread_time_ns``:
    this thread's CPU time, which a loaded host's waits for a core do not inflate)."""
    samples = []
    for start in range(0, n, CHUNK):
        t0 = clock()
        for i in range(start, start + CHUNK):
            call(i)
        samples.append((clock() - t0) / CHUNK / 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99)]


Row = dict[str, Any]


def bench_tracehook(url: str, n_events: int, n_cost: int) -> list[Row]:
    rows = []
    tracer = tracehook.Tracer(tracehook.TracerConfig(app="bench", collectors=(url,), queue_size=2_000_000,
                                                     flush_at_exit=False))
    send = tracer.record_send
    median, p99 = per_call_us(lambda i: send("orders", f"m{i}", **ATTRS), n_cost)
    tracer.flush(60)

    def consume(i: int) -> None:
        with tracer.consume("orders", f"m{i}", "billing", keys="order-1", queue=3, offset=i):
            pass

    c_median, c_p99 = per_call_us(consume, n_cost)
    tracer.flush(60)
    h_median, h_p99 = per_call_us(lambda i: send("orders", headers={}, **ATTRS), n_cost)
    tracer.flush(60)
    before = stub_totals(url)
    sent_before = tracer.stats()["sent"]
    t0 = time.perf_counter()
    for i in range(n_events):
        send("orders", f"e{i}", **ATTRS)
    emit_s = time.perf_counter() - t0
    tracer.flush(120)
    total_s = time.perf_counter() - t0
    stats = tracer.stats()
    sent = stats["sent"] - sent_before
    wire_bytes = stub_totals(url)["tracehook_bytes"] - before["tracehook_bytes"]
    tracer.close()
    rows.append(dict(system="tracehook record_send (8 fields)", median=median, p99=p99, events=n_events,
                     delivered=sent, dropped=n_events - sent, emit_rate=n_events / emit_s,
                     e2e_rate=sent / total_s, bytes=wire_bytes / max(sent, 1)))
    rows.append(dict(system="tracehook consume span (2 events)", median=c_median, p99=c_p99))
    rows.append(dict(system="tracehook record_send + headers", median=h_median, p99=h_p99))
    rows.append(bench_tracehook_default_queue(url, n_events))
    return rows


BODY_1K = (b'{"order": 42, "customer": "c-1001", "lines": [' + b'{"sku": "A-1", "qty": 1}, ' * 38)[:1024]


def bench_bodies(url: str, n_cost: int) -> list[Row]:
    """record_send with 8 fields, on a topic that keeps bodies, with and without a 1 KiB body (issue 43):
    alternated rounds, each flushed before the next, medians of the rounds' medians, in wall and in CPU
    time of the app's thread.  The 8 fields are keywords here (not ``**ATTRS``, whose dict merge with
    one more keyword costs more than the body does), the same in every row."""
    tracer = tracehook.Tracer(tracehook.TracerConfig(app="bench", collectors=(url,), queue_size=2_000_000,
                                                     flush_at_exit=False, body_topics={"orders"}))
    send = tracer.record_send
    headers = [("tracehook-msg-id", b"0af7651916cd43dd8448eb211c80319c"), ("orderId", b"42")]
    a = ATTRS
    calls = {
        "record_send (8 fields), keeping topic, no body": lambda i: send(
            "orders", f"b{i}", keys=a["keys"], tags=a["tags"], broker=a["broker"], queue=3, offset=i,
            born_ms=a["born_ms"], store_ms=a["store_ms"], cost_us=a["cost_us"]),
        "record_send + 1 KiB body, keeping topic": lambda i: send(
            "orders", f"b{i}", keys=a["keys"], tags=a["tags"], broker=a["broker"], queue=3, offset=i,
            born_ms=a["born_ms"], store_ms=a["store_ms"], cost_us=a["cost_us"], body=BODY_1K),
        "record_send + 1 KiB body + raw key + 2 headers": lambda i: send(
            "orders", f"b{i}", keys=a["keys"], tags=a["tags"], broker=a["broker"], queue=3, offset=i,
            born_ms=a["born_ms"], store_ms=a["store_ms"], cost_us=a["cost_us"], body=BODY_1K,
            raw_key=b"order-42", raw_headers=headers),
    }
    rows = []
    for clock, label in ((time.perf_counter_ns, "wall"), (time.thread_time_ns, "CPU")):
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in calls}
        for _ in range(5):
            for name, call in calls.items():
                results[name].append(per_call_us(call, n_cost // 10, clock))
                tracer.flush(120)
        rows += [dict(system=f"tracehook {name} ({label})", median=statistics.median(m for m, _ in runs),
                      p99=statistics.median(p for _, p in runs)) for name, runs in results.items()]
    stats = tracer.stats()
    tracer.close()
    assert stats["dropped_total"] == 0, stats
    return rows


def bench_tracehook_in_otel_span(url: str, n_cost: int) -> list[Row]:
    """record_send once the app has imported OpenTelemetry: no span active, then inside one."""
    assert "opentelemetry.trace" not in sys.modules, "run before anything imports OpenTelemetry"
    from opentelemetry.sdk.trace import TracerProvider

    otel = TracerProvider().get_tracer("bench")  # no processor: the span only has to be active
    tracer = tracehook.Tracer(tracehook.TracerConfig(app="bench", collectors=(url,), queue_size=2_000_000,
                                                     flush_at_exit=False))
    send = tracer.record_send
    rows = []
    for name, call in (("record_send, OTel imported, no span", lambda i: send("orders", f"m{i}", **ATTRS)),
                       ("record_send + headers, OTel imported, no span",
                        lambda i: send("orders", headers={}, **ATTRS))):
        median, p99 = per_call_us(call, n_cost)
        tracer.flush(60)
        rows.append(dict(system=f"tracehook {name}", median=median, p99=p99))
    with otel.start_as_current_span("app"):
        for name, call in (("record_send in an active OTel span", lambda i: send("orders", f"m{i}", **ATTRS)),
                           ("record_send + headers in an active span",
                            lambda i: send("orders", headers={}, **ATTRS))):
            median, p99 = per_call_us(call, n_cost)
            tracer.flush(60)
            rows.append(dict(system=f"tracehook {name}", median=median, p99=p99))
    tracer.close()
    return rows


def bench_tracehook_default_queue(url: str, n_events: int) -> Row:
    """Unpaced at the default queue size: what a burst faster than delivery costs in drops."""
    tracer = tracehook.Tracer(tracehook.TracerConfig(app="bench", collectors=(url,), flush_at_exit=False))
    send = tracer.record_send
    t0 = time.perf_counter()
    for i in range(n_events):
        send("orders", f"d{i}", **ATTRS)
    emit_s = time.perf_counter() - t0
    tracer.flush(120)
    total_s = time.perf_counter() - t0
    stats = tracer.stats()
    tracer.close()
    return dict(system=f"tracehook, default queue ({tracer.config.queue_size})", events=n_events,
                delivered=stats["sent"], dropped=stats["dropped_total"], emit_rate=n_events / emit_s,
                e2e_rate=stats["sent"] / total_s)


def bench_otel(url: str | None, n_events: int, n_cost: int) -> list[Row]:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.trace import SpanKind

    class Counting(SpanExporter):
        """Counts spans the wrapped exporter reports as exported (the no-op one when inner is None)."""

        def __init__(self, inner: Any = None) -> None:
            self.inner, self.exported = inner, 0

        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            result = self.inner.export(spans) if self.inner is not None else SpanExportResult.SUCCESS
            if result == SpanExportResult.SUCCESS:
                self.exported += len(spans)
            return result

        def shutdown(self) -> None:
            if self.inner is not None:
                self.inner.shutdown()

    inner = None
    if url is not None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter,
        )

        inner = OTLPSpanExporter(endpoint=url + "/v1/traces")
    exporter = Counting(inner)
    provider = TracerProvider(resource=Resource.create({"service.name": "bench"}))
    provider.add_span_processor(BatchSpanProcessor(exporter))  # SDK defaults: queue 2048, batch 512, 5 s
    tracer = provider.get_tracer("bench")

    def span(i: int) -> None:
        tracer.start_span("orders publish", kind=SpanKind.PRODUCER, attributes={
            "messaging.system": "rocketmq", "messaging.destination.name": "orders",
            "messaging.message.id": f"m{i}", "messaging.rocketmq.message.keys": "order-1",
            "messaging.rocketmq.message.tag": "created", "server.address": "broker-a",
            "messaging.destination.partition.id": "3", "messaging.rocketmq.message.offset": 123456,
        }).end()

    median, p99 = per_call_us(span, n_cost)
    provider.force_flush(60_000)
    before_spans = exporter.exported
    before = stub_totals(url) if url else collections.Counter()
    t0 = time.perf_counter()
    for i in range(n_events):
        span(i)
    emit_s = time.perf_counter() - t0
    provider.force_flush(120_000)
    total_s = time.perf_counter() - t0
    exported = exporter.exported - before_spans
    wire_bytes = (stub_totals(url)["otlp_bytes"] - before["otlp_bytes"]) if url else 0
    provider.shutdown()
    name = "OpenTelemetry SDK, OTLP/HTTP exporter" if url else "OpenTelemetry SDK, no-op exporter"
    return [dict(system=name, median=median, p99=p99, events=n_events, delivered=exported,
                 dropped=n_events - exported, emit_rate=n_events / emit_s, e2e_rate=exported / total_s,
                 bytes=(wire_bytes / exported) if url and exported else None)]


def bench_queues(n: int = 1_000_000) -> list[tuple[str, float]]:
    """The hot path's queue choice: a bounded put on a deque vs a SimpleQueue (ns per put)."""
    out = []
    dq: collections.deque[int] = collections.deque()
    t0 = time.perf_counter_ns()
    for i in range(n):
        if len(dq) < 2_000_000:
            dq.append(i)
    out.append(("deque: len() check + append", (time.perf_counter_ns() - t0) / n))
    sq: queue.SimpleQueue[int] = queue.SimpleQueue()
    t0 = time.perf_counter_ns()
    for i in range(n):
        if sq.qsize() < 2_000_000:
            sq.put(i)
    out.append(("SimpleQueue: qsize() check + put", (time.perf_counter_ns() - t0) / n))
    return out


def _fmt(value: Any, spec: str) -> str:
    return "" if value is None else format(value, spec)


def print_table(rows: list[Row]) -> None:
    print(f"| {'system':<50} | caller µs/event median | p99 | events | delivered | dropped | "
          f"app emit rate/s | end-to-end events/s | bytes/event |")
    print("|" + "---|" * 9)
    for r in rows:
        print(f"| {r['system']:<50} | {_fmt(r.get('median'), '.2f')} | {_fmt(r.get('p99'), '.2f')} | "
              f"{_fmt(r.get('events'), ',')} | {_fmt(r.get('delivered'), ',')} | {_fmt(r.get('dropped'), ',')} | "
              f"{_fmt(r.get('emit_rate'), ',.0f')} | {_fmt(r.get('e2e_rate'), ',.0f')} | {_fmt(r.get('bytes'), '.1f')} |")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="tracehook end-to-end events")
    parser.add_argument("--otel-events", type=int, default=50_000, help="OpenTelemetry end-to-end spans")
    parser.add_argument("--cost-calls", type=int, default=200_000, help="calls timed for the per-call cost")
    parser.add_argument("--bodies-only", action="store_true", help="only the kept-body rows (issue 43)")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve_stub(args.serve)
        return 0
    proc, url = start_stub()
    if args.bodies_only:
        try:
            rows = bench_bodies(url, args.cost_calls)
        finally:
            proc.terminate()
            proc.wait(10)
        print(f"\nhook_overhead --bodies-only — {time.strftime('%Y-%m-%d')}, Python {sys.version.split()[0]}")
        print_table(rows)
        return 0
    try:
        rows = bench_tracehook(url, args.events, args.cost_calls)
        rows += bench_bodies(url, min(args.cost_calls, 100_000))
        try:
            rows += bench_tracehook_in_otel_span(url, args.cost_calls)
            rows += bench_otel(None, args.otel_events, min(args.cost_calls, 50_000))
            rows += bench_otel(url, args.otel_events, min(args.cost_calls, 50_000))
        except ImportError:
            print("(OpenTelemetry not installed: pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http)")
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"\nhook_overhead — {time.strftime('%Y-%m-%d')}, Python {sys.version.split()[0]}, {os.cpu_count()} cores\n")
    print_table(rows)
    print("\n| hot-path queue | ns per bounded put |\n|---|---|")
    for name, ns in bench_queues():
        print(f"| {name} | {ns:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
