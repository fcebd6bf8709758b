"""Property listings through the native API, ``tracehook query prop --collector`` and the QMQ detail:
hostile names and values, pages and windows against the reference of tests/fixtures/props_model.py;
bad parameters are 400 with their reason."""

from __future__ import annotations

import asyncio
import json
import urllib.parse

import pytest
from api_helpers import collect_pages

from collector.cli.main import main
from collector.index.indexer import index_records
from collector.server.app import create_app
from collector.store import open_store, props
from tests.fixtures.props_model import VALUES, Indexed, Msg, events, expected, queries

TOPICS = ["orders", "a:b=c/ü"]
NAMES = ["orderId", "a:b", "k=v", "ü名", "amqp.exchange", "%2F&x=1"]


def _path(topic: str) -> str:
    return f"/v1/topics/{urllib.parse.quote(topic, safe='')}/messages"


def _messages(now: int) -> list[Msg]:
    """Sends and unsent consumes over both topics, each name with several values, times tied in pairs."""
    out = []
    for i in range(24):
        name = NAMES[i % len(NAMES)]
        send = {name: VALUES[i % 4 + (5 if i % 3 == 0 else 0)], "orderId": str(i % 3)}
        consume = {name: "from-consume", "orderId": "c"} if i % 5 == 0 else None
        out.append(Msg(f"m{i:02d}", TOPICS[i % 2], now - 1000 * (i // 2), i % 7 != 3, send, consume))
    return out


@pytest.fixture
def indexed(config, now_ms) -> tuple[list[Msg], Indexed]:
    msgs = _messages(now_ms)
    store = open_store(config.store_url)
    try:
        props.save(store, props.load(store).with_names(None, NAMES[:4]).with_names(TOPICS[1], NAMES))
        index_records(store, events(msgs))
    finally:
        store.close()
    return msgs, Indexed({1: {TOPICS[0]: frozenset(NAMES[:4]), TOPICS[1]: frozenset(NAMES)}})


async def test_api_pages_and_windows_equal_the_reference(aiohttp_client, config, indexed, now_ms):
    msgs, model = indexed
    client = await aiohttp_client(create_app(config))
    asked = 0
    for n, (topic, name, value) in enumerate(queries(msgs, TOPICS)):
        begin, end = (now_ms - 6000 - 1000 * (n % 3), now_ms - 1000 * (n % 2)) if n % 4 else (now_ms - 60_000, now_ms)
        items = await collect_pages(client, _path(topic),
                                    {"prop_name": name, "prop_value": value, "begin": str(begin), "end": str(end),
                                     "limit": str(1 + n % 3)})
        want = expected(msgs, model, topic, name, value, begin, end)
        assert [i["msg_id"] for i in items] == want, (topic, name, value)
        asked += bool(want)
    assert asked >= 10  # the scenario finds something for many queries, not only nothing


async def test_cli_over_http_equals_the_api(aiohttp_server, config, indexed, capsys):
    msgs, model = indexed
    server = await aiohttp_server(create_app(config))
    url = str(server.make_url("/"))
    for topic, name, value in [(TOPICS[1], "k=v", ""), (TOPICS[0], "orderId", "1"), (TOPICS[1], "a:b", "a:b=c")]:
        code = await asyncio.to_thread(main, ["query", "--collector", url, "--json", "prop", topic, "--since", "1h",
                                              "--limit", "500", "--", name, value])
        page = json.loads(capsys.readouterr().out)
        want = expected(msgs, model, topic, name, value, 0, 2**62)
        assert [i["msg_id"] for i in page["items"]] == want and code == (0 if want else 1)


async def test_a_consume_counts_only_when_the_send_is_not_traced(aiohttp_client, config, indexed):
    msgs, _ = indexed
    client = await aiohttp_client(create_app(config))
    untraced = {m.msg_id for m in msgs if not m.traced and m.consume_props}
    traced = {m.msg_id for m in msgs if m.traced and m.consume_props}
    assert untraced and traced
    found = set()
    for topic in TOPICS:
        items = await collect_pages(client, _path(topic),
                                    {"prop_name": "orderId", "prop_value": "c", "limit": "50"})
        found |= {i["msg_id"] for i in items}
    assert found == untraced


async def test_qmq_detail_attrs_carry_the_properties(aiohttp_client, config, indexed):
    msgs, _ = indexed
    client = await aiohttp_client(create_app(config))
    m = next(m for m in msgs if m.traced and "k=v" in m.send_props)
    response = await client.get("/api/message/detail",
                                params={"backupQuery": json.dumps({"subject": m.topic, "messageId": m.msg_id})})
    assert response.status == 200
    assert (await response.json())["attrs"] == m.send_props


BAD = [
    ({"prop_name": "orderId"}, "missing_param", "prop_value"),
    ({"prop_value": "1"}, "missing_param", "prop_name"),
    ({"prop_name": "orderId", "prop_value": "1", "key": "k"}, "bad_param", "not both"),
    ({"prop_name": "", "prop_value": "1"}, "bad_prop", "empty"),
    ({"prop_name": "n" * 300, "prop_value": "1"}, "bad_prop", "256 bytes"),
    ({"prop_name": "orderId", "prop_value": "1", "cursor": "k.AAAA"}, "bad_cursor", "cursor"),
    ({"prop_name": "orderId", "prop_value": "1", "limit": "0"}, "bad_limit", "limit"),
]


async def test_bad_parameters_are_400_with_a_reason(aiohttp_client, config, indexed):
    client = await aiohttp_client(create_app(config))
    for params, reason, words in BAD:
        response = await client.get(_path(TOPICS[0]), params=params)
        body = await response.json()
        assert response.status == 400 and body["error"] == reason and words in body["detail"], (params, body)


async def test_a_key_cursor_is_refused_by_a_property_listing(aiohttp_client, config, indexed):
    client = await aiohttp_client(create_app(config))
    response = await client.get(_path(TOPICS[0]), params={"prop_name": "orderId",
                                                                            "prop_value": "1", "limit": "1"})
    cursor = (await response.json())["next_cursor"]
    assert cursor and cursor.startswith("p.")
    response = await client.get(_path(TOPICS[0]), params={"key": "x", "cursor": cursor})
    assert response.status == 400 and (await response.json())["error"] == "bad_cursor"
