"""A producer process for the fault tests: the real tracehook library, paced traffic, a JSON report.

The fault tests start this file as a script (``python tests/e2e/fault_helpers.py --prefix p0 ...``).
It records ``--count`` PUB events with the ids ``{prefix}-{i:07d}`` at ``--rate`` events/s,
timing every hook call, then flushes with a deadline and prints one JSON line::

    {"stats": tracehook.stats(), "flushed": true, "acked": [[seq, events], ...],
     "max_hook_s": 0.0004, "samples": [[wall_s, emitted, queued, in_flight, sent, dropped, rss_kb, max_hook_s], ...]}

``acked`` lists every batch the collector answered 2xx, seen from the dispatcher, so the test
can look each one up in the trace log by ``(client_id, seq)``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import tracehook

TOPIC = "orders"
SAMPLE_EVERY_S = 0.25
PACE_EVERY = 100
"""Events between two pacing checks (and between two samples at most)."""


def msg_id(prefix: str, i: int) -> str:
    """The id of a producer's ``i``-th event (the test rebuilds the emitted set from it)."""
    return f"{prefix}-{i:07d}"


def rss_kb() -> int:
    """This process's resident set size in KiB (Linux)."""
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def watch_acks(tracer: tracehook.Tracer) -> list[list[int]]:
    """Record ``[seq, events]`` of every batch the dispatcher counts as sent.

    Test-only observation of the dispatcher's one resolution point; delivery is unchanged.
    """
    dispatcher = tracer._dispatcher
    resolve = dispatcher._resolve
    acked: list[list[int]] = []

    def observed(batch: Any, outcome: str) -> None:
        if outcome == "sent":
            acked.append([batch.seq, len(batch.packed)])
        resolve(batch, outcome)

    dispatcher._resolve = observed  # type: ignore[method-assign]
    return acked


def produce(tracer: tracehook.Tracer, prefix: str, count: int, rate: float) -> tuple[float, list[list[Any]]]:
    """Record ``count`` sends at ``rate``/s; returns the slowest hook call (s) and the samples."""
    samples: list[list[Any]] = []
    slowest_ns = window_ns = 0
    start = next_sample = time.perf_counter()
    clock = time.perf_counter_ns
    for i in range(count):
        if i % PACE_EVERY == 0:
            now = time.perf_counter()
            if now >= next_sample:
                s = tracer.stats()
                samples.append([time.time(), i, s["queued"], s["in_flight"], s["sent"], s["dropped_total"],
                                rss_kb(), window_ns / 1e9])
                window_ns = 0
                next_sample = now + SAMPLE_EVERY_S
            delay = start + i / rate - now
            if delay > 0:
                time.sleep(delay)
        t0 = clock()
        tracer.record_send(TOPIC, msg_id(prefix, i))
        took = clock() - t0
        if took > window_ns:
            window_ns = took
            slowest_ns = max(slowest_ns, took)
    return slowest_ns / 1e9, samples


def main(argv: list[str] | None = None) -> int:
    """Run one producer; prints the JSON report on stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collectors", required=True, help="comma-separated collector URLs")
    parser.add_argument("--prefix", required=True, help="message id prefix, unique per producer")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--rate", type=float, required=True, help="events per second")
    parser.add_argument("--queue-size", type=int, required=True)
    parser.add_argument("--flush-timeout", type=float, default=60.0)
    parser.add_argument("--start-at-first", action="store_true",
                        help="start at the first collector (a scenario that kills it), not at the client's own")
    args = parser.parse_args(argv)
    if args.start_at_first:
        from tracehook import dispatcher

        dispatcher.first_collector = lambda client_id, collectors: 0  # type: ignore[assignment]
    tracer = tracehook.configure(
        app=f"fault-{args.prefix}", collectors=args.collectors.split(","), queue_size=args.queue_size,
        batch_events=1000, linger_s=0.05, timeout_s=5.0, backoff_s=0.05, max_backoff_s=0.5, failover_s=1.0,
        max_retries=100_000,  # bounded by the flush deadline instead: a batch is never given up mid-outage
        flush_at_exit=False,
    )
    acked = watch_acks(tracer)
    slowest, samples = produce(tracer, args.prefix, args.count, args.rate)
    flushed = tracehook.flush(timeout=args.flush_timeout)
    report = {"stats": tracehook.stats(), "flushed": flushed, "acked": list(acked), "max_hook_s": slowest,
              "samples": samples}
    print(json.dumps(report), flush=True)
    tracehook.close(timeout=1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
