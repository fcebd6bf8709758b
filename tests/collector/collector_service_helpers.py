"""Helpers for the collector tests: batches, reading the whole log, a real collector subprocess."""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

import requests

from collector.log import file as tracelog
from tracehook import wire

ROOT = pathlib.Path(__file__).resolve().parents[2]


def make_batch(client_id: str = "client-1", seq: int = 1, n: int = 3, stats: dict[str, int] | None = None) -> bytes:
    """A valid batch of ``n`` PUB events."""
    events = [
        wire.make_event(wire.EventType.PUB, 1_700_000_000_000 + i, "pg", "orders", f"{client_id}-{seq}-{i}",
                        keys=f"k{i}", queue=i % 4, offset=i, store_ms=1_700_000_000_001 + i)
        for i in range(n)
    ]
    return wire.encode_batch(wire.BatchHeader(client_id, seq, "shop", "host-a", 0, stats or {}), events)


def read_log(log_dir: str) -> list[tracelog.LogRecord]:
    """Every good record in the log, sealed segments and the active one (tests only)."""
    records: list[tracelog.LogRecord] = []
    for name in sorted(n for n in os.listdir(log_dir) if n.endswith(tracelog.SEGMENT_SUFFIX)):
        records.extend(tracelog.scan_segment(os.path.join(log_dir, name)).records)
    return records


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CollectorProcess:
    """``python -m collector`` in a real subprocess (for restart, SIGTERM and kill -9 tests).

    With ``ca_file`` the collector is expected to serve HTTPS (pass ``--tls-cert``/``--tls-key``
    in ``extra`` or the env): ``url`` is https and readiness is checked against that CA.
    """

    def __init__(self, data_dir: str, *extra: str, env: dict[str, str] | None = None,
                 ca_file: str | None = None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.ca_file = ca_file
        self.url = f"{'https' if ca_file else 'http'}://127.0.0.1:{self.port}"
        self.log_path = os.path.join(os.path.dirname(data_dir), f"collector-{self.port}.out")
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "collector", "--data-dir", data_dir, "--port", str(self.port),
                 "--store", "none", *extra],
                cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                start_new_session=True,  # its own process group: a test can "press Ctrl-C" on it alone
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"collector exited early:\n{self.output()}")
            try:
                if requests.get(self.url + "/healthz", timeout=1, verify=self.ca_file or True).status_code == 200:
                    return
            except requests.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError(f"collector not ready:\n{self.output()}")

    def output(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=30)
