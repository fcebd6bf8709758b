"""The native JSON API over a real local store holding the sample scenario."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from api_helpers import INGEST_TOKEN, QUERY_TOKEN, collect_pages

from collector.server.routes import OPENAPI_PATH
from tests.fixtures.sample import SHARED_KEY, SHARED_KEY_COUNT, TOPIC

pytestmark = pytest.mark.fallback


def rows_by_group(doc: dict) -> dict[str, dict]:
    return {row["group"]: row for row in doc["timeline"]["rows"]}


async def test_trace_of_a_normal_message_has_producer_and_both_groups(client, ids):
    response = await client.get(f"/v1/messages/{ids.normal}")
    assert response.status == 200
    doc = await response.json()
    assert doc["msg_id"] == ids.normal and doc["topic"] == TOPIC
    rows = rows_by_group(doc)
    assert [r["kind"] for r in doc["timeline"]["rows"]] == ["producer", "consumer", "consumer"]
    assert set(rows) == {"shop-web", "billing", "shipping"}
    billing = rows["billing"]["bars"]
    assert [(b["kind"], b["outcome"], b["finished"], b["host"]) for b in billing] == [
        ("consume", "success", True, "bill-1")
    ]
    assert billing[0]["cost_us"] == 4000
    assert rows["shop-web"]["bars"][0]["host"] == "web-1"


async def test_retried_consume_shows_failed_then_successful_attempt(client, ids):
    doc = await (await client.get(f"/v1/messages/{ids.retried}")).json()
    shipping = rows_by_group(doc)["shipping"]["bars"]
    assert [(b["retry"], b["status"], b["outcome"]) for b in shipping] == [
        (0, "exception", "failed"), (1, "ok", "success")
    ]
    assert shipping[0]["error"] == "handler raised RuntimeError"


async def test_dead_letter_ends_the_groups_row(client, ids):
    doc = await (await client.get(f"/v1/messages/{ids.dead}")).json()
    shipping = rows_by_group(doc)["shipping"]["bars"]
    assert [b["kind"] for b in shipping] == ["consume", "consume", "consume", "dead"]
    assert all(b["outcome"] == "failed" for b in shipping)
    assert rows_by_group(doc)["billing"]["bars"][0]["outcome"] == "success"


async def test_transaction_end_and_failed_send_sit_on_the_producer_row(client, ids):
    doc = await (await client.get(f"/v1/messages/{ids.transactional}")).json()
    producer = doc["timeline"]["rows"][0]
    assert [(b["kind"], b["outcome"]) for b in producer["bars"]] == [("send", "success"), ("end_tx", "success")]
    assert producer["bars"][1]["tx_state"] == "commit"
    doc = await (await client.get(f"/v1/messages/{ids.failed_send}")).json()
    send = doc["timeline"]["rows"][0]["bars"][0]
    assert (send["status"], send["outcome"], send["error"]) == ("timeout", "failed", "send timed out")


async def test_received_but_never_finished_is_unknown(client, ids):
    doc = await (await client.get(f"/v1/messages/{ids.unfinished}")).json()
    bar = rows_by_group(doc)["billing"]["bars"][0]
    assert (bar["outcome"], bar["finished"]) == ("unknown", False)


async def test_unknown_message_is_404_json(client):
    response = await client.get("/v1/messages/no-such-id")
    assert response.status == 404
    assert (await response.json())["error"] == "not_found"


async def test_records_of_a_dead_message(client, ids):
    body = await (await client.get(f"/v1/messages/{ids.dead}/records")).json()
    shipping = [r for r in body["records"] if r["consumer_group"] == "shipping"]
    assert [(r["action"], r["type"]) for r in shipping] == [
        (0, 0), (1, 0), (0, 1), (1, 1), (0, 1), (1, 1), (1, 2)
    ]


async def test_by_key_pages_newest_first_without_gap_or_overlap(client):
    items = await collect_pages(client, f"/v1/topics/{TOPIC}/messages", {"key": SHARED_KEY, "limit": "10"})
    ids = [i["msg_id"] for i in items]
    assert len(ids) == SHARED_KEY_COUNT == len(set(ids))
    assert ids == [f"msg-shared-{n:03d}" for n in reversed(range(SHARED_KEY_COUNT))]
    assert all((i["status"], i["status_name"]) == (0, "OK") for i in items)


async def test_by_time_pages_cover_the_topic(client):
    items = await collect_pages(client, f"/v1/topics/{TOPIC}/messages", {"begin": "2h", "limit": "7"})
    ids = [i["msg_id"] for i in items]
    assert len(ids) == len(set(ids)) == SHARED_KEY_COUNT + 6


async def test_by_time_window_excludes_older_messages(client):
    # every sample message was stored about an hour ago
    body = await (await client.get(f"/v1/topics/{TOPIC}/messages", params={"begin": "10s"})).json()
    assert body == {"items": [], "next_cursor": None}


async def test_dead_letters_by_topic_and_group(client, ids):
    body = await (await client.get(f"/v1/topics/{TOPIC}/dead")).json()
    assert [i["msg_id"] for i in body["items"]] == [ids.dead]
    body = await (await client.get(f"/v1/topics/{TOPIC}/dead", params={"group": "shipping"})).json()
    assert [i["msg_id"] for i in body["items"]] == [ids.dead]
    body = await (await client.get(f"/v1/topics/{TOPIC}/dead", params={"group": "billing"})).json()
    assert body["items"] == []


@pytest.mark.parametrize("params, reason", [
    ({"limit": "0"}, "bad_limit"),
    ({"limit": "501"}, "bad_limit"),
    ({"limit": "ten"}, "bad_type"),
    ({"begin": "yesterday-ish"}, "bad_time"),
    ({"begin": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, "bad_window"),
    ({"begin": "2020-01-01T00:00:00Z"}, "bad_window"),
    ({"cursor": "not-a-cursor"}, "bad_cursor"),
    ({"begin": "\u00b2"}, "bad_time"),  # str.isdigit() but not int(): was a 500
    ({"begin": "99999999999999999999999", "end": "99999999999999999999999"}, "bad_time"),  # was a 500 (bad_key)
    ({"key": "k", "order": "sideways"}, "bad_value"),  # was ignored next to key
])
async def test_bad_parameters_are_400_with_a_reason(client, params, reason):
    response = await client.get(f"/v1/topics/{TOPIC}/messages", params=params)
    assert response.status == 400
    body = await response.json()
    assert body["error"] == reason and body["detail"]


async def test_query_token_is_required_when_configured(secured_client):
    path = f"/v1/topics/{TOPIC}/messages"
    assert (await secured_client.get(path)).status == 401
    assert (await secured_client.get(path, headers={"Authorization": f"Bearer {INGEST_TOKEN}"})).status == 403
    response = await secured_client.get(path, headers={"Authorization": f"Bearer {QUERY_TOKEN}"})
    assert response.status == 200
    assert len((await response.json())["items"]) == 20


async def test_openapi_documents_every_query_route(client):
    response = await client.get("/openapi.json")
    assert response.status == 200
    doc = await response.json()
    assert doc == json.loads(OPENAPI_PATH.read_text())
    registered = {
        r.resource.canonical for r in client.app.router.routes()
        if r.resource is not None and r.resource.canonical.startswith(("/v1/messages", "/v1/topics", "/api/"))
    }
    assert registered and registered <= set(doc["paths"])


async def test_web_page_and_assets_are_served(client):
    page = await client.get("/")
    assert page.status == 200 and "text/html" in page.headers["Content-Type"]
    assert "default-src 'self'" in page.headers["Content-Security-Policy"]
    html = await page.text()
    assert "/static/app.js" in html and "/static/style.css" in html
    script = await client.get("/static/app.js")
    assert script.status == 200
    assert "innerHTML" not in await script.text()


async def test_ids_and_topics_with_reserved_characters(client, config, now_ms):
    from urllib.parse import quote

    from collector.index.indexer import index_records
    from collector.store import open_store
    from tests.fixtures.sample import send

    msg_id, topic = "a/b c?#中", "odd/topic"
    msg = dict(topic=topic, keys="k/1", broker="b", queue=0, offset=1, born_ms=now_ms - 10, store_ms=now_ms - 10)
    store = open_store(config.store_url)
    index_records(store, [send(msg_id, now_ms - 10, msg)])
    store.close()
    doc = await (await client.get("/v1/messages/" + quote(msg_id, safe=""))).json()
    assert (doc["msg_id"], doc["topic"]) == (msg_id, topic)
    body = await (await client.get(f"/v1/topics/{quote(topic, safe='')}/messages", params={"key": "k/1"})).json()
    assert [i["msg_id"] for i in body["items"]] == [msg_id]



async def test_by_key_with_more_than_64_results_pages_to_the_end(client, config, now_ms):
    from collector.index.indexer import index_records
    from collector.store import open_store
    from tests.fixtures.sample import send

    count = 150  # RocketMQ's key query stops at 64
    records = []
    for n in range(count):
        t = now_ms - 600_000 + n
        records.append(send(f"hot-{n:03d}", t, dict(topic="hot", keys=f"k-hot order-{n}", broker="b", queue=n % 3,
                                                    offset=n // 3, born_ms=t, store_ms=t)))
    store = open_store(config.store_url)
    index_records(store, records)
    store.close()
    expected = [f"hot-{n:03d}" for n in reversed(range(count))]
    paged = await collect_pages(client, "/v1/topics/hot/messages", {"key": "k-hot", "limit": "20"})
    assert [i["msg_id"] for i in paged] == expected  # newest first, no overlap, no gap
    one_page = await (await client.get("/v1/topics/hot/messages", params={"key": "k-hot", "limit": "500"})).json()
    assert [i["msg_id"] for i in one_page["items"]] == expected and one_page["next_cursor"] is None


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def _ok(client, path: str, params: dict[str, str]) -> dict:
    response = await client.get(path, params=params)
    assert response.status == 200, f"{path} {params}: {await response.text()}"
    return await response.json()


@pytest.mark.parametrize("form", ["-2h", "2h", "iso", "epoch ms"])
async def test_every_route_reads_a_time_the_same_way(client, ids, now_ms, form):
    # The web page's dead-letter mode sends one begin to /dead and to /dead/counts: both must take it.
    two_hours_ago = now_ms - 7_200_000
    begin = {"iso": _iso(two_hours_ago), "epoch ms": str(two_hours_ago)}.get(form, form)
    window = {"begin": begin, "end": "now"}
    messages = await collect_pages(client, f"/v1/topics/{TOPIC}/messages", dict(window, limit="500"))
    assert len(messages) == SHARED_KEY_COUNT + 6
    dead = await _ok(client, f"/v1/topics/{TOPIC}/dead", window)
    assert [i["msg_id"] for i in dead["items"]] == [ids.dead]
    counts = await _ok(client, f"/v1/topics/{TOPIC}/dead/counts", window)
    assert counts["totals"] == {"shipping": 1}
    replay = await _ok(client, f"/v1/topics/{TOPIC}/unconsumed", dict(window, group="shipping", limit="500"))
    replayed = [i["msg_id"] for i in replay["items"]]
    assert ids.dead in replayed and ids.normal not in replayed
    offsets = await _ok(client, f"/v1/topics/{TOPIC}/offsets", {"time": begin})
    assert offsets["queues"] == [{"queue": q, "offset": 10 * (q + 1)} for q in range(4)]  # each queue's first
    qmq = {"subject": TOPIC, "isDelay": False, "len": 500, "msgCreateTimeBegin": begin, "msgCreateTimeEnd": "now"}
    listed = await _ok(client, "/api/message", {"backupQuery": json.dumps(qmq)})
    assert len(listed["list"]) == SHARED_KEY_COUNT + 6
    qmq_dead = await _ok(client, "/api/message/dead", {"backupQuery": json.dumps(qmq)})
    assert [i["messageId"] for i in qmq_dead["list"]] == [ids.dead]


@pytest.mark.parametrize("begin", ["now", "-10m", "10m"])
async def test_a_window_after_every_message_is_empty_on_every_route(client, begin):
    window = {"begin": begin}
    assert (await _ok(client, f"/v1/topics/{TOPIC}/messages", window))["items"] == []
    assert (await _ok(client, f"/v1/topics/{TOPIC}/dead", window))["items"] == []
    assert (await _ok(client, f"/v1/topics/{TOPIC}/dead/counts", window))["totals"] == {}
    assert (await _ok(client, f"/v1/topics/{TOPIC}/unconsumed", dict(window, group="shipping")))["items"] == []
    qmq = {"subject": TOPIC, "isDelay": False, "len": 10, "msgCreateTimeBegin": begin}
    assert (await _ok(client, "/api/message", {"backupQuery": json.dumps(qmq)}))["list"] == []
    assert (await _ok(client, "/api/message/dead", {"backupQuery": json.dumps(qmq)}))["list"] == []
