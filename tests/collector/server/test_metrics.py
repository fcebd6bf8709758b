"""``GET /metrics`` after real ingest: histogram shape, size gauges against the files on disk, durability modes."""

from __future__ import annotations

import dataclasses
import math
import os

import pytest
from collector_service_helpers import make_batch

from collector.log import file as tracelog
from collector.server.app import create_app
from collector.server.appkeys import INGESTOR_KEY
from collector.server.config import CollectorConfig

MSGPACK = {"Content-Type": "application/msgpack"}
HISTOGRAMS = ("tracehook_collector_append_seconds", "tracehook_collector_fsync_seconds")


def parse(text: str) -> dict[str, float]:
    """Sample lines of the Prometheus text format as {'name{labels}': value}."""
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def buckets(samples: dict[str, float], name: str) -> list[tuple[float, float]]:
    """(le, cumulative count) of one histogram, in the order they appear."""
    prefix = f'{name}_bucket{{le="'
    return [(float(key[len(prefix):-2]), value) for key, value in samples.items() if key.startswith(prefix)]


def assert_histogram(samples: dict[str, float], name: str, count: int) -> None:
    """Cumulative buckets that never go down, ending in +Inf == _count == ``count``, and a _sum."""
    rows = buckets(samples, name)
    bounds, counts = [le for le, _ in rows], [n for _, n in rows]
    assert len(rows) >= 2 and bounds == sorted(bounds) and bounds[-1] == math.inf, rows
    assert all(a <= b for a, b in zip(counts, counts[1:])), rows
    assert counts[-1] == samples[f"{name}_count"] == count
    assert samples[f"{name}_sum"] >= 0 and (count == 0) == (samples[f"{name}_sum"] == 0)


def log_files(log_dir: str) -> list[str]:
    return [os.path.join(log_dir, n) for n in os.listdir(log_dir) if n.endswith(tracelog.SEGMENT_SUFFIX)]


async def post_batches(client, n: int) -> None:  # type: ignore[no-untyped-def]
    """``n`` batches one after another, so each is its own group commit."""
    for seq in range(1, n + 1):
        resp = await client.post("/v1/batches", data=make_batch("m", seq, n=5), headers=MSGPACK)
        assert resp.status == 200


async def test_latency_histograms_are_well_formed_and_count_every_commit(aiohttp_client, collector_config) -> None:
    client = await aiohttp_client(create_app(collector_config))
    samples = parse(await (await client.get("/metrics")).text())
    for name in HISTOGRAMS:
        assert_histogram(samples, name, 0)
    await post_batches(client, 5)
    samples = parse(await (await client.get("/metrics")).text())
    assert_histogram(samples, "tracehook_collector_append_seconds", 5)  # one per acknowledged batch
    assert_histogram(samples, "tracehook_collector_fsync_seconds", 5)  # sequential: one commit per batch


async def test_size_gauges_match_the_files_on_disk(aiohttp_client, collector_config: CollectorConfig) -> None:
    one = len(make_batch("m", 1, n=5))
    # Several segments from a few batches; no maintenance round, so the commits alone must keep the gauges right.
    cfg = dataclasses.replace(collector_config, segment_bytes=3 * one, maintenance_interval_s=3600)
    client = await aiohttp_client(create_app(cfg))
    await post_batches(client, 8)
    samples = parse(await (await client.get("/metrics")).text())
    files = log_files(cfg.log_dir)
    assert len(files) >= 3
    sizes = {"segments": len(files), "log_bytes": sum(os.path.getsize(f) for f in files)}
    assert {k: samples[f"tracehook_collector_{k}"] for k in sizes} == sizes
    assert samples["tracehook_collector_backlog_bytes"] == samples["tracehook_collector_log_bytes"]  # none indexed


@pytest.mark.parametrize("durability", ["os", "fsync"])
async def test_only_fsync_durability_syncs_each_group_commit(aiohttp_client, collector_config, durability) -> None:
    cfg = dataclasses.replace(collector_config, durability=durability)
    client = await aiohttp_client(create_app(cfg))
    await post_batches(client, 4)
    samples = parse(await (await client.get("/metrics")).text())
    commits = samples["tracehook_collector_group_commit_batches_count"]
    assert commits >= 1 and samples["tracehook_collector_batches_total"] == 4
    assert samples["tracehook_collector_fsync_seconds_count"] == (commits if durability == "fsync" else 0)
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

    samples = parse(await (await client.get("/metrics")).text())

    assert samples['tracehook_index_lag_records{store="local:/a.sqlite3"}'] == 2
    assert samples['tracehook_index_lag_events{store="local:/a.sqlite3"}'] == 8
    assert samples['tracehook_index_lag_seconds{store="local:/a.sqlite3"}'] >= 0
    assert samples['tracehook_index_lag_records{store="hbase://h:9090"}'] == 0
    assert samples['tracehook_index_lag_events{store="hbase://h:9090"}'] == 0
    assert samples['tracehook_index_lag_seconds{store="hbase://h:9090"}'] == 0
