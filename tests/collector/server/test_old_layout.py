"""A collector over an older index: ingest goes on, every query route answers 503 with the one
line naming ``tracehook migrate-store`` (layout 1) or ``tracehook upgrade-store`` (layout 2), /healthz
says why, /metrics leaves the rollup series out; an upgraded store is answered from without a restart."""

from __future__ import annotations

import asyncio
import json
import pathlib

import pytest
from collector_service_helpers import make_batch

from collector.cli.query import HttpSource
from collector.server.app import create_app
from collector.server.config import CollectorConfig
from collector.store import OldLayoutError
from collector.store.upgrade import upgrade_store
from tests.collector.store import v2_store
from tests.collector.store.v1_store import write_local

QUERY_ROUTES = [
    "/v1/messages/m-1",
    "/v1/messages/m-1/records",
    "/v1/messages?trace_id=4bf92f3577b34da6a3ce929d0e0e4736",
    "/v1/topics/orders/messages",
    "/v1/topics/orders/messages?key=k-1",
    "/v1/topics/orders/dead",
    "/v1/topics/orders/offsets?time=0",
    "/v1/topics/orders/unconsumed?group=billing&allow_unknown_group=true",
    "/v1/topics/orders/unconsumed/export?group=billing&allow_unknown_group=true",
    "/v1/topics/orders/dead/counts",
    "/v1/overview",
    "/api/message?backupQuery=" + json.dumps({"subject": "orders", "isDelay": False, "len": 10}),
    "/api/message/dead?backupQuery=" + json.dumps({"subject": "orders", "isDelay": False, "len": 10}),
    "/api/message/detail?backupQuery=" + json.dumps({"subject": "orders", "messageId": "m-1"}),
    "/api/message/records?recordQuery=" + json.dumps({"subject": "orders", "brokerGroup": "b", "sequence": 10, "recordCode": 0}),
]


@pytest.fixture
def config(tmp_path: pathlib.Path) -> CollectorConfig:
    write_local(str(tmp_path / "index.sqlite3"), [])  # a store the release before layout versions made
    return CollectorConfig(data_dir=str(tmp_path), durability="os")


async def test_queries_answer_503_naming_the_migration_while_ingest_goes_on(aiohttp_client, config) -> None:
    client = await aiohttp_client(create_app(config))
    posted = await client.post("/v1/batches", data=make_batch("c", 1),
                               headers={"Content-Type": "application/msgpack"})
    assert posted.status == 200, await posted.text()
    for route in QUERY_ROUTES:
        answer = await client.get(route)
        text = await answer.text()
        assert answer.status == 503, (route, text)
        assert "Retry-After" not in answer.headers, route  # waiting does not help: the store must be migrated
        assert "\n" not in text.strip(), route
        body = json.loads(text)
        assert body["error"] == "old_layout", (route, body)
        assert "layout 1" in body["detail"] and "tracehook migrate-store --from local:" in body["detail"]
    health = await (await client.get("/healthz")).json()
    assert health["status"] == "ok" and health["store"] == "unavailable"
    assert "tracehook migrate-store" in health["store_error"]
    source = HttpSource(str(client.make_url("/")))  # the CLI through this collector: the same line, exit 5
    with pytest.raises(OldLayoutError, match="tracehook migrate-store"):
        await asyncio.to_thread(source.trace, "m-1")
    metrics = await client.get("/metrics")
    assert metrics.status == 200
    text = await metrics.text()
    assert "tracehook_collector_store_available 0.0" in text and "tracehook_topic_" not in text


async def test_a_layout_2_store_answers_once_upgraded_in_place_without_a_restart(aiohttp_client,
                                                                                tmp_path: pathlib.Path) -> None:
    """The upgrade is the operator's step (its snapshot is the way back): until it runs, queries answer
    503 naming ``tracehook upgrade-store``; once it has, the running collector reopens the store."""
    path = tmp_path / "index.sqlite3"
    v2_store.write(f"local:{path}", [])
    config = CollectorConfig(data_dir=str(tmp_path), durability="os", retry_after_s=1)
    client = await aiohttp_client(create_app(config))
    answer = await client.get("/v1/messages/m-1")
    body = await answer.json()
    assert answer.status == 503 and body["error"] == "old_layout", body
    assert f"tracehook upgrade-store local:{path}" in body["detail"] and "layout 2" in body["detail"]
    await asyncio.to_thread(upgrade_store, f"local:{path}", snapshot=False)
    for _ in range(50):  # the store is reopened every retry_after_s while it is refused
        answer = await client.get("/v1/messages/m-1")
        if answer.status != 503:
            break
        await asyncio.sleep(0.1)
    assert answer.status == 404, await answer.text()  # answered from the store: no such message
    assert (await (await client.get("/healthz")).json())["store"] == "ok"
