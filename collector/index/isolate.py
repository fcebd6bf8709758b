"""Index a batch so that an event the indexer cannot store costs that event, never the batch.

The index job indexes a whole batch at once (:func:`collector.index.indexer.index_records`, then
:func:`~collector.index.indexer.finish_batch`); only when that raises does it index the batch
again here.  Indexing is idempotent (every cell is computed from its event), so the events are
written again chunk by chunk, each chunk finished on its own; a chunk that fails is split in two
until the event that fails is alone.  That event is *set aside*: returned with the reason, for
the caller to record (:mod:`collector.log.setaside`), while every other event is indexed::

    set_aside = index_isolating(store, [Item(position, header, event), ...])

A failure of the store itself (it is down, its disk is full, its layout is not this one) is not
an event's fault: it is raised, as a normal run raises it, and nothing is set aside.  So that a
store that fails every write is not mistaken for a batch of bad events, an event is set aside
only when the store still answers a read right after it failed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import NamedTuple

from collector.store.base import Store
from collector.store.errors import LayoutVersionError, SaltBucketsMismatchError, StoreUnavailableError
from tracehook.wire import BatchHeader, Event

DEFAULT_CHUNK_EVENTS = 2000
"""Events indexed and finished together while isolating (a failing chunk is then bisected)."""
MAX_REASON_CHARS = 300
"""A set-aside reason is the failure's first line, cut to this length."""


class Item(NamedTuple):
    """One event to index and where it came from (its log position, for the set-aside record)."""

    position: tuple[int, int, int]
    """(segment base or Kafka partition, record offset, index of the event in its batch)."""
    header: BatchHeader
    event: Event


class SetAsideEvent(NamedTuple):
    """An event the indexer could not store, and why."""

    item: Item
    reason: str


STORE_FAILURES: tuple[type[BaseException], ...] = (
    StoreUnavailableError, LayoutVersionError, SaltBucketsMismatchError, OSError, sqlite3.OperationalError,
    MemoryError)
"""Failures of the store or the machine, not of an event: raised, never set aside."""


def is_store_failure(exc: BaseException) -> bool:
    """True when ``exc`` says the store (or the machine) failed rather than an event."""
    return isinstance(exc, STORE_FAILURES) or not isinstance(exc, Exception)


def reason_of(exc: BaseException) -> str:
    """A one-line reason: the exception's type and the first line of its message."""
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return line[:MAX_REASON_CHARS]


IndexChunk = Callable[[Store, Sequence[Item]], None]


def index_chunk(store: Store, items: Sequence[Item]) -> None:
    """Index ``items`` and finish them as one batch (the rows, then the rollups of their messages)."""
    from collector.index.indexer import finish_batch, index_records
    from collector.index.rollup import read_parts

    touched: set[str] = set()
    index_records(store, [(item.header, item.event) for item in items], touched=touched)
    finish_batch(store, parts=read_parts(store, touched))


def index_isolating(store: Store, items: Sequence[Item], *, chunk: int = DEFAULT_CHUNK_EVENTS,
                    index: IndexChunk = index_chunk) -> list[SetAsideEvent]:
    """Index every item ``index`` can store, ``chunk`` events at a time; return the ones set aside.

    Store failures (:func:`is_store_failure`) are raised: the caller's batch fails as before.
    """
    set_aside: list[SetAsideEvent] = []
    for start in range(0, len(items), chunk):
        _bisect(store, items[start:start + chunk], index, set_aside)
    return set_aside


def _bisect(store: Store, items: Sequence[Item], index: IndexChunk, out: list[SetAsideEvent]) -> None:
    try:
        index(store, items)
        return
    except Exception as exc:
        if is_store_failure(exc):
            raise
        if len(items) == 1:
            _check_store_answers(store, exc)
            out.append(SetAsideEvent(items[0], reason_of(exc)))
            return
    half = len(items) // 2
    _bisect(store, items[:half], index, out)
    _bisect(store, items[half:], index, out)


def _check_store_answers(store: Store, failure: Exception) -> None:
    """Raise ``failure`` as a store failure unless the store answers a read now."""
    from collector.store import schema

    try:
        store.get_rows(schema.MESSAGES, [schema.message_row("tracehook-probe")])
    except Exception as exc:
        raise StoreUnavailableError(f"the store fails reads too ({reason_of(exc)}); "
                                    f"not setting aside an event for: {reason_of(failure)}") from failure
