"""The native JSON query API (documented in ``collector/openapi.json``).

    GET /v1/messages?trace_id=T               the messages of one W3C trace (cursor-paged)
    GET /v1/messages/{msg_id}                 the full trace plus its timeline rows and its kept body
    GET /v1/messages/{msg_id}/records         consume records (received / finished / dead)
    GET /v1/topics/{topic}/messages           by ?key= or ?prop_name=&prop_value= (newest first) or by
                                              time (?order=newest|oldest);
                                              ?begin=&end=&limit=&cursor=; ?group=&outcome= keep the
                                              messages with that outcome (collector.query.outcome_filter)
    GET /v1/topics/{topic}/dead               dead letters; ?group=&begin=&end=&limit=&cursor=

Times are read by :func:`collector.query.params.request_window` (epoch ms, ISO-8601,
``now``, ``-1h``, ``1h30m`` ago); a missing window means the last 30 days.
Pages carry ``next_cursor`` (null at the end).
Offsets at a time, reset plans and the replay list are in :mod:`collector.server.backtrack_routes`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiohttp import web

from collector.query.documents import TRACE_ID, body_document, has_body, page_dict, trace_document
from collector.query.outcome_filter import FILTER_SCAN_ROWS, parse_filter
from collector.query.params import ParamError, page_size, request_window, text_param
from collector.server.auth import may_read_bodies, reader_name
from collector.server.responses import json_error
from collector.server.routes import query_route, run_query

log = logging.getLogger(__name__)


@query_route
async def get_message(request: web.Request) -> web.Response:
    """GET /v1/messages/{msg_id}: the full trace, 404 when unknown."""
    msg_id = request.match_info["msg_id"]
    message = await run_query(request, "get_message", msg_id)
    if message is None:
        return json_error("not_found", not_found_detail(request, msg_id), status=404)
    trace, found = message
    may_read = may_read_bodies(request)
    doc = trace_document(trace)
    doc.update(body_document(found, may_read))
    # Cells written before the bodies table held them in the events.
    if may_read and (found.kept is not None or has_body(trace)):
        log_body_read(request, msg_id)
    return web.json_response(doc)


def log_body_read(request: web.Request, msg_id: str) -> None:
    """Log that this answer carries ``msg_id``'s body, with the token's name: an audit trail of who
    read bodies (never the token's value, never the body; nothing with open queries: no name)."""
    name = reader_name(request)
    if name is not None:
        log.info("body read: token %r msg_id %r", name, msg_id)


def not_found_detail(request: web.Request, msg_id: str) -> str:
    """'no trace for message ...', plus what the trace log holds unindexed and the command that indexes it."""
    from collector.query.pending import not_found_hint, pending
    from collector.server.appkeys import CONFIG_KEY, TRACELOG_KEY

    text = f"no trace for message {msg_id!r}"
    tracelog, config = request.app.get(TRACELOG_KEY), request.app.get(CONFIG_KEY)
    if tracelog is None or config is None:
        return text
    if not config.store_url:
        return text
    hint = not_found_hint(pending(tracelog.log_dir, config.store_url))
    return f"{text}; {hint}" if hint else text


@query_route
async def get_records(request: web.Request) -> web.Response:
    """GET /v1/messages/{msg_id}/records: every consume record of the message."""
    msg_id = request.match_info["msg_id"]
    records = await run_query(request, "consume_records", msg_id)
    if not records and await run_query(request, "get_trace", msg_id) is None:
        return json_error("not_found", f"no trace for message {msg_id!r}", status=404)
    return web.json_response({"msg_id": msg_id, "records": records})


@query_route
async def trace_messages(request: web.Request) -> web.Response:
    """GET /v1/messages?trace_id=T: the messages of one W3C trace, cursor-paged."""
    trace_id = text_param("trace_id", request.query.get("trace_id"), required=True)
    assert trace_id is not None
    trace_id = trace_id.strip().lower()
    if not TRACE_ID.fullmatch(trace_id):
        raise ParamError("bad_value", "trace_id must be 32 hex digits (a W3C trace id)")
    limit = page_size(request.query.get("limit"))
    cursor = text_param("cursor", request.query.get("cursor"))
    return web.json_response(page_dict(await run_query(request, "by_trace", trace_id, limit, cursor=cursor)))


@query_route
async def topic_messages(request: web.Request) -> web.Response:
    """GET /v1/topics/{topic}/messages: by key (newest first) or by time range, optionally filtered by outcome."""
    topic = request.match_info["topic"]
    key = text_param("key", request.query.get("key"))
    begin, end = request_window(request.query)
    limit = page_size(request.query.get("limit"))
    cursor = text_param("cursor", request.query.get("cursor"))
    order = request.query.get("order", "newest")
    if order not in ("newest", "oldest"):
        raise ParamError("bad_value", "order must be newest or oldest")
    found = parse_filter(text_param("group", request.query.get("group")), request.query.get("outcome"))
    filtered = {} if found is None else {"match": found.matches, "max_rows": FILTER_SCAN_ROWS}
    prop = prop_params(request.query)
    if prop is not None and key is not None:
        raise ParamError("bad_param", "give key or prop_name, not both")
    if prop is not None:
        page = await run_query(request, "by_prop", topic, *prop, begin, end, limit, cursor=cursor, **filtered)
    elif key is not None:
        page = await run_query(request, "by_key", topic, key, begin, end, limit, cursor=cursor, **filtered)
    else:
        page = await run_query(request, "by_time", topic, begin, end, limit, cursor=cursor,
                               newest_first=order == "newest", **filtered)
    return web.json_response(page_dict(page))


def prop_params(query: Mapping[str, str]) -> tuple[str, str] | None:
    """``(name, value)`` of a property listing (``prop_name`` and ``prop_value``, each any text: ``:``
    and ``=`` are plain characters; an empty ``prop_value=`` is the empty value), or None."""
    if "prop_name" not in query:
        if "prop_value" in query:
            raise ParamError("missing_param", "prop_value needs prop_name")
        return None
    if "prop_value" not in query:
        raise ParamError("missing_param", "prop_name needs prop_value (prop_value= for the empty value)")
    # An empty name reaches the query, which refuses it with its reason (bad_prop).
    return (text_param("prop_name", query["prop_name"]) or "", text_param("prop_value", query["prop_value"]) or "")


@query_route
async def topic_dead(request: web.Request) -> web.Response:
    """GET /v1/topics/{topic}/dead: dead letters, optionally of one consumer group."""
    topic = request.match_info["topic"]
    group = text_param("group", request.query.get("group"))
    begin, end = request_window(request.query)
    limit = page_size(request.query.get("limit"))
    cursor = text_param("cursor", request.query.get("cursor"))
    page = await run_query(
        request, "dead_letters", topic, group, begin_ms=begin, end_ms=end, limit=limit, cursor=cursor
    )
    return web.json_response(page_dict(page))


def add_routes(app: web.Application) -> None:
    """Register the native API on ``app``."""
    app.router.add_get("/v1/messages", trace_messages)
    app.router.add_get("/v1/messages/{msg_id}", get_message)
    app.router.add_get("/v1/messages/{msg_id}/records", get_records)
    app.router.add_get("/v1/topics/{topic}/messages", topic_messages)
    app.router.add_get("/v1/topics/{topic}/dead", topic_dead)
