"""Adapter overhead: messages/s for produce + consume through a real local Kafka (kafka-python).

Side by side in one run, interleaved rounds, median reported:
  * plain kafka-python,
  * with tracehook's adapter (TracedProducer/TracedConsumer; events go to a stub collector process),
  * with OpenTelemetry's kafka-python instrumentation (spans exported over OTLP/HTTP to the same stub),
and, to show where the adapter's cost goes, the two trace headers alone and the adapter with a
tracer that discards its events (no dispatcher work).

Run: python benchmarks/adapter_overhead.py [--messages 20000] [--rounds 3]
(uses a Kafka started with scripts/kafka start, or starts one and stops it afterwards).
Target: tracehook's adapter costs <= 5% of throughput.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from hook_overhead import start_stub
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

import tracehook
from tracehook.adapters import kafka_python

BODY = b"x" * 200
PARTITIONS = 3

Wrap = Callable[[Any], Any]


def run_once(bootstrap: str, n: int, wrap_producer: Wrap, wrap_consumer: Wrap) -> float:
    """Produce n keyed messages, then consume them all in a fresh group; messages/s over both phases."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    admin.close()
    producer = wrap_producer(KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5))
    consumer = wrap_consumer(KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=topic,
                                           auto_offset_reset="earliest", consumer_timeout_ms=10_000))
    consumer.poll(timeout_ms=1000)   # join the group before the clock starts
    consumer.seek_to_beginning()
    started = time.perf_counter()
    for i in range(n):
        producer.send(topic, BODY, key=b"key-%d" % i)
    producer.flush()
    received = 0
    for _record in consumer:
        received += 1
        if received == n:
            break
    elapsed = time.perf_counter() - started
    consumer.close()
    producer.close()
    if received != n:
        raise RuntimeError(f"consumed {received} of {n}")
    return n / elapsed


class HeadersOnly:
    """Adds headers of the adapter's size and nothing else: the cost of carrying context in Kafka records."""

    def __init__(self, producer: Any) -> None:
        self._producer = producer

    def send(self, topic: str, value: Any = None, key: Any = None) -> Any:
        headers = [("tracehook-msg-id", b"0" * 32), ("traceparent", b"0" * 55)]
        return self._producer.send(topic, value, key=key, headers=headers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)


def kafka_bootstrap() -> tuple[str, bool]:
    """A running broker's address and whether this run started it."""
    script = os.path.join(ROOT, "scripts", "kafka")
    status = subprocess.run([script, "status"], capture_output=True, text=True, check=False)
    if status.returncode == 0:
        return status.stdout.split()[-1], False
    started = subprocess.run([script, "start"], capture_output=True, text=True, check=True)
    return started.stdout.strip().splitlines()[-1], True


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.kafka import KafkaInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    bootstrap, started = kafka_bootstrap()
    stub, url = start_stub()
    tracer = tracehook.Tracer(tracehook.TracerConfig.from_env(app="bench", collectors=[url]))
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url + "/v1/traces")))
    otel = KafkaInstrumentor()

    def same(client: Any) -> Any:
        return client

    def run_otel() -> float:
        otel.instrument(tracer_provider=provider)
        try:
            return run_once(bootstrap, args.messages, same, same)
        finally:
            otel.uninstrument()

    idle = tracehook.Tracer(tracehook.TracerConfig.from_env(app="bench", collectors=[]))  # records nothing

    modes: dict[str, Callable[[], float]] = {
        "kafka-python (plain)": lambda: run_once(bootstrap, args.messages, same, same),
        "+ the two trace headers only": lambda: run_once(bootstrap, args.messages, HeadersOnly, same),
        "+ tracehook, events discarded": lambda: run_once(
            bootstrap, args.messages, lambda p: kafka_python.TracedProducer(p, idle),
            lambda c: kafka_python.TracedConsumer(c, idle)),
        "+ tracehook adapter": lambda: run_once(
            bootstrap, args.messages, lambda p: kafka_python.TracedProducer(p, tracer),
            lambda c: kafka_python.TracedConsumer(c, tracer)),
        "+ OpenTelemetry kafka-python": run_otel,
    }
    results: dict[str, list[float]] = {name: [] for name in modes}
    try:
        run_once(bootstrap, min(args.messages, 2000), same, same)   # warm-up: connections, JIT in the broker
        for _ in range(args.rounds):
            for name, run in modes.items():
                results[name].append(run())
        tracer.flush(30)
        provider.force_flush()
    finally:
        tracer.close()
        idle.close()
        provider.shutdown()
        stub.kill()
        if started:
            subprocess.run([os.path.join(ROOT, "scripts", "kafka"), "stop"], capture_output=True, check=False)

    base = statistics.median(results["kafka-python (plain)"])
    print(f"{args.messages} messages x {args.rounds} rounds, produce + consume, {PARTITIONS} partitions, "
          f"{len(BODY)}-byte bodies; tracehook events sent {tracer.stats().get('sent', '?')}")
    print(f"| {'mode':<30} | {'msgs/s (median)':>15} | {'min':>8} | {'max':>8} | {'vs plain':>8} |")
    print(f"|{'-' * 32}|{'-' * 17}|{'-' * 10}|{'-' * 10}|{'-' * 10}|")
    for name, values in results.items():
        median = statistics.median(values)
        print(f"| {name:<30} | {median:>15,.0f} | {min(values):>8,.0f} | {max(values):>8,.0f} | "
              f"{(median / base - 1) * 100:>+7.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
