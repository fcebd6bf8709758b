"""Named errors of the collector; the HTTP middleware in :mod:`collector.app` maps them to responses.

Every :class:`CollectorError` carries an HTTP ``status`` and a short machine-readable
``reason``; the middleware renders ``{"error": reason, "detail": text}``.
"""

from __future__ import annotations


class CollectorError(Exception):
    """Base of every error the collector reports to a client."""

    status = 500
    reason = "internal"

    def __init__(self, detail: str = "", *, reason: str | None = None) -> None:
        super().__init__(detail or self.reason)
        self.detail = detail or self.reason
        if reason is not None:
            self.reason = reason


class Unauthorized(CollectorError):
    """No bearer token, or one the collector does not know (401)."""

    status = 401
    reason = "unauthorized"


class Forbidden(CollectorError):
    """A known token used for the wrong purpose, e.g. a query token posting batches (403)."""

    status = 403
    reason = "forbidden"


class BadBatch(CollectorError):
    """The batch did not decode or validate; ``reason`` is the wire format's reason code (400)."""

    status = 400
    reason = "bad_batch"


class BadOtlpRequest(CollectorError):
    """An OTLP/HTTP body that does not decode (bad gzip, protobuf or JSON); ``reason`` says which (400)."""

    status = 400
    reason = "bad_otlp"


class UnsupportedMediaType(CollectorError):
    """The body is not declared as msgpack (415)."""

    status = 415
    reason = "unsupported_media_type"


class PayloadTooLarge(CollectorError):
    """The body is over ``max_body_bytes`` (413)."""

    status = 413
    reason = "payload_too_large"


class Backpressure(CollectorError):
    """The unindexed backlog is over its limit; the client should retry after ``retry_after_s`` (429)."""

    status = 429
    reason = "backlog_full"

    def __init__(self, detail: str = "", *, retry_after_s: int = 5) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


class RateLimited(Backpressure):
    """One client sends faster than its per-client rate limit; retry after ``retry_after_s`` (429)."""

    reason = "rate_limited"


class ShuttingDown(CollectorError):
    """The collector is stopping and takes no new batches (503)."""

    status = 503
    reason = "shutting_down"


class ClientGone(CollectorError):
    """The client disconnected mid-request; nothing was written and nobody hears the answer."""

    status = 400
    reason = "client_disconnected"


class StorageError(CollectorError):
    """Writing the trace log failed (disk full, I/O error); nothing was acknowledged (500)."""

    status = 500
    reason = "storage_error"


class DiskFull(StorageError):
    """The data dir is out of space (ENOSPC, EDQUOT); nothing was kept or acknowledged (503).

    Not a 500: the collector is healthy and retries each new group commit, so ingest
    resumes by itself once space returns; clients retry after ``Retry-After``.
    """

    status = 503
    reason = "disk_full"


class LogUnavailable(StorageError):
    """The Kafka trace log did not acknowledge the batch in time (broker down, no leader);
    nothing is acknowledged and the client retries after ``Retry-After``, maybe through
    another collector (503)."""

    status = 503
    reason = "log_unavailable"


class BadTimeError(CollectorError, ValueError):
    """A time parameter that is not epoch ms, ISO-8601, ``now`` or a relative time like ``-2h`` (400)."""

    status = 400
    reason = "bad_time"


class UnknownGroupError(CollectorError):
    """A consumer group with no consume record or dead letter on the topic (a typo?) (404).

    The replay list of such a group would hold every message of the window.
    """

    status = 404
    reason = "unknown_group"


class ConfigError(ValueError):
    """A configuration value is missing or invalid (raised at start, never over HTTP)."""


class CorruptSegmentError(Exception):
    """A segment has a bad frame at byte ``position`` (torn write, bit rot, truncation)."""

    def __init__(self, path: str, position: int, why: str = "bad frame") -> None:
        super().__init__(f"{path}: {why} at byte {position}")
        self.path = path
        self.position = position
        self.why = why


class NotATraceLogError(Exception):
    """A directory given as a trace log is not one (no ``log-id``, manifest or segments)."""


class SegmentGoneError(Exception):
    """Records a reader still needs are no longer in the log (a segment was deleted under it)."""
