"""The collector's ingest over real HTTP (aiohttp test server on a real port)."""

from __future__ import annotations

import asyncio
import dataclasses
import os

import msgpack
import pytest
from aiohttp import web
from collector_service_helpers import make_batch, read_log

from collector.log import file as tracelog
from collector.log import state as logstate
from collector.server.app import create_app
from collector.server.appkeys import INGESTOR_KEY, STORE_KEY
from collector.server.auth import require_query_token
from collector.server.config import CollectorConfig

pytestmark = pytest.mark.fallback

MSGPACK = {"Content-Type": "application/msgpack"}


def _auth(token: str) -> dict[str, str]:
    return {**MSGPACK, "Authorization": f"Bearer {token}"}


async def _metric(client, name: str) -> float:  # type: ignore[no-untyped-def]
    text = await (await client.get("/metrics")).text()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


async def test_valid_batch_is_acknowledged_and_stored_exactly_as_sent(aiohttp_client, collector_config) -> None:
    client = await aiohttp_client(create_app(collector_config))
    body = make_batch("c1", 7, n=5)
    resp = await client.post("/v1/batches", data=body, headers=MSGPACK)
    assert resp.status == 200
    assert await resp.json() == {"offset": 0, "events": 5, "duplicate": False}
    [record] = read_log(collector_config.log_dir)
    assert (record.offset, record.client_id, record.seq, record.payload) == (0, "c1", 7, body)
    # Sealing makes it visible to readers of the manifest.
    assert (await client.post("/v1/admin/roll")).status == 200
    [seg] = tracelog.sealed_segments(collector_config.log_dir)
    assert [r.payload for r in tracelog.read_segment(seg.path)] == [body]


async def test_tokens_401_without_403_with_the_other_purposes_token(aiohttp_client, collector_config) -> None:
    cfg = dataclasses.replace(collector_config, ingest_token="in-tok", query_token="q-tok")
    app = create_app(cfg)

    async def probe(request: web.Request) -> web.Response:
        require_query_token(request)
        return web.Response(text="ok")

    app.router.add_get("/probe", probe)
    client = await aiohttp_client(app)
    body = make_batch()
    assert (await client.post("/v1/batches", data=body, headers=MSGPACK)).status == 401
    assert (await client.post("/v1/batches", data=body, headers=_auth("wrong"))).status == 401
    resp = await client.post("/v1/batches", data=body, headers=_auth("q-tok"))
    assert resp.status == 403 and (await resp.json())["error"] == "forbidden"
    assert read_log(cfg.log_dir) == []
    assert (await client.post("/v1/batches", data=body, headers=_auth("in-tok"))).status == 200
    assert (await client.get("/probe")).status == 401
    assert (await client.get("/probe", headers={"Authorization": "Bearer in-tok"})).status == 403
    assert (await client.get("/probe", headers={"Authorization": "Bearer q-tok"})).status == 200
    assert await _metric(client, 'tracehook_collector_rejected_total{reason="unauthorized"}') == 2


async def test_body_over_the_limit_is_413_and_not_stored(aiohttp_client, collector_config) -> None:
    big = make_batch(n=200)
    cfg = dataclasses.replace(collector_config, max_body_bytes=len(big) - 1)
    client = await aiohttp_client(create_app(cfg))
    resp = await client.post("/v1/batches", data=big, headers=MSGPACK)
    assert resp.status == 413 and (await resp.json())["error"] == "payload_too_large"

    async def chunks():  # no Content-Length: the limit must hold while reading
        for i in range(0, len(big), 1000):
            yield big[i:i + 1000]

    assert (await client.post("/v1/batches", data=chunks(), headers=MSGPACK)).status == 413
    assert (await client.post("/v1/batches", data=make_batch(n=2), headers=MSGPACK)).status == 200
    assert len(read_log(cfg.log_dir)) == 1


