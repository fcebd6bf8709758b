"""Message bodies only with the body scope, on every GET route of the app, and each body read logged.

The routes come from the app's router: a new route fails :func:`test_every_get_route_is_probed`
until it is added to ``ROUTES`` here, so none is forgotten.
"""

from __future__ import annotations

import json
import logging
import time
from urllib.parse import quote

import pytest

from collector.index.indexer import index_records
from collector.server.app import create_app
from collector.server.config import CollectorConfig
from collector.store import open_store
from tests.fixtures.sample import BILLING_HEADER, SHIPPING_HEADER, TOPIC, _event, _message, consume, send
from tracehook.wire import EventType, Status

pytestmark = pytest.mark.fallback

MSG, TRACE = "msg-with-body", "0af7651916cd43dd8448eb211c80319c"
BODY = b"card=4111-1111-secret"
NO_BODY, WITH_BODY = "reader-no-body-0123456789", "reader-body-0123456789"
TOKENS = [{"name": "ui", "scopes": ["query"], "token": NO_BODY},
          {"name": "billing-ui", "scopes": ["query", "body"], "token": WITH_BODY}]
BODY_ROUTES = {"/v1/messages/{msg_id}", "/api/message/detail"}
"""The routes whose answer carries bodies (to a reader with the body scope)."""


def _json_param(name: str, doc: dict) -> str:
    return f"{name}={quote(json.dumps(doc))}"


# route (as the router names it) -> (the URL probed, text that shows the probe found the message, or None)
ROUTES = {
    "/healthz": ("/healthz", None),
    "/metrics": ("/metrics", None),
    "/api/message": ("/api/message?" + _json_param("backupQuery", {"subject": TOPIC, "isDelay": False, "len": 20}),
                     MSG),
    "/api/message/dead": ("/api/message/dead?" + _json_param(
        "backupQuery", {"subject": TOPIC, "isDelay": False, "len": 20}), MSG),
    "/api/message/detail": ("/api/message/detail?" + _json_param("backupQuery", {"subject": TOPIC, "messageId": MSG}),
                            MSG),
    "/api/message/records": ("/api/message/records?" + _json_param(
        "recordQuery", {"subject": TOPIC, "messageId": MSG, "recordCode": 0}), '"consumerGroup": "billing"'),
    "/v1/messages": (f"/v1/messages?trace_id={TRACE}", MSG),
    "/v1/messages/{msg_id}": (f"/v1/messages/{MSG}", MSG),
    "/v1/messages/{msg_id}/records": (f"/v1/messages/{MSG}/records", MSG),
    "/v1/topics/{topic}/messages": (f"/v1/topics/{TOPIC}/messages", MSG),
    "/v1/topics/{topic}/dead": (f"/v1/topics/{TOPIC}/dead", MSG),
    "/v1/topics/{topic}/offsets": (f"/v1/topics/{TOPIC}/offsets?time=now", None),
    "/v1/topics/{topic}/unconsumed": (f"/v1/topics/{TOPIC}/unconsumed?group=shipping", MSG),
    "/v1/topics/{topic}/dead/counts": (f"/v1/topics/{TOPIC}/dead/counts", None),
    "/v1/console/config": ("/v1/console/config", None),
    "/v1/topics/{topic}/unconsumed/export": (f"/v1/topics/{TOPIC}/unconsumed/export?group=shipping", MSG),
    "/v1/overview": ("/v1/overview", None),
    "/openapi.json": ("/openapi.json", None),
    "/": ("/", None),
}
NOT_PROBED = {"/static"}  # the page's own files


def _get_routes(app) -> set[str]:  # type: ignore[no-untyped-def]
    found = set()
    for route in app.router.routes():
        if route.method == "GET":
            info = route.resource.get_info()
            found.add(info.get("path") or info.get("formatter") or info.get("prefix"))
    return found - NOT_PROBED


def _fill(store_url: str) -> None:
    """One message whose send, consumes and dead letter all carry a captured body."""
    t = int(time.time() * 1000) - 60_000
    m = {**_message(MSG, t, 0, 10, "order-b"), "body": BODY, "body_len": len(BODY)}
    # A property named like the QMQ detail's body attribute: a sender cannot pose as a kept body.
    records = [send(MSG, t, m, trace_id=TRACE, props={"region": "eu", "qmq_body": "666f72676564"})]
    records += consume(BILLING_HEADER, "billing", MSG, t + 20, m)
    records += consume(SHIPPING_HEADER, "shipping", MSG, t + 30, m, status=Status.FAILED)
    records.append((SHIPPING_HEADER, _event(EventType.DEAD, t + 90, "shipping", MSG, retry=1, error="gave up", **m)))
    store = open_store(store_url)
    try:
        index_records(store, records)
    finally:
        store.close()


