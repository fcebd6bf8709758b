"""Issue 41 through the real Spark index job, into both stores: a trace log holding the issue's poison batch
(acknowledged by older collectors) and batches at the edges of every accepted range is indexed in one run
that sets the poison aside (counted, not fatal; the event beside it in its batch is indexed) and answers
every query for the rest."""

from __future__ import annotations

from typing import Any

import pytest
from fixtures import extremes

from collector.index.indexer import ROW_KEY_TOO_LONG
from collector.log.file import TraceLog
from collector.log.state import committed_offset, readable_end
from collector.store import open_store
from collector.wirecheck import validate
from spark_jobs import index_once
from tracehook import wire

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SEED = 41


def test_the_index_job_skips_the_poison_and_answers_for_the_edges(spark: Any, tmp_path: Any, store_url: str) -> None:
    # The poison alone, and beside an event that is fine: only the poison is lost.
    poison = wire.decode_events_separately(extremes.POISON)[1][0][0]
    innocent = wire.make_event(wire.EventType.PUB, extremes.T0, "pg", "orders", "beside-the-poison", queue=1, offset=7,
                               store_ms=extremes.T0)
    mixed = wire.encode_batch(wire.BatchHeader("client-41", 2, "app", "host", extremes.T0, {}), [poison, innocent])
    payloads = [extremes.POISON, mixed, extremes.HARD, *extremes.fixed_batches(SEED, count=4)]
    for data in payloads[2:]:
        validate.check_batch(data)  # what today's collector acknowledges
    log_dir = str(tmp_path / "log")
    log = TraceLog.open(log_dir, durability="os")
    try:
        log.append([(extremes.T0, "client", i, p) for i, p in enumerate(payloads)])
        log.roll()
    finally:
        log.close()

    report = index_once(spark, log_dir, store_url)

    indexed = [wire.Event(*innocent)] + [e for p in payloads[2:] for e in wire.decode_batch(p).events]
    skipped = {reason: n for reason, n in report.bad.items() if reason != ROW_KEY_TOO_LONG}  # 16 KiB keys: by design
    assert skipped == {} and report.set_aside == 2, (report.bad, report.set_aside)  # the poison, twice: set aside
    assert report.events == len(indexed)
    assert committed_offset(log_dir) == readable_end(log_dir).offset == len(payloads)  # the index goes on
    store = open_store(store_url)
    try:
        extremes.ask_everything(store, indexed)
    finally:
        store.close()
