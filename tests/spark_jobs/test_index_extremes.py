"""Issue 41 through the real Spark index job, into both stores: a trace log holding the issue's poison batch
(acknowledged by older collectors) and batches at the edges of every accepted range is indexed in one run
that skips the poison (counted, not fatal) and answers every query for the rest."""

from __future__ import annotations

from typing import Any

import pytest
from fixtures import extremes

from collector.log.file import TraceLog
from collector.log.state import committed_offset, readable_end
from collector.store import open_store
from collector.store.indexer import ROW_KEY_TOO_LONG
from collector.wirecheck import validate
from spark_jobs.index_job import index_once
from tracehook import wire

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SEED = 41


def test_the_index_job_skips_the_poison_and_answers_for_the_edges(spark: Any, tmp_path: Any, store_url: str) -> None:
    payloads = [extremes.POISON, extremes.HARD, *extremes.fixed_batches(SEED, count=4)]
    for data in payloads[1:]:
        validate.check_batch(data)  # what today's collector acknowledges
    log_dir = str(tmp_path / "log")
    log = TraceLog.open(log_dir, durability="os")
    try:
        log.append([(extremes.T0, "client", i, p) for i, p in enumerate(payloads)])
        log.roll()
    finally:
        log.close()

    report = index_once(spark, log_dir, store_url)

    indexed = [e for p in payloads[1:] for e in wire.decode_batch(p).events]
    skipped = {reason: n for reason, n in report.bad.items() if reason != ROW_KEY_TOO_LONG}  # 16 KiB keys: by design
    assert skipped == {"bad_field": 1}, report.bad  # the poison: skipped and counted
    assert report.events == len(indexed)
    assert committed_offset(log_dir) == readable_end(log_dir).offset == len(payloads)  # the index goes on
    store = open_store(store_url)
    try:
        extremes.ask_everything(store, indexed)
    finally:
        store.close()