async def test_one_bad_event_rejects_the_whole_batch_with_its_reason(aiohttp_client, collector_config) -> None:
    client = await aiohttp_client(create_app(collector_config))
    raw = msgpack.unpackb(make_batch(n=4))
    raw[7][2][4] = ""  # third event loses its msg_id
    resp = await client.post("/v1/batches", data=msgpack.packb(raw), headers=MSGPACK)
    assert resp.status == 400
    answer = await resp.json()
    assert answer["error"] == "missing_field" and "event 2" in answer["detail"]
    resp = await client.post("/v1/batches", data=b"\xc1not msgpack", headers=MSGPACK)
    assert resp.status == 400 and (await resp.json())["error"] == "bad_msgpack"
    resp = await client.post("/v1/batches", data=make_batch(), headers={"Content-Type": "application/json"})
    assert resp.status == 415
    assert read_log(collector_config.log_dir) == []
    assert await _metric(client, 'tracehook_collector_rejected_total{reason="missing_field"}') == 1


@pytest.mark.parametrize("content_type", [None, "application/octet-stream", "text/plain", "application/x-protobuf"])
async def test_only_msgpack_content_types_are_accepted(aiohttp_client, collector_config, content_type) -> None:
    """docs/collector.md: anything but a msgpack type (or no Content-Type at all) is 415, and nothing is written."""
    client = await aiohttp_client(create_app(collector_config))
    headers = {} if content_type is None else {"Content-Type": content_type}
    resp = await client.post("/v1/batches", data=make_batch(), headers=headers, skip_auto_headers=["Content-Type"])
    assert resp.status == 415 and (await resp.json())["error"] == "unsupported_media_type"
    assert read_log(collector_config.log_dir) == []
    for accepted in ("application/msgpack", "application/x-msgpack", "application/vnd.msgpack"):
        resp = await client.post("/v1/batches", data=make_batch(), headers={"Content-Type": accepted})
        assert resp.status == 200, accepted


async def test_backlog_over_the_limit_gets_429_until_indexed(aiohttp_client, collector_config) -> None:
    framed = len(tracelog.encode_record(0, 0, "client-1", 1, make_batch(n=50)))  # the backlog counts log bytes
    cfg = dataclasses.replace(collector_config, backlog_limit_bytes=framed + 1, maintenance_interval_s=0.05,
                              retry_after_s=3)
    client = await aiohttp_client(create_app(cfg))
    assert (await client.post("/v1/batches", data=make_batch(seq=1, n=50), headers=MSGPACK)).status == 200
    assert (await client.post("/v1/batches", data=make_batch(seq=2, n=50), headers=MSGPACK)).status == 200
    resp = await client.post("/v1/batches", data=make_batch(seq=3, n=50), headers=MSGPACK)
    assert resp.status == 429 and resp.headers["Retry-After"] == "3"
    assert len(read_log(cfg.log_dir)) == 2
    # The index job catches up (commits the durable end), and the next maintenance round lifts the limit.
    logstate.write_commit(cfg.log_dir, "job", "local:x", "/ck", logstate.read_durable(cfg.log_dir))
    ingestor = client.server.app[INGESTOR_KEY]
    while ingestor.backlog_bytes:
        await asyncio.sleep(0.02)
    assert (await client.post("/v1/batches", data=make_batch(seq=3, n=50), headers=MSGPACK)).status == 200


async def test_retried_batch_is_acknowledged_once(aiohttp_client, collector_config) -> None:
    client = await aiohttp_client(create_app(collector_config))
    body = make_batch("c9", 41)
    answers = await asyncio.gather(*(client.post("/v1/batches", data=body, headers=MSGPACK) for _ in range(3)))
    results = [await r.json() for r in answers]
    later = await (await client.post("/v1/batches", data=body, headers=MSGPACK)).json()
    assert {r["offset"] for r in [*results, later]} == {0}
    assert sorted(r["duplicate"] for r in results) == [False, True, True] and later["duplicate"]
    assert len(read_log(collector_config.log_dir)) == 1
    other = await (await client.post("/v1/batches", data=make_batch("c9", 42), headers=MSGPACK)).json()
    assert other == {"offset": 1, "events": 3, "duplicate": False}


