"""Building traces with a known outcome per message, for the backtracking tests."""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

from tracehook.wire import BatchHeader, Event, EventType, Status, make_event

PRODUCER = BatchHeader("prod-client", 1, app="shop", host="web-1")
CONSUMER = BatchHeader("cons-client", 7, app="billing", host="bill-1")
GROUP = "billing"
OTHER_GROUP = "audit"
BASE_MS = 1_780_000_000_000

Record = tuple[BatchHeader, Event]
_topics = itertools.count()

# What happened to a message in GROUP, and the replay status that must show for it (None: not listed).
EXPECTED_STATUS: dict[str, str | None] = {
    "ok": None,
    "ok_after_retry": None,
    "failed": "FAILED",
    "timeout": "TIMEOUT",
    "exception": "EXCEPTION",
    "retry_later": "RETRY_LATER",
    "dead": "DEAD",
    "pending": "PENDING",
    "never": "NOT_RECEIVED",
    "other_group_only": "NOT_RECEIVED",
    "failed_send": None,  # the broker never had it: nothing to replay
}
OUTCOMES = tuple(EXPECTED_STATUS)


def new_topic(prefix: str = "bt") -> str:
    """A topic no other example used (examples share one store)."""
    return f"{prefix}-{next(_topics)}"


def ev(type_: EventType, time_ms: int, group: str, topic: str, msg_id: str, **fields: Any) -> Event:
    return Event._make(make_event(type_, time_ms, group, topic, msg_id, **fields))


def message(queue: int, offset: int, store_ms: int) -> dict[str, Any]:
    """The fields every event of one message carries."""
    return dict(queue=queue, offset=offset, born_ms=store_ms - 1, store_ms=store_ms, broker="b1", keys=f"k{offset}")


def pub(topic: str, msg_id: str, m: dict[str, Any], *, status: Status = Status.OK) -> Record:
    fields = dict(m) if status == Status.OK else dict(m, queue=-1, offset=-1, store_ms=0)
    return PRODUCER, ev(EventType.PUB, m["born_ms"] + 1, "producers", topic, msg_id, status=int(status),
                        error="" if status == Status.OK else "send timed out", **fields)


def attempt(topic: str, group: str, msg_id: str, m: dict[str, Any], *, retry: int = 0,
            status: Status | None = Status.OK) -> list[Record]:
    """One consume attempt: SUB_BEFORE and, unless ``status`` is None, SUB_AFTER."""
    at = m["store_ms"] + 10 + 100 * retry
    common = dict(m, retry=retry, request_id=f"{msg_id}/{group}/{retry}")
    out = [(CONSUMER, ev(EventType.SUB_BEFORE, at, group, topic, msg_id, **common))]
    if status is not None:
        error = "" if status == Status.OK else f"handler {status.name.lower()}"
        out.append((CONSUMER, ev(EventType.SUB_AFTER, at + 3, group, topic, msg_id, status=int(status),
                                 cost_us=3000, error=error, **common)))
    return out


def dead(topic: str, group: str, msg_id: str, m: dict[str, Any], error: str = "max retries") -> Record:
    return CONSUMER, ev(EventType.DEAD, m["store_ms"] + 900, group, topic, msg_id, retry=3, error=error, **m)


def outcome_records(topic: str, msg_id: str, m: dict[str, Any], outcome: str) -> list[Record]:
    """The trace of one message whose fate in GROUP is ``outcome`` (OTHER_GROUP always succeeds when it sees it)."""
    if outcome == "failed_send":
        return [pub(topic, msg_id, m, status=Status.TIMEOUT)]
    out = [pub(topic, msg_id, m)] + attempt(topic, OTHER_GROUP, msg_id, m)
    if outcome == "ok":
        out += attempt(topic, GROUP, msg_id, m)
    elif outcome == "ok_after_retry":
        out += attempt(topic, GROUP, msg_id, m, status=Status.EXCEPTION) + attempt(topic, GROUP, msg_id, m, retry=1)
    elif outcome in ("failed", "timeout", "exception", "retry_later"):
        out += attempt(topic, GROUP, msg_id, m, status=Status[outcome.upper()])
    elif outcome == "dead":
        for retry in range(3):
            out += attempt(topic, GROUP, msg_id, m, retry=retry, status=Status.FAILED)
        out.append(dead(topic, GROUP, msg_id, m))
    elif outcome == "pending":
        out += attempt(topic, GROUP, msg_id, m, status=None)
    elif outcome == "never":
        out = out[:1]  # not even OTHER_GROUP received it
    return out


