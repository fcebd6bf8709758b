"""The per-client token buckets, on a fake clock (no sleeping, no timing)."""

from __future__ import annotations

import pytest

from collector.server.errors import RateLimited
from collector.server.ratelimit import RateLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _rejected(limiter: RateLimiter, client: str, events: int) -> RateLimited | None:
    try:
        limiter.check(client, events)
    except RateLimited as exc:
        return exc
    return None


def test_off_by_default_lets_everything_through() -> None:
    limiter = RateLimiter()
    assert not limiter.enabled
    for _ in range(10_000):
        limiter.check("c", 1_000_000)


def test_event_rate_with_burst_and_retry_after_rounded_up() -> None:
    clock = FakeClock()
    limiter = RateLimiter(events_per_s=100, burst_s=2.0, clock=clock)  # holds 200 events
    limiter.check("c", 150)
    limiter.check("c", 50)
    exc = _rejected(limiter, "c", 30)
    assert exc is not None and exc.status == 429 and exc.reason == "rate_limited"
    assert exc.retry_after_s == 1  # 0.3 s of refill, rounded up to whole seconds
    clock.now += 0.5
    limiter.check("c", 30)  # 50 refilled, 20 left
    assert _rejected(limiter, "c", 21) is not None


def test_clients_have_separate_buckets() -> None:
    limiter = RateLimiter(batches_per_s=1, burst_s=1.0, clock=FakeClock())
    limiter.check("a", 10)
    assert _rejected(limiter, "a", 10) is not None
    limiter.check("b", 10)  # another process is not slowed down by a's traffic


def test_a_rejected_batch_uses_up_no_tokens() -> None:
    clock = FakeClock()
    limiter = RateLimiter(events_per_s=10, batches_per_s=1, burst_s=1.0, clock=clock)
    limiter.check("c", 1)  # empties the batch bucket; 9 event tokens left
    for _ in range(5):
        assert _rejected(limiter, "c", 9) is not None  # refused by the batch bucket ...
    clock.now += 1.0
    limiter.check("c", 10)  # ... without draining the event bucket meanwhile


def test_a_batch_bigger_than_the_burst_passes_once_full_then_pays_its_debt() -> None:
    clock = FakeClock()
    limiter = RateLimiter(events_per_s=100, burst_s=1.0, clock=clock)  # holds 100 events
    limiter.check("c", 500)  # would never fit; a full bucket lets it through
    exc = _rejected(limiter, "c", 10)
    assert exc is not None and exc.retry_after_s == 5  # 400 events of debt + 10 at 100/s = 4.1 s
    clock.now += 4.5
    limiter.check("c", 10)


def test_forgotten_clients_are_bounded() -> None:
    limiter = RateLimiter(batches_per_s=1, clock=FakeClock(), max_clients=3)
    for client in "abcd":
        limiter.check(client, 1)
    assert len(limiter._buckets) == 3
    limiter.check("a", 1)  # "a" was the least recently seen: forgotten, so it starts full again


@pytest.mark.parametrize("kwargs", [{"events_per_s": -1}, {"batches_per_s": -0.5}, {"burst_s": 0}])
def test_bad_arguments_raise(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RateLimiter(**kwargs)