async def test_concurrent_batches_share_one_group_commit(collector_config) -> None:
    app = create_app(collector_config)
    runner = web.AppRunner(app)
    await runner.setup()  # runs cleanup_ctx: the log and the writer task start
    try:
        ingestor = app[INGESTOR_KEY]
        payloads = [make_batch("g", seq) for seq in range(10)]
        # All ten are queued before the writer task runs, so one write + one fsync covers them.
        results = await asyncio.gather(*(ingestor.append("g", seq, p, 3) for seq, p in enumerate(payloads)))
        assert sorted(offset for offset, _ in results) == list(range(10))
        commits = ingestor.metrics.registry.get_sample_value
        assert commits("tracehook_collector_group_commit_batches_count") == 1
        assert commits("tracehook_collector_fsync_seconds_count") == 1
        assert [r.payload for r in read_log(collector_config.log_dir)] == payloads
    finally:
        await runner.cleanup()


async def test_metrics_count_events_and_client_reported_drops(aiohttp_client, collector_config) -> None:
    client = await aiohttp_client(create_app(collector_config))
    await client.post("/v1/batches", data=make_batch("a", 1, n=4, stats={"dropped_queue_full": 5}), headers=MSGPACK)
    await client.post("/v1/batches", data=make_batch("a", 2, n=6, stats={"dropped_queue_full": 7}), headers=MSGPACK)
    await client.post("/v1/batches", data=make_batch("b", 1, n=1, stats={"dropped_queue_full": 1}), headers=MSGPACK)
    assert await _metric(client, "tracehook_collector_events_total") == 11
    assert await _metric(client, "tracehook_collector_batches_total") == 3
    # Latest value per client (7 from a, 1 from b), not a sum of every report.
    assert await _metric(client, 'tracehook_client_reported{counter="dropped_queue_full"}') == 8
    assert await _metric(client, "tracehook_collector_fsync_seconds_count") >= 1
    assert await _metric(client, "tracehook_collector_segments") == 1
    health = await (await client.get("/healthz")).json()
    assert health["status"] == "ok" and health["log_bytes"] > 0
    assert set(health) == {"status", "log", "store", "backlog_bytes", "log_bytes", "segments", "disk", "index_set_aside"}
    assert health["index_set_aside"] == 0


async def test_restart_keeps_data_continues_offsets_and_remembers_batches(aiohttp_client, collector_config) -> None:
    first = await aiohttp_client(create_app(collector_config))
    assert (await first.post("/v1/batches", data=make_batch("r", 1), headers=MSGPACK)).status == 200
    await first.close()
    second = await aiohttp_client(create_app(collector_config))
    again = await (await second.post("/v1/batches", data=make_batch("r", 1), headers=MSGPACK)).json()
    assert again == {"offset": 0, "events": 3, "duplicate": True}
    new = await (await second.post("/v1/batches", data=make_batch("r", 2), headers=MSGPACK)).json()
    assert new["offset"] == 1
    assert [(r.offset, r.seq) for r in read_log(collector_config.log_dir)] == [(0, 1), (1, 2)]


async def test_segments_roll_by_age_in_the_background(aiohttp_client, collector_config) -> None:
    cfg = dataclasses.replace(collector_config, segment_age_s=0.05, maintenance_interval_s=0.05)
    client = await aiohttp_client(create_app(cfg))
    await client.post("/v1/batches", data=make_batch(), headers=MSGPACK)
    while not tracelog.sealed_segments(cfg.log_dir):
        await asyncio.sleep(0.02)
    [seg] = tracelog.sealed_segments(cfg.log_dir)
    assert seg.records == 1 and os.path.exists(seg.path)


async def test_store_is_opened_into_the_app_when_configured(aiohttp_client, tmp_path) -> None:
    cfg = CollectorConfig(data_dir=str(tmp_path / "d"))
    assert cfg.store_url == f"local:{tmp_path / 'd' / 'index.sqlite3'}"
    client = await aiohttp_client(create_app(cfg))
    assert STORE_KEY in client.server.app
    assert (await (await client.get("/healthz")).json())["store"] == "ok"


