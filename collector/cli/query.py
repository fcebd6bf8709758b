"""``tracehook query``: look up traces from a terminal.

Against a running collector (``--collector URL``, the default) or directly
against an index store (``--store local:PATH`` or ``--store hbase://...``)::

    tracehook query id MSG_ID
    tracehook query trace 4bf92f3577b34da6a3ce929d0e0e4736
    tracehook query key orders order-42 --since 7d
    tracehook query prop orders orderId 42 --since 7d          # an indexed property (tracehook props)
    tracehook query topic orders --since 1h30m --limit 50
    tracehook query topic orders --begin -6h --end -1h
    tracehook query dead orders --group billing --json

Tables by default; ``--json`` prints the API's JSON documents for scripts.
``--json``, ``--collector``, ``--store`` and ``--token`` go before or after WHAT.
Exit status: 0 found, 1 nothing found, 2 bad query or unreachable source, 5 a store in an older layout
(docs/exit-codes.md).
``--store local:DIR`` also takes a data directory holding ``index.sqlite3``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from collector.cli.errors import USER_ERRORS, QueryFailed, report
from collector.query.params import ParamError, page_size, time_param, time_window
from collector.query.timeline import status_name
from collector.query.timeparse import current_ms, parse_duration
from collector.store.errors import OldLayoutError

ENV_COLLECTOR = "TRACEHOOK_QUERY_URL"
ENV_TOKEN = "TRACEHOOK_QUERY_TOKEN"
DEFAULT_COLLECTOR = "http://127.0.0.1:7070"
DEFAULT_TIMEOUT_S = 10.0
EXIT_OK, EXIT_NOT_FOUND, EXIT_ERROR = 0, 1, 2



class Source(Protocol):
    """Where answers come from: both return the native API's JSON documents."""

    def trace(self, msg_id: str) -> dict[str, Any] | None: ...

    def page(self, kind: str, topic: str, params: dict[str, Any]) -> dict[str, Any]: ...

    def trace_page(self, trace_id: str, params: dict[str, Any]) -> dict[str, Any]: ...

    def close(self) -> None: ...


