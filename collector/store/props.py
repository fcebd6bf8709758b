"""Indexed properties: which property names are indexed per topic, and the index rows they make.

The operator names the properties worth finding messages by (``orderId``, ``tenant``...): a
default list for every topic, and lists of their own for some topics (a topic's list replaces the
default for it).  The lists live in the store's ``meta`` table (column :data:`PROPS_COLUMN`), so
every index job writing the store reads the same ones, set by ``tracehook props set``::

    props = load(store)                                    # IndexedProps
    save(store, props.with_names(None, ["orderId"]))       # the default list
    save(store, props.with_names("payments", ["paymentId", "orderId"]))
    current(store).names_for("orders")                     # what the indexer uses (cached, refreshed)

Each indexed property of an event (see :data:`PROP_TYPES`) files its message in ``propidx`` under
(topic, name, value prefix, reversed message time, msg_id), as keys are filed in ``keyidx``.  A
query keeps a row only when the *message's* props (its send's, else those of the event the message
is known by: :class:`collector.store.model.MessageTrace`) carry that exact value, at the message's
listing time; so a consume's props count only for a message whose send is not traced.
"""

from __future__ import annotations

import json
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from collector.store import schema
from collector.store.base import Store
from collector.store.errors import BadPropertyError
from tracehook.wire import BatchHeader, Event, EventType

PROPS_COLUMN = b"m:indexed_props"
"""The meta column holding the lists (JSON: ``{"default": [...], "topics": {topic: [...]}}``)."""
REFRESH_S = 10.0
"""How often an indexer re-reads the lists of a store it keeps open (a follow-mode job runs for days)."""
PROP_TYPES = frozenset((EventType.PUB, EventType.END_TX, EventType.SUB_BEFORE, EventType.DEAD))
"""Events whose props are indexed: sends and transaction ends, and the consume and dead events that
file a message under its keys too (a message whose send is not traced is known by them)."""
MAX_NAMES = 64
"""Names one list may hold (an event carries at most 64 props, ``tracehook.wire.MAX_PROPS``)."""


def check_name(name: str) -> str:
    """``name`` if it can be an indexed property name; :class:`BadPropertyError` saying why not."""
    if not name:
        raise BadPropertyError("a property name cannot be empty")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadPropertyError(f"property name {name!r} is not valid Unicode text") from None
    if size > schema.MAX_PROP_NAME_BYTES:
        raise BadPropertyError(f"property name {name[:40]!r}... is {size} bytes; indexed names are at most "
                               f"{schema.MAX_PROP_NAME_BYTES} bytes (UTF-8)")
    return name


@dataclass(frozen=True)
class IndexedProps:
    """The property names indexed: ``default`` for every topic without a list of its own in ``topics``."""

    default: tuple[str, ...] = ()
    topics: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        sets = {topic: frozenset(names) for topic, names in self.topics.items()}
        object.__setattr__(self, "_sets", sets)
        object.__setattr__(self, "_default", frozenset(self.default))

    def names_for(self, topic: str) -> frozenset[str]:
        """The names indexed on ``topic``."""
        return self._sets.get(topic, self._default)  # type: ignore[attr-defined,no-any-return]

    @property
    def empty(self) -> bool:
        """True when nothing is indexed on any topic."""
        return not self.default and not any(self.topics.values())

    def with_names(self, topic: str | None, names: Iterable[str]) -> IndexedProps:
        """These lists with ``topic``'s (None: the default) set to ``names``."""
        chosen = tuple(dict.fromkeys(check_name(n) for n in names))
        if not chosen:
            raise BadPropertyError("name at least one property")
        if len(chosen) > MAX_NAMES:
            raise BadPropertyError(f"at most {MAX_NAMES} names per list, not {len(chosen)}")
        if topic is None:
            return IndexedProps(chosen, self.topics)
        return IndexedProps(self.default, {**self.topics, topic: chosen})

    def without(self, topic: str | None, names: Iterable[str] = ()) -> IndexedProps:
        """These lists with ``names`` taken out of ``topic``'s (None: the default); with no names, the
        whole list (a topic then takes the default again)."""
        drop = set(names)
        current = self.default if topic is None else self.topics.get(topic, ())
        kept = tuple(n for n in current if n not in drop) if drop else ()
        if topic is None:
            return IndexedProps(kept, self.topics)
        topics = {t: n for t, n in self.topics.items() if t != topic}
        if kept:
            topics[topic] = kept
        return IndexedProps(self.default, topics)

    def encode(self) -> bytes:
        return json.dumps({"default": list(self.default), "topics": {t: list(n) for t, n in self.topics.items()}},
                          ensure_ascii=False, sort_keys=True).encode("utf-8")

    @classmethod
    def decode(cls, value: bytes) -> IndexedProps:
        doc = json.loads(value.decode("utf-8"))
        return cls(tuple(doc.get("default", ())), {t: tuple(n) for t, n in doc.get("topics", {}).items()})


