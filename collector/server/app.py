"""The collector's aiohttp application: ingest, health, metrics, and the query API.

::

    from aiohttp import web
    from collector.server.app import create_app
    from collector.server.config import CollectorConfig
    web.run_app(create_app(CollectorConfig(data_dir="data", port=7070)), host="127.0.0.1", port=7070)

Resources live in ``cleanup_ctx``: the trace log (opened and recovered at start, its
queue drained and synced at stop) and the index store (a ``collector.store.link.StoreLink``:
opened in the background and reopened after outages, so ingest never depends on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from collector.log.writer import open_trace_log
from collector.server import (
    backtrack_routes,
    body_routes,
    console_routes,
    native,
    otlp_http,
    overview_routes,
    qmq,
    routes,
)
from collector.server.appkeys import (
    CONFIG_KEY,
    FOLLOWER_KEY,
    IN_FLIGHT_KEY,
    INGESTOR_KEY,
    METRICS_KEY,
    STORE_KEY,
    TRACELOG_KEY,
)
from collector.server.auth import require_admin_token
from collector.server.config import CollectorConfig
from collector.server.drain import InFlight, track_requests
from collector.server.errors import ANSWERED, ShuttingDown
from collector.server.ingest import Ingestor
from collector.server.metrics import CollectorMetrics
from collector.server.responses import error_response

log = logging.getLogger(__name__)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Render named errors as ``{"error": reason, "detail": text}`` (:func:`collector.server.errors.http_answer`)."""
    try:
        return await handler(request)
    except ANSWERED as exc:
        response = error_response(request, exc)
        if isinstance(exc, ShuttingDown):
            response.force_close()  # keep-alive clients must not keep this connection busy during the drain
        return response
    except web.HTTPException:
        raise
    except Exception:  # noqa: BLE001 - a client gets JSON, the log gets the traceback
        log.exception("unhandled error in %s %s", request.method, request.path)
        return web.json_response({"error": "internal", "detail": "internal error"}, status=500)


async def _tracelog_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG_KEY]
    # The file log (recovered now; on a full disk it starts degraded: queries served, ingest 503
    # until space returns) or the Kafka topic (a broker that is down: ingest 503 until it is back).
    tracelog = await asyncio.to_thread(open_trace_log, config)
    ingestor = Ingestor(config, tracelog, app[METRICS_KEY])
    app[TRACELOG_KEY] = tracelog
    app[INGESTOR_KEY] = ingestor
    await ingestor.start()
    try:
        yield
    finally:
        await ingestor.stop()


async def _begin_shutdown(app: web.Application) -> None:
    # on_shutdown runs before aiohttp waits for in-flight requests: from here on, new
    # batches (keep-alive clients keep sending) get 503 while the in-flight ones finish.
    if INGESTOR_KEY in app:
        app[INGESTOR_KEY].begin_shutdown()


STORE_START_WAIT_S = 5.0
"""How long start-up waits for the first store connection before serving without it."""


async def _store_ctx(app: web.Application) -> AsyncIterator[None]:
    config = app[CONFIG_KEY]
    # The store package belongs to another part of the project; a collector without it
    # (or with store_url "none") still ingests, it just serves no queries.
    if not config.store_enabled or importlib.util.find_spec("collector.store") is None:
        yield
        return
    from collector.store import local_path
    from collector.store.link import StoreLink, keep_connected

    path = local_path(config.store_url)
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    # Ingest never waits for the store: a store that is down (or slow to answer) at start
    # is opened in the background, and reopened whenever a query finds it gone.
    link = StoreLink(config.store_url)
    app[STORE_KEY] = link
    app[METRICS_KEY].add_gauge("tracehook_collector_store_available",
                               "Whether the index store answers (0: queries answer 503; ingest goes on).",
                               lambda: int(link.state == "ok"))
    first_attempt = asyncio.Event()
    task = asyncio.create_task(keep_connected(link, config.retry_after_s, first_attempt))
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(first_attempt.wait(), STORE_START_WAIT_S)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        link.close()


