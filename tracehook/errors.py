"""Named errors of the tracehook library.

Hooks never raise into the app; these are raised only for bad explicit
configuration (``tracehook.configure(queue_size=-1)``), by the wire format's decoder
(:class:`WireError`, also ``tracehook.wire.WireError``) and inside the dispatcher to
classify collector answers.
"""

from __future__ import annotations


class TracehookError(Exception):
    """Base of every tracehook error."""


class ConfigError(TracehookError, ValueError):
    """An explicit configuration argument is invalid; the message names it."""


class DeliveryError(TracehookError):
    """A batch could not be delivered to a collector (connection failure or bad answer)."""

    def __init__(self, url: str, detail: str, status: int = 0, retry_after_s: float | None = None) -> None:
        super().__init__(f"{url}: {detail}")
        self.url = url
        self.status = status
        self.retry_after_s = retry_after_s


class WireError(TracehookError, ValueError):
    """Input that is not a valid batch or event; ``reason`` is a short machine-readable code."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


class Unkeepable(TracehookError, ValueError):
    """A record's key or headers cannot be kept exactly (over the wire's caps, or of a type it cannot
    carry): the send keeps no body (``tracehook.bodies``; counted as ``unkeepable``)."""
