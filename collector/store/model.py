"""What queries return: a message's full trace, message summaries and pages of them.

:func:`build_trace` assembles a :class:`MessageTrace` from the stored events of one
message; it is pure, so it is tested without any store.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from collector.store.codec import StoredEvent
from collector.store.schema import message_time
from tracehook.hooks import REPLAY_TARGET_PROP
from tracehook.wire import Event, EventType, Status, trace_id_of

Json = dict[str, Any]

_CONSUME_TYPES = (EventType.SUB_BEFORE, EventType.SUB_AFTER)
_FILING_TYPES = (EventType.PUB, EventType.SUB_BEFORE, EventType.DEAD)
# Plain ints for the per-event checks of the rollups' read-back (an enum member's lookup costs more).
_PUB, _SUB_BEFORE = int(EventType.PUB), int(EventType.SUB_BEFORE)
_OK, _RETRY_LATER = int(Status.OK), int(Status.RETRY_LATER)


# A consumer group's outcome on one message (``GroupOutcome.outcome``).
CONSUMED, RETRYING, FAILED, DEAD, PENDING = "consumed", "retrying", "failed", "dead", "pending"
NOT_TRACED = "NOT_TRACED"
"""``status_name`` of a message whose send was never traced (found through its consume events)."""


@dataclass(frozen=True)
class GroupOutcome:
    """How one consumer group fared with one message.

    ``outcome``: ``dead`` (sent to a dead-letter queue), ``consumed`` (an attempt finished OK),
    ``retrying`` (the last attempt asked for a redelivery, or a redelivery is under way),
    ``failed`` (the last attempt finished with an error) or ``pending`` (received, not finished:
    not yet consumed).  ``last_status`` is the last attempt's status name (``PENDING`` while unfinished).
    ``replayed_ms`` is when ``tracehook replay`` last re-delivered it to the group (0: never), with
    ``replay_target`` (``topic:T`` or ``handler:module:function``).
    """

    outcome: str
    attempts: int
    last_status: str
    error: str
    last_ms: int
    replayed_ms: int = 0
    replay_target: str = ""

    def to_json(self) -> Json:
        return asdict(self)


@dataclass(frozen=True)
class MessageSummary:
    """One message as every listing shows it: its send, its placement, and each consumer group's outcome.

    Placement (``topic``, ``queue``, ``offset``, ``broker``, ``store_ms``, ``keys``, ``tags``) comes from
    the send event; ``send_traced`` is False when only consume events are known (then placement is
    what they carried).  ``time_ms`` is the time the message is listed under.  In dead-letter
    listings ``group`` is the consumer group that dead-lettered it (one row per group), elsewhere
    the producer group.
    """

    msg_id: str
    topic: str
    keys: str
    tags: str
    broker: str
    queue: int
    offset: int
    born_ms: int
    store_ms: int
    status: int
    time_ms: int
    group: str = ""
    error: str = ""
    send_traced: bool = True
    groups: dict[str, GroupOutcome] = field(default_factory=dict)
    trace_id: str = ""
    replayed: dict[str, int] = field(default_factory=dict)
    """``{group: when tracehook replay last re-delivered it to that group}`` (ms)."""

    def to_json(self) -> Json:
        out = asdict(self)
        out["status_name"] = Status(self.status).name if self.send_traced else NOT_TRACED
        out["groups"] = {g: o.to_json() for g, o in sorted(self.groups.items())}
        return out


@dataclass(frozen=True)
class Page:
    """A page of summaries; pass ``next_cursor`` back to get the next one (``None``: no more)."""

    items: list[MessageSummary]
    next_cursor: str | None

    def to_json(self) -> Json:
        return {"items": [i.to_json() for i in self.items], "next_cursor": self.next_cursor}


@dataclass(frozen=True)
class MessageTrace:
    """Everything known about one message, from one row of the messages table.

    ``consumes`` maps each consumer group to its attempts in time order; an attempt is
    a dict with ``request_id``, ``before`` / ``after`` (the SUB_BEFORE / SUB_AFTER
    event dicts, ``None`` when missing), ``status`` (``None`` while unfinished),
    ``status_name``, ``cost_us``, ``retry``, ``time_ms``, ``host`` and ``client_id``.
    """

    msg_id: str
    topic: str
    keys: str
    tags: str
    props: dict[str, str]
    broker: str
    queue: int
    offset: int
    born_ms: int
    store_ms: int
    send: Json | None
    placed_ms: int | None = None
    """The time the message is placed at (its send's store, else born, else event time); None: unplaced."""
    time_ms: int = 0
    """The time it is listed under: ``placed_ms``, else the message time of its first event with keys
    (of its first consume or dead event when none has keys)."""
    outcomes: dict[str, GroupOutcome] = field(default_factory=dict)
    trace_id: str = ""
    """The W3C trace id of the message: its send's, else its first event's (an OTel trace, or the id's own)."""
    span_id: str = ""
    """The send's span id (the parent of its consumers' spans); "" when unknown."""
    consumes: dict[str, list[Json]] = field(default_factory=dict)
    tx: list[Json] = field(default_factory=list)
    dead: list[Json] = field(default_factory=list)
    events: list[Json] = field(default_factory=list)
    """Every event, in :func:`display_order`."""
    replays: list[Json] = field(default_factory=list)
    """REPLAY events (``tracehook replay`` re-delivered the message to one group), in time order."""

    @property
    def send_traced(self) -> bool:
        return self.send is not None

    @property
    def replayed(self) -> dict[str, int]:
        """``{group: time of its last replay}`` (``tracehook replay``), for every group replayed to."""
        return {group: ms for group, (ms, _) in last_replays(self.replays).items()}

    @property
    def never_stored(self) -> bool:
        """True for a failed send: every traced send failed (no ``OK`` PUB) and no consumer received
        or dead-lettered it, so the broker never stored it and no group can consume it.  The
        replay list leaves these out, and the rollups count them apart (``failed_sends``)."""
        return self.send is not None and self.send["status"] != Status.OK and not (self.consumes or self.dead)

    def to_json(self) -> Json:
        out = asdict(self)
        out["send_traced"] = self.send_traced
        out["status_name"] = self.send["status_name"] if self.send else NOT_TRACED
        return out

    def summary(self, dead_group: str | None = None) -> MessageSummary:
        """This message as a listing row (a dead-letter row of ``dead_group`` when given)."""
        send = self.send or {}
        group, error, time_ms = send.get("group", ""), send.get("error", ""), self.time_ms
        if dead_group is not None:
            dead = [d for d in self.dead if d["group"] == dead_group]
            group, error = dead_group, (dead[-1]["error"] if dead else "")
            # The time the row is listed (and windowed) under; it differs from time_ms only when unplaced.
            dead_ms = self.dead_time(dead_group)
            time_ms = time_ms if dead_ms is None else dead_ms
        return MessageSummary(
            msg_id=self.msg_id, topic=self.topic, keys=self.keys, tags=self.tags, broker=self.broker,
            queue=self.queue, offset=self.offset, born_ms=self.born_ms, store_ms=self.store_ms,
            status=send.get("status", Status.UNKNOWN), time_ms=time_ms, group=group, error=error,
            send_traced=self.send is not None, groups=dict(self.outcomes), trace_id=self.trace_id,
            replayed=self.replayed,
        )

    def dead_time(self, group: str) -> int | None:
        """The time a dead letter of ``group`` is listed under: ``placed_ms``, else when it died first."""
        if self.placed_ms is not None:
            return self.placed_ms
        times = [message_time_of(d) for d in self.dead if d["group"] == group]
        return min(times) if times else None


def message_time_of(event: Json) -> int:
    """An event dict's message time: its store, else born, else own time (as the index files it)."""
    return event["store_ms"] if event["store_ms"] > 0 else event["born_ms"] if event["born_ms"] > 0 else event["time_ms"]


event_order = operator.itemgetter(*(Event._fields.index(f) for f in ("time_ms", "type", "request_id")))
"""The key a message's events are read in: (time ms, type, request id)."""


def _sort_key(ev: StoredEvent) -> tuple[int, int, str]:
    return event_order(ev.event)


def display_order(ev: StoredEvent) -> tuple[Any, ...]:
    """The order :attr:`MessageTrace.events` (and so the timeline's producer row) shows: by time ms and
    type, as :data:`event_order`; within one millisecond and type, the event that started first
    (its time minus its cost), then a failed attempt before the one that followed it.

    A producer's failed send and its successful retry often end in the same millisecond, and their
    cells come back in hash order.  Everything the trace derives (its send, outcomes) still reads
    :data:`event_order`, the order the rollups read too, so the counts do not depend on this one.
    """
    e = ev.event
    return (e.time_ms, e.type, e.time_ms * 1000 - e.cost_us, e.status == _OK, e.retry, e.request_id,
            ev.client_id, ev.host, e.error)


def send_of(events: list[StoredEvent]) -> StoredEvent | None:
    """The send of a message: its first successful PUB, else its last PUB (events in time order)."""
    pubs = [e for e in events if e.event.type == EventType.PUB]
    ok_pubs = [e for e in pubs if e.event.status == Status.OK]
    return ok_pubs[0] if ok_pubs else (pubs[-1] if pubs else None)


def could_place(event: Event) -> bool:
    """Whether ``event`` can place its message (:func:`placing_event`): a send, or a consume
    or dead event that knew the broker's store time."""
    return event.type == _PUB or (event.type in _FILING_TYPES and event.store_ms > 0)


def placing_event(events: list[StoredEvent], send: StoredEvent | None = None) -> StoredEvent | None:
    """The event that places a message (``events`` in time order, as :func:`build_trace` sorts them).

    Only the send places a message; without one, a consume or dead event that knew the
    broker's store time does (an adapter read it from the record), never a consume time.
    """
    send = send or send_of(events)
    return send or next((e for e in events if could_place(e.event)), None)


def build_trace(msg_id: str, stored: Iterable[StoredEvent]) -> MessageTrace | None:
    """The trace of ``msg_id`` from its stored events; ``None`` when there are none."""
    events = sorted(stored, key=_sort_key)
    if not events:
        return None
    send = send_of(events)
    filing = [e for e in events if e.event.type in _FILING_TYPES]
    placing = placing_event(events, send)
    # Unplaced, it is known by its first event that carries keys: its key rows are filed under that
    # event's time, so a key listing finds it even when a keyless consume came first.
    known_by = placing or next((e for e in filing if e.event.keys), None) or (filing[0] if filing else events[0])
    meta = known_by.event
    placed_ms = message_time(placing.event) if placing else None
    dicts = {id(e): e.to_dict() for e in events}  # each event converted once, shared by every view below
    consumes = _attempts((e, dicts[id(e)]) for e in events if e.event.type in _CONSUME_TYPES)
    dead = [dicts[id(e)] for e in events if e.event.type == EventType.DEAD]
    replays = [dicts[id(e)] for e in events if e.event.type == EventType.REPLAY]
    traced = (send or placing or events[0]).event
    return MessageTrace(
        msg_id=msg_id,
        topic=meta.topic,
        keys=meta.keys,
        tags=meta.tags,
        props=dict(meta.props or {}),
        broker=meta.broker,
        queue=meta.queue,
        offset=meta.offset,
        born_ms=meta.born_ms,
        store_ms=meta.store_ms,
        send=dicts[id(send)] if send else None,
        placed_ms=placed_ms,
        time_ms=placed_ms if placed_ms is not None else message_time(meta),
        outcomes=group_outcomes(consumes, dead, replays),
        trace_id=trace_id_of(traced),
        span_id=traced.span_id or next((e.event.span_id for e in events if e.event.span_id), ""),
        consumes=consumes,
        tx=[dicts[id(e)] for e in events if e.event.type == EventType.END_TX],
        dead=dead,
        events=[dicts[id(e)] for e in sorted(events, key=display_order)],
        replays=replays,
    )


def group_outcomes(consumes: dict[str, list[Json]], dead: list[Json],
                   replays: list[Json] | None = None) -> dict[str, GroupOutcome]:
    """Each consumer group's :class:`GroupOutcome` from its attempts, dead letters and replays.

    A replay alone does not make an outcome: a group that never received the message has none
    (:attr:`MessageTrace.replayed` says whether it was replayed to).
    """
    out: dict[str, GroupOutcome] = {}
    replayed = last_replays(replays or [])
    for group in sorted(set(consumes) | {d["group"] for d in dead}):
        attempts = consumes.get(group, [])
        dead_letters = [d for d in dead if d["group"] == group]
        last = attempts[-1] if attempts else None
        last_status = last["status_name"] if last else "NOT_RECEIVED"
        error = (last["after"] or {}).get("error", "") if last else ""
        last_ms = max([a["time_ms"] for a in attempts] + [d["time_ms"] for d in dead_letters], default=0)
        replay_ms, target = replayed.get(group, (0, ""))
        outcome = outcome_of([(a["time_ms"], a["status"], a["retry"]) for a in attempts],
                             [d["time_ms"] for d in dead_letters], replay_ms)
        if outcome == DEAD:
            error = dead_letters[-1]["error"] or error
        elif outcome == CONSUMED:
            error = ""
        out[group] = GroupOutcome(outcome, len(attempts), last_status, error, last_ms, replay_ms, target)
    return out


Attempt = tuple[int, "int | None", int]
"""An attempt as :func:`outcome_of` reads it: (time ms, status or None while unfinished, retry)."""


def outcome_of(attempts: list[Attempt], dead_ms: list[int], replay_ms: int) -> str:
    """One group's outcome (:class:`GroupOutcome`) from its attempts in time order, the times of
    its dead letters and the time of its last replay (0: never)."""
    # A dead letter is final, unless tracehook replay re-delivered the message after it and the
    # group then consumed it.
    revived = bool(dead_ms) and replay_ms > max(dead_ms) and any(
        status == _OK and time_ms >= replay_ms for time_ms, status, _ in attempts)
    if dead_ms and not revived:
        return DEAD
    if any(status == _OK for _, status, _ in attempts):
        return CONSUMED
    if not attempts:
        return FAILED
    _, status, retry = attempts[-1]
    if status == _RETRY_LATER:
        return RETRYING
    if status is None:
        return RETRYING if retry > 0 else PENDING
    return FAILED


def last_replays(replays: Iterable[Json]) -> dict[str, tuple[int, str]]:
    """``{group: (time ms, target)}`` of each group's last REPLAY event (event dicts in time order)."""
    return {r["group"]: (r["time_ms"], (r.get("props") or {}).get(REPLAY_TARGET_PROP, "")) for r in replays}


def _attempts(consume_events: Iterable[tuple[StoredEvent, Json]]) -> dict[str, list[Json]]:
    """Pair SUB_BEFORE with SUB_AFTER per group by request id (in time order when ids are absent);
    each event comes with its :meth:`StoredEvent.to_dict`."""
    by_group = pair_attempts((ev.event, as_dict) for ev, as_dict in consume_events)
    for attempts in by_group.values():
        for attempt in attempts:
            _fill_attempt(attempt)
        attempts.sort(key=lambda a: a["time_ms"])
    return by_group


def pair_attempts(consume_events: Iterable[tuple[Event, Any]]) -> dict[str, list[Json]]:
    """Each group's attempts (``request_id``, ``before`` and ``after``: what came with its SUB_BEFORE
    and SUB_AFTER event, None when missing), consume events in time order, attempts in order seen."""
    by_group: dict[str, list[Json]] = {}
    for event, payload in consume_events:
        attempts = by_group.get(event.group)
        if attempts is None:
            attempts = by_group[event.group] = []
        side = "before" if event.type == _SUB_BEFORE else "after"
        attempt = _open_attempt(attempts, event.request_id, side) if attempts else None
        if attempt is None:
            attempt = {"request_id": event.request_id, "before": None, "after": None}
            attempts.append(attempt)
        attempt[side] = payload
    return by_group


def _open_attempt(attempts: list[Json], request_id: str, side: str) -> Json | None:
    for attempt in reversed(attempts):
        if attempt[side] is None and (attempt["request_id"] == request_id or not request_id):
            # Without ids an attempt pairs only with the one just before it in time.
            return attempt if request_id or attempt is attempts[-1] else None
    return None


def _fill_attempt(attempt: Json) -> None:
    before, after = attempt["before"], attempt["after"]
    first = before or after
    attempt["status"] = after["status"] if after else None
    attempt["status_name"] = after["status_name"] if after else "PENDING"
    attempt["cost_us"] = after["cost_us"] if after else 0
    attempt["retry"] = first["retry"]
    attempt["time_ms"] = first["time_ms"]
    attempt["host"] = first["host"]
    attempt["client_id"] = first["client_id"]
