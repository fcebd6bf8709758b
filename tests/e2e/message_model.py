"""Message lifecycles for the model-based test: what hypothesis generates, how the library emits
it (the README's and docs/library.md's calls, literally), and the reference answers.

A :class:`Lifecycle` is one message: its send (traced, failed then retried, failed for good, or
never traced), its consume attempts per consumer group, its dead letters.  The reference model
(:func:`expected_row` and friends) is written from the lifecycle, not from events, so it says
what a listing must show whatever the indexer does.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

import tracehook
from tracehook import Status

GROUPS = ("billing", "audit", "shipping")
BROKERS = ("broker-a", "broker-b")
SHARED_KEY = "shared-key"
N_SHARED = 9  # messages of the first topic that carry the shared key: key pages of 1 and 7 cross pages
# (no result cap: tests/collector/store/test_query.py pages 150 messages of one key on both stores)
PRODUCER_GROUP = "shop"
SEND_ERROR, HANDLER_TIMEOUT, BATCH_ERROR = "send timed out", "handler timed out", "ValueError: batch failed"
STORE_SPAN_S = 9  # store times within 9 s: ~2 messages a second, so many share one
PHASE_GAP_S = 0.004  # consume rounds are apart in time, as a broker's redeliveries are (>= 1 ms)

OK, RETRY_LATER = int(Status.OK), int(Status.RETRY_LATER)
FAILURES = (int(Status.EXCEPTION), int(Status.TIMEOUT), int(Status.FAILED), RETRY_LATER)
SENDS = ("ok", "ok", "ok", "ok", "retried", "failed", "none", "none")
PLANS = ("none", "ok", "ok", "fail_ok", "retrying", "failed", "dead", "pending", "retry_pending", "dead_unreceived")


@dataclass(frozen=True)
class Attempt:
    """One delivery to a group: ``status`` None means received and never finished."""

    retry: int
    status: int | None
    form: str  # "readme": with tracehook.consume(...); "batch": with tracehook.consume_batch(...)


@dataclass
class Lifecycle:
    """One message, as generated; ``msg_id``, ``offset`` and the times are set by :func:`layout`."""

    index: int
    topic: int
    keys: str
    tags: str
    broker: str
    queue: int
    store_rel_s: int
    born_lag_ms: int
    gap: int
    send: str  # ok | retried (a failed send, then an OK one) | failed (every send failed) | none (not traced)
    send_failure: int
    attempts: dict[str, tuple[Attempt, ...]]
    dead: tuple[str, ...]
    late: bool  # consumed (and dead-lettered) in the first index round, its send only in the second
    msg_id: str = ""
    topic_name: str = ""
    offset: int = -1
    store_ms: int = 0
    born_ms: int = 0
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def traced(self) -> bool:
        return self.send != "none"

    @property
    def seen(self) -> bool:
        """Whether any event was recorded (an untraced message nobody received has none: no trace)."""
        return self.traced or bool(self.attempts) or bool(self.dead)

    @property
    def stored(self) -> bool:
        """Whether a send succeeded (the message has its placement)."""
        return self.send in ("ok", "retried")

    @property
    def time_ms(self) -> int:
        """The listing time of a traced message: its store time, else (every send failed) its born time."""
        return self.store_ms if self.stored else self.born_ms


@dataclass
class Scenario:
    topics: int
    messages: list[Lifecycle]
    two_rounds: bool


def pick(draw: st.DrawFn, choices: tuple[Any, ...], salt: int) -> Any:
    """One of ``choices``, shifted by ``salt``: even hypothesis' simplest example (all zeros) mixes them all."""
    return choices[(draw(st.integers(0, len(choices) - 1)) + salt) % len(choices)]


