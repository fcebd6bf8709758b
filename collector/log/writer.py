"""The one trace-log interface the ingest path writes through: the file log or a Kafka topic.

The collector's :class:`collector.server.ingest.Ingestor` calls only what :class:`TraceLogWriter`
names, so the group commit, dedup window, limits and answers are the same for both logs::

    from collector.log.writer import open_trace_log
    log = open_trace_log(config)          # TraceLog (config.log_url "" / "file") or KafkaLog (kafka://...)
    offsets = log.append([(receive_ms, client_id, seq, batch_bytes)])   # durable (or acked) when it returns

``append`` returns once the records are durable: fsynced (file log) or acknowledged by every
in-sync replica (Kafka, ``acks=all``); it raises a :class:`collector.log.errors.StorageError`
(``DiskFull`` / ``LogUnavailable`` are 503 + Retry-After) when they are not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from collector.log.state import LogPosition
from collector.log.url import KAFKA_SCHEME, KafkaTopic, is_kafka_log, parse_kafka_url

__all__ = ["KAFKA_SCHEME", "KafkaTopic", "TraceLogWriter", "is_kafka_log", "open_trace_log", "parse_kafka_url"]


@runtime_checkable
class TraceLogWriter(Protocol):
    """What the ingest path needs from a trace log (implemented by ``TraceLog`` and ``KafkaLog``)."""

    log_dir: str
    """Where the log's local files live (the file log's segments; for Kafka only the disk-space gauges look)."""
    last_sync_s: float
    """Seconds the last append waited for durability (fsync, or Kafka's acknowledgement)."""
    recovered_batches: list[tuple[str, int, int]]
    concurrent_appends: int
    """How many ``append`` calls may run at once (on different threads): 1 for the file log."""

    @property
    def recovery_pending(self) -> bool: ...

    def retry_recovery(self) -> list[tuple[str, int, int]]: ...

    def append(self, entries: Sequence[tuple[int, str, int, bytes]]) -> list[int]: ...

    def durable_end(self) -> LogPosition: ...

    def total_bytes(self) -> int: ...

    def segment_count(self) -> int: ...

    def backlog_bytes(self) -> int: ...

    def roll_if_due(self, now_ms: int | None = None) -> Any: ...

    def roll(self) -> Any: ...

    def sealed(self) -> list[Any]: ...

    def apply_retention(self, retention_s: float, now_ms: int | None = None) -> list[Any]: ...

    def health(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


class LogSettings(Protocol):
    """The settings a trace log opens with (the collector's ``CollectorConfig`` has them all):
    declared here so the log layer does not depend on the server's config."""

    @property
    def log_url(self) -> str: ...
    @property
    def log_dir(self) -> str: ...
    @property
    def max_body_bytes(self) -> int: ...
    @property
    def segment_bytes(self) -> int: ...
    @property
    def segment_age_s(self) -> float: ...
    @property
    def durability(self) -> str: ...


def open_trace_log(config: LogSettings) -> TraceLogWriter:
    """The trace log ``config.log_url`` names, opened (the file log recovered; a Kafka producer created)."""
    if is_kafka_log(config.log_url):
        from collector.log.kafka import KafkaLog

        return KafkaLog.open(parse_kafka_url(config.log_url), log_dir=config.log_dir, max_record_bytes=config.max_body_bytes)
    from collector.log.file import TraceLog

    return TraceLog.open(
        config.log_dir,
        segment_bytes=config.segment_bytes,
        segment_age_s=config.segment_age_s,
        durability=config.durability,
        defer_if_full=True,  # start degraded on a full disk: queries served, ingest 503 until space returns
    )
