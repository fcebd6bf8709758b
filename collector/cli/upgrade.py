"""``tracehook upgrade-store``: a layout-2 index upgraded in place to this release's layout.

::

    tracehook upgrade-store local:/data/index.sqlite3                 # snapshot beside it, then upgrade
    tracehook upgrade-store local:/data/index.sqlite3 --roll-back /data/index.sqlite3.layout2-...snapshot
    tracehook upgrade-store 'hbase://hb:9090?namespace=trace' --hbase-shell snapshot | hbase shell -n
    tracehook upgrade-store 'hbase://hb:9090?namespace=trace' --no-snapshot

O(1): records the layout and creates the tables it adds; nothing is copied but the snapshot
(:mod:`collector.store.upgrade`, docs/index-store.md "Upgrading to layout 3").  Exit status: 0
done (or done before), 1 a store failed mid-run (rerun it), 2 bad arguments, an unreachable
store, no room for the snapshot, an HBase store without ``--no-snapshot``, 5 a store in layout 1
(the line names ``tracehook migrate-store``) or in a newer layout (docs/exit-codes.md).
"""

from __future__ import annotations

import argparse
import sys

from collector.cli.errors import EXIT_ERROR, report
from collector.store.errors import BadStoreUrlError, LayoutVersionError, StoreError, StoreUnavailableError, UpgradeError

EXIT_FAILED = 1
SHELL_SCRIPTS = ("snapshot", "restore", "drop-snapshot")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", metavar="STORE_URL", help="the store (local:PATH, a data directory, or hbase://...)")
    way_back = parser.add_mutually_exclusive_group()
    way_back.add_argument("--no-snapshot", action="store_true",
                          help="upgrade without a snapshot first (no way back but a copy you made; an HBase "
                               "store's snapshot is taken with --hbase-shell snapshot)")
    way_back.add_argument("--snapshot-to", metavar="PATH",
                          help="where the local: store's snapshot goes (default: beside it, "
                               "INDEX.layout2-<UTC time>.snapshot)")
    way_back.add_argument("--roll-back", metavar="SNAPSHOT",
                          help="copy a local: snapshot back into the store (stop tracehook first)")
    way_back.add_argument("--hbase-shell", choices=SHELL_SCRIPTS,
                          help="print the HBase shell commands that take, restore or drop the HBase store's "
                               "snapshots (pipe them into `hbase shell -n`); changes nothing")


def run(args: argparse.Namespace) -> int:
    """Upgrade (or print the shell script, or roll back); prints one line; returns the exit status."""
    from collector.store import check_store_url
    from collector.store.upgrade import hbase_shell_script, roll_back, upgrade_store

    try:
        check_store_url(args.url)
        if args.hbase_shell:
            sys.stdout.write(hbase_shell_script(args.url, args.hbase_shell))
            return 0
        if args.roll_back:
            version = roll_back(args.url, args.roll_back)
            print(f"upgrade-store: {args.url} is back in layout {version} as in {args.roll_back}; start the release "
                  "that wrote it, and re-index what the trace log holds since the upgrade (docs/index-store.md)")
            return 0
        result = upgrade_store(args.url, snapshot=not args.no_snapshot, snapshot_to=args.snapshot_to)
    except (BadStoreUrlError, LayoutVersionError, UpgradeError) as exc:
        return report(exc)
    except StoreUnavailableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except StoreError as exc:
        print(f"error: {exc} (rerun the same command)", file=sys.stderr)
        return EXIT_FAILED
    if result.already:
        print(f"upgrade-store: {args.url} is in layout {result.to_version} already; nothing to do")
        return 0
    snap = (f"; snapshot {result.snapshot} ({result.snapshot_bytes / 2**20:,.1f} MiB in {result.snapshot_seconds:.1f} s"
            f", roll back with --roll-back {result.snapshot})" if result.snapshot else "; no snapshot")
    print(f"upgrade-store: {args.url} upgraded from layout {result.from_version} to {result.to_version} "
          f"in {result.seconds:.1f} s{snap}")
    return 0
