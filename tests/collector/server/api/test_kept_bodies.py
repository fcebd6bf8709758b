"""Kept bodies end to end in process: ingest strips the topics ``body_topics`` does not name (counted),
the index keeps the others in the bodies table (not in the trace), ``GET /v1/messages/{id}`` returns them
by scope, and erasure (command and admin route) removes them while the trace stays.  Nothing of a body
is ever logged."""

from __future__ import annotations

import json
import logging
import time
import zlib

import pytest

from collector.cli.main import main as tracehook_main
from collector.index.indexer import finish_batch, index_payloads
from collector.log.file import read_segment, sealed_segments
from collector.server.app import create_app
from collector.server.config import CollectorConfig
from collector.store import open_store
from tracehook import wire
from tracehook.wire import BODY_TRUNCATED, BODY_ZLIB, BatchHeader, EventType

QUERY, BODY, ADMIN = "reader-query-0123456789", "reader-body-0123456789", "admin-token-0123456789"
INGEST = "ingest-token-0123456789"
TOKENS = [{"name": "ui", "scopes": ["query"], "token": QUERY},
          {"name": "billing-ui", "scopes": ["query", "body"], "token": BODY},
          {"name": "ops", "scopes": ["admin"], "token": ADMIN},
          {"name": "apps", "scopes": ["ingest"], "token": INGEST}]
PLAIN = b"sms to +44 7700 900123: your code is 4711"
LONG = bytes(range(256)) * 40  # 10 KiB, of which the library kept the first 1 KiB
NOW = int(time.time() * 1000)


def _event(msg_id: str, topic: str, t: int, body: bytes | None, **fields: object) -> tuple:
    return wire.make_event(EventType.PUB, t, "p", topic, msg_id, queue=0, offset=t % 1000, body=body, **fields)


def _batch(seq: int, events: list[tuple]) -> bytes:
    return wire.encode_batch(BatchHeader("client-1", seq, "shop", "host-a"), events)


EVENTS = [
    _event("plain", "sms", NOW - 50_000, PLAIN, body_len=len(PLAIN), raw_key=b"k\x00\xff",
           raw_headers=[["traceparent", b"00-abc"], ["bin", b"\x00\x01"]]),
    _event("zipped", "sms", NOW - 40_000, zlib.compress(PLAIN), body_len=len(PLAIN), body_flags=BODY_ZLIB),
    _event("cut", "sms", NOW - 30_000, LONG[:1024], body_len=len(LONG), body_flags=BODY_TRUNCATED),
    _event("stripped", "orders", NOW - 20_000, b"card=4111-secret", body_len=16, raw_key=b"order-1"),
    _event("old-sms", "sms", NOW - 10 * 86_400_000, PLAIN, body_len=len(PLAIN)),
    _event("no-body", "sms", NOW - 10_000, None),
]
SECRETS = (PLAIN, zlib.compress(PLAIN), LONG[:64], b"card=4111-secret", b"order-1")


@pytest.fixture
async def bodies_client(aiohttp_client, tmp_path, caplog):  # type: ignore[no-untyped-def]
    """A collector keeping the bodies of topic sms, fed EVENTS through ingest and indexed."""
    caplog.set_level(logging.DEBUG)
    config = CollectorConfig(data_dir=str(tmp_path), durability="os", tokens=TOKENS, body_topics=("sms",))
    client = await aiohttp_client(create_app(config))
    for seq, events in enumerate((EVENTS[:3], EVENTS[3:])):
        r = await client.post("/v1/batches", data=_batch(seq, events), headers={
            "Content-Type": "application/msgpack", "Authorization": f"Bearer {INGEST}"})
        assert r.status == 200, await r.text()
    assert (await client.post("/v1/admin/roll", headers={"Authorization": f"Bearer {ADMIN}"})).status == 200
    payloads = [r.payload for s in sealed_segments(config.log_dir) for r in read_segment(s.path)]
    store = open_store(config.store_url)
    try:
        assert index_payloads(store, payloads) == len(EVENTS)
        finish_batch(store)
    finally:
        store.close()
    client.payloads, client.config = payloads, config
    return client


