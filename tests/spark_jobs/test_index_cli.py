"""``tracehook index`` as a real command: periodic mode picks up new segments and reports progress."""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import IO, Any

import pytest

from collector.tracelog import TraceLog, read_checkpoint, sealed_segments
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


def test_every_indexes_new_segments_until_interrupted(tmp_path: Any) -> None:
    log_dir = str(tmp_path / "log")
    _seal_segment(log_dir, "first")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracehook.cli", "index", "--log-dir", log_dir,
         "--store", f"local:{tmp_path / 'index.sqlite3'}", "--every", "0.5", "--master", "local[1]"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        assert "1 segment(s), 1 record(s), 1 event(s)" in _next_progress(proc.stdout)
        _seal_segment(log_dir, "second")
        line = _next_progress(proc.stdout)
        while "0 segment(s)" in line:
            line = _next_progress(proc.stdout)
        assert "1 segment(s), 1 record(s), 1 event(s)" in line and "(total 2 events)" in line
    finally:
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=60) == 130
    assert read_checkpoint(log_dir) == {s.base for s in sealed_segments(log_dir)}
