"""What queries return: a message's full trace, message summaries and pages of them.

:func:`build_trace` assembles a :class:`MessageTrace` from the stored events of one
message; it is pure, so it is tested without any store.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from collector.store.schema import StoredEvent
from tracehook.wire import EventType, Status

Json = dict[str, Any]

_CONSUME_TYPES = (EventType.SUB_BEFORE, EventType.SUB_AFTER)


@dataclass(frozen=True)
class MessageSummary:
    """One message as an index row lists it (no consume details: use the trace for those)."""

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
    time_ms: int  # the time the message is filed under (store, else born, else event time)
    group: str = ""  # producer group, or the consumer group for dead letters
    error: str = ""

    @classmethod
    def from_dict(cls, d: Json) -> MessageSummary:
        return cls(**{name: d[name] for name in cls.__dataclass_fields__ if name in d})

    def to_json(self) -> Json:
        out = asdict(self)
        out["status_name"] = Status(self.status).name
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
    consumes: dict[str, list[Json]] = field(default_factory=dict)
    tx: list[Json] = field(default_factory=list)
    dead: list[Json] = field(default_factory=list)
    events: list[Json] = field(default_factory=list)

    def to_json(self) -> Json:
        return asdict(self)


def _sort_key(ev: StoredEvent) -> tuple[int, int, str]:
    return (ev.event.time_ms, ev.event.type, ev.event.request_id)


def build_trace(msg_id: str, stored: Iterable[StoredEvent]) -> MessageTrace | None:
    """The trace of ``msg_id`` from its stored events; ``None`` when there are none."""
    events = sorted(stored, key=_sort_key)
    if not events:
        return None
    pubs = [e for e in events if e.event.type == EventType.PUB]
    ok_pubs = [e for e in pubs if e.event.status == Status.OK]
    send = ok_pubs[0] if ok_pubs else (pubs[-1] if pubs else None)
    # Message attributes come from the producer's event when there is one.
    meta = (send or events[0]).event
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
        send=send.to_dict() if send else None,
        consumes=_attempts(e for e in events if e.event.type in _CONSUME_TYPES),
        tx=[e.to_dict() for e in events if e.event.type == EventType.END_TX],
        dead=[e.to_dict() for e in events if e.event.type == EventType.DEAD],
        events=[e.to_dict() for e in events],
    )


def _attempts(consume_events: Iterable[StoredEvent]) -> dict[str, list[Json]]:
    """Pair SUB_BEFORE with SUB_AFTER per group by request id (in time order when ids are absent)."""
    by_group: dict[str, list[Json]] = {}
    for ev in consume_events:
        attempts = by_group.setdefault(ev.event.group, [])
        side = "before" if ev.event.type == EventType.SUB_BEFORE else "after"
        attempt = _open_attempt(attempts, ev.event.request_id, side)
        if attempt is None:
            attempt = {"request_id": ev.event.request_id, "before": None, "after": None}
            attempts.append(attempt)
        attempt[side] = ev.to_dict()
    for attempts in by_group.values():
        for attempt in attempts:
            _fill_attempt(attempt)
        attempts.sort(key=lambda a: a["time_ms"])
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
