"""Backtracking: offsets at a time, a consumer group's reset plan, the replay list, dead-letter counts.

RocketMQ rewinds a group to a timestamp (``resetOffsetByTime``) and the group then
re-consumes everything after it, including what had succeeded.  The traces know
more: which messages a group never consumed successfully, so only those need replaying.

Pure logic over :class:`collector.store.reader.TraceQuery` (and the store's scan API
for what the query class does not offer); shared by the CLI and the HTTP routes::

    from collector.store import open_store
    from collector.store.reader import TraceQuery
    from collector.query.timeparse import parse_time

    q = TraceQuery(open_store("local:index.sqlite3"))
    offsets_at(q, "orders", parse_time("-2h"))                  # {queue: first offset stored >= T}
    plan = reset_plan(q, "orders", "billing", parse_time("-2h"))
    plan.offsets()                                              # {queue: offset to commit}
    for item in iter_replay(q, "orders", "billing", begin_ms, end_ms):
        print(item.queue, item.offset, item.status)             # never consumed OK by billing

Offsets follow Kafka's committed-offset convention (RocketMQ's consumer offset is the
same): the *next* offset the group will read, so a group that finished offset 41 is at 42.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from collector.query.errors import UnknownGroupError
from collector.store.errors import BadRangeError
from collector.store.model import CONSUMED, GroupOutcome, MessageSummary, MessageTrace
from collector.store.model import DEAD as DEAD_OUTCOME
from collector.store.reader import MAX_LIMIT, TraceQuery, next_offset

DEFAULT_SLACK_MS = 5 * 60_000
"""How far past the newest consume of every queue the position scan reads on.

Offsets grow with store time within a queue, so once every queue has been seen the
older records cannot hold a higher offset; the slack covers producer clocks when the
broker files messages under their create time (Kafka's default CreateTime)."""
DEFAULT_REPLAY_LIMIT = 100
DEFAULT_BUCKET_MS = 3_600_000
MAX_BUCKETS = 2000
"""Most time buckets one dead-letter count covers (the web page draws one bar per bucket)."""

# What the plan does on one queue.
REWIND, KEEP, FORWARD, SET = "rewind", "keep", "forward", "set"
# Replay statuses besides the consume statuses (FAILED, TIMEOUT, EXCEPTION, RETRY_LATER, UNKNOWN).
NOT_RECEIVED, PENDING, DEAD, REPLAYED = "NOT_RECEIVED", "PENDING", "DEAD", "REPLAYED"


# --- offsets and reset plans ---------------------------------------------------

def offsets_at(query: TraceQuery, topic: str, time_ms: int, queue: int | None = None) -> dict[int, int]:
    """Per queue, the first offset stored at or after ``time_ms`` (RocketMQ's LOWER-bound search).

    Later than every indexed message gives the end offset (last + 1, at most 2^63-1); earlier than
    them gives the first indexed offset.  Queues with nothing indexed are left out.
    """
    return query.offsets_at(topic, time_ms, queue)


def offsets_document(query: TraceQuery, topic: str, time_ms: int, *, group: str | None = None,
                     queue: int | None = None, force: bool = False,
                     allow_unknown_group: bool = False) -> dict[str, Any]:
    """``GET /v1/topics/{topic}/offsets`` and ``tracehook offsets --json``: offsets at a time,
    ``{topic, time_ms, queues: [{queue, offset}]}``, or with ``group`` that group's reset plan.

    A group never seen on a topic with indexed queues raises :class:`UnknownGroupError` unless
    ``allow_unknown_group``: its plan would set every queue, so a misspelt group looks like a plan.
    """
    if group is not None and not allow_unknown_group and query.queues(topic):
        check_group_seen(query, topic, group)
    if group is None:
        offsets = offsets_at(query, topic, time_ms, queue)
        return {"topic": topic, "time_ms": time_ms,
                "queues": [{"queue": q, "offset": offsets[q]} for q in sorted(offsets)]}
    return reset_plan(query, topic, group, time_ms, force=force, queue=queue).to_json()


@dataclass(frozen=True)
class QueuePosition:
    """Where traces show a group on one queue: one past the highest offset it finished."""

    queue: int
    next_offset: int
    time_ms: int  # message time of that highest finished message


def last_positions(
    query: TraceQuery, topic: str, group: str, *, queue: int | None = None, slack_ms: int = DEFAULT_SLACK_MS
) -> dict[int, QueuePosition]:
    """Per queue, the group's position as its traces show it (SUB_AFTER of any status).

    A finished consume counts whatever its status: the consumer moved past it (a failed
    message goes to a retry or dead-letter queue, the offset advances).  Reads the
    group's consume records newest first and stops once every queue of the topic has
    been seen and the scan is ``slack_ms`` older than the last queue's newest record.
    """
    wanted = {queue} if queue is not None else set(query.queues(topic))
    positions: dict[int, QueuePosition] = {}
    newest: dict[int, int] = {}  # queue -> time of its newest finished consume
    for time_ms, finished in query.group_positions_newest_first(topic, group):
        if newest and wanted <= newest.keys() and time_ms < min(newest.values()) - slack_ms:
            break
        for ev_queue, ev_offset in finished:
            if queue is not None and ev_queue != queue:
                continue
            newest.setdefault(ev_queue, time_ms)
            known = positions.get(ev_queue)
            if known is None or next_offset(ev_offset) > known.next_offset:
                positions[ev_queue] = QueuePosition(ev_queue, next_offset(ev_offset), time_ms)
    return positions


@dataclass(frozen=True)
class PlanEntry:
    """One queue of a reset plan.

    ``target`` is the offset for the reset time, ``current`` the group's position
    (``None`` when nothing is known about it on this queue), ``planned`` what to commit.
    """

    queue: int
    target: int
    current: int | None
    planned: int
    action: str  # rewind | keep | forward | set

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ResetPlan:
    """Per queue, where a consumer group should resume to re-consume from ``time_ms``."""

    topic: str
    group: str
    time_ms: int
    force: bool
    entries: tuple[PlanEntry, ...]

    def offsets(self) -> dict[int, int]:
        """``{queue: planned offset}``: what a reset commits."""
        return {e.queue: e.planned for e in self.entries}

    def changes(self) -> dict[int, int]:
        """Only the queues whose committed offset moves."""
        return {e.queue: e.planned for e in self.entries if e.action != KEEP}

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "group": self.group, "time_ms": self.time_ms, "force": self.force,
                "queues": [e.to_json() for e in self.entries]}


