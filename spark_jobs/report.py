"""What an index run did: :class:`IndexReport`, and the totals a run adds its batches into."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass(frozen=True)
class IndexReport:
    """What one run indexed; ``bad`` counts what it could not index, by reason.

    Reasons: ``corrupt_records`` and ``corrupt_bytes`` (records and bytes in damaged frames,
    skipped up to the next frame that verifies), ``row_key_too_long`` (index rows left out),
    and :attr:`tracehook.wire.WireError.reason` of batches that do not decode.
    ``purged`` is the number of expired cells deleted, None when no purge ran.
    """

    segments: int = 0
    records: int = 0
    events: int = 0
    bad: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    purged: int | None = None
    unit: str = "segment"
    set_aside: int = 0
    """Events the indexer could not store, recorded beside the checkpoint (``tracehook set-aside list``)."""
    """What ``segments`` counts: the trace-log segments read, or ``partition`` for a Kafka source:
    the topic's partitions (those with no new records included)."""

    @property
    def rate(self) -> float:
        """Events indexed per second."""
        return self.events / self.seconds if self.seconds > 0 else 0.0

    def __str__(self) -> str:
        bad = ", ".join(f"{n} {why}" for why, n in sorted(self.bad.items())) or "none"
        purged = "" if self.purged is None else f"; purged {self.purged} expired cell(s)"
        aside = f"; set aside: {self.set_aside} event(s) (tracehook set-aside list)" if self.set_aside else ""
        return (f"{self.segments} {self.unit}(s), {self.records} record(s), {self.events} event(s) "
                f"in {self.seconds:.1f}s ({self.rate:,.0f} events/s); skipped: {bad}{aside}{purged}")


class RunTotals:
    """Totals of one streaming query, filled in by its ``foreachBatch`` on the driver."""

    def __init__(self, unit: str = "segment") -> None:
        self.unit = unit
        self.segments: set[int] = set()
        self.records = 0
        self.events = 0
        self.batches = 0
        self.bad: Counter[str] = Counter()
        self.set_aside = 0
        self.failure: BaseException | None = None
        self.topic_partitions: int | None = None
        """A Kafka source's partition count, reported instead of the partitions records came from."""

    def report(self, started: float, purged: int | None = None) -> IndexReport:
        count = len(self.segments) if self.topic_partitions is None else self.topic_partitions
        return IndexReport(segments=count, records=self.records, events=self.events,
                           bad=dict(self.bad), seconds=time.monotonic() - started, purged=purged, unit=self.unit,
                           set_aside=self.set_aside)