async def _get(client, msg_id: str, token: str) -> dict:  # type: ignore[no-untyped-def]
    r = await client.get(f"/v1/messages/{msg_id}", headers={"Authorization": f"Bearer {token}"})
    assert r.status == 200, await r.text()
    return await r.json()


async def test_bodies_round_trip_by_scope(bodies_client, caplog) -> None:  # type: ignore[no-untyped-def]
    doc = await _get(bodies_client, "plain", BODY)
    assert (doc["body"], doc["body_len"], doc["body_truncated"]) == (PLAIN.hex(), len(PLAIN), False)
    assert doc["raw_key"] == b"k\x00\xff".hex() and doc["raw_headers"] == [["traceparent", b"00-abc".hex()],
                                                                           ["bin", "0001"]]
    doc = await _get(bodies_client, "zipped", BODY)  # inflated for the reader
    assert (doc["body"], doc["body_len"], doc["body_truncated"]) == (PLAIN.hex(), len(PLAIN), False)
    doc = await _get(bodies_client, "cut", BODY)
    assert (doc["body"], doc["body_len"], doc["body_truncated"]) == (LONG[:1024].hex(), len(LONG), True)
    for msg_id in ("plain", "zipped", "cut"):
        doc = await _get(bodies_client, msg_id, QUERY)
        assert doc["body"] is None and doc["body_withheld"] is True and doc["raw_key"] is None
        assert doc["raw_headers"] is None and doc["send"]["msg_id"] == msg_id
    doc = await _get(bodies_client, "no-body", BODY)
    assert doc["body"] is None and "body_withheld" not in doc
    reads = [r.getMessage() for r in caplog.records if r.getMessage().startswith("body read:")]
    assert reads == [f"body read: token 'billing-ui' msg_id '{m}'" for m in ("plain", "zipped", "cut")]
    _nothing_logged(caplog)


async def test_other_topics_are_stripped_at_ingest_and_counted(bodies_client, caplog) -> None:  # type: ignore[no-untyped-def]
    doc = await _get(bodies_client, "stripped", BODY)
    assert doc["body"] is None and doc["send"]["body_len"] == 16  # the trace keeps the length
    # Never written to the trace log: the batch was encoded again without it, its other events intact.
    logged = [e for p in bodies_client.payloads for e in wire.decode_batch(p).events]
    assert len(logged) == len(EVENTS)
    assert {e.msg_id: e.body for e in logged}["stripped"] is None
    assert {e.msg_id: e.raw_key for e in logged}["stripped"] is None
    assert {e.msg_id: e.body for e in logged}["plain"] == PLAIN
    metrics = await (await bodies_client.get("/metrics")).text()
    assert 'tracehook_collector_bodies_stripped_total{reason="topic"} 1.0' in metrics
    _nothing_logged(caplog)


async def test_the_trace_cells_hold_no_body(bodies_client) -> None:  # type: ignore[no-untyped-def]
    from collector.store import schema

    store = open_store(bodies_client.config.store_url)
    try:
        for msg_id in ("plain", "zipped", "cut"):
            cells = store.get_row(schema.MESSAGES, schema.message_row(msg_id))
            assert cells and not any(secret in v for v in cells.values() for secret in SECRETS)
            assert store.get_row(schema.BODIES, schema.message_row(msg_id))
    finally:
        store.close()


