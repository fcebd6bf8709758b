"""``GET /v1/overview`` and the rollup metrics on ``/metrics``, over the sample scenario."""

from __future__ import annotations

import asyncio

import pytest
from api_helpers import QUERY_TOKEN
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

from collector.index.indexer import finish_batch, index_records
from collector.index.rollup import LATENCY_BOUNDS_MS
from collector.query import overview as ov
from collector.query.overview import COUNTS
from collector.server.app import create_app
from collector.server.config import CollectorConfig
from collector.server.overview_routes import ROLLUP_METRICS_KEY, RollupMetrics
from collector.store import open_store
from tests.fixtures.prometheus import check_metrics, samples, value
from tests.fixtures.sample import DEAD_GROUP, TOPIC, scenario

pytestmark = pytest.mark.fallback


def index_with_rollups(store_url: str, now_ms: int) -> None:
    store = open_store(store_url)
    try:
        index_records(store, scenario(now_ms)[1])
        finish_batch(store)  # on the store object that indexed: it knows the messages to roll up
    finally:
        store.close()


@pytest.fixture
async def rolled_client(aiohttp_client, config, now_ms):
    index_with_rollups(config.store_url, now_ms)
    return await aiohttp_client(create_app(config))


async def test_overview_counts_groups_and_series(rolled_client) -> None:
    response = await rolled_client.get("/v1/overview", params={"window": "2h"})
    assert response.status == 200, await response.text()
    body = await response.json()
    (topic,) = body["topics"]
    assert topic["topic"] == TOPIC and topic["sent"] > 0
    assert sum(topic["series"]["sent"]) == topic["sent"] and len(body["times"]) == len(topic["series"]["sent"])
    groups = {g["group"]: g for g in topic["groups"]}
    assert set(groups) == {"billing", DEAD_GROUP}
    shipping = groups[DEAD_GROUP]
    assert shipping["dead"] == 1 and shipping["consumed"] >= 1
    assert shipping["not_received"] == topic["sent"] - sum(
        shipping[k] for k in ("consumed", "retrying", "failed", "dead", "pending"))
    billing = groups["billing"]
    assert billing["pending"] == 1  # the scenario's unfinished consume
    assert billing["latency_ms"]["count"] == billing["consumed"] and billing["latency_ms"]["p50"] is not None
    assert billing["lag_s"] > 3000  # its oldest unconsumed message was sent about an hour ago

    # A window with nothing in it, a topic filter, and the default (1 h) answer from the same rollups.
    empty = await (await rolled_client.get("/v1/overview", params={"begin": "-10m", "end": "now"})).json()
    assert empty["topics"] == [] or all(t["sent"] == 0 for t in empty["topics"])
    other = await (await rolled_client.get("/v1/overview", params={"window": "2h", "topic": "no-such"})).json()
    assert other["topics"] == []


@pytest.mark.parametrize("params, reason", [
    ({"window": "soon"}, "bad_window"),
    ({"window": "0m"}, "bad_window"),
    ({"window": "40d"}, "bad_window"),
    ({"window": "1h", "begin": "-2h"}, "bad_window"),
    ({"begin": "-1h", "end": "-2h"}, "bad_window"),
    ({"begin": "yesterday-ish"}, "bad_time"),
])
async def test_overview_bad_params_are_400_with_the_reason(rolled_client, params, reason) -> None:
    response = await rolled_client.get("/v1/overview", params=params)
    assert response.status == 400
    body = await response.json()
    assert body["error"] == reason and body["detail"]


