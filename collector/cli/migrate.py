"""``tracehook migrate-store``: copy a layout-1 or layout-2 index into a store of this release's layout.

A layout-2 store is upgraded in place in seconds instead (``tracehook upgrade-store``,
:mod:`collector.cli.upgrade`); the copy is for layout 1 and for a new store by choice.

::

    tracehook migrate-store --from local:/data/index.sqlite3 --to local:/data/index-v2.sqlite3
    tracehook migrate-store --from 'hbase://hb:9090?namespace=trace' --to 'hbase://hb:9090?namespace=trace2'

No trace log needed; resumable (rerun the same command after a failure or Ctrl-C); a rerun
after it finished says so and exits 0.  See :mod:`collector.index.migrate` and
docs/index-store.md (Upgrading from layout 1, Upgrading to layout 3).  Exit status: 0 done, 1 a store failed mid-run
(rerun to resume), 2 bad arguments or an unreachable store, 5 ``--to`` in an older layout,
130 interrupted (docs/exit-codes.md).
"""

from __future__ import annotations

import argparse
import sys
import time

from collector.cli.errors import EXIT_ERROR, report
from collector.store.errors import BadStoreUrlError, LayoutVersionError, StoreError, StoreUnavailableError

EXIT_FAILED, EXIT_INTERRUPTED = 1, 130
PROGRESS_EVERY_S = 5.0
"""Seconds between progress lines (one per chunk at most)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from collector.index.migrate import DEFAULT_CHUNK

    parser.add_argument("--from", dest="old", required=True, metavar="OLD_URL",
                        help="the layout-1 or layout-2 store (local:PATH or hbase://HOST:PORT?namespace=NS), only read; "
                             "a local: one with the ttl_days it was used with (its expired cells stay behind)")
    parser.add_argument("--to", dest="new", required=True, metavar="NEW_URL",
                        help="the store to fill, new or one this release already writes (created if absent)")
    parser.add_argument("--chunk", type=int, default=DEFAULT_CHUNK, metavar="N",
                        help=f"old message rows per step; progress is recorded after each (default {DEFAULT_CHUNK})")


def run(args: argparse.Namespace) -> int:
    """Migrate, printing a progress line every few seconds and a final line; returns the exit status."""
    from collector.index.migrate import MigrationError, Progress, migrate_store
    from collector.store import check_store_url

    if args.chunk < 1:
        print(f"error: --chunk must be at least 1, not {args.chunk}", file=sys.stderr)
        return EXIT_ERROR
    last = [time.monotonic()]

    def on_chunk(progress: Progress, fraction: float) -> None:
        if not progress.done and time.monotonic() - last[0] >= PROGRESS_EVERY_S:
            last[0] = time.monotonic()
            print(f"migrate-store: {progress.messages} messages, {progress.events} events "
                  f"(about {fraction:.0%} of the old store)", flush=True)

    try:
        check_store_url(args.old)
        check_store_url(args.new)
        result = migrate_store(args.old, args.new, chunk=args.chunk, on_chunk=on_chunk)
    except KeyboardInterrupt:
        print("migrate-store: interrupted; rerun the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (BadStoreUrlError, LayoutVersionError, MigrationError) as exc:
        return report(exc)
    except StoreUnavailableError as exc:
        print(f"error: {exc} (rerun the same command to resume)", file=sys.stderr)
        return EXIT_ERROR
    except StoreError as exc:
        print(f"error: {exc} (the chunks done are recorded: rerun the same command to resume)", file=sys.stderr)
        return EXIT_FAILED
    bad = f", {result.bad} damaged cell(s) left out" if result.bad else ""
    if result.already_done:
        print(f"migrate-store: {args.old} was migrated into {args.new} already "
              f"({result.messages} messages, {result.events} events{bad}); nothing to do")
        return 0
    resumed = f", resumed after {result.resumed_at} messages" if result.resumed_at else ""
    print(f"migrate-store: done: {result.messages} messages, {result.events} events in {result.seconds:.1f} s"
          f"{resumed}{bad} ({args.old} -> {args.new})")
    return 0
