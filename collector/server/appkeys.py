"""The typed keys under which the collector's application keeps its shared objects.

A module of its own so that routes can reach the config, store, log and metrics
without importing :mod:`collector.server.app` (which imports the routes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from collector.log.writer import TraceLogWriter
    from collector.server.config import CollectorConfig
    from collector.server.drain import InFlight
    from collector.server.follower import FollowerState
    from collector.server.ingest import Ingestor
    from collector.server.metrics import CollectorMetrics

CONFIG_KEY: web.AppKey[CollectorConfig] = web.AppKey("config")
STORE_KEY: web.AppKey[Any] = web.AppKey("store")
"""The index store (a ``collector.store.link.StoreLink``, which is a ``collector.store.Store`` that
reconnects by itself); unset when the store package is missing or ``store_url`` is ``none``."""
METRICS_KEY: web.AppKey[CollectorMetrics] = web.AppKey("metrics")
INGESTOR_KEY: web.AppKey[Ingestor] = web.AppKey("ingestor")
TRACELOG_KEY: web.AppKey[TraceLogWriter] = web.AppKey("tracelog")
IN_FLIGHT_KEY: web.AppKey[InFlight] = web.AppKey("in_flight")
"""The requests in progress, which a graceful stop waits for (:mod:`collector.server.drain`)."""
FOLLOWER_KEY: web.AppKey[FollowerState] = web.AppKey("index_follower")
"""The ``--index`` follower's state (:mod:`collector.server.follower`); unset without ``--index``."""
