"""Index throughput: events/s through the indexer into real HBase, next to the raw ceiling.

Prints one table, every row measured in the same run on the same events:

* ``raw happybase puts``: the exact rows the indexer writes (same batches, same merged
  rows), precomputed and sent over one connection with happybase batched puts: the
  ceiling for an indexer that must also compute them;
* ``indexer -> HBase``: ``collector.index.indexer.index_records`` from decoded events,
  with one writer thread and with the default pipelined writers;
* ``indexer -> local``: the same into the embedded SQLite store (for comparison).

Each path writes into a fresh namespace (fresh tables).  HBase must be running::

    scripts/hbase start
    python benchmarks/index_throughput.py --events 1000000 --port "$(scripts/hbase port)"
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from collector.index.indexer import DEFAULT_BATCH_SIZE, DEFAULT_WRITERS, batched_rows, index_records
from collector.store.hbase import HBaseStore
from collector.store.local import LocalStore
from tracehook.wire import BatchHeader, Event, EventType, make_event

Record = tuple[BatchHeader, Event]

PRODUCER = BatchHeader("bench-producer", 1, app="shop", host="web-1")
CONSUMER = BatchHeader("bench-consumer", 1, app="billing", host="bill-1")
T0 = 1_763_800_000_000


def events(n: int) -> list[Record]:
    """``n`` events: messages each sent (PUB, with a key) and consumed once (SUB_BEFORE + SUB_AFTER)."""
    out: list[Record] = []
    i = 0
    while len(out) < n:
        msg_id, t, queue = f"bench-{i:09d}", T0 + i, i % 8
        common = dict(keys=f"order-{i % 100_000}", tags="created", broker="broker-a", queue=queue,
                      offset=i // 8, born_ms=t - 1, store_ms=t, body_len=512)
        out.append((PRODUCER, Event._make(make_event(EventType.PUB, t + 1, "shop", "orders", msg_id, cost_us=900,
                                                     **common))))
        rid = f"r{i}"
        out.append((CONSUMER, Event._make(make_event(EventType.SUB_BEFORE, t + 5, "billing", "orders", msg_id,
                                                     request_id=rid, **common))))
        out.append((CONSUMER, Event._make(make_event(EventType.SUB_AFTER, t + 9, "billing", "orders", msg_id,
                                                     request_id=rid, cost_us=4000, **common))))
        i += 1
    return out[:n]


def raw_happybase(store: HBaseStore, writes: list[tuple[str, list]]) -> None:
    """The ceiling: one connection, one ``Table.batch()`` (one mutateRows call) per write."""
    import happybase

    conn = happybase.Connection(**store._connect_args)
    try:
        for name, rows in writes:
            with conn.table(name).batch() as put:
                for row, columns in rows:
                    put.put(row, columns)
    finally:
        conn.close()


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True, help="HBase Thrift1 port (scripts/hbase port)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    parser.add_argument("--skip-local", action="store_true")
    args = parser.parse_args(argv)

    records = events(args.events)
    # Exactly the writes the indexer makes (same rows, merged and chunked the same way).
    writes = list(batched_rows(records, args.batch_size))
    n_rows = sum(len(rows) for _, rows in writes)
    results: list[tuple[str, float]] = []

    def hbase_run(name: str, write: Callable[[HBaseStore], object]) -> None:
        store = HBaseStore(args.host, args.port, f"bench{uuid.uuid4().hex[:8]}")
        try:
            results.append((name, timed(lambda: write(store))))
        finally:
            store.drop_tables()
            store.close()

    hbase_run("raw happybase puts (ceiling)", lambda store: raw_happybase(store, writes))
    hbase_run("indexer -> HBase, 1 writer", lambda store: index_records(store, records, args.batch_size, writers=1))
    hbase_run(f"indexer -> HBase, {DEFAULT_WRITERS} writers", lambda store: index_records(store, records, args.batch_size))
    if not args.skip_local:
        with tempfile.TemporaryDirectory() as tmp:
            local = LocalStore(os.path.join(tmp, "index.sqlite3"))
            results.append(("indexer -> local (SQLite)", timed(lambda: index_records(local, records, args.batch_size))))
            local.close()

    ceiling = args.events / results[0][1]
    print(f"\nindex throughput: {args.events:,} events ({n_rows:,} index rows), batch size {args.batch_size}")
    print(f"{'path':<32}{'seconds':>10}{'events/s':>12}{'rows/s':>12}{'% of raw':>10}")
    for name, seconds in results:
        rate = args.events / seconds
        print(f"{name:<32}{seconds:>10.1f}{rate:>12,.0f}{n_rows / seconds:>12,.0f}{100 * rate / ceiling:>9.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