class HttpSource:
    """The collector's native API over HTTP."""

    def __init__(self, base_url: str, token: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise QueryFailed(f"--collector must be an http:// or https:// URL like {DEFAULT_COLLECTOR}, "
                              f"not {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self.not_found_detail = ""  # the collector's explanation of the last 404

    def _get(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any] | None:
        # prop_name and prop_value go as given, empty too (the empty value; an empty name gets its 400).
        query = urllib.parse.urlencode({k: v for k, v in (params or {}).items()
                                        if v is not None and (v != "" or k in ("prop_name", "prop_value"))})
        request = urllib.request.Request(self.base_url + path + ("?" + query if query else ""))
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            try:
                body = json.loads(exc.read())
                text = f"{body.get('error')}: {body.get('detail')}"
            except (ValueError, AttributeError):
                body, text = {}, exc.reason
            if exc.code == 404:
                self.not_found_detail = str(body.get("detail") or "")
                return None
            if exc.code == 503 and body.get("error") == OldLayoutError.reason:  # the same line and exit as --store
                raise OldLayoutError(f"the collector at {self.base_url} answers: {body.get('detail')}") from None
            raise QueryFailed(f"HTTP {exc.code}: {text}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:  # ValueError: a URL urllib cannot use
            raise QueryFailed(f"cannot reach {self.base_url}: {getattr(exc, 'reason', exc)}") from None

    def trace(self, msg_id: str) -> dict[str, Any] | None:
        return self._get("/v1/messages/" + urllib.parse.quote(msg_id, safe=""))

    def page(self, kind: str, topic: str, params: dict[str, Any]) -> dict[str, Any]:
        path = f"/v1/topics/{urllib.parse.quote(topic, safe='')}/{kind}"
        return self._get(path, params) or {"items": [], "next_cursor": None}

    def trace_page(self, trace_id: str, params: dict[str, Any]) -> dict[str, Any]:
        query = {"trace_id": trace_id, "limit": params["limit"], "cursor": params.get("cursor")}
        return self._get("/v1/messages", query) or {"items": [], "next_cursor": None}

    def close(self) -> None:
        pass


class StoreSource:
    """The index store read directly (no collector needed): the HTTP API's documents, for every CLI."""

    def __init__(self, store_url: str) -> None:
        from collector.store import open_store, resolve_store_url
        from collector.store.reader import TraceQuery

        self.store_url = resolve_store_url(store_url, must_exist=True)
        self.query = TraceQuery(open_store(self.store_url))

    def pending_hint(self) -> str:
        """Unindexed records in the trace log next to a ``local:`` index (its data dir's ``log/``), if any."""
        from collector.query.pending import not_found_hint, pending
        from collector.store import local_path

        path = local_path(self.store_url)
        if path is None:
            return ""
        log_dir = os.path.join(os.path.dirname(os.path.abspath(path)), "log")
        return not_found_hint(pending(log_dir, self.store_url))

    def trace(self, msg_id: str) -> dict[str, Any] | None:
        """The document ``GET /v1/messages/{id}`` answers, kept body included: reading the store
        directly is reading everything, as a token with the body scope does."""
        from collector.query.documents import body_document, trace_document

        message = self.query.get_message(msg_id)
        if message is None:
            return None
        doc = trace_document(message.trace)
        doc.update(body_document(message.body, True))
        return doc

    def page(self, kind: str, topic: str, params: dict[str, Any]) -> dict[str, Any]:
        from collector.query.documents import page_dict

        args = (params["begin"], params["end"], params["limit"])
        if kind == "dead":
            page = self.query.dead_letters(topic, params.get("group"), *args, cursor=params.get("cursor"))
        elif params.get("prop_name") is not None:
            page = self.query.by_prop(topic, params["prop_name"], params["prop_value"], *args,
                                      cursor=params.get("cursor"))
        elif params.get("key"):
            page = self.query.by_key(topic, params["key"], *args, cursor=params.get("cursor"))
        else:
            page = self.query.by_time(topic, *args, cursor=params.get("cursor"))
        return page_dict(page)

    def trace_page(self, trace_id: str, params: dict[str, Any]) -> dict[str, Any]:
        from collector.query.documents import TRACE_ID, page_dict

        trace_id = trace_id.strip().lower()
        if not TRACE_ID.fullmatch(trace_id):
            raise ParamError("bad_value", "trace_id must be 32 hex digits (a W3C trace id)")
        return page_dict(self.query.by_trace(trace_id, params["limit"], cursor=params.get("cursor")))

    def offsets(self, topic: str, params: dict[str, Any]) -> dict[str, Any]:
        """``GET /v1/topics/{topic}/offsets``: offsets at a time, or a group's reset plan."""
        from collector.query import backtrack

        return backtrack.offsets_document(self.query, topic, params["time"], group=params.get("group"),
                                          queue=params.get("queue"), force=params["force"],
                                          allow_unknown_group=bool(params.get("allow_unknown_group")))

    def replay(self, topic: str, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Every item of the replay list (``GET /v1/topics/{topic}/unconsumed``, all pages)."""
        from collector.query import backtrack

        if not params.get("allow_unknown_group"):  # here, not lazily: before a CSV header is written
            backtrack.check_group_seen(self.query, topic, params["group"])
        items = backtrack.iter_replay(self.query, topic, params["group"], params["begin"], params["end"])
        return (item.to_json() for item in items)

    def close(self) -> None:
        self.query.store.close()


def _fmt_time(ms: Any) -> str:
    if not ms or int(ms) <= 0:
        return "-"
    return datetime.fromtimestamp(int(ms) / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _fmt_cost(us: Any) -> str:
    us = int(us or 0)
    return f"{us / 1000:.1f}ms" if us >= 1000 else f"{us}us"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain fixed-width text table."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def format_trace(doc: dict[str, Any]) -> str:
    """A trace as text: the message's fields, then one line per timeline bar."""
    head = [
        f"message  {doc.get('msg_id')}",
        f"topic    {doc.get('topic')}   keys {doc.get('keys') or '-'}   tags {doc.get('tags') or '-'}",
        f"broker   {doc.get('broker') or '-'}   queue {doc.get('queue')}   offset {doc.get('offset')}",
        f"born     {_fmt_time(doc.get('born_ms'))}   stored {_fmt_time(doc.get('store_ms'))}   (times in UTC)",
        "",
    ]
    rows = []
    for row in doc.get("timeline", {}).get("rows", []):
        for bar in row["bars"]:
            rows.append([
                row["kind"], row["group"] or "-", bar["kind"], _fmt_time(bar["start_ms"]),
                bar.get("tx_state", bar["status"]),
                _fmt_cost(bar["cost_us"]), bar["retry"], bar["host"] or "-", bar["error"] or "",
            ])
    return "\n".join(head) + table(["row", "group", "what", "time", "status", "cost", "retry", "host", "error"], rows)


def format_outcomes(groups: dict[str, Any]) -> str:
    """Each consumer group's outcome, as the web page shows it: ``billing: consumed, audit: dead (3 attempts)``."""
    parts = []
    for group in sorted(groups):
        o = groups[group]
        attempts = f" ({o['attempts']} attempts)" if o.get("attempts", 0) > 1 else ""
        parts.append(f"{group}: {o['outcome']}{attempts}")
    return ", ".join(parts) or "-"


def format_page(page: dict[str, Any]) -> str:
    """A result page as a table (the web page's columns), with the cursor for the next page."""
    rows = [
        [i.get("msg_id"), i.get("keys") or "", i.get("tags") or "", i.get("broker") or "", i.get("queue"),
         i.get("offset"), _fmt_time(i.get("time_ms")),
         "not traced" if i.get("send_traced") is False else status_name(i.get("status")),
         format_outcomes(i.get("groups") or {})]
        for i in page["items"]
    ]
    text = table(["msg_id", "keys", "tags", "broker", "queue", "offset", "stored", "send", "consumer groups"], rows)
    if page.get("next_cursor"):
        text += f"\n(more: --cursor {page['next_cursor']})"
    return text


def add_source_arguments(parser: argparse.ArgumentParser, *, suppress: bool = False) -> None:
    """``--collector URL`` or ``--store URL``, and ``--token``: where a command reads the index.

    With ``suppress`` an option left out adds nothing to the namespace, so on a subcommand
    it does not overwrite the value (or default) parsed before the subcommand.
    """
    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    source = parser.add_mutually_exclusive_group()
    source.add_argument("--collector", default=default(os.environ.get(ENV_COLLECTOR, DEFAULT_COLLECTOR)),
                        help=f"collector URL (env {ENV_COLLECTOR}; default {DEFAULT_COLLECTOR})")
    source.add_argument("--store", default=default(None),
                        help="read the index store directly: local:PATH or hbase://host:port?namespace=NS")
    parser.add_argument("--token", default=default(os.environ.get(ENV_TOKEN)), help=f"query token (env {ENV_TOKEN})")


def _common_options(parser: argparse.ArgumentParser, *, suppress: bool) -> None:
    add_source_arguments(parser, suppress=suppress)
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS if suppress else False,
                        help="print JSON instead of tables")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``tracehook query``: the common options go before or after WHAT."""
    _common_options(parser, suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _common_options(common, suppress=True)
    sub = parser.add_subparsers(dest="what", required=True, metavar="WHAT")
    by_id = sub.add_parser("id", parents=[common], help="a message's full trace")
    by_id.add_argument("msg_id")
    by_trace = sub.add_parser("trace", parents=[common], help="the messages of one W3C trace id")
    by_trace.add_argument("trace_id")
    by_trace.add_argument("--limit", default="20", help="page size (default 20)")
    by_trace.add_argument("--cursor", help="continue after a previous page")
    by_key = sub.add_parser("key", parents=[common], help="messages of a topic with a business key, newest first")
    by_key.add_argument("topic")
    by_key.add_argument("key")
    by_prop = sub.add_parser("prop", parents=[common],
                             help="messages of a topic with an indexed property's value, newest first")
    by_prop.add_argument("topic")
    by_prop.add_argument("prop_name", metavar="NAME", help="the property name, as is (':' and '=' are plain text)")
    by_prop.add_argument("prop_value", metavar="VALUE", help="its value, as is ('' for the empty value)")
    by_topic = sub.add_parser("topic", parents=[common], help="messages of a topic in a time window")
    by_topic.add_argument("topic")
    dead = sub.add_parser("dead", parents=[common], help="dead letters of a topic")
    dead.add_argument("topic")
    dead.add_argument("--group", help="only this consumer group")
    for listing in (by_key, by_prop, by_topic, dead):
        listing.add_argument("--since", help="window start as a duration ago: 15m, 1h30m, 7d (not with --begin/--end)")
        listing.add_argument("--begin", help="window start: epoch ms, ISO-8601, now or relative like -6h")
        listing.add_argument("--end", help="window end: epoch ms, ISO-8601, now or relative like -1h (default now)")
        listing.add_argument("--limit", default="20", help="page size (default 20)")
        listing.add_argument("--cursor", help="continue after a previous page")


def _listing_params(args: argparse.Namespace, now_ms: int) -> dict[str, Any]:
    if args.since and (args.begin or args.end):
        raise ParamError("bad_window", "--since cannot be combined with --begin or --end")
    if args.since:
        begin: int | None = now_ms - parse_duration(args.since, name="--since")
    else:
        begin = time_param("--begin", args.begin, now_ms=now_ms)
    end = time_param("--end", args.end, now_ms=now_ms)
    begin, end = time_window(begin, end, now_ms=now_ms)
    params = {
        "begin": begin, "end": end, "limit": page_size(args.limit), "cursor": args.cursor,
        "key": getattr(args, "key", None), "group": getattr(args, "group", None),
    }
    if args.what == "prop":
        params.update(prop_name=args.prop_name, prop_value=args.prop_value)
    return params


def run(args: argparse.Namespace) -> int:
    """Run one query and print the answer."""
    try:
        source: Source = StoreSource(args.store) if args.store else HttpSource(args.collector, args.token)
        try:
            if args.what == "id":
                doc = source.trace(args.msg_id)
                if doc is None:
                    missing = f"no trace for message {args.msg_id!r}"
                    print(missing, file=sys.stderr)
                    # Records not indexed yet: counted next to a local: index, or told by the collector's 404.
                    if isinstance(source, StoreSource):
                        hint = source.pending_hint()
                    else:
                        hint = getattr(source, "not_found_detail", "").removeprefix(missing).removeprefix("; ")
                    if hint:
                        print(f"hint: {hint}", file=sys.stderr)
                    return EXIT_NOT_FOUND
                print(json.dumps(doc, indent=2) if args.json else format_trace(doc))
                return EXIT_OK
            if args.what == "trace":
                page = source.trace_page(args.trace_id, {"limit": page_size(args.limit), "cursor": args.cursor})
            else:
                params = _listing_params(args, current_ms())
                page = source.page("dead" if args.what == "dead" else "messages", args.topic, params)
        finally:
            source.close()
    except USER_ERRORS as exc:
        return report(exc)
    print(json.dumps(page, indent=2) if args.json else format_page(page))
    return EXIT_OK if page["items"] else EXIT_NOT_FOUND
