"""Synthetic traces with a known shape, for the query tests, the web test and the benchmark.

``scenario(now_ms)`` gives a handful of messages whose every detail a test can
assert (a normal one, a retried one, a dead letter, a transaction, an
unfinished consume, a failed send, and pages of messages sharing one key);
``bulk(n, now_ms)`` streams many ordinary messages for load.

Example::

    from collector.sample import scenario
    from collector.store import open_store
    from collector.store.indexer import index_records
    ids, records = scenario(now_ms)
    index_records(open_store("local:/tmp/i.sqlite3"), records)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tracehook.wire import BatchHeader, Event, EventType, Status, TxState, make_event

TOPIC = "orders"
PRODUCER = "shop-web"
SHARED_KEY = "customer-7"
SHARED_KEY_COUNT = 25
DEAD_GROUP = "shipping"

PRODUCER_HEADER = BatchHeader("producer-1", 1, app="shop", host="web-1")
BILLING_HEADER = BatchHeader("billing-1", 1, app="billing", host="bill-1")
SHIPPING_HEADER = BatchHeader("shipping-1", 1, app="shipping", host="ship-1")

Record = tuple[BatchHeader, Event]


@dataclass(frozen=True)
class ScenarioIds:
    """The message ids of :func:`scenario`, by what happened to them."""

    normal: str = "msg-normal"
    retried: str = "msg-retried"
    dead: str = "msg-dead"
    transactional: str = "msg-tx"
    unfinished: str = "msg-unfinished"
    failed_send: str = "msg-failed-send"


def _event(type_: EventType, time_ms: int, group: str, msg_id: str, **fields: Any) -> Event:
    return Event._make(make_event(type_, time_ms, group, fields.pop("topic", TOPIC), msg_id, **fields))


def _message(msg_id: str, t: int, queue: int, offset: int, keys: str) -> dict[str, Any]:
    return dict(keys=keys, tags="created", broker="broker-a", queue=queue, offset=offset, born_ms=t - 2, store_ms=t)


def consume(header: BatchHeader, group: str, msg_id: str, t: int, msg: dict[str, Any], *, retry: int = 0,
            status: Status | None = Status.OK, cost_ms: int = 4) -> list[Record]:
    """One consume attempt: SUB_BEFORE at ``t`` and, unless ``status`` is None, SUB_AFTER."""
    request_id = f"{msg_id}/{group}/{retry}"
    records = [(header, _event(EventType.SUB_BEFORE, t, group, msg_id, retry=retry, request_id=request_id, **msg))]
    if status is not None:
        error = "" if status == Status.OK else "handler raised RuntimeError"
        records.append((header, _event(EventType.SUB_AFTER, t + cost_ms, group, msg_id, retry=retry,
                                       request_id=request_id, status=int(status), cost_us=cost_ms * 1000,
                                       error=error, **msg)))
    return records


def send(msg_id: str, t: int, msg: dict[str, Any], **fields: Any) -> Record:
    """The producer's send result."""
    fields.setdefault("cost_us", 1500)
    return PRODUCER_HEADER, _event(EventType.PUB, t, PRODUCER, msg_id, **msg, **fields)


def scenario(now_ms: int) -> tuple[ScenarioIds, list[Record]]:
    """The known messages, all stored within the last hour before ``now_ms``."""
    ids = ScenarioIds()
    t = now_ms - 3_600_000
    records: list[Record] = []

    m = _message(ids.normal, t, 0, 10, "order-1 customer-1")
    records += [send(ids.normal, t, m, props={"region": "eu"})]
    records += consume(BILLING_HEADER, "billing", ids.normal, t + 20, m)
    records += consume(SHIPPING_HEADER, "shipping", ids.normal, t + 25, m)

    t += 1000
    m = _message(ids.retried, t, 1, 20, "order-2")
    records += [send(ids.retried, t, m)]
    records += consume(BILLING_HEADER, "billing", ids.retried, t + 10, m)
    records += consume(SHIPPING_HEADER, "shipping", ids.retried, t + 10, m, status=Status.EXCEPTION)
    records += consume(SHIPPING_HEADER, "shipping", ids.retried, t + 500, m, retry=1)

    t += 1000
    m = _message(ids.dead, t, 2, 30, "order-3")
    records += [send(ids.dead, t, m)]
    records += consume(BILLING_HEADER, "billing", ids.dead, t + 10, m)
    for attempt in range(3):
        records += consume(SHIPPING_HEADER, DEAD_GROUP, ids.dead, t + 100 * (attempt + 1), m,
                           retry=attempt, status=Status.FAILED)
    records.append((SHIPPING_HEADER, _event(EventType.DEAD, t + 400, DEAD_GROUP, ids.dead, retry=3,
                                            error="max retries", **m)))

    t += 1000
    m = _message(ids.transactional, t, 3, 40, "order-4")
    records += [send(ids.transactional, t, m, tx_id="tx-4")]
    records.append((PRODUCER_HEADER, _event(EventType.END_TX, t + 50, PRODUCER, ids.transactional, tx_id="tx-4",
                                            tx_state=int(TxState.COMMIT), **m)))

    t += 1000
    m = _message(ids.unfinished, t, 0, 11, "order-5")
    records += [send(ids.unfinished, t, m)]
    records += consume(BILLING_HEADER, "billing", ids.unfinished, t + 10, m, status=None)

    t += 1000
    m = _message(ids.failed_send, t, 1, 21, "order-6")
    records += [send(ids.failed_send, t, m, status=int(Status.TIMEOUT), error="send timed out", cost_us=3_000_000)]

    for n in range(SHARED_KEY_COUNT):
        t += 1000
        msg_id = f"msg-shared-{n:03d}"
        records += [send(msg_id, t, _message(msg_id, t, n % 4, 100 + n, f"{SHARED_KEY} order-{100 + n}"))]
    return ids, records


def bulk(count: int, now_ms: int, *, first: int = 0, total: int | None = None, topic: str = "bulk",
         span_ms: int = 24 * 3_600_000, consumers: tuple[str, ...] = ("billing",)) -> Iterator[Record]:
    """Messages ``first .. first+count-1`` of ``total`` (default ``count``), evenly over ``span_ms`` before ``now_ms``.

    Message ``n`` is ``bulk-<n:09d>`` with key ``key-<n % 1000:04d>``; each of
    ``consumers`` received and finished it 5 ms after it was stored.
    """
    total = count if total is None else total
    step = max(span_ms // max(total, 1), 1)
    start = now_ms - span_ms
    for n in range(first, first + count):
        t = start + n * step
        msg_id = f"bulk-{n:09d}"
        msg = dict(keys=f"key-{n % 1000:04d}", tags="t", broker="broker-a", queue=n % 8, offset=n // 8,
                   born_ms=t - 1, store_ms=t)
        yield PRODUCER_HEADER, _event(EventType.PUB, t, PRODUCER, msg_id, topic=topic, cost_us=900, **msg)
        for group in consumers:
            yield from consume(BILLING_HEADER, group, msg_id, t + 5, dict(msg, topic=topic))
