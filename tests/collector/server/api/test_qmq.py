"""The QMQ backup-server compatible endpoints, shapes as QMQ documents them."""

from __future__ import annotations

import json

import pytest
from fixtures.pages import CursorPages

from collector.index.indexer import index_records
from collector.store import open_store
from tests.fixtures.sample import BILLING_HEADER, SHARED_KEY_COUNT, TOPIC, Record, consume, send

pytestmark = pytest.mark.fallback

LIST_FIELDS = {"brokerGroup", "sequence", "messageId", "subject", "createTime"}
LISTING = '{"subject": "orders", "isDelay": false, "len": 3, '  # a valid list query, open for one more field


async def qmq(client, path: str, param: str, query: dict, status: int = 200) -> dict:
    response = await client.get(path, params={param: json.dumps(query)})
    assert response.status == status, await response.text()
    return await response.json()


async def test_message_list_pages_with_next_as_start(client):
    pages = CursorPages(max_pages=20)
    for start in pages:
        body = await qmq(client, "/api/message", "backupQuery",
                         {"subject": TOPIC, "isDelay": False, "len": 4, "start": start})
        assert len(body["list"]) <= 4
        for item in body["list"]:
            assert set(item) == LIST_FIELDS and item["subject"] == TOPIC
            assert item["brokerGroup"] in {f"broker-a/{queue}" for queue in range(4)}  # the sample's 4 queues
            assert item["sequence"].isdigit() and item["createTime"].isdigit()
        pages.add([item["messageId"] for item in body["list"]], body["next"])
    seen = pages.items
    assert len(seen) == len(set(seen)) == SHARED_KEY_COUNT + 6


async def test_message_list_by_id(client, ids):
    body = await qmq(client, "/api/message", "backupQuery",
                     {"subject": TOPIC, "messageId": ids.retried, "isDelay": False, "len": 10})
    assert body["next"] is None
    listed = [(i["messageId"], i["brokerGroup"], i["sequence"]) for i in body["list"]]
    assert listed == [(ids.retried, "broker-a/1", "20")]
    body = await qmq(client, "/api/message", "backupQuery",
                     {"subject": "other", "messageId": ids.retried, "isDelay": False, "len": 10})
    assert body["list"] == []


async def test_dead_list(client, ids):
    body = await qmq(client, "/api/message/dead", "backupQuery", {"subject": TOPIC, "isDelay": False, "len": 10})
    assert [i["messageId"] for i in body["list"]] == [ids.dead]
    assert body["next"] is None


