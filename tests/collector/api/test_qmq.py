"""The QMQ backup-server compatible endpoints, shapes as QMQ documents them."""

from __future__ import annotations

import json

import pytest

from collector.sample import SHARED_KEY_COUNT, TOPIC

LIST_FIELDS = {"brokerGroup", "sequence", "messageId", "subject", "createTime"}


async def qmq(client, path: str, param: str, query: dict, status: int = 200) -> dict:
    response = await client.get(path, params={param: json.dumps(query)})
    assert response.status == status, await response.text()
    return await response.json()


async def test_message_list_pages_with_next_as_start(client):
    seen: list[str] = []
    start = None
    for _ in range(20):
        body = await qmq(client, "/api/message", "backupQuery",
                         {"subject": TOPIC, "isDelay": False, "len": 4, "start": start})
        assert len(body["list"]) <= 4
        for item in body["list"]:
            assert set(item) == LIST_FIELDS and item["subject"] == TOPIC and item["brokerGroup"] == "broker-a"
            assert item["sequence"].isdigit() and item["createTime"].isdigit()
        seen += [item["messageId"] for item in body["list"]]
        start = body["next"]
        if start is None:
            break
    assert len(seen) == len(set(seen)) == SHARED_KEY_COUNT + 6


async def test_message_list_by_id(client, ids):
    body = await qmq(client, "/api/message", "backupQuery", {"subject": TOPIC, "messageId": ids.retried, "len": 10})
    assert body["next"] is None
    assert [(i["messageId"], i["sequence"]) for i in body["list"]] == [(ids.retried, "20")]
    body = await qmq(client, "/api/message", "backupQuery", {"subject": "other", "messageId": ids.retried})
    assert body["list"] == []


async def test_dead_list(client, ids):
    body = await qmq(client, "/api/message/dead", "backupQuery", {"subject": TOPIC, "isDelay": False, "len": 10})
    assert [i["messageId"] for i in body["list"]] == [ids.dead]
    assert body["next"] is None


async def test_detail_by_broker_group_and_sequence(client, ids):
    body = await qmq(client, "/api/message/detail", "backupQuery",
                     {"subject": TOPIC, "brokerGroup": "broker-a", "sequence": 10})
    assert body["messageId"] == ids.normal
    assert (body["subject"], body["brokerGroup"], body["sequence"]) == (TOPIC, "broker-a", "10")
    assert body["tags"] == ["created"]
    assert body["attrs"]["region"] == "eu"
    assert body["storeAtFailed"] is False
    failed = await qmq(client, "/api/message/detail", "backupQuery", {"subject": TOPIC, "messageId": ids.failed_send})
    assert failed["storeAtFailed"] is True


async def test_detail_of_a_missing_message_is_404(client):
    body = await qmq(client, "/api/message/detail", "backupQuery",
                     {"subject": TOPIC, "brokerGroup": "broker-a", "sequence": 999}, status=404)
    assert body["error"] == "not_found"


async def test_records_by_code(client, ids):
    normal = await qmq(client, "/api/message/records", "recordQuery",
                       {"subject": TOPIC, "brokerGroup": "broker-a", "sequence": 10, "recordCode": 0})
    assert sorted((r["consumerGroup"], r["action"]) for r in normal["records"]) == [
        ("billing", 0), ("billing", 1), ("shipping", 0), ("shipping", 1)
    ]
    assert all(r["type"] == 0 and r["sequence"] == "10" and r["timestamp"].isdigit() for r in normal["records"])
    assert {r["consumerId"] for r in normal["records"]} == {"billing-1", "shipping-1"}
    retry = await qmq(client, "/api/message/records", "recordQuery",
                      {"subject": TOPIC, "messageId": ids.retried, "recordCode": 1})
    assert [(r["consumerGroup"], r["action"], r["type"]) for r in retry["records"]] == [
        ("shipping", 0, 1), ("shipping", 1, 1)
    ]
    dead = await qmq(client, "/api/message/records", "recordQuery",
                     {"subject": TOPIC, "messageId": ids.dead, "recordCode": 2})
    assert [(r["consumerGroup"], r["type"]) for r in dead["records"]] == [("shipping", 2)]


@pytest.mark.parametrize("path, param, raw, reason", [
    ("/api/message", "backupQuery", None, "missing_param"),
    ("/api/message", "backupQuery", "{not json", "bad_json"),
    ("/api/message", "backupQuery", "[1, 2]", "bad_json"),
    ("/api/message", "backupQuery", '{"len": 3}', "missing_field"),
    ("/api/message", "backupQuery", '{"subject": 7}', "bad_type"),
    ("/api/message", "backupQuery", '{"subject": "orders", "len": "many"}', "bad_type"),
    ("/api/message", "backupQuery", '{"subject": "orders", "len": 0}', "bad_limit"),
    ("/api/message", "backupQuery", '{"subject": "orders", "isDelay": "no"}', "bad_type"),
    ("/api/message", "backupQuery", '{"subject": "orders", "msgCreateTimeBegin": "soon"}', "bad_time"),
    ("/api/message", "backupQuery", '{"subject": "orders", "start": "garbage"}', "bad_cursor"),
    ("/api/message/dead", "backupQuery", '{"isDelay": false}', "missing_field"),
    ("/api/message/detail", "backupQuery", '{"subject": "orders", "brokerGroup": "broker-a"}', "missing_field"),
    ("/api/message/detail", "backupQuery", '{"subject": "orders", "brokerGroup": "b", "sequence": "x"}', "bad_type"),
    ("/api/message/records", "recordQuery", '{"subject": "orders", "messageId": "m", "recordCode": 5}', "bad_value"),
    ("/api/message/records", "recordQuery", '{"subject": "orders"}', "missing_field"),
    # Each of these was a 500 (test_query_fuzz.py fuzzes the same routes).
    ("/api/message", "backupQuery", '{"subject": "\\ud800"}', "bad_value"),
    ("/api/message/records", "recordQuery", '{"subject": "orders", "messageId": "\\udfff"}', "bad_value"),
    ("/api/message", "backupQuery", '{"subject": "orders", "msgCreateTimeBegin": NaN}', "bad_time"),
    ("/api/message", "backupQuery", '{"subject": "orders", "msgCreateTimeEnd": -Infinity}', "bad_time"),
    ("/api/message", "backupQuery", '{"subject": "orders", "msgCreateTimeBegin": "\u00b2"}', "bad_time"),
    ("/api/message/dead", "backupQuery", '{"subject": "orders", "msgCreateTimeEnd": 1e300}', "bad_time"),
    ("/api/message/detail", "backupQuery", '{"subject": "o", "brokerGroup": "b", "sequence": 1e400}', "bad_type"),
    ("/api/message/detail", "backupQuery", '{"subject": "o", "brokerGroup": "b", "sequence": 9223372036854775808}',
     "bad_value"),
])
async def test_malformed_queries_are_400_saying_what_is_wrong(client, path, param, raw, reason):
    response = await client.get(path, params={} if raw is None else {param: raw})
    assert response.status == 400
    body = await response.json()
    assert body["error"] == reason and body["detail"]
