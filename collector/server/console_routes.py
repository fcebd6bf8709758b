"""HTTP routes the web console needs beyond the query API (registered by :func:`setup`).

    GET /v1/console/config                          {"trace_ui_url": template or null}
    GET /v1/topics/{topic}/unconsumed/export?group=G&format=jsonl|csv[&begin=&end=&allow_unknown_group=]
                                                    the whole replay list as a download (Content-Disposition),
                                                    the same lines ``tracehook replay-list --format`` writes

Both need the query token, like every query route (:func:`collector.server.routes.query_route`).
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import logging
import re
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from collector.query import backtrack
from collector.query.params import ParamError, request_window, text_param
from collector.server.appkeys import CONFIG_KEY
from collector.server.auth import require_query_token
from collector.server.errors import ANSWERED
from collector.server.routes import query_route, trace_query
from collector.store.reader import MAX_LIMIT

EXPORT_FORMATS = {"jsonl": "application/x-ndjson", "csv": "text/csv"}
"""Download formats and their media types."""
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
log = logging.getLogger(__name__)


async def console_config(request: web.Request) -> web.Response:
    """The settings the page reads: the external trace UI's URL template (``{trace_id}`` in it), or null."""
    require_query_token(request)
    return web.json_response({"trace_ui_url": request.app[CONFIG_KEY].trace_ui_url or None})


def download_name(topic: str, group: str, fmt: str) -> str:
    """``replay-<topic>-<group>.<fmt>``, with anything but letters, digits, ``.``, ``_``, ``-`` as ``_``."""
    return _UNSAFE_NAME.sub("_", f"replay-{topic}-{group}") + "." + fmt


def export_text(items: Iterable[dict[str, Any]], fmt: str, *, header: bool) -> str:
    """Replay items as JSON lines or CSV rows (``header``: the CSV header line first)."""
    out = io.StringIO()
    if fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=backtrack.FIELDS, extrasaction="ignore")
        if header:
            writer.writeheader()
        writer.writerows(items)
    else:
        out.writelines(json.dumps(item, ensure_ascii=False) + "\n" for item in items)
    return out.getvalue()


@query_route
async def export_unconsumed(request: web.Request) -> web.StreamResponse:
    """The replay list of a group in a window, every page, streamed as a file download."""
    topic = request.match_info["topic"]
    group = text_param("group", request.query.get("group"), required=True)
    assert group is not None
    fmt = request.query.get("format", "jsonl")
    if fmt not in EXPORT_FORMATS:
        raise ParamError("bad_value", f"format must be one of {', '.join(EXPORT_FORMATS)}")
    begin, end = request_window(request.query)
    allow = request.query.get("allow_unknown_group", "").strip().lower()
    if allow not in ("true", "1", "yes", "false", "0", "no", ""):
        raise ParamError("bad_value", "allow_unknown_group must be true or false")
    query = trace_query(request)
    if allow not in ("true", "1", "yes"):
        await asyncio.to_thread(backtrack.check_group_seen, query, topic, group)
    # The first page is read before the answer starts, so a store error is still a JSON error.
    page = await asyncio.to_thread(backtrack.replay_list, query, topic, group, begin, end, MAX_LIMIT, None)
    response = web.StreamResponse(headers={
        "Content-Type": f"{EXPORT_FORMATS[fmt]}; charset=utf-8",
        "Content-Disposition": f'attachment; filename="{download_name(topic, group, fmt)}"',
    })
    await response.prepare(request)
    seen: set[str] = set()
    header = True
    try:
        while True:
            fresh = [item.to_json() for item in page.items if item.msg_id not in seen]
            seen.update(item["msg_id"] for item in fresh)
            await response.write(export_text(fresh, fmt, header=header).encode())
            header = False
            if page.next_cursor is None:
                break
            page = await asyncio.to_thread(backtrack.replay_list, query, topic, group, begin, end, MAX_LIMIT,
                                           page.next_cursor)
    except ANSWERED as exc:
        # The download has started, so no JSON error can follow: cut the connection, and the
        # client sees a failed download instead of a short file that looks complete.
        log.warning("replay-list export of %r / %r cut short: %s", topic, group, exc)
        if request.transport is not None:
            request.transport.abort()
        return response
    await response.write_eof()
    return response


def setup(app: web.Application) -> None:
    """Register the console's routes on ``app``."""
    app.router.add_get("/v1/console/config", console_config)
    app.router.add_get("/v1/topics/{topic}/unconsumed/export", export_unconsumed)
