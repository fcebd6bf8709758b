"""A send that failed at the broker, through the whole chain (library -> collector -> trace log ->
index -> API): it is a failed send, not a message any group can consume, so the overview, the
``/metrics`` lag and the replay list agree that group g has nothing waiting."""

from __future__ import annotations

import asyncio
import os
import pathlib
import re
import time

import pytest

import tracehook
from collector.server.app import create_app
from collector.server.config import CollectorConfig
from tests.fixtures.indexing import index_sealed
from tracehook.wire import Status

pytestmark = pytest.mark.fallback

TOPIC, GROUP = "payments", "g"
CONSUMED_AGO_MS = 800_000
FAILED_AGO_MS = 700_000
"""The failed send is about 12 minutes old: counted as unconsumed, it made a lag of 700 s."""


@pytest.fixture(params=["local", pytest.param("hbase", marks=[pytest.mark.hbase, pytest.mark.slow])])
def store_url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    if request.param == "local":
        return f"local:{tmp_path / 'data' / 'index.sqlite3'}"
    return str(request.getfixturevalue("ready_hbase_url")())


def sample(text: str, name: str, **labels: str) -> float:
    """The value of the one sample of ``name`` with exactly ``labels`` in a Prometheus text exposition."""
    found = []
    for line in text.splitlines():
        match = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        if match and match[1] == name and dict(re.findall(r'(\w+)="([^"]*)"', match[2] or "")) == labels:
            found.append(float(match[3]))
    assert len(found) == 1, f"{name}{labels}: {found}"
    return found[0]


def traffic(tracer: tracehook.Tracer, now_ms: int) -> None:
    """One message stored and consumed by GROUP, then one send the broker refused (no queue, no store time)."""
    stored_ms = now_ms - CONSUMED_AGO_MS
    placement = dict(queue=0, offset=7, born_ms=stored_ms - 1, store_ms=stored_ms)
    tracer.record_send(TOPIC, "m-ok", **placement)
    with tracer.consume(TOPIC, "m-ok", GROUP, **placement):
        pass
    tracer.record_send(TOPIC, "m-failed", born_ms=now_ms - FAILED_AGO_MS, status=Status.FAILED,
                       error="broker refused the message")


async def test_a_failed_send_is_counted_apart_and_makes_no_lag(aiohttp_client, tmp_path, store_url) -> None:
    data_dir = str(tmp_path / "data")
    client = await aiohttp_client(create_app(CollectorConfig(data_dir=data_dir, durability="os",
                                                             store_url=store_url)))
    tracer = tracehook.Tracer(tracehook.TracerConfig(app="shop", collectors=(str(client.make_url("/")),),
                                                     linger_s=0.01))
    now_ms = int(time.time() * 1000)
    try:
        traffic(tracer, now_ms)
        assert await asyncio.to_thread(tracer.flush, 10)  # the collector answers on this test's event loop
    finally:
        await asyncio.to_thread(tracer.close, 10)
    assert (await client.post("/v1/admin/roll")).status == 200
    assert await asyncio.to_thread(index_sealed, os.path.join(data_dir, "log"), store_url) == 4

    overview = await (await client.get("/v1/overview", params={"window": "1h", "topic": TOPIC})).json()
    (topic,) = overview["topics"]
    assert (topic["sent"], topic["failed_sends"]) == (1, 1)
    assert sum(topic["series"]["sent"]) == 1 and sum(topic["series"]["failed_sends"]) == 1
    (group,) = topic["groups"]
    assert (group["group"], group["consumed"], group["not_received"], group["lag_s"]) == (GROUP, 1, 0, 0)

    replay = await client.get(f"/v1/topics/{TOPIC}/unconsumed", params={"group": GROUP, "begin": "-1h"})
    assert replay.status == 200 and (await replay.json())["items"] == []

    metrics = await (await client.get("/metrics")).text()
    assert sample(metrics, "tracehook_group_lag_seconds", topic=TOPIC, group=GROUP) == 0
    assert sample(metrics, "tracehook_group_messages", topic=TOPIC, group=GROUP, outcome="not_received") == 0
    assert sample(metrics, "tracehook_topic_messages_sent", topic=TOPIC) == 1

    # The failed send itself is still there to look at, with its status.
    trace = await (await client.get("/v1/messages/m-failed")).json()
    assert trace["status_name"] == "FAILED"