def plan_reset(targets: Mapping[int, int], current: Mapping[int, int], *, force: bool = False) -> list[PlanEntry]:
    """Combine offsets-at-time with the group's positions, as RocketMQ's broker does.

    Without ``force`` a queue only moves back (``target < current``): resetting never
    skips messages the group has not read yet.  With ``force`` every queue goes to its
    target.  A queue where the group's position is unknown goes to its target; a queue
    with a position but no target (nothing indexed there) keeps its position.
    ``current`` may come from traces (:func:`last_positions`) or from the broker.
    """
    entries = []
    for queue in sorted(set(targets) | set(current)):
        target, now = targets.get(queue), current.get(queue)
        if target is None:
            assert now is not None
            entries.append(PlanEntry(queue, now, now, now, KEEP))
        elif now is None:
            entries.append(PlanEntry(queue, target, None, target, SET))
        elif target < now:
            entries.append(PlanEntry(queue, target, now, target, REWIND))
        elif target > now and force:
            entries.append(PlanEntry(queue, target, now, target, FORWARD))
        else:
            entries.append(PlanEntry(queue, target, now, now, KEEP))
    return entries


def reset_plan(
    query: TraceQuery, topic: str, group: str, time_ms: int, *, force: bool = False, queue: int | None = None,
    slack_ms: int = DEFAULT_SLACK_MS,
) -> ResetPlan:
    """The reset plan of ``group`` on ``topic`` for ``time_ms``, positions taken from traces."""
    targets = offsets_at(query, topic, time_ms, queue)
    positions = last_positions(query, topic, group, queue=queue, slack_ms=slack_ms)
    current = {q: p.next_offset for q, p in positions.items()}
    return ResetPlan(topic, group, time_ms, force, tuple(plan_reset(targets, current, force=force)))


