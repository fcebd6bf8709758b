"""The overview: topics and consumer groups over a window, read from rollups only.

No message is scanned: the rows :mod:`collector.index.rollup` keeps per (topic, minute)
hold every count, a latency histogram that merges across minutes, and what a group's
lag in time needs.  The web console's start page, ``GET /v1/overview`` and the
Prometheus export on ``/metrics`` all read :func:`overview`.

Example::

    ov = overview(store, now_ms - 3_600_000, now_ms, now_ms=now_ms)
    for topic in ov.topics:
        print(topic.topic, topic.sent, [(g.group, g.consumed, g.lag_ms) for g in topic.groups])

``sent`` counts the messages the broker stored; a send that failed at the broker (never
stored: :attr:`collector.store.model.MessageTrace.never_stored`) counts in ``failed_sends``
instead, and in no group's not-received count or lag, as the replay list leaves it out.

Lag in time of a group: the age (at ``now_ms``) of the oldest message sent in the lag
horizon (:data:`DEFAULT_LAG_HORIZON_MS` before the window's end) that the group has not
yet consumed (never received, still pending or being retried; failed and dead count as
finished), not counting messages sent before the first message the group received in
that horizon (it did not exist yet).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from collector.index.rollup import LATENCY_BOUNDS_MS, GroupBucket, MinuteBucket, read_minutes
from collector.index.rollup_hours import read_window
from collector.query.errors import BadTimeError, ParamError
from collector.query.overview_rows import DEFAULT_SORT, OverviewRow, RowQuery, select_rows
from collector.query.params import MAX_PARAM_LEN, request_window, text_param
from collector.query.timeparse import parse_duration
from collector.store import Store

DEFAULT_LAG_HORIZON_MS = 24 * 3600 * 1000
"""How far back from the window's end the lag looks for unconsumed messages."""
MAX_POINTS = 360
"""Most points of a time series; longer windows get coarser steps."""
STEPS_MIN = (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440)
"""Series steps in minutes, the smallest that keeps a window within :data:`MAX_POINTS` is used."""
MINUTE_MS = 60_000
COUNTS = ("consumed", "retrying", "failed", "dead", "pending", "retried")
"""The per-group counters a rollup keeps (``not_received`` is ``sent`` minus what the group received)."""
PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))

MAX_WINDOW_MS = 31 * 24 * 3600 * 1000
"""Longest overview window (rollups live as long as the index's TTL, 30 days by default)."""
DEFAULT_WINDOW = "1h"

Json = dict[str, Any]


def window_from_params(query: Mapping[str, str], now_ms: int) -> tuple[int, int, str | None]:
    """``(begin_ms, end_ms, topic)`` from ``window=DURATION`` (the last DURATION) or ``begin``/``end``
    (default: the last hour); :class:`ParamError` names what is wrong."""
    window = query.get("window", "")
    topic = text_param("topic", query.get("topic"))
    if not window and not query.get("begin") and not query.get("end"):
        window = DEFAULT_WINDOW
    if not window:
        begin, end = request_window(query, now_ms=now_ms, max_window_ms=MAX_WINDOW_MS)
        return begin, end, topic
    if query.get("begin") or query.get("end"):
        raise ParamError("bad_window", "give either window or begin/end, not both")
    if len(window) > MAX_PARAM_LEN:
        raise ParamError("bad_window", "window is too long")
    try:
        length = parse_duration(window, name="window")
    except BadTimeError as exc:
        raise ParamError("bad_window", exc.detail) from None
    if not 0 < length <= MAX_WINDOW_MS:
        raise ParamError("bad_window", f"window must be between 1m and {MAX_WINDOW_MS // 86_400_000}d")
    return now_ms - length, now_ms, topic


