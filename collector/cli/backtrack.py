"""``tracehook offsets`` and ``tracehook replay-list``: backtracking from a terminal.

Against a running collector (``--collector URL``, the default) or directly against
an index store (``--store local:PATH`` or ``--store hbase://...``)::

    tracehook offsets orders --time=-2h                          # first offset stored >= T, per queue
    tracehook offsets orders --time 2026-11-22T10:00Z --group billing          # billing's reset plan
    tracehook offsets orders --time 1795341600000 --group billing --force --json
    tracehook replay-list orders --group billing --begin=-6h --end=-1h --format csv > replay.csv

Times: epoch ms, ISO-8601, ``now`` or relative like ``-2h`` (:mod:`collector.query.timeparse`);
``--time -2h`` and ``--time=-2h`` both work (:mod:`collector.cli.main` joins the first form).
Exit status: 0 answered, 1 nothing indexed for the topic (offsets), 2 bad arguments, a
consumer group never seen on the topic (offsets --group, replay-list; unless ``--allow-unknown-group``) or an
unreachable source (docs/exit-codes.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import urllib.parse
from collections.abc import Iterator
from typing import Any, Protocol, TextIO

from collector.cli.errors import USER_ERRORS, report
from collector.cli.query import (
    EXIT_ERROR,
    EXIT_NOT_FOUND,
    EXIT_OK,
    HttpSource,
    QueryFailed,
    StoreSource,
    add_source_arguments,
    table,
)
from collector.query import backtrack
from collector.query.params import ParamError, time_param, time_window
from collector.query.timeparse import current_ms

FORMATS = ("jsonl", "csv")
# What a command reports as "error: ..." with exit status 2.
FAILURES = USER_ERRORS
_PAGE = 500  # the API's largest page


class Source(Protocol):
    """Where answers come from: both give the HTTP API's JSON documents."""

    def offsets(self, topic: str, params: dict[str, Any]) -> dict[str, Any]: ...

    def replay(self, topic: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]: ...


