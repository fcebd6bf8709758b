"""systemd's readiness protocol: the collector says READY=1 only once it answers, STOPPING=1 on SIGTERM.

The test plays systemd: it listens on a Unix datagram socket and starts a real collector
with ``NOTIFY_SOCKET`` pointing at it (a path, and an abstract ``@name``).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from collector.server.notify import READY, notify

WAIT_S = 120  # a bound for a loaded machine, not a speed assertion


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(params=["path", "abstract"])
def notify_socket(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[tuple[socket.socket, str]]:
    """(a bound datagram socket, the NOTIFY_SOCKET value naming it)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    if request.param == "path":
        path = str(tmp_path / "notify.sock")
        sock.bind(path)
        name = path
    else:
        name = f"@tracehook-test-{uuid.uuid4().hex}"
        sock.bind("\0" + name[1:])
    try:
        yield sock, name
    finally:
        sock.close()


def _receive(sock: socket.socket, timeout: float = WAIT_S) -> str:
    sock.settimeout(timeout)
    return sock.recv(4096).decode()


def test_notify_sends_to_the_named_socket(notify_socket: tuple[socket.socket, str]) -> None:
    sock, name = notify_socket
    assert notify(READY, {"NOTIFY_SOCKET": name})
    assert _receive(sock, 5) == "READY=1"


def test_notify_without_a_socket_sends_nothing_and_a_dead_socket_does_not_raise(tmp_path: Any) -> None:
    assert not notify(READY, {})
    assert not notify(READY, {"NOTIFY_SOCKET": str(tmp_path / "nobody-listens.sock")})


def test_collector_is_ready_only_when_it_answers_and_says_stopping_on_sigterm(
        notify_socket: tuple[socket.socket, str], tmp_path: Any) -> None:
    sock, name = notify_socket
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector", "--data-dir", str(tmp_path / "data"), "--port", str(port),
         "--log-format", "json"],
        env={**os.environ, "NOTIFY_SOCKET": name}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        message = _receive(sock)
        # The moment systemd hears READY=1, the collector must answer (its log recovered, listening).
        health = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=5)
        assert (message, health.status_code, health.json()["status"]) == ("READY=1", 200, "ok")
        proc.send_signal(signal.SIGTERM)
        assert _receive(sock) == "STOPPING=1"
        assert proc.wait(timeout=WAIT_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.stderr is not None
    lines = [line for line in proc.stderr.read().splitlines() if line.strip()]
    docs = [json.loads(line) for line in lines]  # --log-format json: every line one JSON object
    assert any(d["message"].startswith(f"listening on http://127.0.0.1:{port}") and d["level"] == "info"
               for d in docs), lines
    assert all({"time", "level", "logger", "message"} <= set(d) for d in docs)


def test_nothing_is_sent_before_the_log_is_open(notify_socket: tuple[socket.socket, str], tmp_path: Any) -> None:
    """A collector that cannot open its data dir never says READY=1 (systemd sees it fail instead)."""
    sock, name = notify_socket
    blocker = tmp_path / "data"
    blocker.write_text("a file where the data dir should be")
    done = subprocess.run([sys.executable, "-m", "collector", "--data-dir", str(blocker), "--port", str(_free_port())],
                          env={**os.environ, "NOTIFY_SOCKET": name}, capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 1, done.stderr
    sock.setblocking(False)
    with pytest.raises(BlockingIOError):
        sock.recv(4096)
