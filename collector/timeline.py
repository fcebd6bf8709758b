"""Turn a message's events into the rows of a trace timeline.

One row for the producer (send, transaction end) and one row per consumer
group; each row has bars (a consume attempt from SUB_BEFORE to SUB_AFTER, a
send, a dead-letter move) with an ``outcome`` of success / failed / unknown
that the web page colours.  Built only from the trace's ``events`` list
(dicts with :class:`tracehook.wire.Event` field names), so it works the same
for every store.

Example::

    doc = build_timeline(trace_json["events"])
    for row in doc["rows"]:
        print(row["kind"], row["group"], [bar["outcome"] for bar in row["bars"]])
"""

from __future__ import annotations

from typing import Any, Iterable

from tracehook.wire import EventType, Status, TxState

SUCCESS, FAILED, UNKNOWN = "success", "failed", "unknown"
_FAILED_STATUSES = {Status.FAILED, Status.TIMEOUT, Status.EXCEPTION, Status.RETRY_LATER}


def enum_value(enum: type, value: Any, default: int) -> int:
    """An enum member's int from an int or a name (stores may render either)."""
    if isinstance(value, str):
        try:
            return int(enum[value.upper()])
        except KeyError:
            return default
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def status_name(value: Any) -> str:
    """``Status`` as a lower-case name (``ok``, ``exception``...)."""
    code = enum_value(Status, value, Status.UNKNOWN)
    try:
        return Status(code).name.lower()
    except ValueError:
        return "unknown"


def outcome(value: Any) -> str:
    """success / failed / unknown for a status."""
    code = enum_value(Status, value, Status.UNKNOWN)
    if code == Status.OK:
        return SUCCESS
    return FAILED if code in _FAILED_STATUSES else UNKNOWN


def event_type(event: dict[str, Any]) -> int:
    """The event's :class:`EventType` as an int (0 when unreadable)."""
    return enum_value(EventType, event.get("type"), 0)


def _host(event: dict[str, Any]) -> str:
    return str(event.get("host") or event.get("client_host") or "")


def _bar(event: dict[str, Any], kind: str, start_ms: int, end_ms: int) -> dict[str, Any]:
    status = event.get("status", Status.OK)
    return {
        "kind": kind,
        "start_ms": start_ms,
        "end_ms": max(end_ms, start_ms),
        "cost_us": int(event.get("cost_us") or 0),
        "status": status_name(status),
        "outcome": outcome(status),
        "retry": int(event.get("retry") or 0),
        "host": _host(event),
        "client_id": str(event.get("client_id") or ""),
        "app": str(event.get("app") or ""),
        "broker": str(event.get("broker") or ""),
        "queue": event.get("queue", -1),
        "offset": event.get("offset", -1),
        "error": str(event.get("error") or ""),
    }


def _send_bar(event: dict[str, Any]) -> dict[str, Any]:
    # A send's event time is when the result came back; the bar spans its cost.
    end = int(event.get("time_ms") or 0)
    start = end - int(event.get("cost_us") or 0) // 1000
    bar = _bar(event, "send", start, end)
    bar["store_ms"] = int(event.get("store_ms") or 0)
    return bar


def _tx_bar(event: dict[str, Any]) -> dict[str, Any]:
    time_ms = int(event.get("time_ms") or 0)
    bar = _bar(event, "end_tx", time_ms, time_ms)
    state = enum_value(TxState, event.get("tx_state"), TxState.UNKNOWN)
    bar["tx_state"] = TxState(state).name.lower() if state in set(TxState) else "unknown"
    bar["outcome"] = {TxState.COMMIT: SUCCESS, TxState.ROLLBACK: FAILED}.get(state, UNKNOWN)
    return bar


def _dead_bar(event: dict[str, Any]) -> dict[str, Any]:
    time_ms = int(event.get("time_ms") or 0)
    bar = _bar(event, "dead", time_ms, time_ms)
    bar["outcome"] = FAILED
    bar["status"] = "dead"
    return bar


def _attempts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pair one group's SUB_BEFORE/SUB_AFTER by request id into attempt bars."""
    open_attempts: dict[str, dict[str, Any]] = {}
    bars: list[dict[str, Any]] = []
    for event in events:
        kind = event_type(event)
        request_id = str(event.get("request_id") or "")
        time_ms = int(event.get("time_ms") or 0)
        if kind == EventType.SUB_BEFORE:
            bar = _bar(event, "consume", time_ms, time_ms)
            bar.update(status="unknown", outcome=UNKNOWN, finished=False)
            bars.append(bar)
            if request_id:
                open_attempts[request_id] = bar
        elif kind == EventType.SUB_AFTER:
            finished = _bar(event, "consume", time_ms - int(event.get("cost_us") or 0) // 1000, time_ms)
            finished["finished"] = True
            started = open_attempts.pop(request_id, None) if request_id else None
            if started is None:
                bars.append(finished)
            else:
                # Keep when it was received; take the outcome and cost from the finish.
                finished["start_ms"] = started["start_ms"]
                started.update(finished)
        elif kind == EventType.DEAD:
            bars.append(_dead_bar(event))
    return bars


def build_timeline(events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Rows for the producer and each consumer group, and the overall time span."""
    ordered = sorted(events, key=lambda e: int(e.get("time_ms") or 0))
    producer_bars: list[dict[str, Any]] = []
    producer_group = ""
    by_group: dict[str, list[dict[str, Any]]] = {}
    for event in ordered:
        kind = event_type(event)
        if kind == EventType.PUB:
            producer_bars.append(_send_bar(event))
            producer_group = producer_group or str(event.get("group") or "")
        elif kind == EventType.END_TX:
            producer_bars.append(_tx_bar(event))
            producer_group = producer_group or str(event.get("group") or "")
        elif kind in (EventType.SUB_BEFORE, EventType.SUB_AFTER, EventType.DEAD):
            by_group.setdefault(str(event.get("group") or ""), []).append(event)
    rows: list[dict[str, Any]] = [{"kind": "producer", "group": producer_group, "bars": producer_bars}]
    for group, group_events in by_group.items():
        rows.append({"kind": "consumer", "group": group, "bars": _attempts(group_events)})
    times = [t for row in rows for bar in row["bars"] for t in (bar["start_ms"], bar["end_ms"])]
    return {"start_ms": min(times, default=0), "end_ms": max(times, default=0), "rows": rows}
