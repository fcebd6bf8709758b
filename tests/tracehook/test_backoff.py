"""Retry pacing against a lone dead collector: exponential backoff with full jitter, capped."""

from __future__ import annotations

import random
import threading
import time

import pytest

import tracehook

DEAD = "http://127.0.0.1:1"  # nothing listens on port 1: every attempt is refused at once
SLACK_S = 0.2  # scheduling noise on a busy machine; every cap below is checked with this margin


def record_attempts(tracer: tracehook.Tracer) -> list[float]:
    """Wrap the tracer's only collector connection so each POST attempt logs its start time."""
    [conn] = tracer._dispatcher._collectors
    post = conn.post
    times: list[float] = []

    def timed(body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
        times.append(time.monotonic())
        return post(body, headers)

    conn.post = timed  # type: ignore[method-assign]
    return times


def caps(backoff_s: float, max_backoff_s: float, n: int) -> list[float]:
    """The documented ceiling of each of the first ``n`` backoff waits."""
    return [min(max_backoff_s, backoff_s * 2**k) for k in range(n)]


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip(times, times[1:])]


def test_backoff_ceilings_double_up_to_the_cap_and_are_slept(make_tracer, accounted, monkeypatch):
    # Pin the jitter to its ceiling so the schedule itself is visible (and recorded).
    ceilings: list[float] = []
    real_uniform = random.uniform

    def top_of_range(a: float, b: float) -> float:
        if threading.current_thread().name != "tracehook-dispatcher":
            return real_uniform(a, b)
        ceilings.append(b)
        return b

    monkeypatch.setattr(random, "uniform", top_of_range)
    tracer = make_tracer(DEAD, backoff_s=0.02, max_backoff_s=0.1, max_retries=6, failover_s=600)
    times = record_attempts(tracer)
    tracer.record_send("orders", "m-1")
    assert tracer.flush(10)
    stats = accounted(tracer.stats())
    assert stats["dropped"]["send_error"] == 1 and stats["retried"] == 6
    expected = caps(0.02, 0.1, 6)
    assert ceilings == pytest.approx(expected)  # 0.02, 0.04, 0.08, then capped at 0.1
    assert len(times) == 7  # the first try and max_retries retries, failover_s notwithstanding
    for gap, cap in zip(gaps(times), expected):
        assert cap * 0.9 <= gap <= cap + SLACK_S


def test_jittered_waits_never_exceed_their_cap(make_tracer, accounted):
    tracer = make_tracer(DEAD, backoff_s=0.1, max_backoff_s=0.8, max_retries=6, failover_s=600)
    times = record_attempts(tracer)
    tracer.record_send("orders", "m-1")
    assert tracer.flush(20)
    assert accounted(tracer.stats())["dropped"]["send_error"] == 1
    assert len(times) == 7
    for gap, cap in zip(gaps(times), caps(0.1, 0.8, 6)):  # full jitter: each wait is in [0, cap]
        assert gap <= cap + SLACK_S


def test_a_lone_dead_collector_is_not_hammered(make_tracer):
    # With a 0.1 s cap the mean wait is 0.05 s: ~20 attempts a second; without backoff, thousands.
    tracer = make_tracer(DEAD, backoff_s=0.01, max_backoff_s=0.1, max_retries=10_000, failover_s=600)
    times = record_attempts(tracer)
    tracer.record_send("orders", "m-1")
    assert not tracer.flush(1.0)
    tracer.close(0.1)
    window = [t for t in times if t - times[0] <= 1.0]
    assert 2 <= len(window) <= 80
    assert max(gaps(times)) <= 0.1 + SLACK_S
