"""RabbitMQ retry counting without a broker: which x-death entries count, and the bounded redelivery memory."""

from __future__ import annotations

from tracehook.adapters._common import RedeliveryCounter, dead_letter_count


def test_x_death_counts_only_the_consuming_queue_and_the_memory_forgets_the_oldest():
    # a retry loop: "work" rejects into a delay queue whose expired messages come back to "work"
    headers = {"x-death": [{"queue": b"work", "reason": "rejected", "count": 3},
                           {"queue": "work.delay", "reason": "expired", "count": 3},
                           {"queue": "work", "reason": "expired", "count": 1}, "not an entry",
                           {"queue": "work", "count": "2"}]}
    assert dead_letter_count(headers, "work") == 4
    assert dead_letter_count(headers, "parking") == 0   # first delivery to a queue that never dead-lettered it
    assert dead_letter_count({"x-death": "odd"}, "work") == dead_letter_count(None, "work") == 0

    counter = RedeliveryCounter(limit=2)
    assert [counter.count("q", "a", redelivered) for redelivered in (False, True, True, False)] == [0, 1, 2, 2]
    assert counter.count("other", "a", True) == 1   # per queue: another group's redeliveries are its own
    counter.count("q", "b", True)                   # a third pair: the least recently counted one goes
    assert counter.count("q", "a", False) == 0 and counter.count("other", "a", False) == 1
