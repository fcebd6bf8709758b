"""The collector's query side: QMQ-compatible API, native JSON API, OpenAPI and web page.

``create_app`` calls :func:`setup`, which registers every query route::

    /api/message, /api/message/dead, /api/message/detail, /api/message/records   (collector.server.qmq)
    /v1/messages/{msg_id}, /v1/messages/{msg_id}/records,
    /v1/topics/{topic}/messages, /v1/topics/{topic}/dead                          (collector.server.native)
    /openapi.json, / and /static/*                                                (here)

Query routes go through :func:`query_route`: the query token is checked, the
handler runs, and a bad parameter or a bad cursor becomes a 400 JSON answer
``{"error": reason, "detail": text}`` — never a 500.
"""

from __future__ import annotations

import asyncio
import functools
import pathlib
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from collector.query.documents import withhold_bodies
from collector.server.appkeys import STORE_KEY
from collector.server.auth import may_read_bodies, require_query_token
from collector.server.errors import ANSWERED
from collector.server.responses import error_response, json_error
from collector.store.model import MessageTrace
from collector.store.reader import MessageLookup, TraceQuery

HERE = pathlib.Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
OPENAPI_PATH = HERE / "openapi.json"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]



def query_route(handler: Handler) -> Handler:
    """Wrap a query handler: token check, a store must be open; named errors become JSON answers
    (a bad parameter or cursor 400, an unreachable store 503 + Retry-After), never a 500."""

    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        require_query_token(request)
        if STORE_KEY not in request.app:
            return json_error("no_store", "this collector has no index store to query", status=503)
        try:
            return await handler(request)
        except ANSWERED as exc:
            return error_response(request, exc)

    return wrapped


def trace_query(request: web.Request) -> Any:
    """A ``TraceQuery`` over the app's opened index store."""
    return TraceQuery(request.app[STORE_KEY])


async def run_query(request: web.Request, method: str, *args: Any, **kwargs: Any) -> Any:
    """Call a ``TraceQuery`` method for this request in a worker thread.

    Store calls block (SQLite, Thrift); both stores are thread-safe, so running
    them off the event loop keeps ingest flowing while a query scans.
    A trace comes back without message bodies unless the request may read them
    (:func:`collector.server.auth.may_read_bodies`): every route that reads a trace reads it here.
    """
    result = await asyncio.to_thread(getattr(trace_query(request), method), *args, **kwargs)
    trace = result.trace if isinstance(result, MessageLookup) else result
    if isinstance(trace, MessageTrace) and not may_read_bodies(request):
        withhold_bodies(trace)  # a fresh trace per call: nothing else sees the change
    return result


async def openapi(request: web.Request) -> web.Response:
    """The OpenAPI document describing the native and QMQ endpoints."""
    return web.Response(body=OPENAPI_PATH.read_bytes(), content_type="application/json")


PAGE_CSP = "default-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
"""The page loads only its own script and styles: trace data can never run as code."""


async def index_page(request: web.Request) -> web.FileResponse:
    """The trace search page."""
    return web.FileResponse(STATIC_DIR / "index.html", headers={"Content-Security-Policy": PAGE_CSP})


def add_page_routes(app: web.Application) -> None:
    """Register the OpenAPI document, the web page and its static files on ``app``."""
    app.router.add_get("/openapi.json", openapi)
    app.router.add_get("/", index_page)
    app.router.add_static("/static/", STATIC_DIR)
