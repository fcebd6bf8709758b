"""Retry pacing against a lone dead collector: exponential backoff with full jitter, capped.

The tests record what the dispatcher does, in order: each POST attempt and each wait it asks
for (``Dispatcher._sleep``, which still sleeps). They check the waits asked for, never the
wall-clock gaps between attempts, so a busy machine cannot fail them.
"""

from __future__ import annotations

import random
import threading

import pytest

import tracehook

DEAD = "http://127.0.0.1:1"  # nothing listens on port 1: every attempt is refused at once


def record_steps(tracer: tracehook.Tracer) -> list[tuple[str, float]]:
    """Wrap the tracer's only collector connection and its dispatcher's wait, so each POST
    attempt logs ``("post", 0)`` and each wait ``("sleep", seconds asked for)``, in order."""
    dispatcher = tracer._dispatcher
    [conn] = dispatcher._collectors
    post, sleep = conn.post, dispatcher._sleep
    steps: list[tuple[str, float]] = []

    def recorded_post(body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        steps.append(("post", 0.0))
        return post(body, headers)

    def recorded_sleep(seconds: float) -> None:
        steps.append(("sleep", seconds))
        sleep(seconds)

    conn.post = recorded_post  # type: ignore[method-assign]
    dispatcher._sleep = recorded_sleep  # type: ignore[method-assign]
    return steps


def caps(backoff_s: float, max_backoff_s: float, n: int) -> list[float]:
    """The documented ceiling of each of the first ``n`` backoff waits."""
    return [min(max_backoff_s, backoff_s * 2**k) for k in range(n)]


def waits(steps: list[tuple[str, float]]) -> list[float]:
    """The waits asked for, after checking that attempts and waits alternate (one wait before each retry)."""
    kinds = [kind for kind, _ in steps]
    assert kinds == ["post", "sleep"] * (len(kinds) // 2) + ["post"] * (len(kinds) % 2), kinds
    return [seconds for kind, seconds in steps if kind == "sleep"]


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
    steps = record_steps(tracer)
    tracer.record_send("orders", "m-1")
    assert tracer.flush(10)
    stats = accounted(tracer.stats())
    assert stats["dropped"]["send_error"] == 1 and stats["retried"] == 6
    expected = caps(0.02, 0.1, 6)
    assert ceilings == pytest.approx(expected)  # 0.02, 0.04, 0.08, then capped at 0.1
    # The first try and max_retries retries, failover_s notwithstanding, each retry after its full wait.
    assert steps[-1] == ("post", 0.0)
    assert waits(steps) == pytest.approx(expected)


def test_jittered_waits_never_exceed_their_cap(make_tracer, accounted):
    tracer = make_tracer(DEAD, backoff_s=0.01, max_backoff_s=0.08, max_retries=6, failover_s=600)
    steps = record_steps(tracer)
    tracer.record_send("orders", "m-1")
    assert tracer.flush(20)
    assert accounted(tracer.stats())["dropped"]["send_error"] == 1
    asked = waits(steps)
    assert len(asked) == 6 and steps[-1] == ("post", 0.0)
    for wait, cap in zip(asked, caps(0.01, 0.08, 6)):  # full jitter: each wait is in [0, cap]
        assert 0 <= wait <= cap
    assert len(set(asked)) == 6  # drawn afresh each time, not one fixed delay


def test_a_lone_dead_collector_is_retried_at_the_backoff_pace_not_hammered(make_tracer, accounted):
    # Set aside for failover_s (600 s) after each failure, the lone collector is still retried
    # after each backoff wait (capped at 0.1 s), never without one and never after failover_s.
    tracer = make_tracer(DEAD, backoff_s=0.01, max_backoff_s=0.1, max_retries=12, failover_s=600)
    steps = record_steps(tracer)
    tracer.record_send("orders", "m-1")
    assert tracer.flush(20)
    assert accounted(tracer.stats())["retried"] == 12
    asked = waits(steps)
    assert len(asked) == 12 and steps[-1] == ("post", 0.0)
    assert all(0 <= wait <= cap for wait, cap in zip(asked, caps(0.01, 0.1, 12)))