@st.composite
def group_attempts(draw: st.DrawFn, salt: int) -> tuple[str, tuple[Attempt, ...]]:
    """A group's plan and its attempts."""
    plan = pick(draw, PLANS, salt)
    n = pick(draw, (1, 2), salt // 3)
    fails = [pick(draw, FAILURES, salt + i) for i in range(n + 1)]
    statuses: list[int | None]
    if plan in ("none", "dead_unreceived"):
        statuses = []
    elif plan == "ok":
        statuses = [OK]
    elif plan == "fail_ok":
        statuses = [*fails[:n], OK]
    elif plan == "retrying":
        statuses = [*fails[:n - 1], RETRY_LATER]
    elif plan == "failed":
        statuses = [*fails[:n - 1], pick(draw, FAILURES[:3], salt)]
    elif plan == "dead":
        statuses = fails
    elif plan == "pending":
        statuses = [None]
    else:  # retry_pending
        statuses = [fails[0], None]
    return plan, tuple(Attempt(r, s, pick(draw, ("readme", "batch"), salt // 2 + r)) for r, s in enumerate(statuses))


@st.composite
def lifecycles(draw: st.DrawFn, index: int, topics: int, two_rounds: bool) -> Lifecycle:
    # Each topic's first message after the shared ones is sent OK: every topic has a placed message,
    # so its windows and offsets have something to bound (a few messages could all miss a topic).
    anchor = N_SHARED <= index < N_SHARED + topics
    topic = 0 if index < N_SHARED else index - N_SHARED if anchor else pick(draw, tuple(range(topics)), index)
    own = f"key-{index}"
    if index < N_SHARED:
        keys = pick(draw, (SHARED_KEY, f"{SHARED_KEY} {own}"), index // 2)
    else:
        keys = pick(draw, (own, f"{own} {SHARED_KEY}", ""), index // 2)
    send = "ok" if anchor else pick(draw, SENDS, index * 3)
    attempts: dict[str, tuple[Attempt, ...]] = {}
    dead: list[str] = []
    for g, group in enumerate(GROUPS):
        plan, tries = draw(group_attempts(index * 7 + g * 3 + index // 10))
        if plan.startswith("dead") and len(dead) < 2:
            dead.append(group)
        elif plan.startswith("dead"):
            tries = tries[:-1]  # a third dead-lettering group just failed
        if tries:
            attempts[group] = tries
    late = two_rounds and send in ("ok", "retried") and bool(attempts or dead) and pick(draw, (0, 1, 2, 3), index) == 0
    return Lifecycle(
        index=index, topic=topic, keys=keys, tags=pick(draw, ("", "created", "paid||urgent"), index // 3),
        broker=pick(draw, BROKERS, index // 5), queue=pick(draw, (0, 1, 2, 3), index * 5),
        store_rel_s=pick(draw, tuple(range(STORE_SPAN_S)), index * 37),  # many tied store times
        born_lag_ms=pick(draw, (0, 1, 7, 30), index), gap=pick(draw, (1, 1, 1, 2, 5), index * 2),
        send=send, send_failure=pick(draw, (int(Status.TIMEOUT), int(Status.FAILED)), index // 4),
        attempts=attempts, dead=tuple(dead), late=late,
    )


@st.composite
def scenarios(draw: st.DrawFn, min_messages: int = 12, max_messages: int = 22) -> Scenario:
    topics = draw(st.integers(2, 3))
    two_rounds = not draw(st.booleans())  # the simplest example has two rounds
    n = draw(st.integers(min_messages, max_messages))
    return Scenario(topics, [draw(lifecycles(i, topics, two_rounds)) for i in range(n)], two_rounds)


def layout(scenario: Scenario, prefix: str, base_ms: int) -> list[str]:
    """Give each message its topic name, id, times and offset (offsets grow with store time, with gaps)."""
    topics = [f"{prefix}-t{i}" for i in range(scenario.topics)]
    queues: dict[tuple[int, int], list[Lifecycle]] = {}
    for m in scenario.messages:
        m.topic_name = topics[m.topic]
        if m.late or not m.traced:
            # Known before any send is traced: the broker's id (late ones also carry it in headers).
            m.msg_id = tracehook.new_msg_id()
            if m.late:
                tracehook.inject_headers(m.headers, m.msg_id)
        m.store_ms = base_ms + m.store_rel_s * 1000
        m.born_ms = m.store_ms - m.born_lag_ms
        queues.setdefault((m.topic, m.queue), []).append(m)
    for members in queues.values():
        offset = 100 * members[0].queue
        for m in sorted(members, key=lambda m: (m.store_ms, m.index)):
            offset += m.gap
            m.offset = offset  # failed and untraced messages take offsets too: gaps in the queue index
    return topics


# --- emitting through the library ---------------------------------------------------------


def emit_sends(messages: Iterable[Lifecycle]) -> None:
    """The producer, as README.md and docs/library.md show it (a retry reuses the headers, so the id)."""
    for m in messages:
        if not m.traced:
            continue
        headers = m.headers  # empty: record_send generates the id and writes it there
        if m.send in ("retried", "failed"):
            m.msg_id = tracehook.record_send(m.topic_name, keys=m.keys, tags=m.tags, group=PRODUCER_GROUP,
                                             born_ms=m.born_ms, status=m.send_failure, error=SEND_ERROR,
                                             headers=headers)
        if m.stored:
            msg_id = tracehook.record_send(m.topic_name, keys=m.keys, tags=m.tags, group=PRODUCER_GROUP,
                                           broker=m.broker, queue=m.queue, offset=m.offset, born_ms=m.born_ms,
                                           store_ms=m.store_ms, headers=headers)
            assert m.msg_id in ("", msg_id)  # a retry keeps the id its headers carry
            m.msg_id = msg_id


def emit_consumes(messages: list[Lifecycle]) -> None:
    """Every consume round, then the dead letters; rounds are a few ms apart."""
    rounds = max((len(a) for m in messages for a in m.attempts.values()), default=0)
    for r in range(rounds):
        batches: dict[tuple[str, str, int], list[Lifecycle]] = {}
        for m in messages:
            for group, attempts in m.attempts.items():
                if len(attempts) <= r:
                    continue
                attempt = attempts[r]
                if attempt.status is None:
                    # Received, the handler never finished (the process died): no span.finish().
                    tracehook.start_consume(m.topic_name, m.msg_id, group, queue=m.queue, offset=m.offset, retry=r)
                elif attempt.form == "readme":
                    _consume_readme(m, group, attempt)
                else:
                    batches.setdefault((m.topic_name, group, attempt.status), []).append(m)
        for (topic, group, status), members in batches.items():
            _consume_batch(topic, group, status, r, members)
        time.sleep(PHASE_GAP_S)
    for m in messages:
        for group in m.dead:
            tracehook.record_dead(m.topic_name, m.msg_id, group, error=dead_error(group),
                                  retry=len(m.attempts.get(group, ())), keys=m.keys, queue=m.queue, offset=m.offset)


def _consume_readme(m: Lifecycle, group: str, attempt: Attempt) -> None:
    """The README consumer (with the queue and offset docs/library.md adds); untraced: the broker's id."""
    extra: dict[str, Any] = {"retry": attempt.retry} if attempt.retry else {}
    try:
        if m.headers:
            with tracehook.consume(m.topic_name, None, group, headers=m.headers, queue=m.queue, offset=m.offset,
                                   **extra) as span:
                _handle(span, m, attempt.status)
        else:
            with tracehook.consume(m.topic_name, m.msg_id, group, queue=m.queue, offset=m.offset, **extra) as span:
                _handle(span, m, attempt.status)
    except ValueError:
        pass


def _handle(span: Any, m: Lifecycle, status: int | None) -> None:
    if status == Status.EXCEPTION:
        raise ValueError(f"bad message {m.index}")
    if status == RETRY_LATER:
        span.status = Status.RETRY_LATER
    elif status in (Status.TIMEOUT, Status.FAILED):
        span.finish(status, HANDLER_TIMEOUT)


def _consume_batch(topic: str, group: str, status: int, retry: int, members: list[Lifecycle]) -> None:
    """consume_batch as docs/library.md shows it: one span for the batch, one outcome for all."""
    messages = [{"msg_id": m.msg_id, "keys": m.keys, "queue": m.queue, "offset": m.offset, "retry": retry,
                 "broker": m.broker} for m in members]
    try:
        with tracehook.consume_batch(topic, group, messages=messages) as span:
            if status == Status.EXCEPTION:
                raise ValueError("batch failed")
            if status == RETRY_LATER:
                span.status = Status.RETRY_LATER
            elif status in (Status.TIMEOUT, Status.FAILED):
                span.finish(status, HANDLER_TIMEOUT)
    except ValueError:
        pass


def dead_error(group: str) -> str:
    return f"max retries reached in {group}"


# --- the reference model ------------------------------------------------------------------


def attempt_error(m: Lifecycle, attempt: Attempt) -> str:
    if attempt.status == Status.EXCEPTION:
        return f"ValueError: bad message {m.index}" if attempt.form == "readme" else BATCH_ERROR
    if attempt.status in (Status.TIMEOUT, Status.FAILED):
        return HANDLER_TIMEOUT
    return ""


def outcomes(m: Lifecycle) -> dict[str, dict[str, Any]]:
    """Per consumer group: outcome, attempts, last_status, error (the contract's GroupOutcome)."""
    out = {}
    for group in sorted(set(m.attempts) | set(m.dead)):
        attempts = m.attempts.get(group, ())
        last = attempts[-1] if attempts else None
        last_status = "NOT_RECEIVED" if last is None else "PENDING" if last.status is None else Status(last.status).name
        error = attempt_error(m, last) if last is not None else ""
        if group in m.dead:
            outcome, error = "dead", dead_error(group)
        elif any(a.status == OK for a in attempts):
            outcome, error = "consumed", ""
        elif last is not None and (last.status == RETRY_LATER or (last.status is None and last.retry > 0)):
            outcome = "retrying"
        elif last is not None and last.status is None:
            outcome = "pending"
        else:
            outcome = "failed"
        out[group] = {"outcome": outcome, "attempts": len(attempts), "last_status": last_status, "error": error}
    return out


def expected_row(m: Lifecycle, dead_group: str | None = None) -> dict[str, Any]:
    """The listing row of a message (a dead-letter row of ``dead_group``), in comparable fields."""
    row: dict[str, Any] = {"msg_id": m.msg_id, "topic": m.topic_name, "send_traced": m.traced,
                           "groups": outcomes(m)}
    if dead_group is not None:
        row.update(group=dead_group, error=dead_error(dead_group))
    if not m.traced:
        row["status_name"] = "NOT_TRACED"
        if dead_group is None:
            row.update(group="", error="")
        return row
    row.update(keys=m.keys, tags=m.tags, time_ms=m.time_ms, born_ms=m.born_ms)
    if m.stored:
        row.update(broker=m.broker, queue=m.queue, offset=m.offset, store_ms=m.store_ms, status=OK, status_name="OK")
        if dead_group is None:
            row.update(group=PRODUCER_GROUP, error="")
    else:
        row.update(broker="", queue=-1, offset=-1, store_ms=0, status=m.send_failure,
                   status_name=Status(m.send_failure).name)
        if dead_group is None:
            row.update(group=PRODUCER_GROUP, error=SEND_ERROR)
    return row


def actual_row(item: dict[str, Any], expected: dict[str, Any]) -> dict[str, Any]:
    """An API item cut to the fields ``expected`` has (group outcomes without their times)."""
    row = {k: item.get(k) for k in expected}
    row["groups"] = {g: {k: o[k] for k in ("outcome", "attempts", "last_status", "error")}
                     for g, o in (item.get("groups") or {}).items()}
    return row


def key_matches(m: Lifecycle, key: str) -> bool:
    """Whether a key listing finds the message: by its send's keys, else by keys its consumers carried."""
    if m.traced:
        return key in m.keys.split()
    keyed = any(a.form == "batch" and a.status is not None for tries in m.attempts.values() for a in tries)
    return (keyed or bool(m.dead)) and key in m.keys.split()


def group_seen(messages: Iterable[Lifecycle], group: str) -> bool:
    """Whether ``group`` left a consume record or a dead letter among ``messages`` (one topic's): the
    replay list knows it; a group never seen is refused as a likely typo unless allowed."""
    return any(group in m.attempts or group in m.dead for m in messages)


def replay_status(m: Lifecycle, group: str) -> tuple[str, str, int] | None:
    """``(status, error, attempts)`` of the replay list's item for ``group``; None: not listed."""
    o = outcomes(m).get(group)
    if o is None:
        return "NOT_RECEIVED", "", 0
    if o["outcome"] == "consumed":
        return None
    return ("DEAD" if o["outcome"] == "dead" else o["last_status"]), o["error"], o["attempts"]


def replayable(m: Lifecycle) -> bool:
    """Placed, and stored or seen by a consumer (a send that failed for good and nobody received is not)."""
    return m.traced and (m.stored or bool(m.attempts) or bool(m.dead))


def offsets_at(messages: Iterable[Lifecycle], time_ms: int) -> dict[int, int]:
    """Per queue the first offset stored at or after ``time_ms`` (last + 1 when none), from the sends."""
    rows: dict[int, list[tuple[int, int]]] = {}
    for m in messages:
        if m.stored:
            rows.setdefault(m.queue, []).append((m.store_ms, m.offset))
    out = {}
    for queue, placed in rows.items():
        later = sorted(r for r in placed if r[0] >= time_ms)
        out[queue] = later[0][1] if later else max(placed)[1] + 1
    return out


def records(m: Lifecycle, client_id: str) -> list[tuple[str, int, int, str, str]]:
    """QMQ consume records (group, action, type, consumerId, sequence), sorted."""
    out = []
    for group, attempts in m.attempts.items():
        for a in attempts:
            kind = 1 if a.retry > 0 else 0
            out.append((group, 0, kind, client_id, str(m.offset)))
            if a.status is not None:
                out.append((group, 1, kind, client_id, str(m.offset)))
    out += [(group, 1, 2, client_id, str(m.offset)) for group in m.dead]
    return sorted(out)
