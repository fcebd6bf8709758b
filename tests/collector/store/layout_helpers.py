"""What the layout tests share: a scenario where every query kind has something to answer, a store
indexed fresh from it (the reference), and every query kind's answer from a store."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable
from typing import Any

from index_helpers import CONSUMER, consumed, ev, message

from collector.index.indexer import finish_batch, index_records
from collector.query.documents import page_dict, trace_document
from collector.query.overview import overview
from collector.store import Store, open_store
from collector.store.reader import TraceQuery
from tracehook.wire import BatchHeader, Event, EventType, Status, trace_id_of

ROOT = pathlib.Path(__file__).resolve().parents[3]
HOUR = 3_600_000
NOW = int(time.time() * 1000)
T0 = NOW - 30 * HOUR  # events over the last 30 hours: some dead letters are past the 24-hour pending limit
Record = tuple[BatchHeader, Event]


def scenario(topic: str) -> list[Record]:
    """Sends with keys, consumes (ok, failed, retried), dead letters (one of a send never traced),
    a failed send, unconsumed messages: every query kind has something to answer."""
    out: list[Record] = []
    for i in range(24):
        t = T0 + i * 75 * 60_000
        msg_id = f"{topic}-m{i:02d}"
        out += message(topic, msg_id, t, keys=f"order-{i % 5} k{i}", queue=i % 3, offset=100 + i,
                       status=Status.FAILED if i == 7 else Status.OK)
        if i % 4 == 0:
            continue  # nobody consumed it
        out += consumed(topic, msg_id, t, "billing", status=Status.OK if i % 3 else Status.FAILED, queue=i % 3,
                        offset=100 + i, at=t + 2_000)
        if i % 5 == 1:
            out += consumed(topic, msg_id, t, "audit", status=Status.RETRY_LATER, retry=1, at=t + 9_000)
            out.append((CONSUMER, ev(EventType.DEAD, t + 20_000, "audit", topic, msg_id, error="gave up", retry=3)))
    out.append((CONSUMER, ev(EventType.DEAD, NOW - HOUR, "audit", topic, f"{topic}-orphan", keys="order-9")))
    return out


def with_write_times(records: list[Record]) -> list[tuple[BatchHeader, Event, int]]:
    """Each event as an index job wrote it, a little after it happened."""
    return [(h, e, e.time_ms + 1_500) for h, e in records]


def fresh(url: str, records: list[Record]) -> None:
    store = open_store(url)
    try:
        index_records(store, records)
        finish_batch(store)
    finally:
        store.close()


def answers(store: Store, topic: str, records: list[Record]) -> dict[str, Any]:
    """Every query kind's answer, pages walked with a small limit (so cursors are compared too)."""
    q = TraceQuery(store)
    ids = sorted({e.msg_id for _, e in records})
    keys_ = sorted({k for _, e in records for k in e.keys.split() if k})
    lo, hi = T0 - HOUR, NOW + HOUR

    def pages(fetch: Callable[[str | None], Any]) -> list[dict[str, Any]]:
        out, cursor = [], None
        while True:
            page = page_dict(fetch(cursor))
            out.append(page)
            cursor = page["next_cursor"]
            if cursor is None:
                return out

    return {
        "traces": {m: (None if (t := q.get_trace(m)) is None else trace_document(t)) for m in ids},
        "records": {m: q.consume_records(m) for m in ids},
        "keys": {k: pages(lambda c, k=k: q.by_key(topic, k, lo, hi, 3, c)) for k in keys_},
        "time": pages(lambda c: q.by_time(topic, lo, hi, 4, c)),
        "trace": {t: pages(lambda c, t=t: q.by_trace(t, 2, c)) for t in sorted({trace_id_of(e) for _, e in records})},
        "dead": {g: pages(lambda c, g=g: q.dead_letters(topic, g, lo, hi, 2, c)) for g in (None, "audit")},
        "unconsumed": {g: pages(lambda c, g=g: q.unconsumed(topic, g, lo, hi, 5, c)) for g in ("billing", "audit")},
        "offsets": {t: q.offsets_at(topic, t) for t in (lo, T0 + 5 * HOUR, hi)},
        "sequence": {o: q.by_sequence(topic, "b1", o) for o in sorted({e.offset for _, e in records})},
        "groups": q.groups(topic),
        "overview": overview(store, NOW - 24 * HOUR, NOW, now_ms=NOW).to_json(),
        "overview_2d": overview(store, NOW - 48 * HOUR, NOW, now_ms=NOW, topic=topic).to_json(),
    }


