"""``tracehook index`` as a real command: periodic mode picks up new segments and reports progress."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import IO, Any

import pytest

from collector.log.file import TraceLog
from collector.log.state import committed_offset, readable_end
from tracehook.wire import BatchHeader, EventType, encode_batch, make_event

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _seal_segment(log_dir: str, msg_id: str) -> None:
    header = BatchHeader("cli-client", 1, "shop", "host", 1, {})
    log = TraceLog.open(log_dir, durability="os")
    try:
        log.append([(1, "cli-client", 1, encode_batch(header, [make_event(EventType.PUB, 1, "", "t", msg_id)]))])
        log.roll()
    finally:
        log.close()


def _next_progress(out: IO[str]) -> str:
    for line in out:  # Spark's own log lines go to stderr
        if " index: " in line:
            return line
    raise AssertionError("the command exited without a progress line")


def _expired_cells(db: str) -> int:
    import sqlite3

    con = sqlite3.connect(db)
    try:
        return con.execute("select count(*) from messages where row = ?", (b"expired",)).fetchone()[0]
    finally:
        con.close()


def test_every_indexes_the_active_segment_then_new_ones_until_interrupted_quietly(tmp_path: Any) -> None:
    """Periodic mode: its first run reads up to the durable end, the active segment included (nothing is
    sealed yet), and purges expired cells; the next runs pick up what comes later; Ctrl-C ends it with 130.
    Spark, bound to 127.0.0.1 in local mode, prints no 'hostname resolves to a loopback address' warning.
    (A one-shot run is the same index_stream call without the loop: test_migrate and test_salt_buckets run
    ``tracehook index`` one-shot as a command.)"""
    from collector.store import open_store
    from collector.store.local import LocalStore
    from collector.store.reader import TraceQuery

    log_dir, db = str(tmp_path / "log"), str(tmp_path / "index.sqlite3")
    log = TraceLog.open(log_dir, durability="os")
    header = BatchHeader("cli-client", 1, "shop", "host", 1, {})
    log.append([(1, "cli-client", 1, encode_batch(header, [make_event(EventType.PUB, 1, "", "t", "first")]))])
    log.close()  # stays active: not in the manifest
    old = LocalStore(db, clock=lambda: 0)  # written in 1970: long past the 30-day TTL
    old.put_rows("messages", [(b"expired", {b"s:x": b"v"})])
    old.close()
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    with open(tmp_path / "stderr", "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "collector.cli.main", "index", "--log-dir", log_dir,
             "--store", f"local:{db}", "--every", "0.5", "--master", "local[1]"],
            stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    try:
        assert proc.stdout is not None
        first = _next_progress(proc.stdout)
        # Periodic mode purges the local store after its first run (then every --purge-every s).
        assert "1 segment(s), 1 record(s), 1 event(s)" in first and "purged 1 expired cell(s)" in first
        assert _expired_cells(db) == 0
        _seal_segment(log_dir, "second")
        line = _next_progress(proc.stdout)
        while "0 segment(s)" in line:
            line = _next_progress(proc.stdout)
        assert "1 segment(s), 1 record(s), 1 event(s)" in line and "(total 2 events)" in line
        assert "purged" not in line  # not again before --purge-every (1 h) has passed
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    assert committed_offset(log_dir) == readable_end(log_dir).offset
    stderr = (tmp_path / "stderr").read_text()
    assert "loopback address" not in stderr and "SPARK_LOCAL_IP" not in stderr, stderr
    store = open_store(f"local:{db}")
    try:
        assert all(TraceQuery(store).get_trace(m) is not None for m in ("first", "second"))
    finally:
        store.close()
