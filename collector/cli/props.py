"""``tracehook props``: choose the message properties the index files messages under, and backfill them.

::

    tracehook props set --store URL orderId customerId            # the default list (every topic)
    tracehook props set --store URL --topic payments paymentId    # payments' own list (replaces the default there)
    tracehook props list --store URL
    tracehook props unset --store URL --topic payments            # payments takes the default again
    tracehook props unset --store URL customerId                  # one name out of the default list
    tracehook props backfill --store URL --topic orders --name orderId --since 30d

The lists live in the store (:mod:`collector.store.props`); index jobs take a change up within
10 s.  Exit status: 0 done, 1 the store failed mid-backfill (rerun to resume), 2 bad arguments or
an unreachable store, 5 a store in an older layout, 130 interrupted (docs/exit-codes.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from collector.cli.errors import report
from collector.query.errors import QueryInputError
from collector.store.errors import BadStoreUrlError, LayoutVersionError, QueryError, StoreError, StoreUnavailableError

if TYPE_CHECKING:
    from collector.store import Store

EXIT_FAILED, EXIT_INTERRUPTED = 1, 130
PROGRESS_EVERY_S = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from collector.index.backfill import DEFAULT_CHUNK

    store = argparse.ArgumentParser(add_help=False)
    store.add_argument("--store", required=True, help="the index store: local:PATH or hbase://HOST:PORT?namespace=NS")
    store.add_argument("--json", action="store_true", help="print JSON (list)")
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    set_ = sub.add_parser("set", parents=[store], help="set the default list, or a topic's (replacing it)")
    set_.add_argument("--topic", help="this topic's list (default: the list of every topic without one)")
    set_.add_argument("names", nargs="+", metavar="NAME", help="property names (put -- before a name starting with -)")
    sub.add_parser("list", parents=[store], help="the lists, and where they apply")
    unset = sub.add_parser("unset", parents=[store], help="take names out of a list, or drop a list")
    unset.add_argument("--topic", help="this topic's list (default: the default list)")
    unset.add_argument("names", nargs="*", metavar="NAME", help="the names to take out (none: the whole list)")
    fill = sub.add_parser("backfill", parents=[store], help="file the messages already indexed under a property")
    fill.add_argument("--topic", required=True)
    fill.add_argument("--name", action="append", required=True,
                      help="an indexed property name (repeatable; --name=-x for a name starting with -)")
    fill.add_argument("--since", help="only messages since this duration ago (15m, 7d; not with --begin/--end)")
    fill.add_argument("--begin", help="window start: epoch ms, ISO-8601, now or relative like -6h")
    fill.add_argument("--end", help="window end (default now)")
    fill.add_argument("--chunk", type=int, default=DEFAULT_CHUNK, metavar="N",
                      help=f"message rows per step; progress is recorded after each (default {DEFAULT_CHUNK})")


def run(args: argparse.Namespace) -> int:
    """Run one ``tracehook props`` action; returns the exit status."""
    from collector.store import open_store, resolve_store_url
    from collector.store.props import load, save

    try:
        store = open_store(resolve_store_url(args.store, must_exist=args.action != "set"))
    except StoreError as exc:
        return report(exc)
    try:
        if args.action == "backfill":
            return _backfill(store, args)
        props = load(store)
        if args.action == "set":
            save(store, props.with_names(args.topic, args.names))
        elif args.action == "unset":
            save(store, props.without(args.topic, args.names))
        props = load(store)
        if args.json:
            print(json.dumps({"default": list(props.default), "topics": {t: list(n) for t, n in props.topics.items()}},
                             ensure_ascii=False))
        else:
            print(f"default: {_names(props.default)}")
            for topic in sorted(props.topics):
                print(f"topic {topic!r}: {_names(props.topics[topic])}")
        if args.action != "list":
            print("(index jobs take the change up within 10 s; `tracehook props backfill` files older messages)",
                  file=sys.stderr)
        return 0
    except (QueryError, QueryInputError, BadStoreUrlError, LayoutVersionError, StoreUnavailableError) as exc:
        return report(exc)
    finally:
        store.close()


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(json.dumps(n, ensure_ascii=False) for n in names) or "(none)"


def _backfill(store: Store, args: argparse.Namespace) -> int:
    from collector.index.backfill import BackfillProgress, backfill
    from collector.query.params import time_param, time_window
    from collector.query.timeparse import current_ms, parse_duration

    if args.chunk < 1:
        print(f"error: --chunk must be at least 1, not {args.chunk}", file=sys.stderr)
        return 2
    now = current_ms()
    try:
        if args.since and (args.begin or args.end):
            raise QueryError("--since cannot be combined with --begin or --end")
        begin = now - parse_duration(args.since, name="--since") if args.since else time_param(
            "--begin", args.begin, now_ms=now)
        begin, end = time_window(begin, time_param("--end", args.end, now_ms=now), now_ms=now, max_window_ms=None)
        if not (args.since or args.begin):
            begin = 0  # no start given: every message the store holds
    except (QueryError, QueryInputError) as exc:
        return report(exc)
    last = [time.monotonic()]

    def on_chunk(progress: BackfillProgress, fraction: float) -> None:
        if not progress.done and time.monotonic() - last[0] >= PROGRESS_EVERY_S:
            last[0] = time.monotonic()
            print(f"props backfill: {progress.messages} messages read, {progress.rows} rows written "
                  f"(about {fraction:.0%} of the message table)", flush=True)

    try:
        progress, resumed_at = backfill(store, args.topic, args.name, begin, end,
                                        run_id=f"{args.since}|{args.begin}|{args.end}", chunk=args.chunk,
                                        on_chunk=on_chunk)
    except KeyboardInterrupt:
        print("props backfill: interrupted; rerun the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (QueryError, LayoutVersionError) as exc:
        return report(exc)
    except StoreUnavailableError as exc:
        print(f"error: {exc} (rerun the same command to resume)", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"error: {exc} (the chunks done are recorded: rerun the same command to resume)", file=sys.stderr)
        return EXIT_FAILED
    resumed = f", resumed after {resumed_at} messages" if resumed_at else ""
    print(f"props backfill: done: {progress.messages} messages read, {progress.rows} rows written{resumed}")
    return 0