# --- the replay list ---------------------------------------------------------------

@dataclass(frozen=True)
class ReplayItem:
    """A message the group has no successful consume of, and how its last attempt ended.

    ``status`` is ``NOT_RECEIVED`` (no consume event at all), ``PENDING`` (received, the
    handler never finished), ``DEAD`` (sent to the dead-letter queue) or the last
    attempt's consume status (``FAILED``, ``TIMEOUT``, ``EXCEPTION``, ``RETRY_LATER``, ``UNKNOWN``),
    or ``REPLAYED``: ``tracehook replay`` re-delivered it (at ``replayed_ms``) after the group's
    last attempt, and the group has not consumed it since.  ``replayed_ms`` is 0 when never replayed.
    """

    msg_id: str
    topic: str
    keys: str
    tags: str
    queue: int
    offset: int
    born_ms: int
    store_ms: int
    time_ms: int  # the time the message is filed under (store, else born time)
    status: str
    error: str
    attempts: int
    last_attempt_ms: int  # 0 when never received
    replayed_ms: int = 0  # the group's last replay (0: never)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


FIELDS = tuple(ReplayItem.__dataclass_fields__)
"""Column order of the replay list (CSV header)."""


@dataclass(frozen=True)
class ReplayPage:
    """A page of the replay list; may hold fewer than ``limit`` items while ``next_cursor`` is set."""

    items: list[ReplayItem]
    next_cursor: str | None

    def to_json(self) -> dict[str, Any]:
        return {"items": [i.to_json() for i in self.items], "next_cursor": self.next_cursor}


def group_outcome(trace: MessageTrace, group: str) -> tuple[str, str, int, int] | None:
    """``(status, error, attempts, last attempt ms)`` of ``group`` on a message; ``None`` if consumed OK."""
    return _replay_status(trace.outcomes.get(group), trace.replayed.get(group, 0))


def _replay_status(outcome: GroupOutcome | None, replayed_ms: int = 0) -> tuple[str, str, int, int] | None:
    if outcome is None:
        return (REPLAYED if replayed_ms else NOT_RECEIVED), "", 0, 0
    if outcome.outcome == CONSUMED:
        return None
    # Replayed after the last attempt: on its way to the group, not missed a second time.
    status = REPLAYED if replayed_ms > outcome.last_ms else DEAD if outcome.outcome == DEAD_OUTCOME \
        else outcome.last_status
    return status, outcome.error, outcome.attempts, outcome.last_ms


def _replay_items(group: str, summaries: Iterable[MessageSummary]) -> list[ReplayItem]:
    """Describe the group's outcome on each message of a replay page."""
    items = []
    for summary in summaries:
        replayed_ms = summary.replayed.get(group, 0)
        outcome = _replay_status(summary.groups.get(group), replayed_ms)
        if outcome is None:
            continue
        status, error, attempts, last_ms = outcome
        items.append(ReplayItem(
            msg_id=summary.msg_id, topic=summary.topic, keys=summary.keys, tags=summary.tags, queue=summary.queue,
            offset=summary.offset, born_ms=summary.born_ms, store_ms=summary.store_ms, time_ms=summary.time_ms,
            status=status, error=error, attempts=attempts, last_attempt_ms=last_ms, replayed_ms=replayed_ms,
        ))
    return items


def replay_list(
    query: TraceQuery, topic: str, group: str, begin_ms: int, end_ms: int,
    limit: int = DEFAULT_REPLAY_LIMIT, cursor: str | None = None,
) -> ReplayPage:
    """Messages of ``topic`` filed in ``[begin_ms, end_ms]`` that ``group`` never consumed successfully.

    Oldest first.  Follow ``next_cursor`` until it is ``None``; a page may be shorter
    than ``limit`` (candidates the full trace shows as consumed are dropped).
    """
    page = query.unconsumed(topic, group, begin_ms, end_ms, limit, cursor)
    return ReplayPage(_replay_items(group, page.items), page.next_cursor)


