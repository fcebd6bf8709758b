"""What a trace log holds that the index does not have yet, and what to run about it.

A lookup that finds nothing may simply be early: the collector keeps new batches in
the active segment until it seals (``segment_age_s``, 60 s by default), and only
``tracehook index`` puts sealed segments into the store.  :func:`pending` counts
both kinds of unindexed records from the log directory alone (no collector needed)::

    p = pending("/data/tracehook/log")
    if p.records:
        print(not_found_hint(p, "local:/data/tracehook/index.sqlite3"))
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from collector.logformat import SEGMENT_SUFFIX, read_checkpoint, scan_segment, sealed_segments
from collector.tracelog import DEFAULT_SEGMENT_AGE_S, TraceLog


@dataclass(frozen=True)
class Pending:
    """Unindexed records (batches) of one trace log."""

    log_dir: str
    sealed_records: int  # in sealed segments the index job has not checkpointed
    active_records: int  # in the active segment, which the collector has not sealed yet
    seals_in_s: float | None  # about when the active segment seals (None: nothing active)

    @property
    def records(self) -> int:
        return self.sealed_records + self.active_records


def pending(log_dir: str, segment_age_s: float = DEFAULT_SEGMENT_AGE_S, *, now_ms: int | None = None) -> Pending:
    """Count the records of ``log_dir`` not indexed yet (zeros when there is no log there)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    done = read_checkpoint(log_dir) if os.path.isdir(log_dir) else set()
    sealed = sealed_segments(log_dir) if os.path.isdir(log_dir) else []
    sealed_records = sum(s.records for s in sealed if s.base not in done)
    listed = {os.path.basename(s.path) for s in sealed}
    active_records, first_ms = 0, 0
    names = os.listdir(log_dir) if os.path.isdir(log_dir) else []
    for name in names:
        if name.endswith(SEGMENT_SUFFIX) and name not in listed:
            try:
                records = scan_segment(os.path.join(log_dir, name)).records
            except OSError:  # sealed and deleted by retention between listdir and the read
                continue
            active_records += len(records)
            if records:
                first_ms = min(first_ms or records[0].receive_ms, records[0].receive_ms)
    seals_in = max(0.0, (first_ms + segment_age_s * 1000 - now_ms) / 1000) if active_records else None
    return Pending(log_dir, sealed_records, active_records, seals_in)


def pending_in(tracelog: TraceLog, segment_age_s: float, *, now_ms: int | None = None) -> Pending:
    """:func:`pending` from a running collector's :class:`TraceLog` (its counters, no file reads)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    done = read_checkpoint(tracelog.log_dir)
    sealed_records = sum(s.records for s in tracelog.sealed() if s.base not in done)
    active, first_ms = tracelog.active_records, tracelog.active_first_ms
    seals_in = max(0.0, (first_ms + segment_age_s * 1000 - now_ms) / 1000) if active else None
    return Pending(tracelog.log_dir, sealed_records, active, seals_in)


def index_command(log_dir: str, store_url: str) -> str:
    """The ``tracehook index`` command line for this log and store."""
    return f"tracehook index --log-dir {log_dir} --store {store_url}"


def describe(p: Pending) -> str:
    """'12 record(s) not indexed yet: ...' (one sentence, no command)."""
    parts = []
    if p.sealed_records:
        parts.append(f"{p.sealed_records} in sealed segment(s) waiting for the index job")
    if p.active_records:
        parts.append(f"{p.active_records} in the active segment, which the collector seals in about "
                     f"{p.seals_in_s:.0f} s")
    return f"the trace log {p.log_dir} holds {p.records} record(s) (batches) not indexed yet: " + "; ".join(parts)


def not_found_hint(p: Pending, store_url: str) -> str:
    """Why a lookup may have found nothing yet, and the command that indexes what is pending ('' if nothing)."""
    if not p.records:
        return ""
    when = "now" if not p.active_records else "once the segment is sealed"
    return f"{describe(p)}; index them {when} with: {index_command(p.log_dir, store_url)}"
