"""The collector does not die with its index store: real collector processes, real HBase behind a relay.

The relay (``fixtures.relay``) cuts every connection to the shared session HBase, so for the
collector HBase is down while other tests keep using it.  Ingest must go on (200), queries
answer ``503 store_unavailable`` with ``Retry-After`` and a one-line JSON error, ``/healthz``
says so, and once HBase answers again queries work without a restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import requests
from collector_service_helpers import make_batch
from fixtures.collector_process import CollectorProcess
from fixtures.relay import Relay

pytestmark = [pytest.mark.hbase, pytest.mark.slow]

MSGPACK = {"Content-Type": "application/msgpack"}
QUERY = "/v1/topics/orders/messages"  # a listing: 200 with an empty page once the store answers


@pytest.fixture
def relay(hbase_port: int) -> Iterator[Relay]:
    r = Relay(hbase_port)
    yield r
    r.close()


@pytest.fixture
def relayed_url(relay: Relay, make_hbase_url: Callable[..., str], hbase_port: int) -> str:
    return make_hbase_url().replace(f":{hbase_port}?", f":{relay.port}?")


def _start(collector_process: type[CollectorProcess], url: str) -> CollectorProcess:
    # retry_after_s is also how often the collector retries an unavailable store
    return collector_process(None, "--store", url, env={"TRACEHOOK_COLLECTOR_RETRY_AFTER_S": "1"})


def _health(collector: CollectorProcess) -> dict:
    return requests.get(collector.url + "/healthz", timeout=10).json()


def _assert_outage(collector: CollectorProcess, seq: int) -> None:
    """While the store is down: ingest 200, queries 503 + Retry-After + one-line JSON, healthz says why."""
    ingest = requests.post(collector.url + "/v1/batches", data=make_batch("c", seq), headers=MSGPACK, timeout=10)
    assert ingest.status_code == 200, ingest.text
    query = requests.get(collector.url + QUERY, timeout=70)
    assert query.status_code == 503
    assert query.headers["Retry-After"] == "1"
    assert "\n" not in query.text.strip()
    assert query.json()["error"] == "store_unavailable"
    health = _health(collector)
    assert health["status"] == "ok" and health["store"] == "unavailable"
    assert health["store_error"]


def _wait_for_queries(collector: CollectorProcess) -> requests.Response:
    """Poll until a query is not 503 (the collector reconnects by itself); a hang guard, not a timing check."""
    deadline = time.monotonic() + 60
    while True:
        response = requests.get(collector.url + QUERY, timeout=70)
        if response.status_code != 503 or time.monotonic() > deadline:
            return response
        time.sleep(0.2)


def test_collector_starts_with_hbase_down_and_recovers_by_itself(collector_process, relay, relayed_url) -> None:
    relay.cut()
    collector = _start(collector_process, relayed_url)
    _assert_outage(collector, seq=1)
    _assert_outage(collector, seq=2)  # still down: still 503, ingest still fine

    relay.restore()
    response = _wait_for_queries(collector)
    assert response.status_code == 200, response.text
    assert _health(collector)["store"] == "ok"
    assert requests.post(collector.url + "/v1/batches", data=make_batch("c", 3), headers=MSGPACK,
                         timeout=10).status_code == 200
    assert collector.stop() == 0
    assert "Traceback" not in collector.output()


def test_collector_survives_hbase_going_away_and_recovers(collector_process, relay, relayed_url) -> None:
    collector = _start(collector_process, relayed_url)
    assert requests.get(collector.url + QUERY, timeout=70).status_code == 200
    assert _health(collector)["store"] == "ok"

    relay.cut()
    _assert_outage(collector, seq=1)

    relay.restore()
    response = _wait_for_queries(collector)
    assert response.status_code == 200, response.text
    assert _health(collector)["store"] == "ok"
    assert collector.stop() == 0
    assert "Traceback" not in collector.output()
