"""The collector as a real process: kill -9 during writes, SIGTERM drain, CLI/env/TOML config."""

from __future__ import annotations

import os
import pathlib
import re
import signal
import socket
import threading
import time
import urllib.parse

import pytest
import requests
from collector_service_helpers import make_batch, read_log

from tracehook import wire

MSGPACK = {"Content-Type": "application/msgpack"}


class Posters:
    """Threads that post 1,000-event batches in a loop and remember which were acknowledged."""

    def __init__(self, url: str, clients: int = 4, events: int = 1000) -> None:
        self.url = url + "/v1/batches"
        self.acked: set[tuple[str, int]] = set()
        self.lock = threading.Lock()
        self.first_acks = threading.Event()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._post, args=(f"poster-{i}", events)) for i in range(clients)]
        for t in self.threads:
            t.start()

    def _post(self, client_id: str, events: int) -> None:
        session = requests.Session()
        seq = 0
        while not self.stop.is_set():
            seq += 1
            try:
                resp = session.post(self.url, data=make_batch(client_id, seq, n=events), headers=MSGPACK, timeout=10)
            except requests.RequestException:
                return  # the collector is gone
            if resp.status_code == 200:
                with self.lock:
                    self.acked.add((client_id, seq))
                    if len(self.acked) >= 40:
                        self.first_acks.set()

    def join(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


def _check_log(log_dir: str, acked: set[tuple[str, int]]) -> None:
    records = read_log(log_dir)
    stored = [(r.client_id, r.seq) for r in records]
    assert acked <= set(stored), f"acknowledged but lost: {sorted(acked - set(stored))[:5]}"
    assert len(stored) == len(set(stored)), "a batch was stored twice"
    offsets = [r.offset for r in records]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    for r in records:
        assert len(wire.decode_batch(r.payload).events) == 1000


@pytest.mark.slow
def test_kill_9_during_writes_loses_no_acknowledged_batch(collector_process) -> None:
    collector = collector_process()
    posters = Posters(collector.url)
    assert posters.first_acks.wait(timeout=60), collector.output()
    collector.proc.send_signal(signal.SIGKILL)  # mid-stream: requests are in flight
    collector.proc.wait(timeout=30)
    posters.join()
    acked = set(posters.acked)

    restarted = collector_process(collector.data_dir)  # recovery cuts any torn tail
    resp = requests.post(restarted.url + "/v1/batches", data=make_batch("after", 1, n=1000), headers=MSGPACK)
    assert resp.status_code == 200
    assert restarted.stop() == 0
    _check_log(os.path.join(collector.data_dir, "log"), acked | {("after", 1)})


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_graceful_stop_drains_in_flight_batches_and_exits_cleanly(collector_process, how: str) -> None:
    collector = collector_process(None)
    posters = Posters(collector.url)
    assert posters.first_acks.wait(timeout=60), collector.output()
    if how == "sigterm":
        collector.proc.send_signal(signal.SIGTERM)
    else:  # a terminal's Ctrl-C: SIGINT to the whole process group
        os.killpg(collector.proc.pid, signal.SIGINT)
    assert collector.proc.wait(timeout=30) == 0, collector.output()
    assert "Traceback" not in collector.output(), collector.output()
    posters.join()
    _check_log(os.path.join(collector.data_dir, "log"), set(posters.acked))
    # A graceful stop leaves nothing for recovery to cut.
    again = collector_process(collector.data_dir)
    assert again.stop(signal.SIGINT) == 0
    assert "truncating" not in again.output()


def _in_progress(url: str) -> int:
    """The collector's requests in progress, not counting this scrape."""
    text = requests.get(url + "/metrics", timeout=10).text
    return int(float(re.search(r"^tracehook_collector_requests_in_progress (\S+)$", text, re.M).group(1))) - 1


class HalfSentBatch:
    """A batch whose headers and first half of the body are sent, its handler reading the rest."""

    def __init__(self, collector_url: str, client_id: str) -> None:
        address = urllib.parse.urlsplit(collector_url)
        self.url, self.client_id = collector_url, client_id
        self.body = make_batch(client_id, 1, n=1000)
        head = (f"POST /v1/batches HTTP/1.1\r\nHost: {address.netloc}\r\nContent-Type: application/msgpack\r\n"
                f"Content-Length: {len(self.body)}\r\n\r\n").encode()
        self.sock = socket.create_connection((address.hostname, address.port), timeout=60)
        self.sock.sendall(head + self.body[: len(self.body) // 2])
        deadline = time.monotonic() + 30
        while _in_progress(collector_url) < 1:
            assert time.monotonic() < deadline, "the half-sent batch's handler never started"
            time.sleep(0.05)

    def wait_for_refusal(self) -> None:
        """Until a new batch gets 503 shutting_down with Connection: close (the stop has begun)."""
        deadline = time.monotonic() + 30
        while True:
            answer = requests.post(self.url + "/v1/batches", data=make_batch("late", 1, n=10), headers=MSGPACK,
                                   timeout=10)
            if answer.status_code == 503:
                assert answer.json()["error"] == "shutting_down" and answer.headers["Connection"] == "close"
                return
            assert answer.status_code == 200 and time.monotonic() < deadline, (answer.status_code, answer.text)
            time.sleep(0.05)

    def finish(self) -> bytes:
        """Send the rest of the body; the answer's status line (empty if the connection was dropped)."""
        self.sock.sendall(self.body[len(self.body) // 2:])
        return self.sock.makefile("rb").readline()


@pytest.mark.slow
def test_a_batch_still_arriving_when_the_stop_begins_is_acknowledged_and_kept(collector_process) -> None:
    """A stop waits for a batch whose body is half sent (aiohttp alone would drop the rest of the body:
    the client got a broken connection after shutdown_timeout_s), and a new batch meanwhile gets 503."""
    collector = collector_process(None)
    slow = HalfSentBatch(collector.url, "slow-client")
    collector.proc.send_signal(signal.SIGTERM)
    slow.wait_for_refusal()
    status_line = slow.finish()
    assert status_line.startswith(b"HTTP/1.1 200"), status_line
    assert collector.proc.wait(timeout=30) == 0, collector.output()
    assert ("slow-client", 1) in {(r.client_id, r.seq) for r in read_log(os.path.join(collector.data_dir, "log"))}


@pytest.mark.slow
def test_a_second_signal_stops_waiting_for_a_stalled_upload(collector_process) -> None:
    """With a 10-minute shutdown_timeout_s, a client that stalls mid-body would hold the stop that long;
    a second SIGTERM ends the wait, and the stop still commits, syncs and exits 0."""
    collector = collector_process(None, env={"TRACEHOOK_COLLECTOR_SHUTDOWN_TIMEOUT_S": "600"})
    stalled = HalfSentBatch(collector.url, "stalled-client")
    collector.proc.send_signal(signal.SIGTERM)
    stalled.wait_for_refusal()
    collector.proc.send_signal(signal.SIGTERM)
    assert collector.proc.wait(timeout=60) == 0, collector.output()
    stalled.sock.close()
    again = collector_process(collector.data_dir)  # a clean stop: nothing for recovery to cut
    assert again.stop(signal.SIGINT) == 0
    assert "truncating" not in again.output()


def test_cli_reads_tokens_from_env_and_settings_from_toml(collector_process, tmp_path: pathlib.Path) -> None:
    toml = tmp_path / "collector.toml"
    toml.write_text('[collector]\nmax_body_bytes = 2000\nquery_token = "from-toml"\n')
    collector = collector_process(None, "--config", str(toml),
                                  env={"TRACEHOOK_COLLECTOR_INGEST_TOKEN": "from-env"})
    url = collector.url + "/v1/batches"
    small, big = make_batch(n=2), make_batch(n=100)
    assert requests.post(url, data=small, headers=MSGPACK).status_code == 401
    auth = {**MSGPACK, "Authorization": "Bearer from-env"}
    assert requests.post(url, data=small, headers={**MSGPACK, "Authorization": "Bearer from-toml"}).status_code == 403
    assert requests.post(url, data=small, headers=auth).status_code == 200
    assert requests.post(url, data=big, headers=auth).status_code == 413
    assert collector.stop() == 0
