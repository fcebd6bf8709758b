"""The collector server's errors, and the one place any error becomes an HTTP answer.

Errors raised by the server itself (:class:`HttpError` and its subclasses) carry their
``status``. Errors of the other layers (the trace log, the store, the query logic) say
only what went wrong; :func:`http_answer` maps every one of them to a status, a reason
code and whether the client should retry later. The app's middleware and the query
routes both call it, so a given error is answered the same way everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from collector.log.errors import DiskFull, LogError, LogUnavailable, StorageError
from collector.query.errors import QueryInputError, UnknownGroupError
from collector.store.errors import (
    BadStoreUrlError,
    LayoutVersionError,
    QueryError,
    SaltBucketsMismatchError,
    StoreError,
    StoreUnavailableError,
)


class HttpError(Exception):
    """Base of the errors the server raises with their own HTTP ``status``."""

    status = 500
    reason = "internal"

    def __init__(self, detail: str = "", *, reason: str | None = None) -> None:
        super().__init__(detail or self.reason)
        self.detail = detail or self.reason
        if reason is not None:
            self.reason = reason


class Unauthorized(HttpError):
    """No bearer token, or one the collector does not know (401)."""

    status = 401
    reason = "unauthorized"


class Forbidden(HttpError):
    """A known token used for the wrong purpose, e.g. a query token posting batches (403)."""

    status = 403
    reason = "forbidden"


class BadBatch(HttpError):
    """The batch did not decode or validate; ``reason`` is the wire format's reason code (400)."""

    status = 400
    reason = "bad_batch"


class BadOtlpRequest(HttpError):
    """An OTLP/HTTP body that does not decode (bad gzip, protobuf or JSON); ``reason`` says which (400)."""

    status = 400
    reason = "bad_otlp"


class UnsupportedMediaType(HttpError):
    """The body is not declared as msgpack (415)."""

    status = 415
    reason = "unsupported_media_type"


class PayloadTooLarge(HttpError):
    """The body is over ``max_body_bytes`` (413)."""

    status = 413
    reason = "payload_too_large"


class Backpressure(HttpError):
    """The unindexed backlog is over its limit; the client should retry after ``retry_after_s`` (429)."""

    status = 429
    reason = "backlog_full"

    def __init__(self, detail: str = "", *, retry_after_s: int = 5) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


class RateLimited(Backpressure):
    """One client sends faster than its per-client rate limit; retry after ``retry_after_s`` (429)."""

    reason = "rate_limited"


class ShuttingDown(HttpError):
    """The collector is stopping and takes no new batches (503)."""

    status = 503
    reason = "shutting_down"


class ClientGone(HttpError):
    """The client disconnected mid-request; nothing was written and nobody hears the answer."""

    status = 400
    reason = "client_disconnected"


class CollectorConfigError(ValueError):
    """A collector setting is missing or invalid (raised at start, never over HTTP)."""


@dataclass(frozen=True)
class HttpAnswer:
    """How the API answers an error: ``{"error": reason, "detail": detail}`` with ``status``."""

    status: int
    reason: str
    detail: str
    retry_later: bool = False
    """Send ``Retry-After``: the same request may succeed later (backpressure, outages)."""


_LAYER_STATUS: tuple[tuple[type[BaseException], int], ...] = (  # first match wins: subclasses first
    (DiskFull, 503),
    (LogUnavailable, 503),
    (StorageError, 500),
    (LogError, 500),
    (StoreUnavailableError, 503),
    (QueryError, 400),
    (BadStoreUrlError, 400),
    (SaltBucketsMismatchError, 409),
    (LayoutVersionError, 503),  # an old store: its one line names the migration; ingest goes on
    (StoreError, 500),
    (UnknownGroupError, 404),
    (QueryInputError, 400),
)
_RETRY_LATER: tuple[type[BaseException], ...] = (DiskFull, LogUnavailable, StoreUnavailableError)


def http_answer(exc: BaseException) -> HttpAnswer | None:
    """The HTTP answer for a named error of any layer; None for an unexpected exception (a 500)."""
    detail = str(getattr(exc, "detail", None) or exc)
    if isinstance(exc, HttpError):
        return HttpAnswer(exc.status, exc.reason, detail, retry_later=isinstance(exc, (Backpressure, ShuttingDown)))
    for kind, status in _LAYER_STATUS:
        if isinstance(exc, kind):
            reason = str(getattr(exc, "reason", "error"))
            return HttpAnswer(status, reason, detail, retry_later=isinstance(exc, _RETRY_LATER))
    return None


ANSWERED: tuple[type[BaseException], ...] = (HttpError, LogError, StoreError, QueryInputError)
"""The exception types :func:`http_answer` knows (catch these, let anything else be a 500)."""
