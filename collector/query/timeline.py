"""Turn a message's events into the rows of a trace timeline.

One row for the producer (sends, transaction end) and one row per consumer
group; each row has bars (a consume attempt from SUB_BEFORE to SUB_AFTER, a
send, a dead-letter move) with an ``outcome`` of success / failed / unknown
that the web page colours.  Built from a ``MessageTrace.to_json()`` document:
the store has already paired each group's attempts.

Example::

    doc = build_timeline(TraceQuery(store).get_trace(msg_id).to_json())
    for row in doc["rows"]:
        print(row["kind"], row["group"], [bar["outcome"] for bar in row["bars"]])
"""

from __future__ import annotations

from typing import Any

from collector.store.model import REPLAY_TARGET_PROP
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


def _replay_bar(event: dict[str, Any]) -> dict[str, Any]:
    """A ``tracehook replay`` re-delivery to the group: a mark, its target in ``replay_target``."""
    time_ms = int(event.get("time_ms") or 0)
    bar = _bar(event, "replay", time_ms, time_ms)
    bar["status"] = "replayed"
    bar["replay_target"] = str((event.get("props") or {}).get(REPLAY_TARGET_PROP, ""))
    return bar


def _attempt_bar(attempt: dict[str, Any]) -> dict[str, Any]:
    """A consume attempt as the store pairs it: ``before`` / ``after`` event dicts (either may be None)."""
    before, after = attempt.get("before"), attempt.get("after")
    if after is None:
        bar = _bar(before or {}, "consume", int(attempt.get("time_ms") or 0), int(attempt.get("time_ms") or 0))
        bar.update(status="unknown", outcome=UNKNOWN, finished=False)
        return bar
    end = int(after.get("time_ms") or 0)
    start = int(before["time_ms"]) if before else end - int(after.get("cost_us") or 0) // 1000
    bar = _bar(after, "consume", start, end)
    bar["finished"] = True
    return bar


def build_timeline(trace: dict[str, Any]) -> dict[str, Any]:
    """Rows for the producer and each consumer group of a ``MessageTrace.to_json()`` document."""
    producer_bars: list[dict[str, Any]] = []
    producer_group = ""
    # Every send attempt shows (a failed one before the successful resend), not only the chosen one.
    for event in trace.get("events") or []:
        kind = event_type(event)
        if kind in (EventType.PUB, EventType.END_TX):
            producer_bars.append(_send_bar(event) if kind == EventType.PUB else _tx_bar(event))
            producer_group = producer_group or str(event.get("group") or "")
    bars_by_group: dict[str, list[dict[str, Any]]] = {}
    for group, attempts in (trace.get("consumes") or {}).items():
        bars_by_group.setdefault(group, []).extend(_attempt_bar(a) for a in attempts)
    for event in trace.get("dead") or []:
        bars_by_group.setdefault(str(event.get("group") or ""), []).append(_dead_bar(event))
    for event in trace.get("replays") or []:
        bars_by_group.setdefault(str(event.get("group") or ""), []).append(_replay_bar(event))
    rows: list[dict[str, Any]] = [{"kind": "producer", "group": producer_group, "bars": producer_bars}]
    for group, bars in bars_by_group.items():
        # Attempts sharing a millisecond keep their own order (retry 0 before retry 1); the dead move last.
        bars.sort(key=lambda b: (b["start_ms"], b["retry"], b["kind"] == "dead", b["end_ms"]))
        rows.append({"kind": "consumer", "group": group, "bars": bars})
    # Groups in the order they first received the message.
    rows[1:] = sorted(rows[1:], key=lambda r: r["bars"][0]["start_ms"] if r["bars"] else 0)
    times = [t for row in rows for bar in row["bars"] for t in (bar["start_ms"], bar["end_ms"])]
    return {"start_ms": min(times, default=0), "end_ms": max(times, default=0), "rows": rows}
