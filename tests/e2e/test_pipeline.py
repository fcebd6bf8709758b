"""The whole pipeline: tracehook library -> collector subprocess -> sealed segments -> Spark
index job -> the embedded store and real HBase -> lookups return exactly what was sent.

HBase "dying" mid-run is a TCP relay in front of the shared Thrift server that drops
every connection after a fixed number of bytes, so other test sessions keep their HBase.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

import pytest
import requests
from fixtures.collector_process import CollectorProcess
from fixtures.pages import CursorPages
from fixtures.relay import Relay

import tracehook
from collector.log.file import sealed_segments
from collector.store import open_store
from collector.store.reader import TraceQuery
from spark_jobs import index_once
from spark_jobs.checkpoint import default_checkpoint, spark_committed
from spark_jobs.errors import IndexJobError

pytestmark = [pytest.mark.slow, pytest.mark.spark]

TOKEN = "e2e-token"
TOPICS = ("orders", "payments")
N_PER_ROUND = 200
WINDOW = (0, 2**62)


@pytest.fixture(scope="module")
def traced_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, tuple[str, str]]]:
    """A collector's log dir holding two sealed segments of library traffic; msg_id -> (topic, key)."""
    data_dir = str(tmp_path_factory.mktemp("collector"))
    collector = CollectorProcess(data_dir, "--ingest-token", TOKEN, "--segment-age", "3600")
    url = collector.url
    sent: dict[str, tuple[str, str]] = {}
    try:
        tracer = tracehook.Tracer(tracehook.TracerConfig(app="shop", collectors=(url,), token=TOKEN, linger_s=0.01))
        try:
            for round_ in range(2):  # two rounds, each sealed into its own segment
                for i in range(N_PER_ROUND):
                    topic, key = TOPICS[i % 2], f"key-{i % 7}"
                    msg_id = tracer.record_send(topic, keys=key, queue=i % 4, offset=round_ * N_PER_ROUND + i)
                    sent[msg_id] = (topic, key)
                    if i % 3 == 0:
                        with tracer.consume(topic, msg_id, "billing", keys=key):
                            pass
                assert tracer.flush(timeout=30)
                response = requests.post(url + "/v1/admin/roll", headers={"Authorization": f"Bearer {TOKEN}"},
                                         timeout=10)
                assert response.status_code < 300
        finally:
            tracer.close(timeout=10)
    finally:
        collector.stop()
    log_dir = os.path.join(data_dir, "log")
    assert len(sealed_segments(log_dir)) == 2
    return log_dir, sent


def _copy_log(log_dir: str, tmp_path: Any) -> str:
    """A private copy (each test has its own checkpoint)."""
    import shutil

    return str(shutil.copytree(log_dir, tmp_path / "log"))


def snapshot(store_url: str, sent: dict[str, tuple[str, str]]) -> dict[str, Any]:
    """Everything the lookups answer about the sent messages (to compare runs)."""
    store = open_store(store_url)
    try:
        query = TraceQuery(store)
        traces = {m: query.get_trace(m) for m in sent}
        by_key = {(t, k): _all(lambda c, t=t, k=k: query.by_key(t, k, *WINDOW, 1000, c))
                  for t, k in set(sent.values())}
        by_time = {t: _all(lambda c, t=t: query.by_time(t, *WINDOW, 1000, c)) for t in TOPICS}
    finally:
        store.close()
    return {"traces": {m: t and t.to_json() for m, t in traces.items()}, "by_key": by_key, "by_time": by_time}


def _all(page: Callable[[str | None], Any]) -> list[str]:
    """Message ids of every page, following the cursors."""
    pages = CursorPages()
    for cursor in pages:
        result = page(cursor)
        pages.add([s.msg_id for s in result.items], result.next_cursor)
    return pages.items


def assert_exactly_sent(snap: dict[str, Any], sent: dict[str, tuple[str, str]]) -> None:
    for msg_id, (topic, key) in sent.items():
        trace = snap["traces"][msg_id]
        assert trace is not None, msg_id
        assert (trace["topic"], trace["keys"]) == (topic, key)
        assert trace["send"] is not None and trace["send"]["msg_id"] == msg_id
    for (topic, key), ids in snap["by_key"].items():
        assert sorted(ids) == sorted(m for m, tk in sent.items() if tk == (topic, key))
    for topic, ids in snap["by_time"].items():
        assert sorted(ids) == sorted(m for m, (t, _) in sent.items() if t == topic)


def test_pipeline_lookups_return_exactly_what_was_sent(spark: Any, traced_log: Any, store_url: str,
                                                       tmp_path: Any) -> None:
    source, sent = traced_log
    log_dir = _copy_log(source, tmp_path)

    report = index_once(spark, log_dir, store_url)

    assert (report.segments, report.bad) == (2, {})
    first = snapshot(store_url, sent)
    assert_exactly_sent(first, sent)
    consumed = [m for m, t in first["traces"].items() if t["consumes"]]
    assert len(consumed) == sum(1 for i in range(N_PER_ROUND) if i % 3 == 0) * 2
    assert all(list(first["traces"][m]["consumes"]) == ["billing"] for m in consumed)

    assert index_once(spark, log_dir, store_url).segments == 0  # nothing new: nothing done
    shutil.rmtree(default_checkpoint(log_dir, store_url))
    assert index_once(spark, log_dir, store_url).events == report.events  # a full re-run...
    assert snapshot(store_url, sent) == first  # ...changes nothing


@pytest.mark.hbase
def test_hbase_dying_mid_run_keeps_the_checkpoint_and_the_next_run_converges(
    spark: Any, traced_log: Any, make_hbase_url: Callable[..., str], hbase_port: int, tmp_path: Any
) -> None:
    source, sent = traced_log
    log_dir = _copy_log(source, tmp_path)
    url = make_hbase_url()
    relay = Relay(hbase_port, cut_after_bytes=64 * 1024)  # table setup passes, the puts do not
    try:
        with pytest.raises(IndexJobError, match="^indexing failed"):  # the tasks failed, not the setup
            index_once(spark, log_dir, url.replace(f":{hbase_port}?", f":{relay.port}?"))
    finally:
        relay.close()
    assert relay.sent > 64 * 1024  # the cut happened while data was flowing
    assert spark_committed(default_checkpoint(log_dir, url)) is None

    report = index_once(spark, log_dir, url)  # HBase is back

    assert report.segments == 2
    snap = snapshot(url, sent)
    assert_exactly_sent(snap, sent)
    clean = make_hbase_url()
    index_once(spark, _copy_log(source, tmp_path / "clean"), clean)
    assert snapshot(clean, sent) == snap
