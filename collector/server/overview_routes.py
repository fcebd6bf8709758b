"""``GET /v1/overview`` and the rollup metrics on ``/metrics`` (registered by :func:`setup`).

    GET /v1/overview?window=15m                      the last 15 minutes (any duration: 1h, 24h, 90m)
    GET /v1/overview?begin=-2h&end=-1h[&topic=T]     a custom window (begin/end as on every query route)

Both answer from the rollups only (:mod:`collector.query.overview`); a bad parameter is a 400
``{"error": reason, "detail": text}``.  On ``/metrics`` the same rollups appear per topic and
group over the last :data:`METRICS_WINDOW_MS` (see docs/console-overview.md for the names).
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from collector.query import overview as ov
from collector.query.timeparse import current_ms
from collector.server.appkeys import STORE_KEY
from collector.server.auth import require_query_token
from collector.server.errors import HttpError
from collector.server.metrics import render_labels
from collector.server.routes import query_route
from collector.store import Store, StoreError
from collector.store.rollup import LATENCY_BOUNDS_MS

log = logging.getLogger(__name__)

METRICS_WINDOW_MS = 3600 * 1000
"""The window the ``/metrics`` rollup gauges count over: the last hour."""


@query_route
async def get_overview(request: web.Request) -> web.Response:
    """Topics and groups over a window: counts, latency percentiles, series and lag in seconds."""
    now_ms = current_ms()
    begin, end, topic = ov.window_from_params(request.query, now_ms)
    result = await asyncio.to_thread(ov.overview, request.app[STORE_KEY], begin, end, now_ms=now_ms, topic=topic)
    return web.json_response(result.to_json())


def render_metrics(store: Store, now_ms: int) -> str:
    """The rollup metrics in the Prometheus text format (gauges over the last hour, lag now)."""
    result = ov.overview(store, now_ms - METRICS_WINDOW_MS, now_ms, now_ms=now_ms)
    sent = ["# HELP tracehook_topic_messages_sent Messages sent to the topic in the last hour (from rollups).",
            "# TYPE tracehook_topic_messages_sent gauge"]
    outcome = ["# HELP tracehook_group_messages Messages of the last hour by consumer group and outcome (from rollups).",
               "# TYPE tracehook_group_messages gauge"]
    latency = ["# HELP tracehook_group_latency_seconds End-to-end latency (message time to consumed) of the "
               "last hour's messages, by consumer group.", "# TYPE tracehook_group_latency_seconds histogram"]
    lag = ["# HELP tracehook_group_lag_seconds Age of the oldest message the group has not consumed yet.",
           "# TYPE tracehook_group_lag_seconds gauge"]
    for topic in result.topics:
        sent.append(f"tracehook_topic_messages_sent{render_labels([('topic', topic.topic)])} {topic.sent}")
        for group in topic.groups:
            base = [("topic", topic.topic), ("group", group.group)]
            counts = {**group.counts, "not_received": max(0, group.sent - group.received)}
            for name, value in counts.items():
                outcome.append(f"tracehook_group_messages{render_labels([*base, ('outcome', name)])} {value}")
            running = 0
            for bound, n in zip([*(f"{b / 1000:g}" for b in LATENCY_BOUNDS_MS), "+Inf"], group.latency):
                running += n
                latency.append(f"tracehook_group_latency_seconds_bucket{render_labels([*base, ('le', bound)])} {running}")
            latency.append(f"tracehook_group_latency_seconds_sum{render_labels(base)} {group.latency_sum_ms / 1000!r}")
            latency.append(f"tracehook_group_latency_seconds_count{render_labels(base)} {running}")
            lag.append(f"tracehook_group_lag_seconds{render_labels(base)} {group.lag_ms / 1000!r}")
    return "\n".join(sent + outcome + latency + lag) + "\n"


async def metrics_text(request: web.Request) -> str:
    """:func:`render_metrics` for the app's store; "" without a store, while it does not answer, or
    when a query token is configured and the scrape does not present it (topic and group names are
    query data)."""
    store = request.app.get(STORE_KEY)
    if store is None:
        return ""
    try:
        require_query_token(request)
    except HttpError:
        return ""
    try:
        return await asyncio.to_thread(render_metrics, store, current_ms())
    except StoreError as exc:  # the scrape still gets the collector's own metrics
        log.warning("rollup metrics left out: %s", exc)
        return ""


def setup(app: web.Application) -> None:
    """Register ``GET /v1/overview`` on ``app``."""
    app.router.add_get("/v1/overview", get_overview)
