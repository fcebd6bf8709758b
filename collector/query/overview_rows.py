"""The overview's compact rows: one per topic × consumer group, sorted problems first, filtered and paged.

A topic no group received anything of gets one row (``group`` None).  The default order puts
what needs a look first: dead letters, then failures (a group's failed messages plus the topic's
failed sends), then lag in time, then volume (messages sent); ties by topic, then group.  The other
sorts order by one column (names ascending, numbers descending).  ``cursor`` is where the next
page starts, as the previous answer's ``next_cursor`` gave it (opaque to clients).

Example::

    query = row_query_from_params({"sort": "lag", "limit": "20"})
    page, total, next_cursor = select_rows(rows, query)   # rows: collector.query.overview.rows_of(...)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from collector.query.errors import ParamError
from collector.query.params import text_param

DEFAULT_SORT = "problems"
NAME_SORTS = ("topic", "group")
NUMBER_SORTS = ("sent", "consumed", "failed", "dead", "not_received", "failed_sends", "p99", "lag")
SORTS = (DEFAULT_SORT, *NAME_SORTS, *NUMBER_SORTS)
"""Every ``sort`` value the overview accepts."""
DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
MAX_CURSOR = 10_000_000

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class RowQuery:
    """What rows to answer: the order, a page (``limit`` rows from ``offset``) and name filters."""

    sort: str = DEFAULT_SORT
    limit: int = DEFAULT_LIMIT
    offset: int = 0
    group: str | None = None
    """Only this consumer group's rows (exact name)."""
    text: str | None = None
    """Only rows whose topic or group contains this text (case-insensitive)."""
    series: bool = True
    """Whether the page's topics carry their per-step series (``series=0``: counts only)."""


@dataclass(frozen=True, slots=True)
class OverviewRow:
    """One topic × consumer group over the window (``group`` None: a topic no group received)."""

    topic: str
    group: str | None
    sent: int
    consumed: int
    failed: int
    dead: int
    not_received: int
    failed_sends: int
    p99_ms: float | None
    lag_ms: int

    def to_json(self) -> Json:
        return {"topic": self.topic, "group": self.group, "sent": self.sent, "consumed": self.consumed,
                "failed": self.failed, "dead": self.dead, "not_received": self.not_received,
                "failed_sends": self.failed_sends, "p99_ms": self.p99_ms, "lag_s": self.lag_ms / 1000}


def _int_param(query: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = query.get(name, "")
    if raw == "":
        return default
    if not raw.isascii() or not raw.isdigit() or not low <= int(raw) <= high:
        raise ParamError(f"bad_{name}", f"{name} must be a whole number from {low} to {high}, not {raw[:40]!r}")
    return int(raw)


def row_query_from_params(query: Mapping[str, str]) -> RowQuery:
    """``sort``, ``limit``, ``cursor``, ``group``, ``filter`` and ``series`` from a query string;
    :class:`ParamError` (``bad_sort``, ``bad_limit``, ``bad_cursor``, ``bad_param``) names what is wrong."""
    sort = query.get("sort", "") or DEFAULT_SORT
    if sort not in SORTS:
        raise ParamError("bad_sort", f"sort must be one of {', '.join(SORTS)}, not {sort[:40]!r}")
    return RowQuery(sort=sort, limit=_int_param(query, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT),
                    offset=_int_param(query, "cursor", 0, 0, MAX_CURSOR),
                    group=text_param("group", query.get("group")), text=text_param("filter", query.get("filter")),
                    series=_int_param(query, "series", 1, 0, 1) == 1)


def _names(r: OverviewRow) -> tuple[str, str]:
    return r.topic, r.group or ""


def problems_key(r: OverviewRow) -> tuple[Any, ...]:
    """The default order: dead letters, failures, lag, volume (each most first), then the names."""
    return (-r.dead, -(r.failed + r.failed_sends), -r.lag_ms, -r.sent, *_names(r))


_KEYS: dict[str, Callable[[OverviewRow], tuple[Any, ...]]] = {
    "problems": problems_key,
    "topic": _names,
    "group": lambda r: (r.group or "", r.topic),
    "p99": lambda r: (-(r.p99_ms if r.p99_ms is not None else -1.0), *_names(r)),
    "lag": lambda r: (-r.lag_ms, *_names(r)),
    **{name: (lambda r, name=name: (-getattr(r, name), *_names(r)))
       for name in ("sent", "consumed", "failed", "dead", "not_received", "failed_sends")},
}


def matches(row: OverviewRow, query: RowQuery) -> bool:
    if query.group is not None and row.group != query.group:
        return False
    if query.text is not None:
        text = query.text.casefold()
        return text in row.topic.casefold() or text in (row.group or "").casefold()
    return True


def select_rows(rows: Iterable[OverviewRow], query: RowQuery) -> tuple[list[OverviewRow], int, str | None]:
    """The page of ``rows`` ``query`` asks for: ``(page, rows matching in all, next cursor or None)``."""
    ordered = sorted((r for r in rows if matches(r, query)), key=_KEYS[query.sort])
    end = query.offset + query.limit
    return ordered[query.offset:end], len(ordered), str(end) if end < len(ordered) else None