def group_seen(query: TraceQuery, topic: str, group: str) -> bool:
    """True when the index holds a consume record or dead letter of ``group`` on ``topic`` (two one-row scans).

    Any time within retention counts, not only a replay window: a group that was down for
    the whole window is exactly the one whose replay list matters.
    """
    return query.group_seen(topic, group)


def groups_seen(query: TraceQuery, topic: str, limit: int = 20) -> list[str]:
    """Consumer groups with consume records on ``topic`` (up to ``limit``): one one-row scan per group."""
    return query.groups(topic, limit)


def check_group_seen(query: TraceQuery, topic: str, group: str) -> None:
    """Raise :class:`UnknownGroupError` when ``group`` was never seen on ``topic`` (see :func:`group_seen`)."""
    if group_seen(query, topic, group):
        return
    known = groups_seen(query, topic)
    seen = f"groups seen on it: {', '.join(known)}" if known else "no consumer group seen on it"
    raise UnknownGroupError(
        f"consumer group {group!r} has never consumed topic {topic!r} as far as the index knows ({seen}); "
        "check the name, or allow it explicitly (--allow-unknown-group, allow_unknown_group=true) "
        "for a group that has not consumed yet")


def iter_replay(
    query: TraceQuery, topic: str, group: str, begin_ms: int, end_ms: int, page_size: int = MAX_LIMIT
) -> Iterator[ReplayItem]:
    """The whole replay list, page after page, each message once."""
    seen: set[str] = set()
    cursor: str | None = None
    while True:
        page = replay_list(query, topic, group, begin_ms, end_ms, page_size, cursor)
        for item in page.items:
            if item.msg_id not in seen:
                seen.add(item.msg_id)
                yield item
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


def offsets_by_queue(items: Iterable[ReplayItem | Mapping[str, Any]]) -> dict[int, list[int]]:
    """``{queue: [offsets ascending]}`` of a replay list: what a replayer re-reads from the broker.

    Takes :class:`ReplayItem` objects or their JSON form (``tracehook replay-list``, the
    HTTP API).  Items without a known queue/offset (``-1``: the trace never said) are left out.
    """
    out: dict[int, set[int]] = {}
    for item in items:
        queue, offset = (item.queue, item.offset) if isinstance(item, ReplayItem) else (item["queue"], item["offset"])
        if queue >= 0 and offset >= 0:
            out.setdefault(queue, set()).add(offset)
    return {queue: sorted(offsets) for queue, offsets in sorted(out.items())}


# --- dead letters over time --------------------------------------------------------

@dataclass(frozen=True)
class DeadCounts:
    """Dead letters of a topic per consumer group per time bucket (``buckets`` are the bucket starts)."""

    topic: str
    begin_ms: int
    end_ms: int
    bucket_ms: int
    buckets: list[int]
    groups: dict[str, list[int]]

    def totals(self) -> dict[str, int]:
        return {group: sum(counts) for group, counts in self.groups.items()}

    def to_json(self) -> dict[str, Any]:
        return dict(asdict(self), totals=self.totals())


def dead_counts(
    query: TraceQuery, topic: str, begin_ms: int, end_ms: int, bucket_ms: int = DEFAULT_BUCKET_MS
) -> DeadCounts:
    """Count dead letters per group in ``bucket_ms`` buckets of ``[begin_ms, end_ms]`` (row keys only)."""
    if begin_ms < 0 or begin_ms > end_ms:
        raise BadRangeError(f"bad time range [{begin_ms}, {end_ms}]")
    if bucket_ms < 1:
        raise BadRangeError(f"bucket must be at least 1 ms, not {bucket_ms}")
    n = (end_ms - begin_ms) // bucket_ms + 1
    if n > MAX_BUCKETS:
        raise BadRangeError(f"{n} buckets is more than {MAX_BUCKETS}: use a wider bucket or a shorter window")
    groups: dict[str, list[int]] = {}
    for time_ms, group in query.dead_letter_times(topic, begin_ms, end_ms):
        index = (time_ms - begin_ms) // bucket_ms
        groups.setdefault(group, [0] * n)[index] += 1
    return DeadCounts(topic, begin_ms, end_ms, bucket_ms, [begin_ms + i * bucket_ms for i in range(n)],
                      dict(sorted(groups.items())))