async def test_detail_by_broker_group_and_sequence(client, ids):
    body = await qmq(client, "/api/message/detail", "backupQuery",
                     {"subject": TOPIC, "brokerGroup": "broker-a/0", "sequence": 10})
    assert body["messageId"] == ids.normal
    assert (body["subject"], body["brokerGroup"], body["sequence"]) == (TOPIC, "broker-a/0", "10")
    # A brokerGroup without its queue still works while the offset is unique across queues.
    plain = await qmq(client, "/api/message/detail", "backupQuery",
                      {"subject": TOPIC, "brokerGroup": "broker-a", "sequence": 10})
    assert plain["messageId"] == ids.normal
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
    # isDelay and len are required ("必须" in QMQ's backupQuery).
    ("/api/message", "backupQuery", '{"subject": "orders", "len": 3}', "missing_field"),
    ("/api/message", "backupQuery", '{"subject": "orders", "isDelay": false}', "missing_field"),
    ("/api/message/dead", "backupQuery", '{"subject": "orders", "len": 3}', "missing_field"),
    ("/api/message/dead", "backupQuery", '{"subject": "orders", "isDelay": false}', "missing_field"),
    ("/api/message", "backupQuery", '{"subject": "orders", "isDelay": false, "len": "many"}', "bad_type"),
    ("/api/message", "backupQuery", '{"subject": "orders", "isDelay": false, "len": 0}', "bad_limit"),
    ("/api/message", "backupQuery", '{"subject": "orders", "isDelay": "no", "len": 3}', "bad_type"),
    ("/api/message", "backupQuery", LISTING + '"msgCreateTimeBegin": "soon"}', "bad_time"),
    ("/api/message", "backupQuery", LISTING + '"start": "garbage"}', "bad_cursor"),
    ("/api/message/dead", "backupQuery", '{"isDelay": false}', "missing_field"),
    ("/api/message/detail", "backupQuery", '{"subject": "orders", "brokerGroup": "broker-a"}', "missing_field"),
    ("/api/message/detail", "backupQuery", '{"subject": "orders", "brokerGroup": "b", "sequence": "x"}', "bad_type"),
    ("/api/message/records", "recordQuery", '{"subject": "orders", "messageId": "m", "recordCode": 5}', "bad_value"),
    ("/api/message/records", "recordQuery", '{"subject": "orders"}', "missing_field"),
    # Each of these was a 500 (test_query_fuzz.py fuzzes the same routes).
    ("/api/message", "backupQuery", '{"subject": "\\ud800"}', "bad_value"),
    ("/api/message/records", "recordQuery", '{"subject": "orders", "messageId": "\\udfff"}', "bad_value"),
    ("/api/message", "backupQuery", LISTING + '"msgCreateTimeBegin": NaN}', "bad_time"),
    ("/api/message", "backupQuery", LISTING + '"msgCreateTimeEnd": -Infinity}', "bad_time"),
    ("/api/message", "backupQuery", LISTING + '"msgCreateTimeBegin": "\u00b2"}', "bad_time"),
    ("/api/message/dead", "backupQuery", LISTING + '"msgCreateTimeEnd": 1e300}', "bad_time"),
    ("/api/message/detail", "backupQuery", '{"subject": "o", "brokerGroup": "b", "sequence": 1e400}', "bad_type"),
    ("/api/message/detail", "backupQuery", '{"subject": "o", "brokerGroup": "b", "sequence": 9223372036854775808}',
     "bad_value"),
])
async def test_malformed_queries_are_400_saying_what_is_wrong(client, path, param, raw, reason):
    response = await client.get(path, params={} if raw is None else {param: raw})
    assert response.status == 400
    body = await response.json()
    assert body["error"] == reason and body["detail"]


def _index(config, records) -> None:
    store = open_store(config.store_url)
    try:
        index_records(store, records)
    finally:
        store.close()


def _pub(topic: str, msg_id: str, t: int, *, broker: str = "broker-a", queue: int = 0, offset: int = 0) -> Record:
    return send(msg_id, t, dict(topic=topic, broker=broker, queue=queue, offset=offset, born_ms=t - 2, store_ms=t))


async def test_message_list_is_newest_first_within_begin_and_end(client, ids, now_ms):
    t0 = now_ms - 3_600_000  # the sample stores its messages 1 s apart from here
    window = {"subject": TOPIC, "isDelay": False, "len": 10,
              "msgCreateTimeBegin": t0 + 2000, "msgCreateTimeEnd": t0 + 4000}  # both ends inclusive
    body = await qmq(client, "/api/message", "backupQuery", window)
    assert [i["messageId"] for i in body["list"]] == [ids.unfinished, ids.transactional, ids.dead]
    assert body["next"] is None
    everything = await qmq(client, "/api/message", "backupQuery", {"subject": TOPIC, "isDelay": False, "len": 500})
    created = [int(i["createTime"]) for i in everything["list"]]
    assert created == sorted(created, reverse=True) and len(created) == SHARED_KEY_COUNT + 6
    dead = await qmq(client, "/api/message/dead", "backupQuery", dict(window, msgCreateTimeBegin=t0 + 2001))
    assert dead["list"] == []  # the dead letter was stored at t0 + 2000


async def test_without_begin_and_end_the_list_covers_the_last_30_days(client, config, now_ms):
    day = 86_400_000
    _index(config, [_pub("aged", "m-31d", now_ms - 31 * day), _pub("aged", "m-29d", now_ms - 29 * day, offset=1),
                    _pub("aged", "m-1m", now_ms - 60_000, offset=2)])
    body = await qmq(client, "/api/message", "backupQuery", {"subject": "aged", "isDelay": False, "len": 10})
    assert [i["messageId"] for i in body["list"]] == ["m-1m", "m-29d"]
    older = await qmq(client, "/api/message", "backupQuery", {"subject": "aged", "isDelay": False, "len": 10,
                                                             "msgCreateTimeEnd": now_ms - 30 * day})
    assert [i["messageId"] for i in older["list"]] == ["m-31d"]  # end alone: the 30 days before it


