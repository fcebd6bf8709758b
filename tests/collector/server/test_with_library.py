"""The real tracehook library delivering to a real collector subprocess (token, 429 backoff, dedup)."""

from __future__ import annotations

import os

import pytest
import requests
from collector_service_helpers import read_log

import tracehook
from collector.log import file as tracelog
from tracehook import wire


@pytest.mark.slow
def test_library_batches_land_in_the_log_with_their_client_stats(collector_process) -> None:
    collector = collector_process(None, "--ingest-token", "lib-token", "--query-token", "q")
    tracer = tracehook.Tracer(tracehook.TracerConfig(app="shop", collectors=(collector.url,), token="lib-token",
                                                     linger_s=0.01))
    try:
        sent = [tracer.record_send("orders", f"m-{i}", keys=f"k{i}") for i in range(500)]
        assert tracer.flush(timeout=30)
    finally:
        tracer.close(timeout=10)
    records = read_log(os.path.join(collector.data_dir, "log"))
    events = [e for r in records for e in wire.decode_batch(r.payload).events]
    assert sorted(e.msg_id for e in events) == sorted(sent)
    assert {r.client_id for r in records} == {wire.decode_batch(records[0].payload).header.client_id}
    metrics = requests.get(collector.url + "/metrics", timeout=5).text
    assert "tracehook_collector_events_total 500" in metrics
    assert 'tracehook_client_reported{counter="sent"}' in metrics
    # Sealed on request, the batches are what the index job will read.
    requests.post(collector.url + "/v1/admin/roll", headers={"Authorization": "Bearer lib-token"}, timeout=5)
    sealed = tracelog.sealed_segments(os.path.join(collector.data_dir, "log"))
    assert sum(s.records for s in sealed) == len(records)
