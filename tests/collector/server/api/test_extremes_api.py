"""Issue 41 over HTTP: the poison batch is refused at ingest with a documented reason, and a batch at
the edges of every accepted range is acknowledged, indexed and answered for by every route."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from fixtures import extremes
from fixtures.indexing import index_sealed

from collector.server.app import create_app
from collector.server.config import CollectorConfig
from tracehook import wire
from tracehook.wire import BatchHeader, EventType, Status, TxState, make_event

pytestmark = pytest.mark.fallback

MSGPACK = {"Content-Type": "application/msgpack"}
MAX_TIME, MAX_INT, MIN_INT = wire.MAX_TIME_MS, wire.MAX_INT, wire.MIN_INT
DAY_MS = 86_400_000
TOPIC, GROUP, BROKER = "orders", "billing", "broker-a"
LAST, FIRST, NOW = "at-9999", "at-1970", "at-now"  # msg ids: placed at the last ms of 9999, at 0, about now


def edge_events(now_ms: int) -> list[tuple]:
    """Every event kind at the edges of its fields' ranges, for three messages (see the msg ids)."""
    position = dict(broker=BROKER, queue=MAX_INT, offset=MAX_INT, born_ms=MAX_TIME, store_ms=MAX_TIME)
    consume = dict(position, request_id="r-1", retry=MAX_INT, cost_us=MAX_INT, body_len=MIN_INT)
    return [
        make_event(EventType.PUB, MAX_TIME, "pg", TOPIC, LAST, keys="k1 k2", props={"\x00": "\xff"},
                   cost_us=MIN_INT, body_len=MAX_INT, retry=MIN_INT, **position),
        make_event(EventType.SUB_BEFORE, MAX_TIME, GROUP, TOPIC, LAST, **consume),
        make_event(EventType.SUB_AFTER, MAX_TIME, GROUP, TOPIC, LAST, status=Status.FAILED, error="boom", **consume),
        make_event(EventType.DEAD, MAX_TIME, GROUP, TOPIC, LAST, **position),
        make_event(EventType.REPLAY, MAX_TIME, GROUP, TOPIC, LAST, retry=MAX_INT, **position),
        make_event(EventType.END_TX, MAX_TIME, "pg", TOPIC, LAST, tx_id="tx", tx_state=TxState.COMMIT),
        # Sent at the epoch with no born or store time, consumed in the last ms of 9999: the longest latency.
        make_event(EventType.PUB, 0, "pg", TOPIC, FIRST, broker=BROKER, queue=0, offset=0, born_ms=-1, store_ms=-1),
        make_event(EventType.SUB_BEFORE, MAX_TIME, GROUP, TOPIC, FIRST, queue=0, offset=0, request_id="r-2"),
        make_event(EventType.SUB_AFTER, MAX_TIME, GROUP, TOPIC, FIRST, queue=0, offset=0, request_id="r-2",
                   cost_us=MIN_INT),
        # Within the last hour, for /metrics: consumed before it was stored, with negative costs.
        make_event(EventType.PUB, now_ms, "pg", TOPIC, NOW, queue=1, offset=MAX_INT, store_ms=now_ms, cost_us=-1),
        make_event(EventType.SUB_BEFORE, 0, GROUP, TOPIC, NOW, queue=1, offset=MAX_INT, request_id="r-3"),
        make_event(EventType.SUB_AFTER, 0, GROUP, TOPIC, NOW, queue=1, offset=MAX_INT, request_id="r-3",
                   cost_us=MIN_INT, retry=MIN_INT),
    ]


async def _ok(client: Any, path: str, **params: Any) -> Any:
    query = {k: json.dumps(v) if isinstance(v, dict) else str(v) for k, v in params.items()}
    response = await client.get(path, params=query)
    text = await response.text()
    assert response.status == 200, (path, params, text[:500])
    return json.loads(text) if response.content_type == "application/json" else text