def step_ms_for(begin_ms: int, end_ms: int) -> int:
    """The series step for a window: whole minutes, at most :data:`MAX_POINTS` points."""
    minutes = (end_ms - begin_ms) // MINUTE_MS + 1
    for step in STEPS_MIN:
        if minutes <= step * MAX_POINTS:
            return step * MINUTE_MS
    return STEPS_MIN[-1] * MINUTE_MS * -(-minutes // (STEPS_MIN[-1] * MAX_POINTS))


def percentile_ms(counts: list[int], q: float) -> float | None:
    """The ``q`` quantile of a :data:`LATENCY_BOUNDS_MS` histogram, interpolated inside its bucket."""
    total = sum(counts)
    if total == 0:
        return None
    rank, running = q * total, 0
    for i, n in enumerate(counts):
        if n and running + n >= rank:
            lower = LATENCY_BOUNDS_MS[i - 1] if i > 0 else 0
            if i == len(LATENCY_BOUNDS_MS):  # the open-ended bucket: its lower bound is all we know
                return float(lower)
            return lower + (LATENCY_BOUNDS_MS[i] - lower) * (rank - running) / n
        running += n
    return float(LATENCY_BOUNDS_MS[-1])


@dataclass
class GroupStats:
    """One consumer group on one topic over the window."""

    group: str
    sent: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0))
    latency: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BOUNDS_MS) + 1))
    latency_sum_ms: int = 0
    lag_ms: int = 0
    series: dict[str, list[int]] = field(default_factory=dict)

    @property
    def received(self) -> int:
        return sum(self.counts[c] for c in ("consumed", "retrying", "failed", "dead", "pending"))

    def add(self, bucket: GroupBucket) -> None:
        counts = self.counts
        counts["consumed"] += bucket.consumed
        counts["retrying"] += bucket.retrying
        counts["failed"] += bucket.failed
        counts["dead"] += bucket.dead
        counts["pending"] += bucket.pending
        counts["retried"] += bucket.retried
        if bucket.consumed:  # only consumed messages have a latency
            self.latency = list(map(operator.add, self.latency, bucket.latency))
        self.latency_sum_ms += bucket.latency_sum_ms

    def to_json(self) -> Json:
        return {
            "group": self.group, **self.counts, "not_received": max(0, self.sent - self.received),
            "latency_ms": {"count": sum(self.latency), **{name: percentile_ms(self.latency, q) for name, q in PERCENTILES}},
            "lag_s": self.lag_ms / 1000, "series": self.series,
        }


@dataclass
class TopicStats:
    """One topic over the window: messages sent (stored by the broker), failed sends (never
    stored), a series of each per minute step, and its groups."""

    topic: str
    sent: int = 0
    series: dict[str, list[int]] = field(default_factory=dict)
    groups: list[GroupStats] = field(default_factory=list)
    failed_sends: int = 0

    def to_json(self) -> Json:
        return {"topic": self.topic, "sent": self.sent, "failed_sends": self.failed_sends, "series": self.series,
                "groups": [g.to_json() for g in self.groups]}


@dataclass
class Overview:
    """Every topic with rollups in ``[begin_ms, end_ms]`` (minute resolution) or with a group lagging.

    ``rows`` is the page of compact rows asked for (:mod:`collector.query.overview_rows`), and
    ``topics`` then holds the topics of those rows only, in the rows' order, with their series."""

    begin_ms: int
    end_ms: int
    now_ms: int
    step_ms: int
    times: list[int]
    topics: list[TopicStats]
    rows: list[OverviewRow] = field(default_factory=list)
    total_rows: int = 0
    next_cursor: str | None = None
    sort: str = DEFAULT_SORT

    def to_json(self) -> Json:
        return {
            "begin_ms": self.begin_ms, "end_ms": self.end_ms, "now_ms": self.now_ms, "step_ms": self.step_ms,
            "times": self.times, "latency_bounds_ms": list(LATENCY_BOUNDS_MS), "sort": self.sort,
            "rows": [r.to_json() for r in self.rows], "total_rows": self.total_rows, "next_cursor": self.next_cursor,
            "topics": [t.to_json() for t in self.topics],
        }