async def test_large_batches_are_validated_like_small_ones(aiohttp_client, collector_config) -> None:
    cfg = collector_config
    client = await aiohttp_client(create_app(cfg))
    big = make_batch("w", 1, n=400)
    assert len(big) > 16 * 1024
    answer = await (await client.post("/v1/batches", data=big, headers=MSGPACK)).json()
    assert answer == {"offset": 0, "events": 400, "duplicate": False}
    raw = msgpack.unpackb(make_batch("w", 2, n=400))
    raw[7][399][0] = 99  # an unknown event type in the last event
    resp = await client.post("/v1/batches", data=msgpack.packb(raw), headers=MSGPACK)
    assert resp.status == 400
    assert (await resp.json())["error"] == "bad_field"
    assert [r.payload for r in read_log(cfg.log_dir)] == [big]


async def test_background_retention_deletes_indexed_segments_only(aiohttp_client, collector_config) -> None:
    cfg = dataclasses.replace(collector_config, retention_s=0, maintenance_interval_s=0.05)
    client = await aiohttp_client(create_app(cfg))
    for seq in (1, 2):
        await client.post("/v1/batches", data=make_batch("ret", seq), headers=MSGPACK)
        await client.post("/v1/admin/roll")
    first, second = tracelog.sealed_segments(cfg.log_dir)
    # only the first is indexed
    logstate.write_commit(cfg.log_dir, "job", "local:x", "/ck", logstate.LogPosition(second.base, first.base, first.size))
    while os.path.exists(first.path):
        await asyncio.sleep(0.02)
    # Two more completed rounds: at least one started after the deletion was seen, and left the second.
    ingestor = client.server.app[INGESTOR_KEY]
    seen = ingestor.maintenance_rounds
    while ingestor.maintenance_rounds < seen + 2:
        await asyncio.sleep(0.02)
    assert tracelog.sealed_segments(cfg.log_dir) == [second]
    assert os.path.exists(second.path)


async def test_every_ingest_answer_advertises_the_event_fields(aiohttp_client, collector_config) -> None:
    # Issue 43: the library sends newer fields only to collectors that say they take them, so the
    # header is on refusals too; hostile kept records are refused naming the field, nothing written.
    from tracehook import wire

    cfg = dataclasses.replace(collector_config, ingest_token="in-tok")
    client = await aiohttp_client(create_app(cfg))
    advertised = {wire.WIRE_HEADER: f"fields={wire.FIELD_COUNT}"}
    ok = await client.post("/v1/batches", data=make_batch(), headers=_auth("in-tok"))
    assert ok.status == 200 and wire.accepted_fields(ok.headers[wire.WIRE_HEADER]) == wire.FIELD_COUNT
    for headers, status in ((MSGPACK, 401), ({"Authorization": "Bearer in-tok"}, 415)):
        resp = await client.post("/v1/batches", data=make_batch(), headers=headers)
        assert resp.status == status and resp.headers[wire.WIRE_HEADER] == advertised[wire.WIRE_HEADER]
    hostile = [dict(raw_headers=[["h", b"v"]] * (wire.MAX_RAW_HEADERS + 1)), dict(body_flags=8),
               dict(raw_headers=[["é" * 10, b"\x00" * wire.MAX_RAW_HEADERS_BYTES]]), dict(raw_key="text")]
    for fields in hostile:
        event = wire.make_event(wire.EventType.PUB, 1, "g", "t", "m", **fields)
        resp = await client.post("/v1/batches", data=wire.encode_batch(wire.BatchHeader("c", 9), [event]),
                                 headers=_auth("in-tok"))
        answer = await resp.json()
        assert resp.status == 400 and answer["error"] == "bad_field" and next(iter(fields)) in answer["detail"]
        assert resp.headers[wire.WIRE_HEADER] == advertised[wire.WIRE_HEADER]
    assert len(read_log(cfg.log_dir)) == 1  # only the valid batch
