"""Backfill: file the messages already in the store under a property indexed since.

The index job files a property only once its name is indexed (:mod:`collector.store.props`);
a backfill reads every message row (the ``messages`` table holds each indexed event, so no trace
log is needed) and writes the ``propidx`` rows the index job would have written for one topic's
messages in a window.  Rows are computed from the events alone, as the indexer computes them, so
running it again, or over messages the job indexed meanwhile, rewrites identical cells.

It reads the message table in row-key order, a chunk at a time, and records how far it got in
the store's ``meta`` table after each chunk: an interrupted run resumes where it stopped when it
is run again with the same arguments (``run_id``); a finished one runs again from the start.

Example::

    report = backfill(store, "orders", ["orderId"], begin_ms, end_ms)
    print(report.messages, report.rows)
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from collector.store import codec, keys, schema
from collector.store.base import Store
from collector.store.errors import BadPropertyError
from collector.store.props import PROP_TYPES, check_name, event_rows, load

DEFAULT_CHUNK = 5000
"""Message rows per step: read, filed, and recorded as done together."""
PROGRESS_PREFIX = b"m:props_backfill "
"""The meta column recording a backfill's progress: this prefix and its topic and names."""
PUT_ROWS = 1000


@dataclass
class BackfillProgress:
    """How far a backfill got (recorded after every chunk)."""

    run_id: str = ""
    after: str | None = None
    """The last message row done, as hex (None: none yet)."""
    messages: int = 0
    """Message rows read."""
    rows: int = 0
    """``propidx`` rows written (an existing row written again counts too)."""
    done: bool = False

    def encode(self) -> bytes:
        return json.dumps(asdict(self)).encode("utf-8")

    @classmethod
    def decode(cls, value: bytes) -> BackfillProgress:
        return cls(**json.loads(value.decode("utf-8")))


def progress_column(topic: str, names: Iterable[str]) -> bytes:
    return PROGRESS_PREFIX + json.dumps([topic, sorted(set(names))], ensure_ascii=False).encode("utf-8")


def backfill(
    store: Store, topic: str, names: Iterable[str], begin_ms: int, end_ms: int, *, run_id: str | None = None,
    chunk: int = DEFAULT_CHUNK, on_chunk: Callable[[BackfillProgress, float], None] | None = None,
    max_chunks: int | None = None,
) -> tuple[BackfillProgress, int]:
    """File ``topic``'s messages with message time in ``[begin_ms, end_ms]`` under properties ``names``.

    Every name must be indexed on ``topic`` (:class:`BadPropertyError` otherwise: set it first, so
    the index job files new messages too).  ``on_chunk(progress, fraction)`` runs after each chunk
    (``fraction``: about how far through the message table).  ``max_chunks`` stops early, as an
    interruption would.  Returns the progress and the message rows earlier runs had done.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, not {chunk}")
    chosen = frozenset(check_name(n) for n in names)
    if not chosen:
        raise BadPropertyError("name at least one property to backfill")
    indexed = load(store).names_for(topic)
    missing = sorted(chosen - indexed)
    if missing:
        raise BadPropertyError(f"{', '.join(map(repr, missing))} not indexed on topic {topic!r}: run "
                               f"`tracehook props set --topic {topic} NAME...` (or set the default list) first")
    run_id = f"{begin_ms}..{end_ms}" if run_id is None else run_id
    column = progress_column(topic, chosen)
    recorded = store.get_meta(column)
    progress = BackfillProgress.decode(recorded) if recorded is not None else BackfillProgress()
    if progress.done or progress.run_id != run_id:
        progress = BackfillProgress(run_id)
    resumed_at = progress.messages
    for _ in itertools.count() if max_chunks is None else range(max_chunks):
        start = b"" if progress.after is None else keys.successor(bytes.fromhex(progress.after))
        rows = list(store.scan(schema.MESSAGES, start, keys.STOP, limit=chunk))
        found: dict[bytes, schema.Cells] = {}
        for row, columns in rows:
            msg_id = keys.unpack(row)[1]  # schema.message_row: (hash4(msg_id), msg_id)
            for event in codec.decode_events(msg_id, list(columns.values())):  # type: ignore[arg-type]
                if (event.topic == topic and event.props and event.type in PROP_TYPES
                        and begin_ms <= schema.message_time(event) <= end_ms):
                    found.update((r, schema.INDEX_CELLS) for r in event_rows(event, chosen)
                                 if len(r) <= schema.MAX_ROW_KEY_BYTES)
        puts = list(found.items())
        for i in range(0, len(puts), PUT_ROWS):
            store.put_rows(schema.PROPIDX, puts[i:i + PUT_ROWS])
        if rows:
            progress.after = rows[-1][0].hex()
        progress.messages += len(rows)
        progress.rows += len(puts)
        progress.done = len(rows) < chunk
        store.put_meta(column, progress.encode())
        if on_chunk is not None:
            on_chunk(progress, 1.0 if progress.done else _fraction(rows[-1][0]))
        if progress.done:
            break
    return progress, resumed_at


def _fraction(row: bytes) -> float:
    """How far through the message table ``row`` is (rows are ordered by their 4-byte hash)."""
    return int.from_bytes(keys.unpack(row)[0], "big") / 2**32  # type: ignore[arg-type]