def overview(
    store: Store, begin_ms: int, end_ms: int, *, now_ms: int, lag_horizon_ms: int = DEFAULT_LAG_HORIZON_MS,
    topic: str | None = None, rows: RowQuery | None = None, series: bool = True,
) -> Overview:
    """The overview of ``[begin_ms, end_ms]`` (of one ``topic`` when given) from the rollups.

    Every topic's totals and lag come from hourly rollups for the whole hours of the window and of
    the lag's look-back, all topics' in one scan, and minute rollups for the edges
    (:func:`collector.index.rollup_hours.read_window`).  With ``rows``, only
    the topics of the page of rows it asks for are kept; ``series`` reads their minutes for the charts.
    """
    step = step_ms_for(begin_ms, end_ms)
    first = begin_ms - begin_ms % step
    times = list(range(first, end_ms + 1, step))
    out = Overview(begin_ms, end_ms, now_ms, step, times, [])
    lo, hi = begin_ms - begin_ms % MINUTE_MS, end_ms - end_ms % MINUTE_MS + MINUTE_MS  # the window's minutes
    start = min(begin_ms, end_ms - lag_horizon_ms)
    buckets = read_window(store, start - start % MINUTE_MS, hi, cuts=(lo,), topic=topic, lag_only_before=lo)
    stats = [s for name in sorted(buckets) if (s := _topic_totals(name, buckets[name], lo, now_ms)) is not None]
    if rows is None:
        out.topics = stats
    else:
        out.sort = rows.sort
        out.rows, out.total_rows, out.next_cursor = select_rows(rows_of(stats), rows)
        by_name = {s.topic: s for s in stats}
        out.topics = [by_name[name] for name in dict.fromkeys(r.topic for r in out.rows)]
    if series:
        for t in out.topics:
            _add_series(t, read_minutes(store, t.topic, begin_ms, end_ms), first, step, len(times))
    return out


def rows_of(topics: Iterable[TopicStats]) -> list[OverviewRow]:
    """One compact row per topic × group (one row for a topic no group received anything of)."""
    out: list[OverviewRow] = []
    for t in topics:
        for g in t.groups:
            out.append(OverviewRow(t.topic, g.group, t.sent, g.counts["consumed"], g.counts["failed"],
                                   g.counts["dead"], max(0, g.sent - g.received), t.failed_sends,
                                   percentile_ms(g.latency, 0.99), g.lag_ms))
        if not t.groups:
            out.append(OverviewRow(t.topic, None, t.sent, 0, 0, 0, 0, t.failed_sends, None, 0))
    return out


def _topic_totals(topic: str, buckets: list[MinuteBucket], lo: int, now_ms: int) -> TopicStats | None:
    """A topic's counts over the window (its buckets from ``lo`` on) and each group's lag over all of
    ``buckets`` (the look-back and the window, in time order), without series (None: nothing to show)."""
    in_window = [b for b in buckets if b.minute_ms >= lo]
    lags = {g: lag for g in {g for m in buckets for g in m.groups} if (lag := lag_ms(g, buckets, now_ms))}
    if not in_window and not lags:
        return None
    stats = TopicStats(topic)
    groups: dict[str, GroupStats] = {}
    for m in in_window:
        stats.sent += m.sent
        stats.failed_sends += m.failed_sends
        for name, bucket in m.groups.items():
            g = groups.get(name)
            if g is None:
                g = groups[name] = GroupStats(name)
            g.add(bucket)
    for name in lags:
        groups.setdefault(name, GroupStats(name))  # a stalled group: nothing in the window, but messages waiting
    for g in groups.values():
        g.sent = stats.sent
        g.lag_ms = lags.get(g.group, 0)
    stats.groups = [groups[name] for name in sorted(groups)]
    return stats


def _add_series(stats: TopicStats, minutes: list[MinuteBucket], first: int, step: int, points: int) -> None:
    """The per-step series of one topic and its groups, from its minute rollups in the window."""
    stats.series = {"sent": [0] * points, "failed_sends": [0] * points}
    for g in stats.groups:
        g.series = {"consumed": [0] * points, "failed": [0] * points}
    groups = {g.group: g for g in stats.groups}
    for m in minutes:
        i = (m.minute_ms - first) // step
        if not 0 <= i < points:
            continue
        stats.series["sent"][i] += m.sent
        stats.series["failed_sends"][i] += m.failed_sends
        for name, bucket in m.groups.items():
            g = groups.get(name)
            if g is not None:  # (a group first rolled up after the totals were read waits for the next load)
                g.series["consumed"][i] += bucket.consumed
                g.series["failed"][i] += bucket.failed + bucket.dead


def lag_ms(group: str, minutes: list[MinuteBucket], now_ms: int) -> int:
    """The group's lag in time from a topic's minutes in order (0: nothing waiting)."""
    started = False
    for m in minutes:
        bucket = m.groups.get(group)
        if not started:
            if bucket is None:
                continue  # before the group's first message: not its backlog
            started, oldest = True, bucket.oldest_open_after_first_ms
        elif bucket is None:
            oldest = m.first_ms  # the group received nothing of this minute
        else:
            oldest = bucket.oldest_open_ms
        if oldest is not None:
            return max(0, now_ms - oldest)
    return 0