async def test_erase_by_msg_id_and_by_topic_window_with_the_command(bodies_client, capsys) -> None:  # type: ignore[no-untyped-def]
    url = bodies_client.config.store_url
    assert tracehook_main(["bodies", "erase", "--store", url, "--msg-id", "plain", "--msg-id", "nope"]) == 0
    assert "1 kept body erased" in capsys.readouterr().out
    doc = await _get(bodies_client, "plain", BODY)
    assert doc["body"] is None and doc["body_erased"] is True and doc["send"]["msg_id"] == "plain"  # trace stays
    assert (await _get(bodies_client, "zipped", BODY))["body"] == PLAIN.hex()  # the others stay
    # A window of the topic: "cut" (30 s ago) only, not "zipped" (40 s ago) nor "old-sms" (10 days ago).
    since, until = str(NOW - 35_000), str(NOW - 25_000)
    assert tracehook_main(["bodies", "erase", "--store", url, "--topic", "sms", "--since", since,
                           "--until", until]) == 0
    assert "1 kept body erased" in capsys.readouterr().out
    assert (await _get(bodies_client, "cut", BODY))["body_erased"] is True
    assert (await _get(bodies_client, "zipped", BODY))["body"] == PLAIN.hex()
    assert (await _get(bodies_client, "old-sms", BODY))["body"] == PLAIN.hex()
    assert tracehook_main(["bodies", "erase", "--store", url, "--topic", "sms"]) == 0  # the rest of the topic
    assert "2 kept bodies erased" in capsys.readouterr().out
    assert (await _get(bodies_client, "old-sms", BODY))["body_erased"] is True
    assert tracehook_main(["bodies", "erase", "--store", url, "--msg-id", "x", "--since", "1h"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


async def test_erase_route_takes_the_admin_scope_only(bodies_client, caplog) -> None:  # type: ignore[no-untyped-def]
    route = "/v1/admin/bodies/erase"
    for token, status in ((None, 401), (BODY, 403), (INGEST, 403)):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        assert (await bodies_client.post(route, json={"msg_ids": ["plain"]}, headers=headers)).status == status
    admin = {"Authorization": f"Bearer {ADMIN}"}
    for bad in ({}, {"msg_ids": []}, {"topic": ""}, {"msg_ids": ["a"], "topic": "sms"}, {"topic": "sms", "since": "x"}):
        r = await bodies_client.post(route, json=bad, headers=admin)
        assert r.status == 400, bad
    assert (await bodies_client.post(route, data=b"{", headers=admin)).status == 400
    r = await bodies_client.post(route, json={"msg_ids": ["plain", "zipped"]}, headers=admin)
    assert (r.status, await r.json()) == (200, {"erased": 2})
    r = await bodies_client.post(route, json={"topic": "sms", "until": NOW - 25_000}, headers=admin)
    assert (r.status, await r.json()) == (200, {"erased": 2})  # cut and old-sms
    for msg_id in ("plain", "zipped", "cut", "old-sms"):
        assert (await _get(bodies_client, msg_id, BODY))["body_erased"] is True
    assert "bodies erased: token 'ops' erased 2" in caplog.text
    _nothing_logged(caplog)


async def _qmq_attrs(client, msg_id: str, token: str) -> dict:  # type: ignore[no-untyped-def]
    query = json.dumps({"subject": "sms", "messageId": msg_id})
    r = await client.get("/api/message/detail", params={"backupQuery": query},
                         headers={"Authorization": f"Bearer {token}"})
    assert r.status == 200, await r.text()
    return (await r.json())["attrs"]


async def test_the_qmq_detail_gives_the_native_body_fields_as_attrs(bodies_client, caplog) -> None:  # type: ignore[no-untyped-def]
    assert await _qmq_attrs(bodies_client, "zipped", BODY) == {  # inflated, as the native route does
        "qmq_body": PLAIN.hex(), "qmq_bodyLen": str(len(PLAIN)), "qmq_bodyTruncated": "false"}
    assert await _qmq_attrs(bodies_client, "cut", BODY) == {
        "qmq_body": LONG[:1024].hex(), "qmq_bodyLen": str(len(LONG)), "qmq_bodyTruncated": "true"}
    assert await _qmq_attrs(bodies_client, "no-body", BODY) == {}
    assert tracehook_main(["bodies", "erase", "--store", bodies_client.config.store_url, "--msg-id", "plain"]) == 0
    assert await _qmq_attrs(bodies_client, "plain", BODY) == {"qmq_bodyErased": "true"}
    for msg_id in ("zipped", "cut", "plain"):
        assert await _qmq_attrs(bodies_client, msg_id, QUERY) == {}
    reads = [r.getMessage() for r in caplog.records if r.getMessage().startswith("body read:")]
    assert reads == [f"body read: token 'billing-ui' msg_id '{m}'" for m in ("zipped", "cut")]
    _nothing_logged(caplog)


def _nothing_logged(caplog) -> None:  # type: ignore[no-untyped-def]
    text = caplog.text
    for secret in SECRETS:
        assert secret.hex() not in text and repr(secret)[2:-1] not in text
    assert PLAIN.decode() not in text
