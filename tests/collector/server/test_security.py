"""Collector security: HTTPS, the per-client rate limit, and tokens kept out of the logs.

Ingest vs query token separation (401/403) is covered in test_ingest.py.
"""

from __future__ import annotations

import dataclasses
import os
import socket

import pytest
import requests
from collector_service_helpers import make_batch, read_log
from fixtures.collector_process import run_collector

import tracehook
from collector.server.app import create_app
from collector.server.config import load_config
from collector.server.errors import CollectorConfigError
from collector.server.tls import server_ssl_context
from tracehook import wire

MSGPACK = {"Content-Type": "application/msgpack"}
INGEST_TOKEN = "ingest-S3CRET-7f3a9c"
QUERY_TOKEN = "query-S3CRET-91bc2e"


def _logged_msg_ids(data_dir: str) -> list[str]:
    records = read_log(os.path.join(data_dir, "log"))
    return sorted(e.msg_id for r in records for e in wire.decode_batch(r.payload).events)


# -- TLS ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_https_collector_takes_the_librarys_batches_verified_with_ca_file(collector_process, tls_files) -> None:
    collector = collector_process(None, "--tls-cert", tls_files.cert, "--tls-key", tls_files.key,
                                  "--ingest-token", INGEST_TOKEN, ca_file=tls_files.ca)
    assert collector.url.startswith("https://")
    with pytest.raises(requests.ConnectionError):  # it speaks TLS only
        requests.get(collector.url.replace("https://", "http://") + "/healthz", timeout=5)
    tracer = tracehook.Tracer(tracehook.TracerConfig(app="shop", collectors=(collector.url,), token=INGEST_TOKEN,
                                                     ca_file=tls_files.ca, linger_s=0.01, flush_at_exit=False))
    try:
        sent = [tracer.record_send("orders", f"m-{i}") for i in range(300)]
        assert tracer.flush(timeout=30)
        assert tracer.stats()["sent"] == 300
    finally:
        tracer.close(timeout=10)
    assert _logged_msg_ids(collector.data_dir) == sorted(sent)
    assert "listening on https://" in collector.output()


def test_tls_cert_and_key_come_together_from_env_or_toml(tmp_path, tls_files) -> None:
    env = {"TRACEHOOK_COLLECTOR_TLS_CERT": tls_files.cert, "TRACEHOOK_COLLECTOR_TLS_KEY": tls_files.key}
    cfg = load_config(env=env)
    assert (cfg.tls_cert, cfg.tls_key) == (tls_files.cert, tls_files.key)
    assert server_ssl_context(cfg) is not None
    assert server_ssl_context(load_config(env={})) is None  # plain HTTP by default
    with pytest.raises(CollectorConfigError, match="tls_cert and tls_key"):
        load_config(env={"TRACEHOOK_COLLECTOR_TLS_CERT": tls_files.cert})
    toml = tmp_path / "collector.toml"
    toml.write_text(f'[collector]\ntls_key = "{tls_files.key}"\n')
    with pytest.raises(CollectorConfigError, match="tls_cert and tls_key"):
        load_config(env={}, config_file=str(toml))
    # Files that exist but do not belong together: the CA's certificate with the server's key.
    with pytest.raises(CollectorConfigError, match="cannot load TLS certificate"):
        server_ssl_context(load_config({"tls_cert": tls_files.ca, "tls_key": tls_files.key}, env={}))


def test_unreadable_certificate_stops_the_collector_at_start(tmp_path, tls_files) -> None:
    missing = str(tmp_path / "missing-cert.pem")
    done = run_collector(str(tmp_path / "data"), "--tls-cert", missing, "--tls-key", tls_files.key)
    assert done.returncode == 2
    assert "cannot load TLS certificate" in done.stderr and missing in done.stderr


# -- rate limit -----------------------------------------------------------------------------