def send_failed_and_nobody_received(send: Event, events: list[Event]) -> bool:
    """The one rule of the replay reference about failed sends (docs/backtracking.md): a message
    whose send failed and that no group received is not listed; the broker never had it."""
    consumed_by_someone = any(e.type in (EventType.SUB_BEFORE, EventType.SUB_AFTER) for e in events)
    return send.status != Status.OK and not consumed_by_someone


def replay_reference(records: list[Record], topic: str, group: str, begin_ms: int, end_ms: int) -> list[dict[str, Any]]:
    """The replay list (JSON items) worked out from the events alone, by docs/backtracking.md's rules.

    A message is filed under its send's store time, else its born time; listed when filed in
    ``[begin_ms, end_ms]`` and ``group`` has no successful SUB_AFTER for it; oldest first. Its
    status: ``DEAD`` when the group dead-lettered it (the dead letter's error), else
    ``NOT_RECEIVED`` without any consume event of the group, else its last attempt's: ``PENDING``
    when unfinished, or the SUB_AFTER's status name and error. ``attempts`` counts the group's
    attempts (request ids), ``last_attempt_ms`` is the latest of their receive times and the dead
    letters' times (0 when never received). ``replayed_ms`` is the group's latest REPLAY event's time
    (0: never); when it is later than ``last_attempt_ms`` the status is ``REPLAYED``.
    Built for this module's traces: one send per message.
    """
    by_msg: dict[str, list[Event]] = defaultdict(list)
    for _, event in records:
        if event.topic == topic:
            by_msg[event.msg_id].append(event)
    items = []
    for msg_id, events in by_msg.items():
        (send,) = [e for e in events if e.type == EventType.PUB]
        filed_ms = send.store_ms or send.born_ms
        if not begin_ms <= filed_ms <= end_ms or send_failed_and_nobody_received(send, events):
            continue
        mine = [e for e in events if e.group == group]
        afters = {e.request_id: e for e in mine if e.type == EventType.SUB_AFTER}
        if any(e.status == Status.OK for e in afters.values()):
            continue
        received = {e.request_id: e.time_ms for e in mine if e.type == EventType.SUB_BEFORE}
        dead_letters = [e for e in mine if e.type == EventType.DEAD]
        status, error = "NOT_RECEIVED", ""
        if received:
            last = max(received, key=received.__getitem__)
            after = afters.get(last)
            status, error = ("PENDING", "") if after is None else (Status(after.status).name, after.error)
        if dead_letters:
            status, error = "DEAD", dead_letters[-1].error
        last_ms = max([*received.values(), *(d.time_ms for d in dead_letters)], default=0)
        replayed_ms = max((e.time_ms for e in mine if e.type == EventType.REPLAY), default=0)
        if replayed_ms > last_ms:
            status = "REPLAYED"
        items.append({
            "msg_id": msg_id, "topic": topic, "keys": send.keys, "tags": send.tags, "queue": send.queue,
            "offset": send.offset, "born_ms": send.born_ms, "store_ms": send.store_ms, "time_ms": filed_ms,
            "status": status, "error": error, "attempts": len(received),
            "last_attempt_ms": last_ms, "replayed_ms": replayed_ms,
        })
    return sorted(items, key=lambda item: (item["time_ms"], item["msg_id"]))
