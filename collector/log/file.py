"""The trace log: append-only, CRC-framed segments that keep batches safe until they are indexed.

Layout of a log directory::

    00000000000000000000.log   sealed segment (listed in manifest.json, never changes again)
    00000000000000004096.log   the active segment (only the collector touches it)
    manifest.json              sealed segments, written atomically
    log-id                     the log's identity (index checkpoints belong to one log)
    durable                    the durable end: readers of the active segment stop there
    index-commits/<key>.json   what each index checkpoint has committed (retention reads these)

Each record is one batch exactly as received, framed as (big-endian)::

    u32 length        bytes after this 8-byte prefix (header + payload)
    u32 crc32c        over header + payload
    u64 offset        record number, unique and increasing across the log
    u64 receive_ms    when the collector received the batch
    u64 seq           the batch's sequence number from its client
    u16 n + n bytes   the client id, utf-8
    payload           the batch bytes

Reading sealed segments::

    from collector.log import file as tracelog
    for seg in tracelog.sealed_segments(log_dir):
        for rec in tracelog.read_segment(seg.path):
            ...  # rec.payload is a tracehook.wire batch

The index job reads the active segment too, up to the durable end
(:mod:`collector.log.state`, :mod:`spark_jobs.datasource`).

The writer is :class:`TraceLog`; opening one recovers the active segment by truncating
a torn tail at the first bad frame.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from collector.log.errors import CorruptSegmentError, DiskFull, StorageError
from collector.log.format import (
    CHECKPOINT,
    MANIFEST,
    MAX_RECORD_BYTES,
    SEGMENT_SUFFIX,
    LogRecord,
    SegmentInfo,
    SegmentScan,
    _fsync_dir,
    _load_manifest,
    _write_manifest,
    encode_record,
    read_segment,
    scan_segment,
    sealed_segments,
    segment_name,
)
from collector.log.state import DurableWriter, LogPosition, committed_offset, ensure_log_id, read_commits

__all__ = [
    "LogRecord", "SegmentInfo", "CorruptSegmentError", "TraceLog", "RecoveryReport", "SegmentScan",
    "sealed_segments", "read_segment", "scan_segment",
    "encode_record", "segment_name", "MANIFEST", "CHECKPOINT", "SEGMENT_SUFFIX", "MAX_RECORD_BYTES",
]

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_BYTES = 128 * 1024 * 1024
DEFAULT_SEGMENT_AGE_S = 60.0
DURABILITY_MODES = ("fsync", "os")
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def _storage_error(what: str, exc: OSError) -> StorageError:
    """The named error for a failed write: :class:`DiskFull` (503, retried by clients) when
    the disk or quota is full, else a plain :class:`StorageError` (500)."""
    kind = DiskFull if exc.errno in _NO_SPACE else StorageError
    return kind(f"{what} failed: {exc}")


@dataclass(frozen=True)
class RecoveryReport:
    """What opening the log found: the active segment and any bytes cut from a torn tail."""

    active_base: int
    active_records: int
    cut_bytes: int
    cut_reason: str | None
    orphans_removed: int


class TraceLog:
    """The writer side: one instance per log directory, in one process.

    ``append`` is thread-safe (the collector calls it from a single writer thread);
    :meth:`open` recovers the active segment first.
    """

    def __init__(
        self,
        log_dir: str,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        segment_age_s: float = DEFAULT_SEGMENT_AGE_S,
        durability: str = "fsync",
    ) -> None:
        if durability not in DURABILITY_MODES:
            raise ValueError(f"durability must be one of {DURABILITY_MODES}, not {durability!r}")
        if segment_bytes <= 0:
            raise ValueError("segment_bytes must be positive")
        self.log_dir = log_dir
        self.segment_bytes = segment_bytes
        self.segment_age_s = segment_age_s
        self.durability = durability
        self._lock = threading.RLock()
        self._fd = -1
        self._closed = True  # until _recover; close() sets it again. _fd < 0 alone may be a failed roll.
        self._torn = False  # a failed write's bytes are still at the end of the active segment
        self._pending: DiskFull | None = None  # why recovery waits for space (see open)
        self._sealed: list[SegmentInfo] = []
        self._sealed_end = 0
        self.active_base = 0
        self.active_size = 0
        self.active_records = 0
        self.active_first_ms = 0
        self.next_offset = 0
        self.recovery: RecoveryReport | None = None
        self.last_sync_s = 0.0
        """How long the latest append's fdatasync took (for the fsync latency metric)."""
        self.recovered_batches: list[tuple[str, int, int]] = []
        """(client_id, seq, offset) of the records found in the active segment at open (dedup seed)."""
        self.log_id = ""
        self._durable: DurableWriter | None = None

    @classmethod
    def open(cls, log_dir: str, *, defer_if_full: bool = False, **options: object) -> TraceLog:
        """Open (creating if needed) and recover the log in ``log_dir``.

        Recovery may need space (the directory, a new segment, a seal). On a full disk it
        raises :class:`DiskFull`; with ``defer_if_full`` it returns a log whose recovery
        is pending instead: appends raise :class:`DiskFull` until :meth:`retry_recovery`
        succeeds (the collector starts degraded and resumes once space returns)."""
        tl = cls(log_dir, **options)  # type: ignore[arg-type]
        try:
            tl._recover()
        except DiskFull as exc:
            if not defer_if_full:
                raise
            tl._defer_recovery(exc)
        return tl

    # -- recovery -------------------------------------------------------------------------

    @property
    def recovery_pending(self) -> bool:
        """True while a full disk keeps the log from being recovered (nothing can be appended)."""
        return self._pending is not None

    def retry_recovery(self) -> list[tuple[str, int, int]]:
        """Run the recovery a full disk deferred; return the recovered (client_id, seq,
        offset) batches (the dedup seed), or [] when nothing was pending. Raises
        :class:`DiskFull` while the disk is still full."""
        with self._lock:
            if self._pending is None:
                return []
            try:
                self._recover()
            except DiskFull as exc:
                self._defer_recovery(exc)
                raise
            self._pending = None
            log.info("recovered the trace log in %s: space is back", self.log_dir)
            return list(self.recovered_batches)

    def _defer_recovery(self, exc: DiskFull) -> None:
        log.warning("cannot recover the trace log yet (%s); ingest is refused until space returns", exc)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._closed = True
        self._pending = exc

    def _recover(self) -> None:
        try:
            self._recover_or_raise()
        except OSError as exc:
            if exc.errno in _NO_SPACE:
                raise _storage_error(f"recovering the trace log in {self.log_dir}", exc) from exc
            raise

    def _recover_or_raise(self) -> None:
        # Safe to run again after a failure: every step leaves the directory consistent.
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        os.makedirs(self.log_dir, exist_ok=True)
        self.log_id = ensure_log_id(self.log_dir)
        self._durable = DurableWriter(self.log_dir)
        self._sealed, sealed_end = _load_manifest(self.log_dir)
        self._sealed_end = sealed_end
        listed = {os.path.basename(s.path) for s in self._sealed}
        unsealed = sorted(
            int(name[: -len(SEGMENT_SUFFIX)])
            for name in os.listdir(self.log_dir)
            if name.endswith(SEGMENT_SUFFIX) and name not in listed and name[: -len(SEGMENT_SUFFIX)].isdigit()
        )
        # A file below the sealed end is one retention dropped from the manifest
        # but had not deleted yet when the process died.
        orphans = [b for b in unsealed if b < sealed_end]
        for base in orphans:
            log.warning("removing orphan segment %s (already dropped from the manifest)", segment_name(base))
            os.remove(self._path(base))
        candidates = [b for b in unsealed if b >= sealed_end]
        cut_bytes, cut_reason = 0, None
        next_offset = sealed_end
        for i, base in enumerate(candidates):
            scan = scan_segment(self._path(base))
            if scan.error is not None:
                size = os.path.getsize(self._path(base))
                cut_bytes += size - scan.valid_bytes
                cut_reason = scan.error.why
                log.warning(
                    "recovery: %s: %s at byte %d; truncating %d bytes (kept %d records)",
                    segment_name(base), scan.error.why, scan.error.position, size - scan.valid_bytes,
                    len(scan.records),
                )
                with open(self._path(base), "r+b") as f:
                    f.truncate(scan.valid_bytes)
                    os.fsync(f.fileno())
            next_offset = scan.records[-1].offset + 1 if scan.records else max(next_offset, base)
            self._activate(base, scan.valid_bytes, scan.records)
            if i < len(candidates) - 1:
                # Only the newest unsealed file may stay active; older ones were complete.
                self._seal_locked()
        self.next_offset = next_offset
        if self._fd < 0:
            self._activate(next_offset, 0, [])
        # Complete frames a crashed process wrote but never synced are kept: sync them
        # before readers are told they are durable.
        os.fsync(self._fd)
        self._publish_durable()
        self._closed = False
        self.recovery = RecoveryReport(self.active_base, self.active_records, cut_bytes, cut_reason, len(orphans))
        if self.active_records:
            log.info("recovery: active segment %s holds %d records", segment_name(self.active_base),
                     self.active_records)

    def _activate(self, base: int, size: int, records: Sequence[LogRecord]) -> None:
        path = self._path(base)
        created = not os.path.exists(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        if created:
            try:
                _fsync_dir(self.log_dir)
            except OSError:
                # Removed so the retry creates it again and syncs its directory entry then.
                os.close(fd)
                os.remove(path)
                raise
        self._fd = fd
        self.active_base = base
        self.active_size = size
        self.active_records = len(records)
        self.active_first_ms = records[0].receive_ms if records else 0
        self.recovered_batches = [(r.client_id, r.seq, r.offset) for r in records]

    def _path(self, base: int) -> str:
        return os.path.join(self.log_dir, segment_name(base))

    # -- writing --------------------------------------------------------------------------

    def append(self, entries: Sequence[tuple[int, str, int, bytes]]) -> list[int]:
        """Append (receive_ms, client_id, seq, payload) records as one write; sync per the
        durability mode; return their offsets. On an I/O error nothing is kept and
        :class:`DiskFull` or :class:`StorageError` is raised; the next append tries again."""
        with self._lock:
            if self._pending is not None:
                raise DiskFull(f"the trace log is not recovered yet: {self._pending.detail}")
            if self._closed:
                raise StorageError("the trace log is closed")
            self._prepare_locked()
            first = self.next_offset
            frames = b"".join(
                encode_record(first + i, receive_ms, client_id, seq, payload)
                for i, (receive_ms, client_id, seq, payload) in enumerate(entries)
            )
            try:
                self._write_all(frames)
                if self.durability == "fsync":
                    started = time.perf_counter()
                    os.fdatasync(self._fd)
                    self.last_sync_s = time.perf_counter() - started
            except OSError as exc:
                self._undo_partial_write()
                raise _storage_error("appending to the trace log", exc) from exc
            if not self.active_records and entries:
                self.active_first_ms = entries[0][0]
            self.active_size += len(frames)
            self.active_records += len(entries)
            self.next_offset = first + len(entries)
            self._publish_durable()
            return list(range(first, first + len(entries)))

    def _publish_durable(self) -> None:
        """Tell readers everything before the next offset is durable (after the sync)."""
        if self._durable is None or self._fd < 0:
            return
        try:
            self._durable.publish(LogPosition(self.next_offset, self.active_base, self.active_size))
        except OSError as exc:  # readers lag behind until the next append publishes again
            log.warning("could not publish the durable end: %s", exc)

    def durable_end(self) -> LogPosition:
        """The durable end as readers see it: the next offset, the active base and its size."""
        with self._lock:
            return LogPosition(self.next_offset, self.active_base, self.active_size)

    def _prepare_locked(self) -> None:
        """Make the active segment ready for a write, redoing whatever an earlier failure left."""
        if self._torn:
            # Appending after a torn frame would hide every later record from readers.
            try:
                os.ftruncate(self._fd, self.active_size)
            except OSError as exc:
                raise _storage_error("cutting a failed write from the trace log", exc) from exc
            self._torn = False
        if self._fd < 0:  # an earlier roll sealed the segment but could not start the next one
            try:
                self._activate(self.next_offset, 0, [])
            except OSError as exc:
                raise _storage_error(f"creating segment {segment_name(self.next_offset)}", exc) from exc
        if self.active_size >= self.segment_bytes:
            try:
                self._roll_locked()
            except StorageError as exc:
                if self._fd < 0:
                    raise
                # Not sealed (e.g. no room for the manifest): keep appending to the active
                # segment; the next append or maintenance round tries the seal again.
                log.warning("%s; appending to the active segment", exc)

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            if not written:  # not expected for a regular file, but it must not spin forever
                raise OSError(errno.EIO, "write wrote nothing")
            view = view[written:]

    def _undo_partial_write(self) -> None:
        # A short write (disk full mid-frame) or a failed sync leaves bytes nobody was
        # promised: cut them so the segment re-reads cleanly and later frames stay reachable.
        try:
            os.ftruncate(self._fd, self.active_size)
        except OSError:  # the next append retries the cut before it writes (see _prepare_locked)
            self._torn = True
            log.exception("could not cut a failed write from %s", segment_name(self.active_base))

    def sync(self) -> None:
        """Force the active segment to disk (used at close in ``os`` durability mode)."""
        with self._lock:
            if self._fd >= 0:
                os.fsync(self._fd)

    # -- sealing, retention ---------------------------------------------------------------

    def roll_if_due(self, now_ms: int | None = None) -> SegmentInfo | None:
        """Seal the active segment when it is over the size limit or older than the age limit."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        with self._lock:
            if not self.active_records or self._fd < 0:
                return None
            too_old = now_ms - self.active_first_ms >= self.segment_age_s * 1000
            if too_old or self.active_size >= self.segment_bytes:
                return self._roll_locked()
        return None

    def roll(self) -> SegmentInfo | None:
        """Seal the active segment now (if it holds anything) and start a new one."""
        with self._lock:
            if self._pending is not None:
                raise DiskFull(f"the trace log is not recovered yet: {self._pending.detail}")
            return self._roll_locked() if self.active_records else None

    def _roll_locked(self) -> SegmentInfo:
        info = self._seal_locked()
        try:
            self._activate(self.next_offset, 0, [])
        except OSError as exc:  # sealed all the same; the next append creates the file
            raise _storage_error(f"creating segment {segment_name(self.next_offset)}", exc) from exc
        self._publish_durable()
        return info

    def _seal_locked(self) -> SegmentInfo:
        # Order matters for crash safety: data durable, then listed, then a new file.
        try:
            os.fsync(self._fd)
        except OSError as exc:
            raise _storage_error(f"syncing {segment_name(self.active_base)} to seal it", exc) from exc
        info = SegmentInfo(self.active_base, self._path(self.active_base), self.active_records,
                           self.active_size, int(time.time() * 1000))
        end = max(self._sealed_end, info.base + info.records)
        try:
            _write_manifest(self.log_dir, [*self._sealed, info], end)
        except OSError as exc:  # e.g. disk full: the segment stays active and appends go on
            raise _storage_error(f"sealing {segment_name(info.base)}", exc) from exc
        os.close(self._fd)
        self._fd = -1
        # Nothing is active until _activate succeeds: a failed one must not leave this
        # segment counted twice in the backlog or sealed again.
        self.active_size = self.active_records = self.active_first_ms = 0
        self._sealed.append(info)
        self._sealed_end = end
        log.info("sealed segment %s: %d records, %d bytes", segment_name(info.base), info.records, info.size)
        return info

    def sealed(self) -> list[SegmentInfo]:
        """The sealed segments this writer knows (same as the manifest)."""
        with self._lock:
            return list(self._sealed)

    def backlog_bytes(self) -> int:
        """Bytes not yet indexed by the index checkpoint furthest behind (all of them when
        there is no checkpoint)."""
        commits = read_commits(self.log_dir)
        with self._lock:
            segments = [(s.base, s.base + s.records, s.size) for s in self._sealed]
            segments.append((self.active_base, self.next_offset, self.active_size))
        if not commits:
            return sum(size for _, _, size in segments)
        lowest = min(c.position for c in commits)
        total = 0
        for base, end, size in segments:
            if end <= lowest.offset:
                continue
            total += size - lowest.pos if base == lowest.base else size
        return total

    def total_bytes(self) -> int:
        """Size of the whole log on disk (sealed + active)."""
        with self._lock:
            return self.active_size + sum(s.size for s in self._sealed)

    def segment_count(self) -> int:
        """Number of segments including the active one."""
        with self._lock:
            return len(self._sealed) + 1

    def apply_retention(self, retention_s: float, now_ms: int | None = None) -> list[SegmentInfo]:
        """Delete sealed segments that every index checkpoint has committed past and that were
        sealed longer ago than ``retention_s``; with no checkpoint nothing is deleted (a
        segment nobody indexed is never deleted). Returns what was deleted."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        committed = committed_offset(self.log_dir)
        if committed is None:
            return []
        limit = now_ms - retention_s * 1000
        with self._lock:
            doomed = [s for s in self._sealed if s.base + s.records <= committed and s.sealed_ms < limit]
            if not doomed:
                return []
            keep = [s for s in self._sealed if s not in doomed]
            # Manifest first: a crash before the unlink leaves an orphan that recovery removes,
            # never a manifest entry pointing at a missing file.
            _write_manifest(self.log_dir, keep, self._sealed_end)
            self._sealed = keep
        for s in doomed:
            try:
                os.remove(s.path)
            except FileNotFoundError:
                pass
            log.info("retention: deleted indexed segment %s", segment_name(s.base))
        return doomed

    def close(self) -> None:
        """Sync and close the active segment (it stays active; the next open continues it)."""
        with self._lock:
            self._closed = True
            if self._fd >= 0:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = -1
            if self._durable is not None:
                self._durable.close()
                self._durable = None