class CollectorSource:
    """The collector's backtracking routes over HTTP."""

    def __init__(self, base_url: str, token: str | None) -> None:
        self.http = HttpSource(base_url, token)

    def _get(self, topic: str, what: str, params: dict[str, Any]) -> dict[str, Any]:
        path = f"/v1/topics/{urllib.parse.quote(topic, safe='')}/{what}"
        doc = self.http._get(path, params)
        if doc is None:
            raise QueryFailed(self.http.not_found_detail
                              or f"{path}: not found (a collector without backtracking routes?)")
        return doc

    def offsets(self, topic: str, params: dict[str, Any]) -> dict[str, Any]:
        query = {k: params.get(k) for k in ("time", "queue", "group")}
        for flag in ("force", "allow_unknown_group"):
            if params.get(flag):
                query[flag] = "true"
        return self._get(topic, "offsets", query)

    def replay(self, topic: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        query = dict(group=params["group"], begin=params["begin"], end=params["end"], limit=_PAGE,
                     allow_unknown_group="true" if params.get("allow_unknown_group") else None)
        # The first page now, not lazily: an error (unknown group) comes before a CSV header is written.
        return self._pages(topic, query, self._get(topic, "unconsumed", query))

    def _pages(self, topic: str, query: dict[str, Any], page: dict[str, Any]) -> Iterator[dict[str, Any]]:
        seen: set[str] = set()
        while True:
            for item in page["items"]:
                if item["msg_id"] not in seen:  # a message filed under two times can show on two pages
                    seen.add(item["msg_id"])
                    yield item
            if not page.get("next_cursor"):
                return
            query["cursor"] = page["next_cursor"]
            page = self._get(topic, "unconsumed", query)

    def close(self) -> None:
        pass


def add_offsets_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``tracehook offsets``."""
    parser.add_argument("topic")
    parser.add_argument("--time", required=True, help="epoch ms, ISO-8601, now, or relative like -2h")
    parser.add_argument("--group", help="show this consumer group's reset plan")
    parser.add_argument("--force", action="store_true", help="plan moves forward too (default: rewind only)")
    parser.add_argument("--queue", type=int, help="only this queue / partition")
    parser.add_argument("--allow-unknown-group", action="store_true",
                        help="plan for a group that never consumed the topic (default: exit 2, a misspelt "
                             "group would get a plan that sets every queue)")
    parser.add_argument("--json", action="store_true", help="print the API's JSON instead of a table")
    add_source_arguments(parser)


def add_replay_list_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``tracehook replay-list``."""
    parser.add_argument("topic")
    parser.add_argument("--group", required=True, help="the consumer group to replay for")
    parser.add_argument("--begin", help="window start (default: end - 30 days)")
    parser.add_argument("--end", help="window end (default: now)")
    parser.add_argument("--format", choices=FORMATS, default="jsonl", help="JSON lines (default) or CSV")
    parser.add_argument("--allow-unknown-group", action="store_true",
                        help="list the window even if the group never consumed the topic (default: exit 2, "
                             "a misspelt group would list every message)")
    add_source_arguments(parser)


def open_source(args: argparse.Namespace) -> StoreSource | CollectorSource:
    """The source :func:`add_source_arguments` selected; close it after use."""
    return StoreSource(args.store) if args.store else CollectorSource(args.collector, args.token)


def format_offsets(doc: dict[str, Any]) -> str:
    """Offsets, or a reset plan, as a table."""
    if "group" not in doc:
        return table(["queue", "offset"], [[q["queue"], q["offset"]] for q in doc["queues"]])
    rows = [[q["queue"], q["target"], "-" if q["current"] is None else q["current"], q["planned"], q["action"]]
            for q in doc["queues"]]
    mode = "force" if doc["force"] else "rewind only"
    return f"group {doc['group']} ({mode})\n" + table(["queue", "target", "current", "planned", "action"], rows)


def write_replay(items: Iterator[dict[str, Any]], fmt: str, out: TextIO) -> int:
    """Write the replay list as JSON lines or CSV; returns how many messages were written."""
    count = 0
    writer = csv.DictWriter(out, fieldnames=backtrack.FIELDS, extrasaction="ignore") if fmt == "csv" else None
    if writer is not None:
        writer.writeheader()
    for item in items:
        if writer is not None:
            writer.writerow(item)
        else:
            out.write(json.dumps(item, ensure_ascii=False) + "\n")
        count += 1
    return count


def run_offsets(args: argparse.Namespace) -> int:
    """Print offsets at a time, or a group's reset plan."""
    try:
        time_ms = time_param("--time", args.time)
        if time_ms is None:
            raise ParamError("bad_time", "--time is required")
        params = {"time": time_ms, "queue": args.queue, "group": args.group, "force": args.force,
                  "allow_unknown_group": args.allow_unknown_group}
        if args.force and not args.group:
            print("error: --force needs --group", file=sys.stderr)
            return EXIT_ERROR
        source = open_source(args)
        try:
            doc = source.offsets(args.topic, params)
        finally:
            source.close()
    except FAILURES as exc:
        return report(exc)
    print(json.dumps(doc, indent=2) if args.json else format_offsets(doc))
    return EXIT_OK if doc["queues"] else EXIT_NOT_FOUND


def run_replay_list(args: argparse.Namespace) -> int:
    """Print the replay list; a summary line goes to stderr."""
    try:
        now = current_ms()
        begin = time_param("--begin", args.begin, now_ms=now)
        begin, end = time_window(begin, time_param("--end", args.end, now_ms=now), now_ms=now)
        source = open_source(args)
        try:
            params = {"group": args.group, "begin": begin, "end": end, "allow_unknown_group": args.allow_unknown_group}
            count = write_replay(source.replay(args.topic, params), args.format, sys.stdout)
        finally:
            source.close()
    except BrokenPipeError:
        # The reader (head, a closed pipe) has had enough; Python would otherwise complain at exit too.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except FAILURES as exc:
        return report(exc)
    print(f"{count} message(s) to replay for {args.group}", file=sys.stderr)
    return EXIT_OK
