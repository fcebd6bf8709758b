"""The web console's outcome filters: server-side pages against filtering on the client.

Loads the messages of benchmarks/backtrack.py (group ``billing``: 1 % failed, 0.5 % never
received, 0.2 % dead-lettered, over 24 h) into an embedded store, then lists the whole day
filtered by billing's outcome, three ways, each checked equal to the others:

    server        what ``GET /v1/topics/T/messages?group=billing&outcome=O`` runs: pages of 20 through
                  TraceQuery.by_time(match=..., max_rows=FILTER_SCAN_ROWS), following the cursor
    client        what a page without the filter would do: unfiltered pages of 500 (the API's
                  largest), each item's ``groups`` checked in the client
    first page    the server's first page only (what the console shows first), and its worst page

Direct Python calls (no HTTP: the client side would also pay for 25x more JSON over the wire).

Run::

    python benchmarks/console_filters.py [--messages 20000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable

from backtrack import GROUP, SPAN_MS, TOPIC, records

from collector.index.indexer import index_records
from collector.query.outcome_filter import FILTER_SCAN_ROWS, parse_filter
from collector.query.params import MAX_PAGE_SIZE
from collector.store import open_store
from collector.store.reader import TraceQuery

OUTCOMES = ("dead", "failed", "not_consumed")
PAGE = 20


def server(query: TraceQuery, outcome: str, begin: int, end: int) -> tuple[list[str], list[float]]:
    """Every match through filtered pages; and each page's milliseconds."""
    match = parse_filter(GROUP, outcome).matches
    ids, times, cursor = [], [], None
    while True:
        started = time.perf_counter()
        page = query.by_time(TOPIC, begin, end, PAGE, cursor, match=match, max_rows=FILTER_SCAN_ROWS)
        times.append((time.perf_counter() - started) * 1000)
        ids += [s.msg_id for s in page.items]
        cursor = page.next_cursor
        if cursor is None:
            return ids, times


def client(query: TraceQuery, outcome: str, begin: int, end: int) -> list[str]:
    """Every match by reading the unfiltered listing and checking each item here."""
    match = parse_filter(GROUP, outcome)
    ids, cursor = [], None
    while True:
        page = query.by_time(TOPIC, begin, end, MAX_PAGE_SIZE, cursor)
        for s in page.items:
            found = s.groups.get(GROUP)
            keep = (found is None or found.outcome != "consumed") if outcome == "not_consumed" else (
                found is not None and found.outcome == outcome)
            if keep and match is not None:
                ids.append(s.msg_id)
        cursor = page.next_cursor
        if cursor is None:
            return ids


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    samples, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        samples.append((time.perf_counter() - started) * 1000)
    return sorted(samples)[len(samples) // 2], result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tracehook-filters-") as data_dir:
        store = open_store(f"local:{os.path.join(data_dir, 'index.sqlite3')}")
        query = TraceQuery(store)
        start = int(time.time() * 1000) - SPAN_MS - 60_000
        loaded = time.monotonic()
        index_records(store, records(args.messages, start), batch_size=5000)
        print(f"loaded {args.messages:,} messages in {time.monotonic() - loaded:.0f} s", file=sys.stderr)
        begin, end = start, start + SPAN_MS
        rows = []
        for outcome in OUTCOMES:
            ours_ms, (ours, pages) = timed(lambda o=outcome: server(query, o, begin, end), args.repeats)
            peer_ms, peer = timed(lambda o=outcome: client(query, o, begin, end), args.repeats)
            assert ours == peer, (outcome, len(ours), len(peer))
            rows.append([outcome, f"{len(ours):,}", f"{ours_ms:.0f}", f"{len(pages)}", f"{pages[0]:.1f}",
                         f"{max(pages):.1f}", f"{peer_ms:.0f}", f"{(args.messages + MAX_PAGE_SIZE - 1) // MAX_PAGE_SIZE}"])
        store.close()
    head = ["billing outcome", "matches", "server: all (ms)", "server pages", "first page (ms)", "worst page (ms)",
            "client: all (ms)", "client pages"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print(f"\noutcome filters over {args.messages:,} messages in 24 h (median of {args.repeats} runs; pages of {PAGE}, "
          f"at most {FILTER_SCAN_ROWS} index rows each)")
    for row in [head, ["-" * w for w in widths], *rows]:
        print("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
