"""``GET /v1/overview`` and the rollup metrics on ``/metrics`` (registered by :func:`setup`).

    GET /v1/overview?window=15m                      the last 15 minutes (any duration: 1h, 24h, 90m)
    GET /v1/overview?begin=-2h&end=-1h[&topic=T]     a custom window (begin/end as on every query route)
    GET /v1/overview?sort=lag&limit=20&cursor=20&filter=pay&group=G    rows: order, page, filters
    GET /v1/overview?series=0                        rows and groups without the per-step series

Both answer from the rollups only (:mod:`collector.query.overview`); a bad parameter is a 400
``{"error": reason, "detail": text}``.  On ``/metrics`` the same rollups appear per topic and
group over the last :data:`METRICS_WINDOW_MS`, computed at most once per :data:`METRICS_CACHE_S`
(see docs/console-overview.md for the names).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable

from aiohttp import web
from prometheus_client.core import GaugeHistogramMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString

from collector.index.rollup import LATENCY_BOUNDS_MS
from collector.query import overview as ov
from collector.query.overview_rows import row_query_from_params
from collector.query.timeparse import current_ms
from collector.server.appkeys import INGESTOR_KEY, STORE_KEY
from collector.server.auth import require_query_token
from collector.server.errors import HttpError
from collector.server.routes import query_route
from collector.store import Store, StoreError

log = logging.getLogger(__name__)

METRICS_WINDOW_MS = 3600 * 1000
"""The window the ``/metrics`` rollup gauges count over: the last hour."""
METRICS_CACHE_S = 15.0
"""How long a computation of the rollup metrics serves scrapes (one per this many seconds at most)."""


@query_route
async def get_overview(request: web.Request) -> web.Response:
    """Topic × group rows over a window (problems first, paged), and the shown topics' groups and series."""
    now_ms = current_ms()
    begin, end, topic = ov.window_from_params(request.query, now_ms)
    rows = row_query_from_params(request.query)
    result = await asyncio.to_thread(ov.overview, request.app[STORE_KEY], begin, end, now_ms=now_ms, topic=topic,
                                     rows=rows, series=rows.series)
    body = result.to_json()
    ingestor = request.app.get(INGESTOR_KEY)
    # The console shows it above the table (docs/console-overview.md): events the index job set aside.
    body["index_set_aside"] = 0 if ingestor is None else await asyncio.to_thread(ingestor.index_lag.set_aside_total)
    return web.json_response(body)


def rollup_families(store: Store, now_ms: int) -> list[Metric]:
    """The rollup metrics: gauges over the last hour (lag: as of now), latency as a gauge histogram."""
    result = ov.overview(store, now_ms - METRICS_WINDOW_MS, now_ms, now_ms=now_ms, series=False)
    sent = GaugeMetricFamily("tracehook_topic_messages_sent", "Messages sent to the topic in the last hour "
                             "(from rollups).", labels=["topic"])
    failed_sends = GaugeMetricFamily("tracehook_topic_failed_sends", "Sends of the last hour that failed at the "
                                     "broker (never stored; from rollups).", labels=["topic"])
    outcome = GaugeMetricFamily("tracehook_group_messages", "Messages of the last hour by consumer group and "
                                "outcome (from rollups).", labels=["topic", "group", "outcome"])
    latency = GaugeHistogramMetricFamily("tracehook_group_latency_seconds", "End-to-end latency (message time to "
                                         "consumed) of the last hour's messages, by consumer group.",
                                         labels=["topic", "group"])
    lag = GaugeMetricFamily("tracehook_group_lag_seconds", "Age of the oldest message the group has not consumed "
                            "yet.", labels=["topic", "group"])
    bounds = [*(floatToGoString(b / 1000) for b in LATENCY_BOUNDS_MS), "+Inf"]
    for topic in result.topics:
        sent.add_metric([topic.topic], topic.sent)
        failed = getattr(topic, "failed_sends", None)  # counted on their own since the overview keeps them apart
        if failed is not None:
            failed_sends.add_metric([topic.topic], failed)
        for group in topic.groups:
            labels = [topic.topic, group.group]
            not_received = getattr(group, "not_received", max(0, group.sent - group.received))
            for name, value in {**group.counts, "not_received": not_received}.items():
                outcome.add_metric([*labels, name], value)
            latency.add_metric(labels, list(zip(bounds, itertools.accumulate(group.latency))),
                               gsum_value=group.latency_sum_ms / 1000)
            lag.add_metric(labels, group.lag_ms / 1000)
    return [sent, *([failed_sends] if failed_sends.samples else []), outcome, latency, lag]


class RollupMetrics:
    """The rollup families for ``/metrics``, computed at most once per ``cache_s`` seconds.

    Each computation reads up to a day of rollups per topic (the lag looks back 24 hours: hour rows,
    and minute rows at the edges); scrapes
    in between (any number of scrapers) get the cached families, concurrent ones wait for one
    computation.  A failed computation (store down) is cached as "no families" for as long.
    """

    def __init__(self, cache_s: float = METRICS_CACHE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.cache_s, self._clock = cache_s, clock
        self._at: float | None = None
        self._families: list[Metric] = []
        self._lock = asyncio.Lock()

    async def families(self, store: Store) -> list[Metric]:
        async with self._lock:
            if self._at is not None and self._clock() - self._at < self.cache_s:
                return self._families
            try:
                self._families = await asyncio.to_thread(rollup_families, store, current_ms())
            except StoreError as exc:  # the scrape still gets the collector's own metrics
                log.warning("rollup metrics left out: %s", exc)
                self._families = []
            self._at = self._clock()
            return self._families


ROLLUP_METRICS_KEY = web.AppKey("rollup_metrics", RollupMetrics)


async def metrics_families(request: web.Request) -> list[Metric]:
    """The rollup families (:class:`RollupMetrics`) for the app's store; none without a store, or
    when a query token is configured and the scrape does not present it (topic and group names are
    query data)."""
    store = request.app.get(STORE_KEY)
    if store is None:
        return []
    try:
        require_query_token(request)
    except HttpError:
        return []
    return await request.app[ROLLUP_METRICS_KEY].families(store)


def setup(app: web.Application) -> None:
    """Register ``GET /v1/overview`` on ``app`` (and the rollup metrics' cache)."""
    app[ROLLUP_METRICS_KEY] = RollupMetrics()
    app.router.add_get("/v1/overview", get_overview)
