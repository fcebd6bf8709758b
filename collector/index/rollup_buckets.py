"""The rollup buckets: one topic's counts for one minute (or one hour), as the ``rollups`` table holds them.

:mod:`collector.index.rollup` writes the minutes, :mod:`collector.index.rollup_hours` merges them
into hours; the overview (:mod:`collector.query.overview`) reads both.  An hour bucket is a
:class:`MinuteBucket` whose ``minute_ms`` is the start of its hour.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import msgpack

from collector.store import keys, schema
from collector.store.base import Columns
from collector.store.model import PENDING, RETRYING

LATENCY_BOUNDS_MS: tuple[int, ...] = (
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 1_800_000,
)
"""Upper bounds (inclusive, ms) of the end-to-end latency histogram; one more bucket holds the rest.
Fixed, so buckets of any minutes, topics or collectors add up."""
OPEN_OUTCOMES = frozenset((RETRYING, PENDING))
"""Outcomes that leave a message not yet consumed by the group (with never received): they make lag."""
_LATENCY_BUCKETS = len(LATENCY_BOUNDS_MS) + 1
ROLLUP_FORMAT = 3
"""The rollups' format, the version every part and bucket is encoded with (and recorded in the
store's meta table): 3 keeps hourly rollups beside the minutes (:mod:`collector.index.rollup_hours`);
2 tells failed sends apart (a part's ``stored`` flag, a minute's ``failed_sends``); 1 counted them
as sent and never received."""
_VERSION = ROLLUP_FORMAT


def saturated(n: int) -> int:
    """``n`` held within signed 64 bits (what msgpack packs and HBase readers expect).

    Only a latency sum gets near it: a latency is at most the span of accepted times (1970 to the
    year 9999, about 2.5e14 ms), so tens of thousands of one minute's messages that each waited
    millennia pass 2^63; such a sum says nothing more when it stops there, and the index goes on."""
    return max(keys.INT_MIN, min(n, keys.INT_MAX))


@dataclass(slots=True)
class GroupBucket:
    """One consumer group's outcomes for the messages placed in one minute.

    ``consumed`` / ``retrying`` / ``failed`` / ``dead`` / ``pending`` partition the messages the
    group received (:class:`collector.store.model.GroupOutcome`); ``retried`` counts those it
    needed more than one attempt for.  ``latency`` counts consumed messages by end-to-end
    latency (message time to the SUB_AFTER that consumed it) over :data:`LATENCY_BOUNDS_MS`.
    ``first_ms`` is the time of the first message the group received in the minute;
    ``oldest_open_ms`` that of the oldest message it has not consumed yet (received or not),
    and ``oldest_open_after_first_ms`` the oldest such one at or after ``first_ms``.
    """

    consumed: int = 0
    retrying: int = 0
    failed: int = 0
    dead: int = 0
    pending: int = 0
    retried: int = 0
    first_ms: int | None = None
    oldest_open_ms: int | None = None
    oldest_open_after_first_ms: int | None = None
    latency_sum_ms: int = 0
    latency: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BOUNDS_MS) + 1))

    @property
    def received(self) -> int:
        return self.consumed + self.retrying + self.failed + self.dead + self.pending

    def encode(self) -> bytes:
        return msgpack.packb([
            _VERSION, self.consumed, self.retrying, self.failed, self.dead, self.pending, self.retried,
            self.first_ms, self.oldest_open_ms, self.oldest_open_after_first_ms, saturated(self.latency_sum_ms),
            self.latency,
        ])

    @classmethod
    def decode(cls, value: bytes) -> GroupBucket:
        # Fields straight into the slots: the overview decodes tens of thousands per request, and the
        # dataclass __init__ took three times as long as the unpacking.
        out = object.__new__(cls)
        (_, out.consumed, out.retrying, out.failed, out.dead, out.pending, out.retried, out.first_ms,
         out.oldest_open_ms, out.oldest_open_after_first_ms, out.latency_sum_ms, latency) = msgpack.unpackb(value)
        if len(latency) < _LATENCY_BUCKETS:  # written with fewer bounds: the open-ended bucket moved up
            latency = latency + [0] * (_LATENCY_BUCKETS - len(latency))
        out.latency = latency
        return out


@dataclass(slots=True)
class MinuteBucket:
    """One topic's rollup for one minute: messages placed in it and each group's outcomes."""

    topic: str
    minute_ms: int
    sent: int = 0
    """Messages placed in the minute that the broker stored (failed sends are not)."""
    first_ms: int | None = None
    """The time of the minute's oldest stored message."""
    groups: dict[str, GroupBucket] = field(default_factory=dict)
    failed_sends: int = 0
    """Messages placed in the minute whose every send failed at the broker (never stored)."""

    @property
    def placed(self) -> int:
        """Every message placed in the minute: a minute with none has no rollup row."""
        return self.sent + self.failed_sends

    def columns(self) -> Columns:
        cols = {schema.ROLLUP_COLUMN: msgpack.packb([_VERSION, self.sent, self.first_ms, self.failed_sends])}
        for group, bucket in self.groups.items():
            cols[schema.rollup_group_column(group)] = bucket.encode()
        return cols

    @classmethod
    def from_row(cls, topic: str, row: bytes, columns: Columns) -> MinuteBucket:
        return cls.from_columns(topic, schema.rollup_row_minute(row), columns)

    @classmethod
    def from_columns(cls, topic: str, minute_ms: int, columns: Columns) -> MinuteBucket:
        """The bucket of ``minute_ms`` (an hour row's: its hour) from its row's columns."""
        out = cls(topic, minute_ms)
        for name, value in columns.items():
            if name == schema.ROLLUP_COLUMN:
                fields = msgpack.unpackb(value)
                out.sent, out.first_ms = fields[1:3]
                out.failed_sends = fields[3] if len(fields) > 3 else 0  # format 1 had no failed sends
            else:
                out.groups[_group_of(name)] = GroupBucket.decode(value)
        return out


@functools.lru_cache(maxsize=4096)
def _group_of(column: bytes) -> str:
    (group,) = keys.unpack(schema.split_column(column)[1])
    return str(group)