@pytest.fixture
async def body_client(aiohttp_client, tmp_path):  # type: ignore[no-untyped-def]
    config = CollectorConfig(data_dir=str(tmp_path), durability="os", tokens=TOKENS)
    _fill(config.store_url)
    return await aiohttp_client(create_app(config))


def test_every_get_route_is_probed(tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert _get_routes(create_app(CollectorConfig(data_dir=str(tmp_path)))) == set(ROUTES)


@pytest.mark.parametrize("route", sorted(ROUTES))
async def test_bodies_only_with_the_body_scope(body_client, caplog, route: str) -> None:  # type: ignore[no-untyped-def]
    url, marker = ROUTES[route]
    caplog.set_level(logging.INFO)
    texts = {}
    for token in (NO_BODY, WITH_BODY):
        response = await body_client.get(url, headers={"Authorization": f"Bearer {token}"})
        assert response.status == 200, await response.text()
        texts[token] = await response.text()
        assert marker is None or marker in texts[token]  # the probe found the message
        assert BODY.decode() not in texts[token]  # never raw, as any route shows it
    assert BODY.hex() not in texts[NO_BODY]
    assert (BODY.hex() in texts[WITH_BODY]) == (route in BODY_ROUTES)
    reads = [r.getMessage() for r in caplog.records if r.getMessage().startswith("body read:")]
    assert reads == ([f"body read: token 'billing-ui' msg_id '{MSG}'"] if route in BODY_ROUTES else [])
    assert NO_BODY not in caplog.text and WITH_BODY not in caplog.text


async def test_the_body_is_the_messages_and_withheld_without_the_body_scope(body_client) -> None:  # type: ignore[no-untyped-def]
    doc = await (await body_client.get(f"/v1/messages/{MSG}", headers={"Authorization": f"Bearer {NO_BODY}"})).json()
    views = [doc["send"], *doc["dead"], *doc["events"]]
    views += [e for attempts in doc["consumes"].values() for a in attempts for e in (a["before"], a["after"]) if e]
    assert len(doc["events"]) == 6 and len(views) == 12
    # The events' cells never hold a body (the bodies table does): the message carries it, withheld here.
    assert all(e["body"] is None and "body_withheld" not in e for e in views)
    assert doc["body"] is None and doc["body_withheld"] is True and doc["raw_key"] is None
    assert doc["body_len"] == len(BODY) and doc["body_truncated"] is False
    doc = await (await body_client.get(f"/v1/messages/{MSG}", headers={"Authorization": f"Bearer {WITH_BODY}"})).json()
    assert doc["body"] == BODY.hex() and "body_withheld" not in doc
    assert all(e["body"] is None for e in doc["events"])


@pytest.mark.parametrize("query_token", [None, "legacy-query"])
async def test_open_queries_and_the_legacy_query_token_see_bodies_as_before(
        aiohttp_client, tmp_path, caplog, query_token) -> None:  # type: ignore[no-untyped-def]
    config = CollectorConfig(data_dir=str(tmp_path), durability="os", query_token=query_token)
    _fill(config.store_url)
    client = await aiohttp_client(create_app(config))
    caplog.set_level(logging.INFO)
    headers = {"Authorization": f"Bearer {query_token}"} if query_token else {}
    doc = await (await client.get(f"/v1/messages/{MSG}", headers=headers)).json()
    assert doc["body"] == BODY.hex()
    reads = [r.getMessage() for r in caplog.records if r.getMessage().startswith("body read:")]
    assert reads == ([f"body read: token 'query' msg_id '{MSG}'"] if query_token else [])


async def test_the_qmq_detail_carries_the_body_in_attrs_only_with_the_body_scope(body_client) -> None:  # type: ignore[no-untyped-def]
    url = ROUTES["/api/message/detail"][0]
    attrs = {}
    for token in (NO_BODY, WITH_BODY):
        response = await body_client.get(url, headers={"Authorization": f"Bearer {token}"})
        attrs[token] = (await response.json())["attrs"]
    shared = {"region": "eu", "keys": "order-b"}  # the properties; the one named qmq_body is left out
    assert attrs[NO_BODY] == shared  # nothing of the body: no flag, no length
    assert attrs[WITH_BODY] == {**shared, "qmq_body": BODY.hex(), "qmq_bodyLen": str(len(BODY)),
                                "qmq_bodyTruncated": "false"}