async def healthz(request: web.Request) -> web.Response:
    """Liveness plus the numbers an operator looks at first, those that apply to the log's kind.

    ``log`` is the trace log's state: ``{"kind": "file", "state": "ok" | "disk_full", "dir"}`` or
    ``{"kind": "kafka", "state": "ok" | "connecting" | "unavailable", "bootstrap", "topic", "error"?,
    "produced_records", "failed_records"}``; ``status`` is ``log_unavailable`` (still 200) while
    the Kafka log refuses batches.
    The file log adds ``backlog_bytes``, ``log_bytes``, ``segments`` and ``disk``, and ``status`` is
    ``disk_full`` (still 200: queries work) while the log's disk has no space. A Kafka log has none
    of them: the topic is Kafka's to size, its backlog is the index job's consumer lag, and the
    collector writes nothing of it to disk.
    With ``--index``, ``index_follower`` is ``{"state": "running" | "restarting" | "stopped", "restarts",
    "last_exit"}`` and ``status`` is ``index_failing`` (still 200) while it is not running.
    The file log also has ``index_set_aside``: the events index checkpoints of this log set aside (still ``ok``:
    the rest is indexed; ``tracehook set-aside list`` shows them).
    ``store`` is ``ok``, ``unavailable`` (with ``store_error``: queries answer 503, ingest goes
    on), ``connecting`` (at start) or ``none`` (no index store configured).
    """
    ingestor = request.app[INGESTOR_KEY]
    log_health = ingestor.tracelog.health()
    status = "disk_full" if ingestor.disk_full else "ok"
    if log_health["state"] == "unavailable":
        status = "log_unavailable"
    body: dict[str, Any] = {"status": status, "log": log_health, "store": "none"}
    if log_health["kind"] == "file":
        free_bytes, free_inodes = ingestor.disk_free()
        body.update(backlog_bytes=ingestor.backlog_bytes, log_bytes=ingestor.log_bytes, segments=ingestor.segments,
                    disk={"full": ingestor.disk_full, "free_bytes": free_bytes, "free_inodes": free_inodes})
        # Events the index job set aside (tracehook set-aside list), counted through the log's commit
        # records (a Kafka log has none): indexing goes on; someone should look.
        body["index_set_aside"] = await asyncio.to_thread(ingestor.index_lag.set_aside_total)
    follower = request.app.get(FOLLOWER_KEY)
    if follower is not None:  # tracehook collector --index: a follower that keeps failing is not ok
        body["index_follower"] = follower.to_json()
        if follower.state in ("restarting", "stopped") and status == "ok":
            body["status"] = "index_failing"
    link = request.app.get(STORE_KEY)
    if link is not None:
        body["store"] = link.state
        if link.error:
            body["store_error"] = link.error
    return web.json_response(body)


async def metrics(request: web.Request) -> web.Response:
    """The collector's own metrics, then the rollups' (collector.server.overview_routes), in the
    Prometheus text format or OpenMetrics as the scraper's ``Accept`` asks."""
    rollups = await overview_routes.metrics_families(request)
    body, content_type = request.app[METRICS_KEY].exposition(request.headers.get("Accept", ""), rollups)
    return web.Response(body=body, headers={"Content-Type": content_type, "X-Content-Type-Options": "nosniff"})


async def post_batches(request: web.Request) -> web.StreamResponse:
    return await request.app[INGESTOR_KEY].handle(request)


async def post_roll(request: web.Request) -> web.Response:
    """Seal the active segment now so the index job can read it (admin or ingest scope)."""
    require_admin_token(request)
    await request.app[INGESTOR_KEY].roll()
    return web.json_response({"sealed": [s.base for s in request.app[TRACELOG_KEY].sealed()]})


MAX_REQUEST_LINE = 160 * 1024
"""Longest request line (method, path and query) the collector reads."""


def create_app(config: CollectorConfig) -> web.Application:
    """The collector application for ``config`` (the log and store open when it starts)."""
    # aiohttp refuses request lines over 8 KiB with a plain-text 400 before any handler runs; query
    # parameters may be 16 KiB characters (params.MAX_PARAM_LEN), i.e. up to ~48 KiB percent-encoded
    # in UTF-8, so allow that much and let params.py answer too-long values with a JSON reason.
    # aiohttp's own body decoding is off for the same reason: /v1/traces decodes Content-Encoding
    # itself and answers in JSON (otlp_http.decompress); no other route takes compressed bodies.
    app = web.Application(middlewares=[track_requests, error_middleware], client_max_size=config.max_body_bytes,
                          handler_args={"max_line_size": MAX_REQUEST_LINE, "auto_decompress": False})
    app[CONFIG_KEY] = config
    app[METRICS_KEY] = CollectorMetrics()
    in_flight = app[IN_FLIGHT_KEY] = InFlight()
    app[METRICS_KEY].add_gauge("tracehook_collector_requests_in_progress",
                               "Requests being handled now, this scrape included (a graceful stop waits for them).",
                               lambda: in_flight.count)
    app.cleanup_ctx.append(_tracelog_ctx)
    app.cleanup_ctx.append(_store_ctx)
    app.on_shutdown.append(_begin_shutdown)
    app.router.add_post("/v1/batches", post_batches)
    app.router.add_post("/v1/admin/roll", post_roll)
    body_routes.setup(app)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    qmq.add_routes(app)
    native.add_routes(app)
    backtrack_routes.setup(app)
    console_routes.setup(app)
    overview_routes.setup(app)
    routes.add_page_routes(app)
    otlp_http.setup(app)
    return app
