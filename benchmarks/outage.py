"""Hook calls, queue and memory of an app whose collector goes down for a while.

This process is the app: it records PUB events at ``--rate``/s through the real library
(``queue_size=--queue-size``, the rest as ``DISPATCH``) to a ``tracehook collector`` subprocess on 127.0.0.1. After
``--before`` seconds the collector is stopped (SIGTERM), ``--outage`` seconds later it is
started again on the same data dir and port, and the app goes on for ``--after`` seconds, then
flushes. A helper thread stops and starts the collector, so the app's loop never waits for it.

Prints one row per phase: seconds, events recorded and what the pace asked for, the slowest and
the 99th-percentile hook call, the most events queued, events dropped, and this process's RSS at
the start of the phase and its peak in it; then what was delivered before the final flush::

    python benchmarks/outage.py [--rate 2000] [--queue-size 8000] [--before 4] [--outage 30] [--after 15]

tests/e2e/test_faults.py checks the same scenario structurally (every call returns while the
collector is down; the queue never holds more than its bound) without timing anything.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from array import array
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root

import tracehook  # noqa: E402
from collector.cli.demo import free_port, start_collector, stop_collector  # noqa: E402

PHASES = ("up, before", "down", "up, after")
DISPATCH = dict(batch_events=1000, linger_s=0.05, timeout_s=5.0, backoff_s=0.05, max_backoff_s=0.5, failover_s=1.0,
                max_retries=100_000)
"""The fault tests' producer settings: a batch is never given up during the outage."""
PACE_EVERY = 100
RSS_EVERY_S = 0.25


def rss_kb() -> int:
    """This process's resident set size in KiB (Linux)."""
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


@dataclass
class Phase:
    """What the app did while the collector was in one state."""

    name: str
    started: float = 0.0
    ended: float = 0.0
    events: int = 0
    hook_ns: array = field(default_factory=lambda: array("q"))
    max_queued: int = 0
    dropped_at_start: int = 0
    dropped: int = 0
    rss_start_kb: int = 0
    rss_peak_kb: int = 0


class Outage(threading.Thread):
    """Stops the collector after ``before`` s and starts it again ``outage`` s later; ``phase`` says where it is."""

    def __init__(self, data_dir: str, port: int, before: float, outage: float) -> None:
        super().__init__(name="outage", daemon=True)
        self.data_dir, self.port, self.before, self.outage = data_dir, port, before, outage
        self.collector = start_collector(data_dir, port)
        self.phase = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            time.sleep(self.before)
            self.phase = 1  # from the moment the stop is asked for
            stop_collector(self.collector)
            time.sleep(self.outage)
            self.collector = start_collector(self.data_dir, self.port)
            self.phase = 2  # from the moment it answers again
        except BaseException as exc:  # reported by the main thread
            self.error = exc
            self.phase = 2


def run(rate: float, queue_size: int, before: float, outage_s: float, after: float) -> tuple[list[Phase], dict]:
    """The scenario; returns the phases and what was delivered before and after the final flush."""
    data_dir = tempfile.mkdtemp(prefix="tracehook-outage-")
    port = free_port()
    control = Outage(data_dir, port, before, outage_s)
    tracer = tracehook.configure(app="bench-outage", collectors=[f"http://127.0.0.1:{port}"], queue_size=queue_size,
                                 flush_at_exit=False, **DISPATCH)
    phases = [Phase(name) for name in PHASES]
    clock = time.perf_counter_ns
    current: Phase | None = None
    next_rss = 0.0
    i = 0
    start = time.perf_counter()
    control.start()
    try:
        while True:
            now = time.perf_counter()
            index = control.phase
            if current is not phases[index]:
                stats = tracer.stats()
                if current is not None:
                    current.ended = now
                    current.dropped = stats["dropped_total"] - current.dropped_at_start
                current = phases[index]
                current.started = now
                current.dropped_at_start = stats["dropped_total"]
                current.rss_start_kb = current.rss_peak_kb = rss_kb()
            if index == 2 and now - current.started >= after:
                break
            if i % PACE_EVERY == 0:
                if now >= next_rss:
                    current.rss_peak_kb = max(current.rss_peak_kb, rss_kb())
                    next_rss = now + RSS_EVERY_S
                delay = start + i / rate - now
                if delay > 0:
                    time.sleep(delay)
            t0 = clock()
            tracer.record_send("orders", f"o-{i:08d}")
            current.hook_ns.append(clock() - t0)
            current.max_queued = max(current.max_queued, tracer.stats()["queued"])
            i += 1
        stats = tracer.stats()
        current.ended = time.perf_counter()
        current.dropped = stats["dropped_total"] - current.dropped_at_start
        for phase in phases:
            phase.events = len(phase.hook_ns)
        before_flush = tracer.stats()
        flushed = tracer.flush(60)
        final = tracer.stats()
    finally:
        tracer.close(1.0)
        control.join(120)
        stop_collector(control.collector)
    if control.error is not None:
        raise control.error
    return phases, {"before_flush": before_flush, "final": final, "flushed": flushed, "rate": rate}


def percentile(values: array, q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=2000.0, help="events per second")
    parser.add_argument("--queue-size", type=int, default=8000)
    parser.add_argument("--before", type=float, default=4.0, help="seconds before the collector stops")
    parser.add_argument("--outage", type=float, default=30.0, help="seconds the collector is down")
    parser.add_argument("--after", type=float, default=15.0, help="seconds after it answers again")
    args = parser.parse_args(argv)
    phases, end = run(args.rate, args.queue_size, args.before, args.outage, args.after)
    print(f"rate {args.rate:,.0f}/s, queue {args.queue_size:,}, collector down {args.outage:.0f} s")
    print("| phase | seconds | events | paced target | max hook µs | p99 hook µs | max queued | dropped "
          "| RSS KiB at start | RSS KiB peak |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for p in phases:
        seconds = p.ended - p.started
        print(f"| {p.name} | {seconds:.1f} | {p.events:,} | {seconds * args.rate:,.0f} "
              f"| {max(p.hook_ns, default=0) / 1000:,.1f} | {percentile(p.hook_ns, 0.99) / 1000:,.1f} "
              f"| {p.max_queued:,} | {p.dropped:,} | {p.rss_start_kb:,} | {p.rss_peak_kb:,} |")
    before, final = end["before_flush"], end["final"]
    print(f"sent before the final flush: {before['sent']:,} of {before['emitted']:,}; after it: {final['sent']:,} "
          f"sent, {final['dropped_total']:,} dropped ({final['dropped']['queue_full']:,} queue_full), "
          f"flushed: {end['flushed']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