NOTHING = IndexedProps()


def load(store: Store) -> IndexedProps:
    """The lists recorded in ``store`` (:data:`NOTHING` when none are)."""
    value = store.get_meta(PROPS_COLUMN)
    return NOTHING if value is None else IndexedProps.decode(value)


def save(store: Store, props: IndexedProps) -> None:
    """Record ``props`` in ``store`` (the last writer wins); indexers take it up within :data:`REFRESH_S`."""
    store.put_meta(PROPS_COLUMN, props.encode())
    with _lock:
        _cache.pop(store, None)


_cache: weakref.WeakKeyDictionary[Store, tuple[float, IndexedProps]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def current(store: Store, *, now: float | None = None) -> IndexedProps:
    """The lists of ``store`` as the indexer uses them: read when this store object is first used,
    then again once they are :data:`REFRESH_S` old."""
    now = time.monotonic() if now is None else now
    with _lock:
        cached = _cache.get(store)
    if cached is not None and now - cached[0] < REFRESH_S:
        return cached[1]
    # A store without a meta table (a test double, a benchmark's) indexes no properties.
    props = load(store) if hasattr(store, "get_meta") else NOTHING
    with _lock:
        _cache[store] = (now, props)
    return props


class PropRows:
    """The ``propidx`` rows of the events that pass through :meth:`tap`, merged until taken."""

    def __init__(self, props: IndexedProps) -> None:
        self.props = props
        self.rows: dict[bytes, schema.Cells] = {}
        self.too_long = 0

    def tap(self, records: Iterable[tuple[BatchHeader, Event]]) -> Iterator[tuple[BatchHeader, Event]]:
        """``records`` unchanged, collecting their events' property rows on the way."""
        names_for, types, rows, limit = self.props.names_for, PROP_TYPES, self.rows, schema.MAX_ROW_KEY_BYTES
        for record in records:
            event = record[1]
            props = event.props
            if props and event.type in types:
                names = names_for(event.topic)
                if names:
                    for row in event_rows(event, names):
                        if len(row) > limit:  # as rows_for: HBase refuses a put holding one
                            self.too_long += 1
                        else:
                            rows[row] = schema.INDEX_CELLS
            yield record

    def take(self) -> list[tuple[bytes, schema.Cells]]:
        """The rows collected so far (and forget them)."""
        out = list(self.rows.items())
        self.rows.clear()
        return out


def event_rows(event: Event, names: frozenset[str]) -> list[bytes]:
    """The ``propidx`` row keys of ``event``'s properties named in ``names`` (long keys included)."""
    props = event.props or {}
    found = [n for n in names if n in props] if len(names) < len(props) else [n for n in props if n in names]
    if not found:
        return []
    return schema.prop_rows(event.topic, event.msg_id, schema.message_time(event), [(n, props[n]) for n in found])
