"""Named errors of the query logic: a query asked wrongly.

Each carries a short ``reason`` code and a ``detail`` naming what is wrong. The HTTP
API answers them with 400 (404 for an unknown group) through
:mod:`collector.server.errors`; the command line prints ``detail`` and exits 2.
"""

from __future__ import annotations


class QueryInputError(ValueError):
    """Base: a parameter, time or name the query cannot use."""

    reason = "bad_query"

    def __init__(self, detail: str = "", *, reason: str | None = None) -> None:
        super().__init__(detail or self.reason)
        self.detail = detail or self.reason
        if reason is not None:
            self.reason = reason


class ParamError(QueryInputError):
    """A query parameter is missing, malformed or out of range."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail, reason=reason)


class BadTimeError(QueryInputError):
    """A time that is not epoch ms, ISO-8601, ``now`` or a relative time like ``-2h``."""

    reason = "bad_time"


class UnknownGroupError(QueryInputError):
    """A consumer group with no consume record or dead letter on the topic (a typo?).

    The replay list of such a group would hold every message of the window.
    """

    reason = "unknown_group"