async def test_poison_refused_edges_answered_by_every_route(aiohttp_client, tmp_path) -> None:
    config = CollectorConfig(data_dir=str(tmp_path), durability="os")
    client = await aiohttp_client(create_app(config))

    refused = await client.post("/v1/batches", data=extremes.POISON, headers=MSGPACK)
    assert refused.status == 400
    body = await refused.json()
    assert body["error"] in extremes.documented_400_reasons() and "store_ms" in body["detail"], body

    now_ms = int(time.time() * 1000)
    header = BatchHeader("edges", 1, "app", "host", MAX_TIME, {"queue_full": MAX_INT})
    accepted = await client.post("/v1/batches", data=wire.encode_batch(header, edge_events(now_ms)), headers=MSGPACK)
    assert accepted.status == 200, await accepted.text()
    assert (await client.post("/v1/admin/roll")).status == 200
    assert index_sealed(config.log_dir, config.store_url) == len(edge_events(now_ms))  # the poison was never logged

    for msg_id in (LAST, FIRST, NOW):
        trace = await _ok(client, f"/v1/messages/{msg_id}")
        assert trace["msg_id"] == msg_id
        assert (await _ok(client, f"/v1/messages/{msg_id}/records"))["records"]
        assert msg_id in [i["msg_id"] for i in (await _ok(client, "/v1/messages", trace_id=trace["trace_id"]))["items"]]
    assert (await _ok(client, f"/v1/messages/{LAST}"))["offset"] == MAX_INT

    # (Numbers below 10^10 are epoch seconds: the epoch's first day as ISO-8601.)
    windows = {LAST: (MAX_TIME - DAY_MS, MAX_TIME), FIRST: ("1970-01-01T00:00:00Z", "1970-01-02T00:00:00Z"),
               NOW: (now_ms - DAY_MS, now_ms + DAY_MS)}
    for msg_id, (begin, end) in windows.items():
        window = {"begin": begin, "end": end}
        for order in ("newest", "oldest"):
            page = await _ok(client, f"/v1/topics/{TOPIC}/messages", order=order, **window)
            assert [i["msg_id"] for i in page["items"]] == [msg_id]
        replay = await _ok(client, f"/v1/topics/{TOPIC}/unconsumed", group=GROUP, **window)
        assert [i["msg_id"] for i in replay["items"]] == ([LAST] if msg_id == LAST else [])  # failed, then dead
        await _ok(client, f"/v1/topics/{TOPIC}/unconsumed/export", group=GROUP, format="csv", **window)
        await _ok(client, f"/v1/topics/{TOPIC}/dead/counts", bucket="1h", **window)
        qmq = {"subject": TOPIC, "isDelay": False, "len": 10, "msgCreateTimeBegin": begin, "msgCreateTimeEnd": end}
        assert [i["messageId"] for i in (await _ok(client, "/api/message", backupQuery=qmq))["list"]] == [msg_id]
        await _ok(client, "/api/message/dead", backupQuery=qmq)
        await _ok(client, "/v1/overview", **window)
        overview = await _ok(client, "/v1/overview", topic=TOPIC, **window)
        assert TOPIC in [t["topic"] for t in overview["topics"]]

    last = {"begin": MAX_TIME - DAY_MS, "end": MAX_TIME}
    assert [i["msg_id"] for i in (await _ok(client, f"/v1/topics/{TOPIC}/messages", key="k2", **last))["items"]] == [LAST]
    dead = await _ok(client, f"/v1/topics/{TOPIC}/dead", group=GROUP, **last)
    assert [i["msg_id"] for i in dead["items"]] == [LAST]
    offsets = await _ok(client, f"/v1/topics/{TOPIC}/offsets", time=MAX_TIME)
    assert {q["queue"]: q["offset"] for q in offsets["queues"]} == {0: 1, 1: MAX_INT, MAX_INT: MAX_INT}
    plan = await _ok(client, f"/v1/topics/{TOPIC}/offsets", time=0, group=GROUP)
    assert all(0 <= q[f] <= MAX_INT for q in plan["queues"] for f in ("target", "planned")), plan

    group = f"{BROKER}/{MAX_INT}"  # as /api/message lists it
    for found_by in ({"messageId": LAST}, {"brokerGroup": group, "sequence": MAX_INT}):
        detail = await _ok(client, "/api/message/detail", backupQuery={"subject": TOPIC, **found_by})
        assert (detail["messageId"], detail["brokerGroup"], detail["sequence"]) == (LAST, group, str(MAX_INT))
    for code in (0, 1, 2):
        await _ok(client, "/api/message/records", recordQuery={"subject": TOPIC, "messageId": LAST, "recordCode": code})

    metrics = await _ok(client, "/metrics")
    assert f'tracehook_topic_messages_sent{{topic="{TOPIC}"}} 1.0' in metrics
