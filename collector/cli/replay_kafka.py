"""Kafka's side of ``tracehook replay``: read exactly the listed records, hand them on, two ways.

Records are read in contiguous offset ranges: one ``assign`` + ``seek`` per range, then polls
until the range is read (records between two wanted ones are read and dropped when the gap
is at most :data:`DEFAULT_MAX_GAP`).  Every wanted record comes back once, with what is wrong
with it, if anything::

    for wanted, record, problem in read_records(bootstrap, "orders", wanted):
        ...   # problem "": record is the kafka-python ConsumerRecord whose msg id matches the trace

Deliveries: :class:`TopicDelivery` re-publishes to another topic (same key, value and headers;
the original's place, timestamp and next retry number in ``tracehook-replay-*`` headers, which
the Kafka adapters read so the group's consume attaches to the original message);
:class:`HandlerDelivery` calls a handler in this process, traced as a consume of the group.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import tracehook
from collector.cli.errors import ReplayError
from tracehook.adapters._common import (
    HEADER_ORIGINAL_TIMESTAMP,
    HEADER_REPLAY_OF,
    HEADER_REPLAY_RETRY,
    header_text,
    text,
)
from tracehook.context import HEADER_MSG_ID, derived_msg_id

DEFAULT_MAX_GAP = 100
"""Most unwanted records read (and dropped) between two wanted ones rather than seeking again."""
DEFAULT_POLL_MS = 5000
"""How long a range may go without a record before its unread offsets are reported."""
MAX_POLL_RECORDS = 500

GONE = "gone from the broker (before its log start: retention or delete-records)"
PAST_END = "not on the broker (past its end offset)"
NOT_AT_OFFSET = "no record at that offset (a transaction marker, or compacted away)"


@dataclass(frozen=True)
class Wanted:
    """One message of the replay list to re-read: its id, place and the retry number its replay carries."""

    msg_id: str
    partition: int
    offset: int
    retry: int
    time_ms: int = 0
    keys: str = ""


@dataclass(frozen=True)
class Bounds:
    """The topic's partitions on the broker: log start and end offset."""

    beginning: dict[int, int]
    end: dict[int, int]


def _consumer(bootstrap: str) -> Any:
    from kafka import KafkaConsumer

    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         max_poll_records=MAX_POLL_RECORDS)


def broker_bounds(bootstrap: str, topic: str) -> Bounds | None:
    """The topic's log start and end offsets per partition; None when the broker has no such topic."""
    from kafka import TopicPartition

    consumer = _consumer(bootstrap)
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            return None
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        beginning, end = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        return Bounds({tp.partition: beginning[tp] for tp in tps}, {tp.partition: end[tp] for tp in tps})
    finally:
        consumer.close()


def ranges(offsets: list[int], max_gap: int = DEFAULT_MAX_GAP) -> list[tuple[int, int]]:
    """Ascending ``offsets`` as ``[(first, last)]`` ranges; a gap of more than ``max_gap`` starts a new one."""
    out: list[tuple[int, int]] = []
    for offset in offsets:
        if out and offset - out[-1][1] <= max_gap + 1:
            out[-1] = (out[-1][0], offset)
        else:
            out.append((offset, offset))
    return out


def bounds_problem(offset: int, low: int | None, high: int | None) -> str:
    """:data:`GONE` or :data:`PAST_END` for an offset outside a partition's ``[low, high)``; "" otherwise."""
    if low is None or high is None or offset >= high:
        return PAST_END
    return GONE if offset < low else ""


def off_the_broker(wanted: list[Wanted], bounds: Bounds) -> list[tuple[Wanted, str]]:
    """``(wanted, problem)`` for the records the broker's bounds already rule out, no read needed."""
    found = [(w, bounds_problem(w.offset, bounds.beginning.get(w.partition), bounds.end.get(w.partition)))
             for w in wanted]
    return [(w, problem) for w, problem in found if problem]


def msg_id_problem(topic: str, wanted: Wanted, record: Any) -> str:
    """Why ``record`` is not the message the trace lists ("" when it is): a different id is refused."""
    found = header_text(record.headers, HEADER_MSG_ID) or derived_msg_id(topic, record.partition, record.offset)
    if found == wanted.msg_id:
        return ""
    return f"the record there has message id {found!r}, not the trace's: refused"


def read_records(bootstrap: str, topic: str, wanted: list[Wanted], bounds: Bounds, *,
                 max_gap: int = DEFAULT_MAX_GAP, poll_ms: int = DEFAULT_POLL_MS) -> Iterator[tuple[Wanted, Any, str]]:
    """``(wanted, record or None, problem)`` for every wanted record, by partition and offset.

    Stop early by closing the generator (``break`` out of the loop): the consumer closes with it.
    """
    from kafka import TopicPartition

    by_partition: dict[int, dict[int, Wanted]] = {}
    for w in wanted:
        by_partition.setdefault(w.partition, {})[w.offset] = w
    consumer = _consumer(bootstrap)
    try:
        for partition in sorted(by_partition):
            mine = by_partition[partition]
            low, high = bounds.beginning.get(partition), bounds.end.get(partition)
            readable = []
            for offset in sorted(mine):
                problem = bounds_problem(offset, low, high)
                if problem:
                    yield mine[offset], None, problem
                else:
                    readable.append(offset)
            tp = TopicPartition(topic, partition)
            for first, last in ranges(readable, max_gap):
                yield from _read_range(consumer, tp, first, last, mine, poll_ms)
    finally:
        consumer.close()


