"""QMQ backup-server compatible query endpoints.

Shapes follow QMQ's backup API (docs/query.md): subject = topic,
brokerGroup = broker (``broker/queue`` when the message has a queue, see
:func:`broker_group`), sequence = offset, createTime = the producer's born
time (the store time when unknown).  Longs are rendered as strings, as QMQ's
server does, so JavaScript clients keep every digit.

    GET /api/message?backupQuery={"subject":"t","isDelay":false,"len":10,"start":null}
    GET /api/message/dead?backupQuery={...}
    GET /api/message/detail?backupQuery={"subject":"t","brokerGroup":"b/0","sequence":3}
    GET /api/message/records?recordQuery={"subject":"t","messageId":"id","recordCode":0}

``isDelay`` and ``len`` are required, as QMQ documents them.  tracehook records
no delayed messages (the wire format has no delay field), so ``isDelay: true``
lists nothing.  The detail carries the kept body among its ``attrs`` (:data:`BODY_ATTRS`), only
to a token with the ``body`` scope; the lists never do.  The window (``msgCreateTimeBegin``/``End``) filters on the time
the index files messages under: the broker's store time, not the create time.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from collector.query.documents import as_dict, body_document
from collector.query.params import (
    ParamError,
    field_bool,
    field_int,
    field_str,
    page_size,
    parse_json_object,
    request_window,
)
from collector.server.auth import may_read_bodies
from collector.server.native import log_body_read
from collector.server.responses import json_error
from collector.server.routes import query_route, run_query
from tracehook.wire import MAX_INT

_MAX_QUEUE_DIGITS = 19
"""A queue is any signed 64-bit value the wire format accepts (up to 2^63-1: 19 digits)."""


def broker_group(broker: str, queue: int) -> str:
    """QMQ's brokerGroup of a message: the broker, and its queue when it has one.

    QMQ numbers messages per broker group; Kafka-like brokers number them per partition,
    so the broker alone does not name a message (offset 7 exists in every partition).
    """
    return f"{broker}/{queue}" if queue >= 0 else broker


def split_broker_group(text: str) -> tuple[str, int | None]:
    """``(broker, queue)`` of a brokerGroup :func:`broker_group` made; ``(text, None)`` when unqualified."""
    broker, sep, queue = text.rpartition("/")
    if sep and broker and queue.isascii() and queue.isdigit() and len(queue) <= _MAX_QUEUE_DIGITS \
            and int(queue) <= MAX_INT:
        return broker, int(queue)
    return text, None


def _list_item(item: dict[str, Any]) -> dict[str, Any]:
    created = item.get("born_ms") or item.get("store_ms") or 0
    return {
        "brokerGroup": broker_group(str(item.get("broker") or ""), int(item.get("queue", -1))),
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
    is_delay = field_bool(query, "isDelay", required=True)
    limit = page_size(field_int(query, "len", required=True), name="len", clamp=True)
    msg_id = field_str(query, "messageId")
    begin, end = request_window(query, "msgCreateTimeBegin", "msgCreateTimeEnd", max_window_ms=None)
    start = field_str(query, "start")
    if is_delay:
        # Only delayed messages are asked for, and no event records a delay.
        return web.json_response({"list": [], "next": None})
    if msg_id is not None:
        doc = await _trace_of(request, subject, msg_id)
        listed = doc is not None and (doc["dead"] or not dead)
        return web.json_response({"list": [_list_item(doc)] if listed else [], "next": None})
    if dead:
        page = await run_query(request, "dead_letters", subject, None, begin_ms=begin, end_ms=end,
                               limit=limit, cursor=start)
    else:
        page = await run_query(request, "by_time", subject, begin, end, limit, cursor=start)
    items = [_list_item(s.to_json()) for s in page.items]
    return web.json_response({"list": items, "next": page.next_cursor or None})


async def _trace_of(request: web.Request, subject: str, msg_id: str) -> dict[str, Any] | None:
    """The message's trace document when it exists and belongs to ``subject``."""
    doc = as_dict(await run_query(request, "get_trace", msg_id))
    return doc if doc and doc["topic"] == subject else None


async def _find(request: web.Request, query: dict[str, Any]) -> dict[str, Any] | None:
    """The trace named by messageId, or by brokerGroup + sequence (one index lookup)."""
    subject = field_str(query, "subject", required=True)
    msg_id = field_str(query, "messageId")
    if msg_id is not None:
        return await _trace_of(request, subject, msg_id)
    group = field_str(query, "brokerGroup")
    sequence = field_int(query, "sequence")
    if group is None or sequence is None:
        raise ParamError("missing_field", "give messageId, or brokerGroup and sequence")
    broker, queue = split_broker_group(group)
    found = await run_query(request, "by_sequence", subject, broker, sequence, queue)
    if not found and queue is not None:  # a broker whose own name ends in "/<digits>", listed without a queue
        found = await run_query(request, "by_sequence", subject, group, sequence)
    ids = {s.msg_id for s in found}
    if len(ids) > 1:
        choices = ", ".join(sorted({broker_group(s.broker, s.queue) for s in found}))
        raise ParamError("ambiguous_sequence", f"sequence {sequence} of brokerGroup {group!r} is in several queues: "
                         f"give brokerGroup with its queue, as /api/message lists it ({choices})")
    return await _trace_of(request, subject, ids.pop()) if ids else None


BODY_ATTRS = {"body": "qmq_body", "body_len": "qmq_bodyLen", "body_truncated": "qmq_bodyTruncated",
              "body_erased": "qmq_bodyErased", "body_corrupt": "qmq_bodyCorrupt"}
"""The detail's ``attrs`` holding the kept body (to a token with the body scope), by the native
document's field: reserved, so a property of one of these names is left out of ``attrs``."""


def body_attrs(found: Any) -> dict[str, str]:
    """The kept body of a :class:`collector.store.bodies.BodyLookup` as QMQ attrs (strings, as QMQ's
    are): the native API's body fields (:func:`collector.query.documents.body_document`) renamed by
    :data:`BODY_ATTRS`, the ones that are null left out; the raw key and headers (for replay) stay out."""
    doc = body_document(found, True)
    return {attr: _attr_text(doc[field]) for field, attr in BODY_ATTRS.items() if doc.get(field) is not None}


def _attr_text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


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
    """GET /api/message/detail: one message's ids, tags and properties, and its kept body
    (:data:`BODY_ATTRS`) to a token with the body scope."""
    doc = await _find(request, _backup_query(request))
    if doc is None:
        return json_error("not_found", "no such message", status=404)
    send = doc.get("send") or {}
    reserved = set(BODY_ATTRS.values())
    attrs = {str(k): str(v) for k, v in (doc.get("props") or {}).items() if str(k) not in reserved}
    if doc.get("keys"):
        attrs.setdefault("keys", str(doc["keys"]))
    if may_read_bodies(request):
        kept = body_attrs(await run_query(request, "get_body", doc["msg_id"]))
        attrs.update(kept)
        if "qmq_body" in kept:
            log_body_read(request, doc["msg_id"])
    return web.json_response({
        "subject": str(doc.get("topic") or ""),
        "messageId": str(doc.get("msg_id") or ""),
        "brokerGroup": broker_group(str(doc.get("broker") or ""), int(doc.get("queue", -1))),
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
