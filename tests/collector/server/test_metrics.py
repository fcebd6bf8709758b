"""``GET /metrics`` after real ingest, every scrape checked by ``promtool check metrics``: histogram shape,
size gauges against the files on disk, durability modes, OpenMetrics, a registry per app."""

from __future__ import annotations

import dataclasses
import math
import os

import pytest
from collector_service_helpers import make_batch
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families

from collector.log import file as tracelog
from collector.server.app import create_app
from collector.server.appkeys import INGESTOR_KEY
from collector.server.config import CollectorConfig
from tests.fixtures.prometheus import SampleKey, check_metrics, samples, value

MSGPACK = {"Content-Type": "application/msgpack"}
HISTOGRAMS = ("tracehook_collector_append_seconds", "tracehook_collector_fsync_seconds")


async def scrape(client, **headers: str) -> dict[SampleKey, float]:  # type: ignore[no-untyped-def]
    """``GET /metrics``, checked by ``promtool check metrics``, parsed by prometheus_client's parser."""
    text = await (await client.get("/metrics", headers=headers)).text()
    check_metrics(text)
    return samples(text)


def assert_histogram(parsed: dict[SampleKey, float], name: str, count: int) -> None:
    """Cumulative buckets that never go down, ending in +Inf == _count == ``count``, and a _sum."""
    rows = sorted((float(dict(labels)["le"]), v) for (n, labels), v in parsed.items() if n == f"{name}_bucket")
    bounds, counts = [le for le, _ in rows], [n for _, n in rows]
    assert len(rows) >= 2 and bounds[-1] == math.inf, rows
    assert all(a <= b for a, b in zip(counts, counts[1:])), rows
    assert counts[-1] == value(parsed, f"{name}_count") == count
    total = value(parsed, f"{name}_sum")
    assert total is not None and total >= 0 and (count == 0) == (total == 0)


def log_files(log_dir: str) -> list[str]:
    return [os.path.join(log_dir, n) for n in os.listdir(log_dir) if n.endswith(tracelog.SEGMENT_SUFFIX)]


async def post_batches(client, n: int) -> None:  # type: ignore[no-untyped-def]
    """``n`` batches one after another, so each is its own group commit."""
    for seq in range(1, n + 1):
        resp = await client.post("/v1/batches", data=make_batch("m", seq, n=5), headers=MSGPACK)
        assert resp.status == 200


async def test_latency_histograms_are_well_formed_and_count_every_commit(aiohttp_client, collector_config) -> None:
    client = await aiohttp_client(create_app(collector_config))
    parsed = await scrape(client)
    for name in HISTOGRAMS:
        assert_histogram(parsed, name, 0)
    await post_batches(client, 5)
    parsed = await scrape(client)
    assert_histogram(parsed, "tracehook_collector_append_seconds", 5)  # one per acknowledged batch
    assert_histogram(parsed, "tracehook_collector_fsync_seconds", 5)  # sequential: one commit per batch


async def test_size_gauges_match_the_files_on_disk(aiohttp_client, collector_config: CollectorConfig) -> None:
    one = len(make_batch("m", 1, n=5))
    # Several segments from a few batches; no maintenance round, so the commits alone must keep the gauges right.
    cfg = dataclasses.replace(collector_config, segment_bytes=3 * one, maintenance_interval_s=3600)
    client = await aiohttp_client(create_app(cfg))
    await post_batches(client, 8)
    parsed = await scrape(client)
    files = log_files(cfg.log_dir)
    assert len(files) >= 3
    sizes = {"segments": len(files), "log_bytes": sum(os.path.getsize(f) for f in files)}
    assert {k: value(parsed, f"tracehook_collector_{k}") for k in sizes} == sizes
    assert value(parsed, "tracehook_collector_backlog_bytes") == sizes["log_bytes"]  # none indexed


@pytest.mark.parametrize("durability", ["os", "fsync"])
async def test_only_fsync_durability_syncs_each_group_commit(aiohttp_client, collector_config, durability) -> None:
    cfg = dataclasses.replace(collector_config, durability=durability)
    client = await aiohttp_client(create_app(cfg))
    await post_batches(client, 4)
    parsed = await scrape(client)
    commits = value(parsed, "tracehook_collector_group_commit_batches_count")
    assert commits is not None and commits >= 1 and value(parsed, "tracehook_collector_batches_total") == 4
    assert value(parsed, "tracehook_collector_fsync_seconds_count") == (commits if durability == "fsync" else 0)
    # last_sync_s is set only when an append really calls fdatasync.
    assert (client.server.app[INGESTOR_KEY].tracelog.last_sync_s > 0) == (durability == "fsync")


