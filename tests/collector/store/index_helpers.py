"""Building events for the store tests."""

from __future__ import annotations

import uuid
from typing import Any

from fixtures.pages import CursorPages

from tracehook.wire import BatchHeader, Event, EventType, Status, make_event

PRODUCER = BatchHeader("prod-client", 1, app="shop", host="web-1")
CONSUMER = BatchHeader("cons-client", 9, app="billing", host="bill-1")


def backend_of(store_url: str) -> str:
    """``"local"`` or ``"hbase"``: which of :data:`BACKENDS` a store URL names."""
    return "local" if store_url.startswith("local:") else "hbase"


def unique(prefix: str) -> str:
    """A name no other test uses (tests share one HBase namespace per module)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def ev(type_: EventType, time_ms: int, group: str, topic: str, msg_id: str, **fields: Any) -> Event:
    return Event._make(make_event(type_, time_ms, group, topic, msg_id, **fields))


def message(topic: str, msg_id: str, t: int, *, keys: str = "", queue: int = 0, offset: int = 0,
            status: Status = Status.OK) -> list[tuple[BatchHeader, Event]]:
    """A PUB event of a message stored at ``t``."""
    return [(PRODUCER, ev(EventType.PUB, t + 1, "pg", topic, msg_id, keys=keys, tags="tag-a", broker="b1",
                          queue=queue, offset=offset, born_ms=t - 1, store_ms=t, cost_us=800, status=status,
                          props={"p": "1"}))]


def consumed(topic: str, msg_id: str, t: int, group: str, *, status: Status | None = Status.OK, retry: int = 0,
             queue: int = 0, offset: int = 0, at: int | None = None) -> list[tuple[BatchHeader, Event]]:
    """SUB_BEFORE (and SUB_AFTER unless ``status`` is None) of one consume attempt of a message stored at ``t``."""
    at = at if at is not None else t + 10 + retry * 100
    common = dict(queue=queue, offset=offset, born_ms=t - 1, store_ms=t, retry=retry,
                  request_id=f"{msg_id}/{group}/{retry}")
    out = [(CONSUMER, ev(EventType.SUB_BEFORE, at, group, topic, msg_id, **common))]
    if status is not None:
        out.append((CONSUMER, ev(EventType.SUB_AFTER, at + 5, group, topic, msg_id, cost_us=5000, status=status,
                                 error="" if status == Status.OK else "boom", **common)))
    return out


def all_pages(fetch: Any, limit: int) -> tuple[list[str], int]:
    """Follow ``next_cursor`` to the end: (msg ids of every page in order, number of pages)."""
    pages = CursorPages()
    for cursor in pages:
        page = fetch(limit=limit, cursor=cursor)
        assert len(page.items) <= limit
        pages.add([i.msg_id for i in page.items], page.next_cursor)
    return pages.items, pages.count


def page_ids(fetch: Any, limit: int) -> list[str]:
    """The msg_ids of every page of a paged query, following ``next_cursor`` to the end."""
    return all_pages(fetch, limit)[0]
