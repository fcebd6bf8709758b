"""Collectors with ``--log kafka://``, index runs with ``--source kafka://``, and whole-store dumps to compare."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from typing import Any

import requests
from fixtures.collector_process import CollectorProcess

from collector.store import open_store
from collector.store.schema import TABLES
from tracehook import wire

ROOT = pathlib.Path(__file__).resolve().parents[2]
STOP_KEY = b"\xff" * 64


def start_collector(data_dir: pathlib.Path, log_url: str = "file", port: int | None = None) -> tuple[Any, str]:
    """A real ``tracehook collector`` process (ingest only, ``os`` durability); returns (process, URL)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    collector = CollectorProcess(str(data_dir), port=port,
                                 env={"TRACEHOOK_COLLECTOR_LOG": log_url, "TRACEHOOK_COLLECTOR_DURABILITY": "os"})
    return collector.proc, collector.url


def index_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "collector.cli.main", "index", "--master", "local[2]", *args]


def index_env(tmp_path: pathlib.Path) -> dict[str, str]:
    """The index job's environment: Kafka checkpoints under the test's directory."""
    return {**os.environ, "TRACEHOOK_INDEX_CHECKPOINTS": str(tmp_path / "checkpoints")}


def run_index(tmp_path: pathlib.Path, *args: str) -> str:
    """Run ``tracehook index ARGS`` to completion; returns its stdout (fails the test on a non-zero exit)."""
    done = subprocess.run(index_command(*args), cwd=ROOT, env=index_env(tmp_path), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def dump(store_url: str) -> dict[str, set[tuple[bytes, bytes, bytes]]]:
    """Every cell of every index table, without write times: two stores that index the same events are equal."""
    store = open_store(store_url, create_tables=False)
    try:
        return {t.name: {(row, col, value) for row, columns in store.scan(t.name, b"", STOP_KEY)
                         for col, value in columns.items()} for t in TABLES}
    finally:
        store.close()


def traffic_batch(client_id: str, seq: int, first: int, n: int, base_ms: int) -> bytes:
    """A batch with a send, a receive and a handled consume per message (message, key, time, queue
    and consume-record rows all get written)."""
    events = []
    for i in range(first, first + n):
        msg_id = f"m-{i:05d}"
        t = base_ms + i
        events.append(wire.make_event(wire.EventType.PUB, t, "pg", "orders", msg_id, keys=f"k{i % 7}",
                                      queue=i % 3, offset=i, store_ms=t + 1))
        events.append(wire.make_event(wire.EventType.SUB_BEFORE, t + 5, "billing", "orders", msg_id,
                                      queue=i % 3, offset=i, request_id=f"r{i}"))
        events.append(wire.make_event(wire.EventType.SUB_AFTER, t + 9, "billing", "orders", msg_id,
                                      queue=i % 3, offset=i, cost_us=4000, request_id=f"r{i}",
                                      status=int(wire.Status.FAILED if i % 5 == 0 else wire.Status.OK)))
    return wire.encode_batch(wire.BatchHeader(client_id, seq, "shop", "host-a", 0, {}), events)


def post(url: str, body: bytes) -> requests.Response:
    return requests.post(url + "/v1/batches", data=body, headers={"Content-Type": "application/msgpack"}, timeout=10)