def _read_range(consumer: Any, tp: Any, first: int, last: int, mine: dict[int, Wanted],
                poll_ms: int) -> Iterator[tuple[Wanted, Any, str]]:
    consumer.assign([tp])
    consumer.seek(tp, first)
    next_wanted = first  # everything below it is settled
    while consumer.position(tp) <= last:
        records = consumer.poll(timeout_ms=poll_ms, max_records=MAX_POLL_RECORDS).get(tp, [])
        if not records and consumer.position(tp) <= last:
            break  # nothing more within the timeout: what is left of the range is unread
        for record in records:
            if record.offset > last:
                break
            for offset in range(next_wanted, record.offset):
                if offset in mine:
                    yield mine[offset], None, NOT_AT_OFFSET
            next_wanted = record.offset + 1
            w = mine.get(record.offset)
            if w is not None:
                yield w, record, msg_id_problem(tp.topic, w, record)
    unread = "not read within the poll timeout" if consumer.position(tp) <= last else NOT_AT_OFFSET
    for offset in range(next_wanted, last + 1):
        if offset in mine:
            yield mine[offset], None, unread


# -- deliveries ---------------------------------------------------------------------------------

REPLAY_HEADERS = frozenset((HEADER_REPLAY_OF, HEADER_REPLAY_RETRY, HEADER_ORIGINAL_TIMESTAMP))
"""The headers that mark a re-published record (a record's own are replaced, never doubled)."""


def replay_marks(source_topic: str, wanted: Wanted, record: Any) -> list[tuple[str, bytes]]:
    """The headers that mark ``record`` re-published as the replay of the original (its place, the
    attempt number its consume continues with, its timestamp), which the adapters read."""
    return [(HEADER_REPLAY_OF, f"{source_topic}/{record.partition}/{record.offset}".encode()),
            (HEADER_REPLAY_RETRY, str(wanted.retry).encode()),
            (HEADER_ORIGINAL_TIMESTAMP, str(record.timestamp).encode())]


class TopicDelivery:
    """Re-publish records to ``target`` with a plain (untraced) producer: the message already has its send."""

    replay_event_first = False  # the REPLAY event is recorded once the broker acknowledged the copy

    def __init__(self, bootstrap: str, source_topic: str, target: str) -> None:
        from kafka import KafkaProducer

        self.source_topic = source_topic
        self.target = f"topic:{target}"
        self._topic = target
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=5)
        self._pending: list[tuple[Wanted, Any]] = []

    def deliver(self, wanted: Wanted, record: Any) -> None:
        headers = [(k, v) for k, v in (record.headers or []) if k not in REPLAY_HEADERS]
        headers += replay_marks(self.source_topic, wanted, record)
        future = self._producer.send(self._topic, value=record.value, key=record.key, headers=headers)
        self._pending.append((wanted, future))

    def settle(self) -> list[tuple[Wanted, str]]:
        """Wait for the broker's answers: ``(wanted, error or "")`` for every record since the last call."""
        self._producer.flush()
        pending, self._pending = self._pending, []
        out = []
        for wanted, future in pending:
            try:
                future.get(timeout=0)
                out.append((wanted, ""))
            except Exception as exc:  # noqa: BLE001  one record's failure is reported, the run goes on
                out.append((wanted, f"{type(exc).__name__}: {exc}"))
        return out

    def close(self) -> None:
        self._producer.close()


def load_handler(spec: str) -> Callable[[Any], Any]:
    """``module:function`` imported; :class:`ReplayError` (one line) when it cannot be."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise ReplayError(f"--handler {spec!r}: expected module:function")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001  the app's module may fail in any way; say so in one line
        raise ReplayError(f"--handler {spec!r}: cannot import {module_name}: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ReplayError(f"--handler {spec!r}: {module_name} has no function {name!r}")
    return fn


class HandlerDelivery:
    """Call the group's handler for each record in this process, traced as a consume of the group."""

    replay_event_first = True  # before the handler's own consume events: its outcome follows the replay

    def __init__(self, spec: str, tracer: tracehook.Tracer, topic: str, group: str) -> None:
        self.target = f"handler:{spec}"
        self._fn = load_handler(spec)
        self._tracer, self._topic, self._group = tracer, topic, group
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: list[tuple[Wanted, str]] = []

    def deliver(self, wanted: Wanted, record: Any) -> None:
        with self._tracer.consume(self._topic, wanted.msg_id, self._group, keys=text(record.key),
                                  queue=record.partition, offset=record.offset, store_ms=max(record.timestamp, 0),
                                  retry=wanted.retry, headers=record.headers or []) as span:
            try:
                result = self._fn(record)
                if inspect.isawaitable(result):
                    if self._loop is None:
                        self._loop = asyncio.new_event_loop()
                    self._loop.run_until_complete(result)
            except Exception as exc:  # noqa: BLE001  the handler's failure is the record's, not the run's
                span.finish(tracehook.Status.EXCEPTION, exc)
                self._done.append((wanted, f"handler raised {type(exc).__name__}: {exc}"))
                return
        self._done.append((wanted, ""))

    def settle(self) -> list[tuple[Wanted, str]]:
        done, self._done = self._done, []
        return done

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
