"""The library over HTTPS: certificates verified (system CAs or ca_file), failures counted, never raised."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from stub_collector import StubCollector

import tracehook
from tracehook import wire
from tracehook.errors import DeliveryError
from tracehook.transport import CollectorConnection


@contextlib.contextmanager
def _serve(context: Any) -> Iterator[StubCollector]:
    server = StubCollector(ssl_context=context)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def tls_stub(tls_files: Any) -> Iterator[StubCollector]:
    """The stub collector over HTTPS with a certificate for 127.0.0.1 from the test CA."""
    with _serve(tls_files.server_context()) as server:
        yield server


def _batch() -> bytes:
    event = wire.make_event(wire.EventType.PUB, 1_700_000_000_000, "pg", "orders", "m-1")
    return wire.encode_batch(wire.BatchHeader("c1", 1, "shop", "host-a", 0, {}), [event])


def test_ca_file_delivers_every_event_over_tls(tls_stub, tls_files, make_tracer, accounted) -> None:
    tracer = make_tracer(tls_stub.url, ca_file=tls_files.ca)
    sent = [tracer.record_send("orders", f"m-{i}") for i in range(200)]
    assert tracer.flush(timeout=10)
    stats = accounted(tracer.stats())
    assert stats["sent"] == 200 and stats["dropped_total"] == 0
    assert sorted(e.msg_id for e in tls_stub.events()) == sorted(sent)


def test_tls_connection_is_kept_alive_with_tcp_nodelay(tls_stub, tls_files) -> None:
    conn = CollectorConnection(tls_stub.url, 5.0, tls_files.ca)
    try:
        assert conn.post(_batch(), {"Content-Type": "application/msgpack"})[0] == 200
        sock = conn.conn.sock  # type: ignore[union-attr]
        assert sock.version() is not None  # a TLS socket, not plain TCP
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        assert conn.post(_batch(), {"Content-Type": "application/msgpack"})[0] == 200
        assert conn.conn.sock is sock  # type: ignore[union-attr]  # the same connection, no new handshake
    finally:
        conn.close()


def test_without_the_ca_batches_are_dropped_as_send_error_not_raised(tls_stub, make_tracer, accounted) -> None:
    # No ca_file: the system CAs do not know the test CA, so every handshake fails.
    tracer = make_tracer(tls_stub.url, max_retries=1)
    for i in range(30):
        tracer.record_send("orders", f"m-{i}")  # must not raise
    assert tracer.flush(timeout=10)
    stats = accounted(tracer.stats())
    assert stats["sent"] == 0
    assert stats["dropped"]["send_error"] == 30
    assert tls_stub.requests == 0  # nothing was sent to an unverified server


def test_host_name_is_verified_not_only_the_chain(tls_files) -> None:
    # A certificate from the trusted CA, but for another host name than the URL's.
    with _serve(tls_files.server_context("collector.example")) as server:
        conn = CollectorConnection(server.url, 5.0, tls_files.ca)
        with pytest.raises(DeliveryError, match="CERTIFICATE_VERIFY_FAILED|match"):
            conn.post(_batch(), {"Content-Type": "application/msgpack"})
        assert server.requests == 0


def test_ca_file_from_the_environment_and_bad_values(tls_files, tmp_path) -> None:
    env = {"TRACEHOOK_COLLECTORS": "https://127.0.0.1:7070", "TRACEHOOK_CA_FILE": tls_files.ca}
    assert tracehook.TracerConfig.from_env(env).ca_file == tls_files.ca
    not_pem = tmp_path / "not-a-ca.pem"
    not_pem.write_text("not a certificate\n")
    # A bad environment value is logged and the system CAs used; a bad argument raises.
    assert tracehook.TracerConfig.from_env({**env, "TRACEHOOK_CA_FILE": str(not_pem)}).ca_file is None
    with pytest.raises(tracehook.ConfigError, match="ca_file"):
        tracehook.TracerConfig(collectors=("https://127.0.0.1:7070",), ca_file=str(tmp_path / "missing.pem"))
    with pytest.raises(tracehook.ConfigError, match="ca_file"):
        tracehook.TracerConfig(ca_file=str(not_pem))