async def test_metrics_export_rollups_per_topic_and_group(aiohttp_client, config, now_ms) -> None:
    # The scenario five minutes inside the hour: the metrics' last hour and the overview's, taken a moment
    # apart, start in different minutes when a minute boundary falls between them, and the scenario's
    # first messages (at exactly an hour ago) would be in one and not the other.
    index_with_rollups(config.store_url, now_ms + 5 * 60_000)
    rolled_client = await aiohttp_client(create_app(config))
    text = await (await rolled_client.get("/metrics")).text()
    check_metrics(text)
    parsed = samples(text)
    assert value(parsed, "tracehook_collector_batches_total") == 0  # the collector's own metrics stay
    (topic,) = (await (await rolled_client.get("/v1/overview", params={"window": "1h"})).json())["topics"]
    # The same rollups as the overview's last hour, group by group and outcome by outcome.
    assert value(parsed, "tracehook_topic_messages_sent", topic=TOPIC) == topic["sent"]
    for group in topic["groups"]:
        labels = {"topic": TOPIC, "group": group["group"]}
        for outcome in (*COUNTS, "not_received"):
            assert value(parsed, "tracehook_group_messages", **labels, outcome=outcome) == group[outcome], outcome
        assert value(parsed, "tracehook_group_lag_seconds", **labels) == pytest.approx(group["lag_s"], abs=5)
        assert value(parsed, "tracehook_group_latency_seconds_gcount", **labels) == group["latency_ms"]["count"]
    assert value(parsed, "tracehook_group_messages", topic=TOPIC, group=DEAD_GROUP, outcome="dead") == 1
    buckets = sorted((float(dict(labels)["le"]), n) for (name, labels), n in parsed.items()
                     if name == "tracehook_group_latency_seconds_bucket" and ("group", DEAD_GROUP) in labels)
    assert [n for _, n in buckets] == sorted(n for _, n in buckets) and len(buckets) == 16  # cumulative, 15 + Inf
    assert [le for le, _ in buckets[:-1]] == [b / 1000 for b in LATENCY_BOUNDS_MS]


async def test_metrics_rollups_are_a_gauge_histogram_in_openmetrics(rolled_client) -> None:
    response = await rolled_client.get("/metrics", headers={"Accept": "application/openmetrics-text;version=1.0.0"})
    families = {f.name: f for f in openmetrics_families(await response.text())}
    assert families["tracehook_group_latency_seconds"].type == "gaugehistogram"
    assert {families[n].type for n in ("tracehook_topic_messages_sent", "tracehook_group_messages",
                                       "tracehook_group_lag_seconds")} == {"gauge"}


async def test_metrics_compute_the_rollups_once_per_cache_interval(aiohttp_client, config, now_ms, monkeypatch) -> None:
    index_with_rollups(config.store_url, now_ms)
    calls: list[int] = []
    real = ov.overview

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(ov, "overview", counted)
    clock = [0.0]
    app = create_app(config)
    app[ROLLUP_METRICS_KEY] = RollupMetrics(cache_s=15, clock=lambda: clock[0])
    client = await aiohttp_client(app)
    scrapes = [await (await client.get("/metrics")).text() for _ in range(3)]
    await asyncio.gather(*(client.get("/metrics") for _ in range(4)))
    assert len(calls) == 1 and all("tracehook_group_lag_seconds{" in text for text in scrapes)
    clock[0] = 14.9
    await client.get("/metrics")
    assert len(calls) == 1
    clock[0] = 15.0
    await client.get("/metrics")
    assert len(calls) == 2


async def test_metrics_leave_rollups_out_without_the_query_token(aiohttp_client, tmp_path, now_ms) -> None:
    config = CollectorConfig(data_dir=str(tmp_path), durability="os", query_token=QUERY_TOKEN)
    index_with_rollups(config.store_url, now_ms)
    client = await aiohttp_client(create_app(config))
    assert "tracehook_group_messages" not in await (await client.get("/metrics")).text()
    with_token = await client.get("/metrics", headers={"Authorization": f"Bearer {QUERY_TOKEN}"})
    assert "tracehook_group_messages{" in await with_token.text()
    assert "tracehook_group_messages" not in await (await client.get("/metrics")).text()  # not from the cache


async def test_metrics_export_failed_sends_as_the_overview_counts_them(rolled_client) -> None:
    """``tracehook_topic_failed_sends`` is the overview's own count of sends the broker never stored."""
    body = await (await rolled_client.get("/v1/overview", params={"window": "1h"})).json()
    text = await (await rolled_client.get("/metrics")).text()
    check_metrics(text)
    (topic,) = body["topics"]
    assert topic["failed_sends"] >= 1  # the sample scenario's send that timed out
    assert value(samples(text), "tracehook_topic_failed_sends", topic=TOPIC) == topic["failed_sends"]