@pytest.mark.parametrize("path", ["/api/message", "/api/message/dead"])
async def test_is_delay_true_lists_no_normal_messages(client, ids, path):
    body = await qmq(client, path, "backupQuery", {"subject": TOPIC, "isDelay": True, "len": 10})
    assert body == {"list": [], "next": None}
    body = await qmq(client, path, "backupQuery", {"subject": TOPIC, "messageId": ids.dead, "isDelay": True, "len": 1})
    assert body == {"list": [], "next": None}


async def test_broker_group_and_sequence_name_one_partition_exactly(client, config, now_ms):
    # Kafka: one bootstrap string for every partition, and every partition has an offset 5.
    broker, old = "kafka-1:9092", now_ms - 40 * 86_400_000
    _index(config, [_pub("k", "p0-5", now_ms - 3000, broker=broker, queue=0, offset=5),
                    _pub("k", "p1-5", now_ms - 2000, broker=broker, queue=1, offset=5),
                    _pub("k", "p2-5", old, broker=broker, queue=2, offset=5)])
    listed = await qmq(client, "/api/message", "backupQuery", {"subject": "k", "isDelay": False, "len": 10})
    assert [(i["brokerGroup"], i["sequence"], i["messageId"]) for i in listed["list"]] == [
        (f"{broker}/1", "5", "p1-5"), (f"{broker}/0", "5", "p0-5")]
    for item in listed["list"]:  # what a QMQ client does: echo brokerGroup + sequence back
        detail = await qmq(client, "/api/message/detail", "backupQuery",
                           {"subject": "k", "brokerGroup": item["brokerGroup"], "sequence": int(item["sequence"])})
        assert (detail["messageId"], detail["brokerGroup"]) == (item["messageId"], item["brokerGroup"])
    # An exact key lookup, not a scan of recent messages: 40 days old is found too.
    detail = await qmq(client, "/api/message/detail", "backupQuery",
                       {"subject": "k", "brokerGroup": f"{broker}/2", "sequence": "5"})
    assert detail["messageId"] == "p2-5"
    ambiguous = await qmq(client, "/api/message/detail", "backupQuery",
                          {"subject": "k", "brokerGroup": broker, "sequence": 5}, status=400)
    assert ambiguous["error"] == "ambiguous_sequence" and f"{broker}/" in ambiguous["detail"]
    records = await qmq(client, "/api/message/records", "recordQuery",
                        {"subject": "k", "brokerGroup": broker, "sequence": 5, "recordCode": 0}, status=400)
    assert records["error"] == "ambiguous_sequence"
    await qmq(client, "/api/message/detail", "backupQuery",
              {"subject": "k", "brokerGroup": f"{broker}/3", "sequence": 5}, status=404)


async def test_records_by_queue_qualified_broker_group(client, config, now_ms):
    t = now_ms - 5000
    msg = dict(topic="k2", broker="b", queue=1, offset=0, born_ms=t - 2, store_ms=t)
    _index(config, [_pub("k2", "q0", t, broker="b", queue=0, offset=0), send("q1", t, msg)]
           + consume(BILLING_HEADER, "billing", "q1", t + 10, msg))
    body = await qmq(client, "/api/message/records", "recordQuery",
                     {"subject": "k2", "brokerGroup": "b/1", "sequence": 0, "recordCode": 0})
    assert [(r["consumerGroup"], r["action"], r["sequence"]) for r in body["records"]] == [
        ("billing", 0, "0"), ("billing", 1, "0")]
    body = await qmq(client, "/api/message/records", "recordQuery",
                     {"subject": "k2", "brokerGroup": "b/0", "sequence": 0, "recordCode": 0})
    assert body["records"] == []  # q0 was never consumed
