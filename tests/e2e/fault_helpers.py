"""A producer process for the fault tests: the real tracehook library, paced traffic, a JSON report.

The fault tests start this file as a script (``python tests/e2e/fault_helpers.py --prefix p0 ...``).
It records ``--count`` PUB events with the ids ``{prefix}-{i:07d}`` at ``--rate`` events/s (0: as
fast as it can), reads ``tracehook.stats()`` after every hook call, then flushes with a deadline
and prints one JSON line::

    {"stats": tracehook.stats(), "flushed": true, "acked": [[seq, events], ...], "max_queued": 812,
     "pauses": [{"returned": 4000, "stats": ..., "max_queued": 0}, ...]}

``acked`` lists every batch the collector answered 2xx, seen from the dispatcher, so the test
can look each one up in the trace log by ``(client_id, seq)``. ``max_queued`` is the most events
``stats()`` ever showed queued. With ``--pause-at I`` (repeatable) the producer stops before
event ``I``: it prints the same figures for the calls so far (``returned``: how many hook calls
have returned) as one JSON line and waits for a line on stdin, so a test can stop or start a
collector between two known events.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import tracehook

TOPIC = "orders"
PACE_EVERY = 100
"""Events between two pacing checks."""


def msg_id(prefix: str, i: int) -> str:
    """The id of a producer's ``i``-th event (the test rebuilds the emitted set from it)."""
    return f"{prefix}-{i:07d}"


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


def pause(returned: int, max_queued: int) -> dict[str, Any]:
    """Print where the producer stands and wait for the test's go (a line on stdin)."""
    report = {"returned": returned, "stats": tracehook.stats(), "max_queued": max_queued}
    print(json.dumps({"pause": report}), flush=True)
    sys.stdin.readline()
    return report


def produce(prefix: str, count: int, rate: float, pause_at: set[int]) -> tuple[int, list[dict[str, Any]]]:
    """Record ``count`` sends at ``rate``/s; returns the most events ever queued, and the pauses."""
    pauses: list[dict[str, Any]] = []
    max_queued = 0
    start = time.perf_counter()
    for i in range(count):
        if i in pause_at:
            pauses.append(pause(i, max_queued))
            start = time.perf_counter() - (i / rate if rate else 0.0)  # pace on from here
        if rate and i % PACE_EVERY == 0:
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        tracehook.record_send(TOPIC, msg_id(prefix, i))
        max_queued = max(max_queued, tracehook.stats()["queued"])
    return max_queued, pauses


def main(argv: list[str] | None = None) -> int:
    """Run one producer; prints the JSON report on stdout."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collectors", required=True, help="comma-separated collector URLs")
    parser.add_argument("--prefix", required=True, help="message id prefix, unique per producer")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--rate", type=float, required=True, help="events per second (0: unpaced)")
    parser.add_argument("--queue-size", type=int, required=True)
    parser.add_argument("--flush-timeout", type=float, default=60.0)
    parser.add_argument("--pause-at", type=int, action="append", default=[],
                        help="stop before this event until a line arrives on stdin (repeatable)")
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
    max_queued, pauses = produce(args.prefix, args.count, args.rate, set(args.pause_at))
    flushed = tracehook.flush(timeout=args.flush_timeout)
    report = {"stats": tracehook.stats(), "flushed": flushed, "acked": list(acked), "max_queued": max_queued,
              "pauses": pauses}
    print(json.dumps(report), flush=True)
    tracehook.close(timeout=1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