async def test_index_lag_per_store_from_the_checkpoints_commits(aiohttp_client, collector_config) -> None:
    from collector.log import state as logstate

    client = await aiohttp_client(create_app(collector_config))
    log_dir = collector_config.log_dir
    assert (await client.post("/v1/batches", data=make_batch(seq=1, n=3), headers=MSGPACK)).status == 200
    caught_up = logstate.read_durable(log_dir)
    for seq in (2, 3):
        assert (await client.post("/v1/batches", data=make_batch(seq=seq, n=4), headers=MSGPACK)).status == 200
    logstate.write_commit(log_dir, "a", "local:/a.sqlite3", "/ck/a", caught_up)  # behind by two batches
    logstate.write_commit(log_dir, "b", "hbase://h:9090", "/ck/b", logstate.read_durable(log_dir))

    parsed = await scrape(client)

    lag = {(name, store): value(parsed, f"tracehook_index_lag_{name}", store=store)
           for name in ("records", "events", "seconds") for store in ("local:/a.sqlite3", "hbase://h:9090")}
    assert lag[("records", "local:/a.sqlite3")] == 2 and lag[("events", "local:/a.sqlite3")] == 8
    assert lag[("seconds", "local:/a.sqlite3")] is not None and lag[("seconds", "local:/a.sqlite3")] >= 0
    assert lag[("records", "hbase://h:9090")] == lag[("events", "hbase://h:9090")] == 0
    assert lag[("seconds", "hbase://h:9090")] == 0


OPENMETRICS = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"  # as Prometheus asks


async def test_openmetrics_when_the_scraper_asks_for_it(aiohttp_client, collector_config) -> None:
    client = await aiohttp_client(create_app(collector_config))
    await post_batches(client, 2)
    plain = await client.get("/metrics")
    assert plain.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    response = await client.get("/metrics", headers={"Accept": OPENMETRICS})
    assert response.headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    text = await response.text()
    assert text.endswith("# EOF\n")
    families = {f.name: f for f in openmetrics_families(text)}  # the strict OpenMetrics parser
    batches = families["tracehook_collector_batches"]
    assert batches.type == "counter"
    assert {s.name: s.value for s in batches.samples}["tracehook_collector_batches_total"] == 2
    assert families["tracehook_collector_append_seconds"].type == "histogram"
    assert families["tracehook_collector_disk_full"].type == "gauge"


async def test_process_metrics_come_with_the_library(aiohttp_client, collector_config) -> None:
    parsed = await scrape(await aiohttp_client(create_app(collector_config)))
    assert (value(parsed, "process_resident_memory_bytes") or 0) > 0
    assert (value(parsed, "process_open_fds") or 0) > 0
    assert value(parsed, "process_cpu_seconds_total") is not None


async def test_two_collectors_in_one_process_keep_their_own_counts(aiohttp_client, tmp_path) -> None:
    busy = await aiohttp_client(create_app(CollectorConfig(data_dir=str(tmp_path / "a"), store_url="none")))
    idle = await aiohttp_client(create_app(CollectorConfig(data_dir=str(tmp_path / "b"), store_url="none")))
    await post_batches(busy, 3)
    bad = await idle.post("/v1/batches", data=b"\xc1", headers=MSGPACK)
    assert bad.status == 400
    reason = (await bad.json())["error"]
    busy_samples, idle_samples = await scrape(busy), await scrape(idle)
    assert value(busy_samples, "tracehook_collector_batches_total") == 3
    assert value(idle_samples, "tracehook_collector_batches_total") == 0
    assert value(idle_samples, "tracehook_collector_rejected_total", reason=reason) == 1
    assert value(busy_samples, "tracehook_collector_rejected_total", reason=reason) is None


async def test_store_availability_is_a_gauge_only_with_a_store(aiohttp_client, collector_config, tmp_path) -> None:
    without = await scrape(await aiohttp_client(create_app(collector_config)))
    assert value(without, "tracehook_collector_store_available") is None
    cfg = dataclasses.replace(collector_config, store_url=f"local:{tmp_path}/index.sqlite3")
    with_store = await scrape(await aiohttp_client(create_app(cfg)))
    assert value(with_store, "tracehook_collector_store_available") == 1
