"""Backtracking through the whole chain over HTTP: library hooks -> collector -> sealed trace log -> index -> API and CLI.

Synthetic traffic (no broker) for what a real Kafka scenario cannot produce on demand:
messages never received, handlers that never finished, retries and dead letters.  Checks
the reset plan's positions (pending and never-received messages do not count) and
rewind-only/force through the HTTP API, and that the replay list over a collector has
exactly the failed subset with each last status.  Offsets at a time, kafka-reset and the
replay helper on a real broker are tests/e2e/test_backtrack_kafka.py.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from fixtures.collector_process import CollectorProcess

import tracehook
from collector.cli.main import main as cli_main
from collector.index.indexer import index_records
from collector.log.file import read_segment, sealed_segments
from collector.store import open_store
from tests.fixtures.indexing import seal_log
from tracehook.wire import decode_batch

pytestmark = pytest.mark.slow

TOPIC, GROUP, PARTITIONS, MESSAGES = "payments", "ledger", 3, 60
STEP_MS = 1000
# The group's fate per message, by index; index 10 is left pending (received, handler never finished).
CYCLE = ("ok", "exception", "ok", "never", "retry_ok", "dead")
EXPECTED = {"exception": "EXCEPTION", "never": "NOT_RECEIVED", "dead": "DEAD", "pending": "PENDING"}


def outcome(i: int) -> str:
    return "pending" if i == 10 else CYCLE[i % len(CYCLE)]


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data_dir = tmp_path_factory.mktemp("chain")
    collector = CollectorProcess(str(data_dir), "--durability", "os", store=None)
    url = collector.url
    try:
        produced = run_traffic(url)
        seal_log(url, str(data_dir / "log"))
        index_sealed(str(data_dir / "log"), f"local:{data_dir / 'index.sqlite3'}")
        yield {"url": url, "produced": produced}
    finally:
        collector.stop()


def run_traffic(url: str) -> list[dict[str, Any]]:
    """Send MESSAGES messages, then let GROUP consume them in partition order with the known failures."""
    tracer = tracehook.Tracer(tracehook.TracerConfig(app="payments", collectors=(url,), linger_s=0.05))
    base = int(time.time() * 1000) - 2 * 3_600_000
    produced, offsets = [], [0] * PARTITIONS
    for i in range(MESSAGES):
        partition = i % PARTITIONS
        store_ms = base + i * STEP_MS
        msg = dict(keys=f"pay-{i}", queue=partition, offset=offsets[partition], born_ms=store_ms - 2,
                   store_ms=store_ms)
        offsets[partition] += 1
        msg["msg_id"] = tracer.record_send(TOPIC, f"pay-{i:03d}", group="api", **msg)
        produced.append(dict(msg, outcome=outcome(i)))
    for msg in produced:
        fields = {k: msg[k] for k in ("keys", "queue", "offset", "born_ms", "store_ms")}
        fate = msg["outcome"]
        if fate == "never":
            continue
        if fate == "pending":
            tracer.start_consume(TOPIC, msg["msg_id"], GROUP, **fields)
            continue
        try:
            with tracer.consume(TOPIC, msg["msg_id"], GROUP, **fields):
                if fate != "ok":
                    raise ValueError("ledger unavailable")
        except ValueError:
            if fate == "retry_ok":
                with tracer.consume(TOPIC, msg["msg_id"], GROUP, retry=1, **fields):
                    pass
            elif fate == "dead":
                tracer.record_dead(TOPIC, msg["msg_id"], GROUP, error="poison", retry=1, **fields)
    assert tracer.flush(timeout=10.0)
    assert tracer.stats()["dropped_total"] == 0
    tracer.close()
    return produced


def index_sealed(log_dir: str, store_url: str) -> None:
    """What the index job does, without Spark: decode every sealed record and index its events."""
    store = open_store(store_url)
    try:
        for segment in sealed_segments(log_dir):
            for record in read_segment(segment.path):
                batch = decode_batch(record.payload)
                index_records(store, ((batch.header, e) for e in batch.events))
    finally:
        store.close()


def get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def brute_offsets(produced: list[dict[str, Any]], time_ms: int) -> dict[int, int]:
    out = {}
    for p in range(PARTITIONS):
        msgs = [m for m in produced if m["queue"] == p]
        later = [m["offset"] for m in msgs if m["store_ms"] >= time_ms]
        out[p] = min(later) if later else max(m["offset"] for m in msgs) + 1
    return out


def test_reset_plan_rewinds_only_unless_forced(chain) -> None:
    produced = chain["produced"]
    # The group's position per partition: one past the highest offset it finished (pending and never don't count).
    position = {p: 1 + max(m["offset"] for m in produced
                           if m["queue"] == p and m["outcome"] not in ("never", "pending")) for p in range(PARTITIONS)}
    middle = produced[30]["store_ms"]
    plan = get(f"{chain['url']}/v1/topics/{TOPIC}/offsets?time={middle}&group={GROUP}")
    targets = brute_offsets(produced, middle)
    assert {q["queue"]: (q["target"], q["current"], q["planned"]) for q in plan["queues"]} == {
        p: (targets[p], position[p], targets[p]) for p in range(PARTITIONS)
    }
    after = produced[-1]["store_ms"] + 1
    kept = get(f"{chain['url']}/v1/topics/{TOPIC}/offsets?time={after}&group={GROUP}")
    forced = get(f"{chain['url']}/v1/topics/{TOPIC}/offsets?time={after}&group={GROUP}&force=true")
    ends = brute_offsets(produced, after)
    for p in range(PARTITIONS):
        kept_q, forced_q = kept["queues"][p], forced["queues"][p]
        assert kept_q["planned"] == min(position[p], ends[p])
        assert forced_q["planned"] == ends[p]


def test_replay_list_is_exactly_the_failed_subset(chain, capsys) -> None:
    produced = chain["produced"]
    begin, end = produced[0]["store_ms"], produced[-1]["store_ms"]
    code = cli_main(["replay-list", TOPIC, "--group", GROUP, "--begin", str(begin), "--end", str(end),
                     "--collector", chain["url"]])
    out, _ = capsys.readouterr()
    assert code == 0
    items = [json.loads(line) for line in out.splitlines()]
    got = {item["msg_id"]: (item["status"], item["queue"], item["offset"]) for item in items}
    assert got == {m["msg_id"]: (EXPECTED[m["outcome"]], m["queue"], m["offset"])
                   for m in produced if m["outcome"] in EXPECTED}
