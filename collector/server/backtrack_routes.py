"""HTTP routes for backtracking (registered by :func:`setup`, which :mod:`collector.server.routes` calls).

    GET /v1/topics/{topic}/offsets?time=T[&queue=Q]          first offset stored at or after T, per queue
    GET /v1/topics/{topic}/offsets?time=T&group=G[&force=true&allow_unknown_group=]
                                                             G's reset plan (rewind-only unless force);
                                                             404 unknown_group for a group never seen on the topic
    GET /v1/topics/{topic}/unconsumed?group=G&begin=&end=[&limit=&cursor=&allow_unknown_group=]
                                                             the replay list, oldest first; 404 unknown_group
                                                             for a group never seen on the topic
    GET /v1/topics/{topic}/dead/counts?begin=&end=[&bucket=1h]   dead letters per group per time bucket

Times go through :func:`collector.query.params.parse_time`, as on every query route (epoch ms,
ISO-8601, ``now``, ``-2h``); a missing window means the last 30 days.  Query token and error rendering
are the query API's (:func:`collector.server.routes.query_route`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web

from collector.query import backtrack
from collector.query.params import ParamError, page_size, request_window, text_param, time_param, to_int
from collector.query.timeparse import parse_duration
from collector.server.routes import query_route, trace_query

_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no", "")


def _flag(request: web.Request, name: str) -> bool:
    value = request.query.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ParamError("bad_value", f"{name} must be true or false")


async def _run(request: web.Request, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Store calls block; run them off the event loop like every other query."""
    return await asyncio.to_thread(func, trace_query(request), *args, **kwargs)


@query_route
async def topic_offsets(request: web.Request) -> web.Response:
    """Offsets at a time for every queue (or ``queue``); with ``group``, that group's reset plan."""
    topic = request.match_info["topic"]
    time_ms = time_param("time", request.query.get("time"))
    if time_ms is None:
        raise ParamError("bad_time", "time is required: epoch ms, ISO-8601, now or a relative time like -2h")
    queue_text = request.query.get("queue")
    queue = None if queue_text in (None, "") else to_int("queue", queue_text)
    group = text_param("group", request.query.get("group"))
    force = _flag(request, "force")
    if group is None and force:
        raise ParamError("bad_value", "force needs a group")
    allow = _flag(request, "allow_unknown_group")  # else 404 unknown_group: a typo would plan "set" everywhere
    doc = await _run(request, backtrack.offsets_document, topic, time_ms, group=group, queue=queue, force=force,
                     allow_unknown_group=allow)
    return web.json_response(doc)


@query_route
async def topic_unconsumed(request: web.Request) -> web.Response:
    """The replay list: messages in the window the group has no successful consume of."""
    topic = request.match_info["topic"]
    group = text_param("group", request.query.get("group"), required=True)
    begin, end = request_window(request.query)
    limit = page_size(request.query.get("limit"))  # the API's usual default page (20), as openapi.json says
    cursor = text_param("cursor", request.query.get("cursor"))
    if not _flag(request, "allow_unknown_group"):
        await _run(request, backtrack.check_group_seen, topic, group)  # 404 unknown_group: a typo lists everything
    page = await _run(request, backtrack.replay_list, topic, group, begin, end, limit, cursor)
    return web.json_response(page.to_json())


@query_route
async def topic_dead_counts(request: web.Request) -> web.Response:
    """Dead letters per consumer group per time bucket, for the web page's overview."""
    topic = request.match_info["topic"]
    begin, end = request_window(request.query)
    bucket_text = request.query.get("bucket")
    bucket_ms = backtrack.DEFAULT_BUCKET_MS if not bucket_text else parse_duration(bucket_text, name="bucket")
    counts = await _run(request, backtrack.dead_counts, topic, begin, end, bucket_ms)
    return web.json_response(counts.to_json())


def setup(app: web.Application) -> None:
    """Register the backtracking routes on ``app``."""
    app.router.add_get("/v1/topics/{topic}/offsets", topic_offsets)
    app.router.add_get("/v1/topics/{topic}/unconsumed", topic_unconsumed)
    app.router.add_get("/v1/topics/{topic}/dead/counts", topic_dead_counts)
