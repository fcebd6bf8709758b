"""QMQ backup-server compatible query endpoints.

Shapes follow QMQ's backup API (docs/query.md): subject = topic,
brokerGroup = broker, sequence = offset, createTime = the producer's born
time (the store time when unknown).  Longs are rendered as strings, as QMQ's
server does, so JavaScript clients keep every digit.

    GET /api/message?backupQuery={"subject":"t","len":10,"start":null}
    GET /api/message/dead?backupQuery={...}
    GET /api/message/detail?backupQuery={"subject":"t","brokerGroup":"b","sequence":3}
    GET /api/message/records?recordQuery={"subject":"t","messageId":"id","recordCode":0}

``isDelay`` is accepted and ignored: tracehook does not keep delayed
messages apart.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from collector.api import error_response, query_route, run_query
from collector.params import (
    MAX_PAGE_SIZE,
    ParamError,
    field_bool,
    field_int,
    field_str,
    page_size,
    parse_json_object,
    parse_time,
    time_window,
)
from collector.views import as_dict, now_ms

DEFAULT_LEN = 10
DETAIL_SCAN_PAGES = 20
"""How many pages of MAX_PAGE_SIZE the brokerGroup + sequence lookup scans."""


def _list_item(item: dict[str, Any]) -> dict[str, Any]:
    created = item.get("born_ms") or item.get("store_ms") or 0
    return {
        "brokerGroup": str(item.get("broker") or ""),
        "sequence": str(item.get("offset", -1)),
        "messageId": str(item.get("msg_id") or ""),
        "subject": str(item.get("topic") or ""),
        "createTime": str(created),
    }


def _backup_query(request: web.Request) -> dict[str, Any]:
    return parse_json_object("backupQuery", request.query.get("backupQuery"))


async def _message_list(request: web.Request, *, dead: bool) -> web.Response:
    query = _backup_query(request)
    subject = field_str(query, "subject", required=True)
    msg_id = field_str(query, "messageId")
    field_bool(query, "isDelay")
    now = now_ms()
    begin = parse_time("msgCreateTimeBegin", query.get("msgCreateTimeBegin"))
    end = parse_time("msgCreateTimeEnd", query.get("msgCreateTimeEnd"))
    begin, end = time_window(begin, end, now_ms=now)
    limit = page_size(query.get("len"), default=DEFAULT_LEN, name="len")
    start = field_str(query, "start")
    if msg_id is not None:
        doc = await _trace_of(request, subject, msg_id)
        listed = doc is not None and (doc["dead"] or not dead)
        return web.json_response({"list": [_list_item(doc)] if listed else [], "next": None})
    if dead:
        page = await run_query(request, "dead_letters", subject, None, begin_ms=begin, end_ms=end,
                               limit=limit, cursor=start)
    else:
        page = await run_query(request, "by_time", subject, begin, end, limit, cursor=start, newest_first=True)
    items = [_list_item(s.to_json()) for s in page.items]
    return web.json_response({"list": items, "next": page.next_cursor or None})


async def _trace_of(request: web.Request, subject: str, msg_id: str) -> dict[str, Any] | None:
    """The message's trace document when it exists and belongs to ``subject``."""
    doc = as_dict(await run_query(request, "get_trace", msg_id))
    return doc if doc and doc["topic"] == subject else None


async def _find(request: web.Request, query: dict[str, Any]) -> dict[str, Any] | None:
    """The trace named by messageId, or by brokerGroup + sequence within the last 30 days."""
    subject = field_str(query, "subject", required=True)
    msg_id = field_str(query, "messageId")
    if msg_id is not None:
        return await _trace_of(request, subject, msg_id)
    broker = field_str(query, "brokerGroup")
    sequence = field_int(query, "sequence")
    if broker is None or sequence is None:
        raise ParamError("missing_field", "give messageId, or brokerGroup and sequence")
    # The index has no (broker, offset) row, so walk the topic's recent messages, newest first.
    begin, end = time_window(None, None, now_ms=now_ms())
    cursor = None
    for _ in range(DETAIL_SCAN_PAGES):
        page = await run_query(request, "by_time", subject, begin, end, MAX_PAGE_SIZE, cursor=cursor,
                               newest_first=True)
        for summary in page.items:
            if summary.broker == broker and summary.offset == sequence:
                return await _trace_of(request, subject, summary.msg_id)
        cursor = page.next_cursor
        if not cursor:
            break
    return None


def _tags(tags: str) -> list[str]:
    return [t for t in tags.replace("||", " ").split() if t]


@query_route
async def message_list(request: web.Request) -> web.Response:
    """GET /api/message: a topic's messages in a time window, cursor-paged."""
    return await _message_list(request, dead=False)


@query_route
async def dead_list(request: web.Request) -> web.Response:
    """GET /api/message/dead: a topic's dead letters, cursor-paged."""
    return await _message_list(request, dead=True)


@query_route
async def message_detail(request: web.Request) -> web.Response:
    """GET /api/message/detail: one message's ids, tags and properties."""
    doc = await _find(request, _backup_query(request))
    if doc is None:
        return error_response("not_found", "no such message", status=404)
    send = doc.get("send") or {}
    attrs = {str(k): str(v) for k, v in (doc.get("props") or {}).items()}
    if doc.get("keys"):
        attrs.setdefault("keys", str(doc["keys"]))
    return web.json_response({
        "subject": str(doc.get("topic") or ""),
        "messageId": str(doc.get("msg_id") or ""),
        "brokerGroup": str(doc.get("broker") or ""),
        "sequence": str(doc.get("offset", -1)),
        "queue": doc.get("queue", -1),
        "createTime": str(doc.get("born_ms") or 0),
        "storeTime": str(doc.get("store_ms") or 0),
        "tags": _tags(str(doc.get("tags") or "")),
        "storeAtFailed": bool(send) and send.get("status", 0) not in (0, "ok", "OK"),
        "durable": True,
        "attrs": attrs,
    })


@query_route
async def message_records(request: web.Request) -> web.Response:
    """GET /api/message/records: consume records of one type (0 normal, 1 retry, 2 dead)."""
    query = parse_json_object("recordQuery", request.query.get("recordQuery"))
    code = field_int(query, "recordCode")
    code = 0 if code is None else code
    if code not in (0, 1, 2):
        raise ParamError("bad_value", "recordCode must be 0 (normal), 1 (retry) or 2 (dead)")
    doc = await _find(request, query)
    records = await run_query(request, "consume_records", doc["msg_id"]) if doc else []
    return web.json_response({"records": [
        {
            "consumerGroup": r["consumer_group"],
            "action": r["action"],
            "type": r["type"],
            "timestamp": str(r["timestamp"]),
            "consumerId": r["consumer_id"],
            "sequence": str(r["offset"]),
        }
        for r in records
        if r["type"] == code
    ]})


def add_routes(app: web.Application) -> None:
    """Register the QMQ-compatible endpoints on ``app``."""
    app.router.add_get("/api/message", message_list)
    app.router.add_get("/api/message/dead", dead_list)
    app.router.add_get("/api/message/detail", message_detail)
    app.router.add_get("/api/message/records", message_records)
