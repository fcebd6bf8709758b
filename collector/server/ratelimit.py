"""Per-client ingest rate limit: token buckets keyed by the batch's client id.

A client may send ``events_per_s`` events and ``batches_per_s`` batches per second on
average (0 turns that limit off) and save up ``burst_s`` seconds of that rate while idle::

    limiter = RateLimiter(events_per_s=5000, batches_per_s=0, burst_s=2.0)
    limiter.check("shop@host:1234:9f2c01ab", events=500)   # raises RateLimited when over

The key is the client id from the decoded batch header, not the remote address: one
address often carries many processes (a host, a NAT, a proxy), and a client id is one
process, so a runaway process is slowed down without its neighbours. Client ids are
chosen by the client, so this limits misbehaving clients that hold the ingest token, not
a hostile sender inventing ids; the token and ``max_body_bytes`` are the guard there.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable

from collector.server.errors import RateLimited

MAX_TRACKED_CLIENTS = 10_000
"""Buckets remembered; the least recently seen client's goes first (it would be full again anyway)."""


class TokenBucket:
    """``rate`` tokens per second, holding at most ``capacity``; may go into debt (see :meth:`wait_s`)."""

    __slots__ = ("rate", "capacity", "tokens", "updated")

    def __init__(self, rate: float, capacity: float, now: float) -> None:
        self.rate = rate
        self.capacity = capacity
        self.tokens = capacity
        self.updated = now

    def wait_s(self, cost: float, now: float) -> float:
        """Seconds until ``cost`` may be taken; 0.0 when it may be taken now.

        A cost above the capacity needs only a full bucket and leaves the bucket in debt:
        otherwise a batch larger than the burst could never pass, while the debt still
        holds the client to the average rate.
        """
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        need = min(cost, self.capacity)
        return 0.0 if self.tokens >= need else (need - self.tokens) / self.rate

    def take(self, cost: float) -> None:
        self.tokens -= cost


class RateLimiter:
    """Event and batch buckets per client id; a request passes only if every limit allows it."""

    def __init__(self, events_per_s: float = 0.0, batches_per_s: float = 0.0, burst_s: float = 1.0,
                 *, clock: Callable[[], float] = time.monotonic, max_clients: int = MAX_TRACKED_CLIENTS) -> None:
        if events_per_s < 0 or batches_per_s < 0:
            raise ValueError("events_per_s and batches_per_s must not be negative")
        if burst_s <= 0:
            raise ValueError("burst_s must be positive")
        self.events_per_s = events_per_s
        self.batches_per_s = batches_per_s
        self.burst_s = burst_s
        self._clock = clock
        self._max_clients = max_clients
        self._buckets: OrderedDict[str, tuple[TokenBucket | None, TokenBucket | None]] = OrderedDict()

    @property
    def enabled(self) -> bool:
        """False when both rates are 0 (unlimited)."""
        return bool(self.events_per_s or self.batches_per_s)

    def _bucket(self, rate: float, now: float) -> TokenBucket | None:
        return TokenBucket(rate, rate * self.burst_s, now) if rate else None

    def check(self, client_id: str, events: int) -> None:
        """Charge one batch of ``events`` to ``client_id``, or raise :class:`RateLimited` and charge nothing."""
        if not self.enabled:
            return
        now = self._clock()
        buckets = self._buckets.pop(client_id, None)
        if buckets is None:
            buckets = (self._bucket(self.events_per_s, now), self._bucket(self.batches_per_s, now))
        self._buckets[client_id] = buckets  # most recently seen last
        while len(self._buckets) > self._max_clients:
            self._buckets.popitem(last=False)
        pairs = [(b, cost) for b, cost in zip(buckets, (events, 1)) if b is not None]
        # Check every bucket before taking from any: a rejected batch must not use up tokens.
        wait = max(b.wait_s(cost, now) for b, cost in pairs)
        if wait > 0:
            # Retry-After takes whole seconds; rounding up keeps the retry from being early.
            raise RateLimited(f"client {client_id!r} is over its rate limit", retry_after_s=max(1, math.ceil(wait)))
        for b, cost in pairs:
            b.take(cost)
