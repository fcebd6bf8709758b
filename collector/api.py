"""The collector's query side: QMQ-compatible API, native JSON API, OpenAPI and web page.

``create_app`` calls :func:`setup`, which registers every query route::

    /api/message, /api/message/dead, /api/message/detail, /api/message/records   (collector.qmq)
    /v1/messages/{msg_id}, /v1/messages/{msg_id}/records,
    /v1/topics/{topic}/messages, /v1/topics/{topic}/dead                          (collector.views)
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

from collector.params import ParamError

HERE = pathlib.Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
OPENAPI_PATH = HERE / "openapi.json"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_response(reason: str, detail: str, status: int = 400) -> web.Response:
    """The JSON error body every API error uses."""
    return web.json_response({"error": reason, "detail": detail}, status=status)


def query_errors() -> tuple[type[BaseException], ...]:
    """The exception types a query may raise on purpose (each carries ``status`` and ``reason``)."""
    try:
        from collector.store.errors import StoreError
    except ImportError:  # the store package is optional until it is installed
        return (ParamError,)
    return (ParamError, StoreError)


def query_route(handler: Handler) -> Handler:
    """Wrap a query handler: token check, a store must be open, query errors become JSON."""

    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        from collector.app import CONFIG_KEY, STORE_KEY
        from collector.auth import require_query_token

        require_query_token(request)
        if STORE_KEY not in request.app:
            return error_response("no_store", "this collector has no index store to query", status=503)
        try:
            return await handler(request)
        except query_errors() as exc:
            # QueryError and ParamError are 400; an unreachable HBase is 503.
            status = int(getattr(exc, "status", 400))
            detail = getattr(exc, "detail", None) or str(exc)
            response = error_response(str(getattr(exc, "reason", "bad_query")), str(detail), status=status)
            if status == 503:  # the store is retried in the background (collector.storelink)
                response.headers["Retry-After"] = str(request.app[CONFIG_KEY].retry_after_s)
            return response

    return wrapped


def trace_query(request: web.Request) -> Any:
    """A ``TraceQuery`` over the app's opened index store."""
    from collector.app import STORE_KEY
    from collector.store.query import TraceQuery

    return TraceQuery(request.app[STORE_KEY])


async def run_query(request: web.Request, method: str, *args: Any, **kwargs: Any) -> Any:
    """Call a ``TraceQuery`` method for this request in a worker thread.

    Store calls block (SQLite, Thrift); both stores are thread-safe, so running
    them off the event loop keeps ingest flowing while a query scans.
    """
    return await asyncio.to_thread(getattr(trace_query(request), method), *args, **kwargs)


async def openapi(request: web.Request) -> web.Response:
    """The OpenAPI document describing the native and QMQ endpoints."""
    return web.Response(body=OPENAPI_PATH.read_bytes(), content_type="application/json")


PAGE_CSP = "default-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"
"""The page loads only its own script and styles: trace data can never run as code."""


async def index_page(request: web.Request) -> web.FileResponse:
    """The trace search page."""
    return web.FileResponse(STATIC_DIR / "index.html", headers={"Content-Security-Policy": PAGE_CSP})


def setup(app: web.Application) -> None:
    """Register the query API, the OpenAPI document and the web page on ``app``."""
    from collector import backtrack_api, overview_api, qmq, views

    qmq.add_routes(app)
    overview_api.setup(app)
    views.add_routes(app)
    backtrack_api.setup(app)
    app.router.add_get("/openapi.json", openapi)
    app.router.add_get("/", index_page)
    app.router.add_static("/static/", STATIC_DIR)
