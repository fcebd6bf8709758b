"""The same query API over real HBase: one store-independent query layer, two backends."""

from __future__ import annotations

import json

import pytest
from api_helpers import collect_pages, fill_store

from collector.server.app import create_app
from collector.server.config import CollectorConfig
from tests.fixtures.sample import SHARED_KEY, SHARED_KEY_COUNT, TOPIC

pytestmark = [pytest.mark.hbase, pytest.mark.slow]


@pytest.fixture
async def hbase_client(aiohttp_client, tmp_path, hbase_url, now_ms):
    config = CollectorConfig(data_dir=str(tmp_path), durability="os", store_url=hbase_url)
    ids = fill_store(hbase_url, now_ms)
    return await aiohttp_client(create_app(config)), ids


async def test_queries_over_hbase(hbase_client):
    client, ids = hbase_client
    doc = await (await client.get(f"/v1/messages/{ids.dead}")).json()
    rows = {row["group"]: [b["outcome"] for b in row["bars"]] for row in doc["timeline"]["rows"]}
    assert rows == {"shop-web": ["success"], "billing": ["success"], "shipping": ["failed"] * 4}

    by_key = await collect_pages(client, f"/v1/topics/{TOPIC}/messages", {"key": SHARED_KEY, "limit": "10"})
    assert [i["msg_id"] for i in by_key] == [f"msg-shared-{n:03d}" for n in reversed(range(SHARED_KEY_COUNT))]
    by_time = await collect_pages(client, f"/v1/topics/{TOPIC}/messages", {"limit": "7", "order": "oldest"})
    assert len({i["msg_id"] for i in by_time}) == len(by_time) == SHARED_KEY_COUNT + 6

    dead = await (await client.get("/api/message/dead", params={"backupQuery": json.dumps(
        {"subject": TOPIC, "isDelay": False, "len": 10})})).json()
    assert [i["messageId"] for i in dead["list"]] == [ids.dead]
    records = await (await client.get("/api/message/records", params={"recordQuery": json.dumps(
        {"subject": TOPIC, "brokerGroup": "broker-a", "sequence": 20, "recordCode": 1})})).json()
    assert [(r["consumerGroup"], r["action"]) for r in records["records"]] == [("shipping", 0), ("shipping", 1)]

    bad = await client.get(f"/v1/topics/{TOPIC}/messages", params={"cursor": "k.AAAA"})
    assert bad.status == 400 and (await bad.json())["error"] == "bad_cursor"


async def test_qmq_broker_group_names_one_partition_over_hbase(hbase_client, hbase_url, now_ms):
    from collector.index.indexer import index_records
    from collector.store import open_store
    from tests.fixtures.sample import send

    client, _ = hbase_client
    broker = "kafka-1:9092"
    records = [send(f"p{q}", now_ms - 1000 + q, dict(topic="k", broker=broker, queue=q, offset=5, born_ms=now_ms,
                                                        store_ms=now_ms - 1000 + q)) for q in (0, 1)]
    store = open_store(hbase_url)
    index_records(store, records)
    store.close()

    async def detail(group: str, status: int = 200) -> dict:
        response = await client.get("/api/message/detail", params={"backupQuery": json.dumps(
            {"subject": "k", "brokerGroup": group, "sequence": 5})})
        assert response.status == status, await response.text()
        return await response.json()

    assert (await detail(f"{broker}/0"))["messageId"] == "p0"
    assert (await detail(f"{broker}/1"))["messageId"] == "p1"
    assert (await detail(broker, status=400))["error"] == "ambiguous_sequence"
