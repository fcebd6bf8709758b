"""The two ways from a layout-2 embedded store to layout 3: ``upgrade-store`` in place and ``migrate-store`` copying.

::

    python benchmarks/upgrade_store.py --events 100000            # realistic mix (3.8 events per message)
    python benchmarks/upgrade_store.py --events 1000000 --work /tmp/up
    python benchmarks/upgrade_store.py --events 100000 --spread-days 29   # cells written over 29 days

Builds a layout-2 store of N events (today's indexer, then layout 2's own message cells and
record: tests/collector/store/v2_store.py), then measures, in this order:

1. ``migrate_store`` copying it into a new store: wall, this process's CPU (every thread), events
   per CPU-second (the per-core throughput), and the copy's bytes; beside it, the same events indexed
   fresh in process (the indexer's own cost, which a copy cannot go below: the copy's floor);
2. ``upgrade_store`` in place with its snapshot (SQLite's online backup API) and, on a second
   copy of the store, without one: wall, CPU, the snapshot's bytes, the store's bytes before and after.

With ``--spread-days D`` each message row's cells get write times spread over D days (a hash of
the row picks the minute), as in a store an index job filled over its TTL; without, every cell has the
one write time of the build, and a copy's chunk is one write-time group.  Prints one Markdown table
row per measurement.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.index_cost_support import MIXES, sqlite_bytes  # noqa: E402
from collector.index.indexer import finish_batch, index_records  # noqa: E402
from collector.index.migrate import migrate_store  # noqa: E402
from collector.store import open_store  # noqa: E402
from collector.store.upgrade import upgrade_store  # noqa: E402
from tests.collector.store import v2_store  # noqa: E402


def _timed(fn):  # type: ignore[no-untyped-def]
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def _index_fresh(url: str, records: list, chunk: int = 20_000) -> None:  # type: ignore[type-arg]
    store = open_store(url)
    try:
        for i in range(0, len(records), chunk):
            index_records(store, records[i:i + chunk])
            finish_batch(store)
    finally:
        store.close()


def spread_write_times(path: str, days: int) -> None:
    """Move each message row's cells' write times back by up to ``days`` days (the row's hash picks the minute)."""
    db = sqlite3.connect(path)
    try:
        minutes = days * 24 * 60
        db.create_function("back", 1, lambda row: int.from_bytes(row[1:5], "big") % minutes * 60_000,
                           deterministic=True)
        db.execute('UPDATE "messages" SET ts = ts - back(row)')
        db.commit()
    finally:
        db.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--mix", choices=sorted(MIXES), default="realistic")
    parser.add_argument("--skip-copy", action="store_true", help="measure the upgrade only (no fresh index, no copy)")
    parser.add_argument("--spread-days", type=int, default=0,
                        help="spread the message cells' write times over this many days (0: one write time)")
    parser.add_argument("--work", default=None, help="directory for the stores (default: a temporary one)")
    args = parser.parse_args(argv)
    work = args.work or tempfile.mkdtemp(prefix="upgrade-bench-")
    os.makedirs(work, exist_ok=True)
    records = MIXES[args.mix](args.events)
    n = len(records)
    old = os.path.join(work, "v2.sqlite3")
    _, build_s, _ = _timed(lambda: v2_store.write(f"local:{old}", records))
    if args.spread_days:
        spread_write_times(old, args.spread_days)
    old_bytes = sqlite_bytes(old)
    print(f"layout-2 store: {n:,} events ({args.mix}), {old_bytes / 2**20:,.1f} MiB ({old_bytes / n:.0f} B/event), "
          f"built in {build_s:.0f} s" + (f", cells written over {args.spread_days} days" if args.spread_days else ""))
    print("| step | wall s | CPU s | events/CPU-s | bytes written | B/event |")
    print("|---|---:|---:|---:|---:|---:|")
    bare = os.path.join(work, "v2-bare.sqlite3")
    shutil.copyfile(old, bare)
    copy = os.path.join(work, "copy.sqlite3")
    if not args.skip_copy:
        ref = os.path.join(work, "fresh.sqlite3")
        _, wall, cpu = _timed(lambda: _index_fresh(f"local:{ref}", records))
        print(f"| index the same events fresh (floor) | {wall:.1f} | {cpu:.1f} | {n / cpu:,.0f} | "
              f"{sqlite_bytes(ref):,} | {sqlite_bytes(ref) / n:.0f} |")
        report, wall, cpu = _timed(lambda: migrate_store(f"local:{old}", f"local:{copy}"))
        assert report.events == n, report
        copy_bytes = sqlite_bytes(copy)
        print(f"| migrate-store (copy) | {wall:.1f} | {cpu:.1f} | {n / cpu:,.0f} | {copy_bytes:,} "
              f"| {copy_bytes / n:.0f} |")
    up, wall, cpu = _timed(lambda: upgrade_store(f"local:{old}"))
    grown = sqlite_bytes(old) - old_bytes
    print(f"| upgrade-store with snapshot | {wall:.2f} | {cpu:.2f} | - | {up.snapshot_bytes + grown:,} "
          f"(snapshot {up.snapshot_bytes:,} in {up.snapshot_seconds:.2f} s; store +{grown:,}) "
          f"| {(up.snapshot_bytes + grown) / n:.0f} |")
    up, wall, cpu = _timed(lambda: upgrade_store(f"local:{bare}", snapshot=False))
    grown = sqlite_bytes(bare) - old_bytes
    print(f"| upgrade-store --no-snapshot | {wall:.3f} | {cpu:.3f} | - | {grown:,} | {grown / n:.2f} |")
    if args.work is None:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