async def test_rate_limit_is_429_with_retry_after_per_client_and_counted(aiohttp_client, collector_config) -> None:
    # 0.01 events/s with a 1000 s burst: 10 events, and nothing comes back during the test.
    cfg = dataclasses.replace(collector_config, rate_limit_events_s=0.01, rate_limit_burst_s=1000)
    client = await aiohttp_client(create_app(cfg))
    assert (await client.post("/v1/batches", data=make_batch("a", 1, n=10), headers=MSGPACK)).status == 200
    resp = await client.post("/v1/batches", data=make_batch("a", 2, n=1), headers=MSGPACK)
    assert resp.status == 429 and (await resp.json())["error"] == "rate_limited"
    assert int(resp.headers["Retry-After"]) >= 1
    assert (await client.post("/v1/batches", data=make_batch("b", 1, n=10), headers=MSGPACK)).status == 200
    assert [(r.client_id, r.seq) for r in read_log(cfg.log_dir)] == [("a", 1), ("b", 1)]
    metrics = await (await client.get("/metrics")).text()
    assert 'tracehook_collector_rejected_total{reason="rate_limited"} 1' in metrics


@pytest.mark.slow
def test_library_delivers_everything_through_the_rate_limit(collector_process) -> None:
    # 100 events/s per client, at most 100 at once; 400 events in batches of 50 take a few 429s.
    collector = collector_process(None, "--rate-limit-events", "100", "--rate-limit-burst", "1")
    tracer = tracehook.Tracer(tracehook.TracerConfig(app="shop", collectors=(collector.url,), batch_events=50,
                                                     linger_s=0.01, flush_at_exit=False))
    try:
        sent = [tracer.record_send("orders", f"m-{i}") for i in range(400)]
        assert tracer.flush(timeout=60)
        stats = tracer.stats()
    finally:
        tracer.close(timeout=10)
    assert stats["sent"] == 400 and stats["dropped_total"] == 0
    assert stats["retried"] >= 1
    assert _logged_msg_ids(collector.data_dir) == sorted(sent)
    metrics = requests.get(collector.url + "/metrics", timeout=5).text
    assert f'tracehook_collector_rejected_total{{reason="rate_limited"}} {stats["retried"]}' in metrics


# -- tokens stay out of the logs ------------------------------------------------------------


def _raw_request(url: str, raw: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(raw)
        return sock.recv(65536)


@pytest.mark.slow
def test_tokens_never_appear_in_the_collectors_output(collector_process) -> None:
    collector = collector_process(None, "--log-level", "DEBUG", env={
        "TRACEHOOK_COLLECTOR_INGEST_TOKEN": INGEST_TOKEN, "TRACEHOOK_COLLECTOR_QUERY_TOKEN": QUERY_TOKEN,
    })

    def post(token: str) -> int:
        return requests.post(collector.url + "/v1/batches", data=make_batch(), timeout=5,
                             headers={**MSGPACK, "Authorization": f"Bearer {token}"}).status_code

    def query(token: str) -> int:
        return requests.get(collector.url + "/v1/messages/m-1", timeout=5,
                            headers={"Authorization": f"Bearer {token}"}).status_code

    assert post(INGEST_TOKEN) == 200
    assert post(QUERY_TOKEN) == 403 and query(INGEST_TOKEN) == 403
    assert post(INGEST_TOKEN + "x") == 401 and query("wrong") == 401
    assert query(QUERY_TOKEN) == 503  # allowed, but this collector has no index store
    # A malformed header: aiohttp logs the parser error, which quotes the whole header line.
    answer = _raw_request(collector.url, b"POST /v1/batches HTTP/1.1\r\nHost: x\r\n"
                          b"Authorization: Bearer " + INGEST_TOKEN.encode() + b"\x01\r\n\r\n")
    assert answer.startswith(b"HTTP/1.") and b" 400 " in answer.split(b"\r\n")[0]
    assert collector.stop() == 0
    output = collector.output()
    assert "Error handling request" in output and "[redacted]" in output  # the leaky path was taken
    assert INGEST_TOKEN not in output and QUERY_TOKEN not in output
    # Not even the secret part alone (e.g. cut differently or escaped).
    assert "S3CRET-7f3a9c" not in output and "S3CRET-91bc2e" not in output
