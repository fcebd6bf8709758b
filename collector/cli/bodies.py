"""``tracehook bodies erase``: erase kept message bodies from an index store; the traces stay.

::

    tracehook bodies erase --store local:./data --topic sms --since 2026-11-01 --until 2026-11-08
    tracehook bodies erase --store local:./data --topic sms             # every kept body of the topic
    tracehook bodies erase --store local:./data --msg-id ID [--msg-id ID2]   # a person's data

Times are those of ``tracehook query`` (epoch ms, ISO-8601, ``now``, ``-2h``); the window is the
message time, ``[since, until)``.  Erasing by topic reads the whole bodies table
(:func:`collector.store.bodies.erase_topic`).  Prints how many bodies went.  Exit status: 0 done,
2 bad arguments or an unreachable store, 5 a store in an older layout (docs/exit-codes.md).
"""

from __future__ import annotations

import argparse

from collector.cli.errors import USER_ERRORS, report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    erase = actions.add_parser("erase", help="erase kept bodies by topic and time, or by message id",
                               description="Erase kept bodies by topic (and message time) or by message id; "
                                           "the traces stay.")
    erase.add_argument("--store", required=True, help="the index store (local:PATH or hbase://HOST:PORT?namespace=NS)")
    which = erase.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", help="erase this topic's kept bodies (with --since/--until: of that window)")
    which.add_argument("--msg-id", action="append", dest="msg_ids", metavar="ID",
                       help="erase this message's kept body (repeatable)")
    erase.add_argument("--since", help="window start (message time, inclusive); with --topic")
    erase.add_argument("--until", help="window end (message time, exclusive); with --topic")


def run(args: argparse.Namespace) -> int:
    """Erase, print one line saying how many bodies went; the exit status."""
    from collector.query.timeparse import parse_time
    from collector.store import open_store, resolve_store_url
    from collector.store.bodies import erase_messages, erase_topic

    if args.msg_ids and (args.since or args.until):
        return report(ValueError("--since/--until go with --topic, not --msg-id"))
    try:
        since = None if args.since is None else parse_time(args.since, name="--since")
        until = None if args.until is None else parse_time(args.until, name="--until")
        store = open_store(resolve_store_url(args.store, must_exist=True))
    except USER_ERRORS as exc:
        return report(exc)
    try:
        if args.msg_ids:
            n = erase_messages(store, args.msg_ids)
            what = f"{len(set(args.msg_ids))} message id(s)"
        else:
            n = erase_topic(store, args.topic, since, until)
            what = f"topic {args.topic!r}" + (f" from {since}" if since is not None else "") + (
                f" until {until}" if until is not None else "")
    except USER_ERRORS as exc:
        return report(exc)
    finally:
        store.close()
    print(f"bodies erase: {n} kept bod{'y' if n == 1 else 'ies'} erased ({what}); the traces stay")
    return 0
