"""Named errors of the trace log.

They say what went wrong with the log, not how a client hears it: the collector's
server maps them to HTTP answers in one place (:mod:`collector.server.errors`).
"""

from __future__ import annotations


class LogError(Exception):
    """Base of every error raised by :mod:`collector.log`; ``reason`` is a short code."""

    reason = "log_error"

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail or self.reason)
        self.detail = detail or self.reason


class StorageError(LogError):
    """Writing the trace log failed (disk full, I/O error); nothing was acknowledged."""

    reason = "storage_error"


class DiskFull(StorageError):
    """The data dir is out of space (ENOSPC, EDQUOT); nothing was kept or acknowledged.

    The collector stays healthy and retries each new group commit, so ingest resumes by
    itself once space returns (clients are told to retry later).
    """

    reason = "disk_full"


class LogUnavailable(StorageError):
    """A remote trace log (a Kafka topic) did not acknowledge; the batch was not accepted."""

    reason = "log_unavailable"


class CorruptSegmentError(LogError):
    """A segment has a bad frame at byte ``position`` (torn write, bit rot, truncation)."""

    reason = "corrupt_segment"

    def __init__(self, path: str, position: int, why: str = "bad frame") -> None:
        super().__init__(f"{path}: {why} at byte {position}")
        self.path = path
        self.position = position
        self.why = why


class NotATraceLogError(LogError):
    """A directory given as a trace log is not one (no ``log-id``, manifest or segments)."""

    reason = "not_a_trace_log"


class SegmentGoneError(LogError):
    """Records a reader still needs are no longer in the log (a segment was deleted under it)."""

    reason = "segment_gone"
