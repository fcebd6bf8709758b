"""Index lag on ``/metrics``: how far each index checkpoint is behind the log's durable end.

The collector knows its durable end; each index checkpoint records what it has committed in
``<log-dir>/index-commits/`` (:mod:`collector.log.state`).  Per store (label ``store``):

- ``tracehook_index_lag_records``: records (batches) acknowledged but not yet committed;
- ``tracehook_index_lag_events``: the events in them, counted over the batches this collector
  process acknowledged (a checkpoint further behind than the collector's start shows a lower bound);
- ``tracehook_index_lag_seconds``: age of the oldest record not yet committed (0 when caught up);
- ``tracehook_index_set_aside_events``: events the checkpoint's runs could not store and set aside
  (``<checkpoint>/set-aside.jsonl``, :mod:`collector.log.setaside`; ``tracehook set-aside list``).
"""

from __future__ import annotations

import bisect
import time
from collections import deque
from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from collector.log import setaside
from collector.log.state import LogPosition, read_commits, receive_ms_at
from collector.server.metrics import CollectorMetrics, LabelKey, gauge_family

MAX_REMEMBERED_GROUPS = 200_000
"""Group commits whose (end offset, events so far) are kept to count events behind a checkpoint."""


HELP = {
    "records": "Acknowledged records (batches) an index checkpoint has not committed, per store.",
    "events": "Events in those records (counted since the collector started), per store.",
    "seconds": "Age of the oldest acknowledged record not yet indexed, per store.",
}
SET_ASIDE_METRIC = "tracehook_index_set_aside_events"
SET_ASIDE_HELP = "Events the index job could not store and set aside (tracehook set-aside list), per store."


class IndexLag(Collector):
    """Fed by the ingestor after every group commit; read at scrape time (the checkpoints'
    commit files once per scrape for the three gauges)."""

    def __init__(self, log_dir: str, durable: LogPosition) -> None:
        self.log_dir = log_dir
        self.end = durable.offset
        self.events = 0
        self._ends: deque[int] = deque(maxlen=MAX_REMEMBERED_GROUPS)
        self._totals: deque[int] = deque(maxlen=MAX_REMEMBERED_GROUPS)

    def acknowledged(self, end_offset: int, events: int) -> None:
        """A group commit made records up to ``end_offset`` (exclusive), holding ``events``, durable."""
        self.end = end_offset
        self.events += events
        self._ends.append(end_offset)
        self._totals.append(self.events)

    def _events_before(self, offset: int) -> int:
        i = bisect.bisect_right(list(self._ends), offset)
        return self._totals[i - 1] if i else 0

    def samples(self) -> dict[str, dict[LabelKey, float]]:
        """{metric suffix: {labels: value}} for every checkpoint."""
        out: dict[str, dict[LabelKey, float]] = {"records": {}, "events": {}, "seconds": {}}
        now_ms = time.time() * 1000
        for commit in read_commits(self.log_dir):
            key: LabelKey = (("store", commit.store),)
            behind = max(0, self.end - commit.position.offset)
            out["records"][key] = behind
            out["events"][key] = self.events - self._events_before(commit.position.offset) if behind else 0
            seconds = 0.0
            if behind:
                received = receive_ms_at(self.log_dir, *commit.position)
                seconds = max(0.0, (now_ms - received) / 1000) if received else 0.0
            out["seconds"][key] = round(seconds, 3)
        return out

    def set_aside(self) -> dict[LabelKey, float]:
        """Per store: the events its checkpoint set aside."""
        return {(("store", commit.store),): setaside.count(commit.checkpoint) for commit in read_commits(self.log_dir)}

    def set_aside_total(self) -> int:
        """Events set aside by every checkpoint of this log (``/healthz``, the console)."""
        return int(sum(self.set_aside().values()))

    def describe(self) -> list[Metric]:
        return [Metric(f"tracehook_index_lag_{suffix}", help_, "gauge") for suffix, help_ in HELP.items()] + [
            Metric(SET_ASIDE_METRIC, SET_ASIDE_HELP, "gauge")]

    def collect(self) -> Iterator[Metric]:
        for suffix, values in self.samples().items():
            yield gauge_family(f"tracehook_index_lag_{suffix}", HELP[suffix], values)
        yield gauge_family(SET_ASIDE_METRIC, SET_ASIDE_HELP, self.set_aside())

    def register(self, metrics: CollectorMetrics) -> None:
        """Add the three gauges to ``metrics``."""
        metrics.register(self)
