"""Helpers for the collector tests: batches and reading the whole log (collector subprocesses:
tests/fixtures/collector_process.py)."""

from __future__ import annotations

import os

from collector.log import file as tracelog
from tracehook import wire


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
