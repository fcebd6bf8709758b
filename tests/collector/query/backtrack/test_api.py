"""The backtracking routes over a real collector app on the embedded store."""

from __future__ import annotations

import pathlib

import pytest
from backtrack_helpers import BASE_MS, EXPECTED_STATUS, GROUP, Record, dead, message, outcome_records
from fixtures.pages import CursorPages

from collector.index.indexer import index_records
from collector.server.app import create_app
from collector.server.config import CollectorConfig
from collector.store import open_store

pytestmark = pytest.mark.fallback

TOPIC = "orders"
QUERY_TOKEN = "q-secret"
# Queue 0 holds offsets 0..4 stored a second apart; outcome of each message in GROUP:
OUTCOMES = ["ok", "failed", "ok", "dead", "never"]


def records() -> list[Record]:
    out: list[Record] = []
    for i, outcome in enumerate(OUTCOMES):
        out += outcome_records(TOPIC, f"m{i}", message(0, i, BASE_MS + i * 1000), outcome)
    out.append(dead(TOPIC, "audit", "m4", message(0, 4, BASE_MS + 4000)))
    return out


@pytest.fixture
def config(tmp_path: pathlib.Path) -> CollectorConfig:
    config = CollectorConfig(data_dir=str(tmp_path), durability="os", query_token=QUERY_TOKEN)
    store = open_store(config.store_url)
    index_records(store, records())
    store.close()
    return config


@pytest.fixture
async def client(aiohttp_client, config):
    return await aiohttp_client(create_app(config), headers={"Authorization": f"Bearer {QUERY_TOKEN}"})


async def get(client, path: str, **params) -> tuple[int, dict]:
    response = await client.get(path, params={k: str(v) for k, v in params.items()})
    return response.status, await response.json()


async def test_offsets_at_a_time(client) -> None:
    status, body = await get(client, f"/v1/topics/{TOPIC}/offsets", time=BASE_MS + 1500)
    assert status == 200
    assert body == {"topic": TOPIC, "time_ms": BASE_MS + 1500, "queues": [{"queue": 0, "offset": 2}]}
    _, iso = await get(client, f"/v1/topics/{TOPIC}/offsets", time="2020-01-01T00:00:00Z")
    assert iso["queues"] == [{"queue": 0, "offset": 0}]
    _, late = await get(client, f"/v1/topics/{TOPIC}/offsets", time="now", queue=0)
    assert late["queues"] == [{"queue": 0, "offset": 5}]


async def test_reset_plan_rewind_only_and_forced(client) -> None:
    # GROUP finished offsets 0..3 (the dead one too): its position is 4.
    _, back = await get(client, f"/v1/topics/{TOPIC}/offsets", time=BASE_MS + 1500, group=GROUP)
    assert back["queues"] == [{"queue": 0, "target": 2, "current": 4, "planned": 2, "action": "rewind"}]
    _, kept = await get(client, f"/v1/topics/{TOPIC}/offsets", time="now", group=GROUP)
    assert kept["queues"][0]["planned"] == 4 and kept["force"] is False
    _, forced = await get(client, f"/v1/topics/{TOPIC}/offsets", time="now", group=GROUP, force="true")
    assert forced["queues"][0]["planned"] == 5 and forced["queues"][0]["action"] == "forward"


async def test_reset_plan_of_a_group_never_seen_on_the_topic_is_404(client) -> None:
    """A misspelt group has no position anywhere, so its plan would 'set' every queue: refused unless asked."""
    status, body = await get(client, f"/v1/topics/{TOPIC}/offsets", time=BASE_MS + 1500, group="nosuchgroup")
    assert status == 404 and body["error"] == "unknown_group"
    assert GROUP in body["detail"] and "allow_unknown_group" in body["detail"]
    status, body = await get(client, f"/v1/topics/{TOPIC}/offsets", time=BASE_MS + 1500, group="nosuchgroup",
                             allow_unknown_group="true")
    assert status == 200
    assert body["queues"] == [{"queue": 0, "target": 2, "current": None, "planned": 2, "action": "set"}]


async def test_unconsumed_pages(client) -> None:
    pages = CursorPages(max_pages=10)
    for cursor in pages:
        params = dict(group=GROUP, begin=BASE_MS, end=BASE_MS + 10_000, limit=1)
        if cursor:
            params["cursor"] = cursor
        status, body = await get(client, f"/v1/topics/{TOPIC}/unconsumed", **params)
        assert status == 200, body
        pages.add(body["items"], body["next_cursor"])
    items = pages.items
    expected = {f"m{i}": EXPECTED_STATUS[o] for i, o in enumerate(OUTCOMES) if EXPECTED_STATUS[o]}
    assert {i["msg_id"]: i["status"] for i in items} == expected
    assert [(i["queue"], i["offset"]) for i in items] == [(0, 1), (0, 3), (0, 4)]


async def test_dead_counts(client) -> None:
    status, body = await get(client, f"/v1/topics/{TOPIC}/dead/counts", begin=BASE_MS, end=BASE_MS + 9999,
                             bucket="5s")
    assert status == 200, body
    assert body["buckets"] == [BASE_MS, BASE_MS + 5000]
    assert body["groups"] == {"audit": [1, 0], GROUP: [1, 0]}
    assert body["totals"] == {"audit": 1, GROUP: 1}


@pytest.mark.parametrize("path, params, reason", [
    ("offsets", {}, "bad_time"),
    ("offsets", {"time": "yesterday"}, "bad_time"),
    ("offsets", {"time": "now", "force": "maybe", "group": GROUP}, "bad_value"),
    ("offsets", {"time": "now", "force": "true"}, "bad_value"),
    ("offsets", {"time": "now", "queue": "x"}, "bad_type"),
    ("unconsumed", {"begin": "-1h"}, "missing_param"),
    ("unconsumed", {"group": GROUP, "begin": "now", "end": "-1h"}, "bad_window"),
    ("unconsumed", {"group": GROUP, "cursor": "t.garbage"}, "bad_cursor"),
    ("dead/counts", {"bucket": "1ms"}, "bad_range"),
    ("dead/counts", {"bucket": "soon"}, "bad_time"),
])
async def test_bad_parameters_are_400_json(client, path, params, reason) -> None:
    status, body = await get(client, f"/v1/topics/{TOPIC}/{path}", **params)
    assert status == 400, body
    assert body["error"] == reason and body["detail"]


async def test_query_token_required(aiohttp_client, config) -> None:
    anonymous = await aiohttp_client(create_app(config))
    response = await anonymous.get(f"/v1/topics/{TOPIC}/offsets", params={"time": "now"})
    assert response.status == 401


async def test_replay_list_of_a_group_never_seen_on_the_topic_is_404(client) -> None:
    """A misspelt group would list every message as 'to replay': refused unless asked for explicitly."""
    status, body = await get(client, f"/v1/topics/{TOPIC}/unconsumed", group="nosuchgroup")
    assert status == 404 and body["error"] == "unknown_group"
    assert GROUP in body["detail"] and "allow_unknown_group" in body["detail"]
    status, body = await get(client, f"/v1/topics/{TOPIC}/unconsumed", group="nosuchgroup", allow_unknown_group="true",
                             begin=BASE_MS, end=BASE_MS + 10_000)
    assert status == 200 and len(body["items"]) == len(OUTCOMES)
    status, _ = await get(client, f"/v1/topics/{TOPIC}/unconsumed", group="audit")  # only ever dead-lettered: seen
    assert status == 200
