"""A real Prometheus (scripts/prometheus) scrapes a live collector with traffic and rollups: every
selector of the alert rules (deploy/prometheus) and of the dashboard's panels (deploy/grafana)
returns series from it, every expression evaluates without error, and the rules evaluate healthy."""

from __future__ import annotations

import json
import pathlib
import re
import time
import uuid

import pytest
import requests
import yaml
from collector_service_helpers import make_batch

from collector.index.indexer import finish_batch, index_records
from collector.log import setaside
from collector.log import state as logstate
from collector.store import open_store
from tests.fixtures.prometheus import Prometheus, check_metrics, samples, value
from tests.fixtures.sample import DEAD_GROUP, TOPIC, scenario

pytestmark = [pytest.mark.prometheus, pytest.mark.slow]

ROOT = pathlib.Path(__file__).resolve().parents[3]
RULES = ROOT / "deploy" / "prometheus" / "tracehook-rules.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "tracehook.json"
MSGPACK = {"Content-Type": "application/msgpack"}
SELECTOR = re.compile(r"\b((?:up|tracehook_\w+))(\{[^}]*\})?")
"""A metric name and its matchers (the rules and panels only select ``up`` and tracehook's own names)."""


def rule_exprs() -> list[str]:
    return [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def panel_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    # Grafana's range variable; any window holding a few 1 s scrapes will do here.
    return [t["expr"].replace("$__rate_interval", "1m") for p in panels for t in p.get("targets", [])]


INDEX_ONLY = ("tracehook_collector_index_follower_up",)
"""Series only a collector started with ``--index`` exports (its values: tests/collector/server/test_follower_health.py);
their expressions are still evaluated below."""


def selectors(expr: str) -> list[str]:
    return [name + matchers for name, matchers in SELECTOR.findall(expr)]


def only_this_test(selector: str, label: str) -> str:
    """``selector`` narrowed to the target this test lists (the Prometheus may scrape others)."""
    name, _, rest = selector.partition("{")
    return f"{name}{{test=\"{label}\"{',' if rest.strip('} ') else ''}{rest or '}'}"


def fill_rollups(store_url: str, now_ms: int) -> None:
    store = open_store(store_url)
    try:
        index_records(store, scenario(now_ms)[1])
        finish_batch(store)
    finally:
        store.close()


def traffic(url: str, log_dir: str, store_url: str, checkpoint: str) -> None:
    """Acknowledged batches whose clients report drops, rejected requests, and an index checkpoint
    two batches behind that set aside one event."""
    before = logstate.read_durable(log_dir)
    assert before is not None
    logstate.write_commit(log_dir, "test", store_url, checkpoint, before)
    setaside.record(checkpoint, [setaside.SetAside(0, 0, 2, "m-1", TOPIC, "PUB", "KeyEncodingError: ...", 1)])
    for seq in range(1, 4):
        stats = {"sent": 5 * seq, "dropped_queue_full": seq}
        assert requests.post(f"{url}/v1/batches", data=make_batch("app-1", seq, n=5, stats=stats),
                             headers=MSGPACK, timeout=10).status_code == 200
    assert requests.post(f"{url}/v1/batches", data=b"\xc1", headers=MSGPACK, timeout=10).status_code == 400


def test_rules_and_panels_select_series_from_a_live_collector(prometheus: Prometheus, collector_process,
                                                              tmp_path) -> None:
    store_url = f"local:{tmp_path}/index.sqlite3"
    fill_rollups(store_url, int(time.time() * 1000))
    # The rollup series only go to scrapes with the query token: Prometheus sends it as docs/deploy.md says.
    collector = collector_process(None, "--store", store_url, "--query-token", prometheus.query_token)
    traffic(collector.url, str(tmp_path / "data" / "log"), store_url, str(tmp_path / "checkpoint"))

    assert "tracehook_group_lag_seconds{" not in requests.get(collector.url + "/metrics", timeout=10).text
    auth = {"Authorization": f"Bearer {prometheus.query_token}"}
    scrape = requests.get(collector.url + "/metrics", headers=auth, timeout=10).text
    check_metrics(scrape)
    parsed = samples(scrape)
    assert value(parsed, "tracehook_client_reported", counter="dropped_queue_full") == 3
    assert value(parsed, "tracehook_index_lag_records", store=store_url) == 3
    # The set-aside event: on /metrics per store, on /healthz and in the overview the console shows.
    assert value(parsed, "tracehook_index_set_aside_events", store=store_url) == 1
    assert requests.get(collector.url + "/healthz", timeout=10).json()["index_set_aside"] == 1
    overview = requests.get(collector.url + "/v1/overview?window=1h", headers=auth, timeout=10).json()
    assert overview["index_set_aside"] == 1
    assert value(parsed, "tracehook_group_messages", topic=TOPIC, group=DEAD_GROUP, outcome="dead") == 1

    label = f"scrape-{uuid.uuid4().hex[:8]}"
    with prometheus.scraping(label, [collector.url.removeprefix("http://")]), prometheus.rules(RULES):
        prometheus.wait_until(f'tracehook_group_lag_seconds{{test="{label}"}}')
        exprs = rule_exprs() + panel_exprs()
        for selector in sorted({s for e in exprs for s in selectors(e)}):
            if not selector.startswith(INDEX_ONLY):
                prometheus.wait_until(only_this_test(selector, label))
        for expr in exprs:
            prometheus.query(expr)  # fails on an error or a warning
        groups = wait_for_rule_evaluation(prometheus)
    rules = [r for g in groups for r in g["rules"]]
    assert len(rules) == len(rule_exprs())
    assert all(r["health"] == "ok" and not r.get("lastError") for r in rules), rules


def wait_for_rule_evaluation(prometheus: Prometheus, timeout_s: float = 60) -> list[dict]:  # type: ignore[type-arg]
    """The rule groups of tracehook-rules.yml once every rule has been evaluated (a hang guard)."""
    deadline = time.monotonic() + timeout_s
    while True:
        groups = [g for g in prometheus.api("rules")["groups"] if g["file"].endswith(RULES.name)]
        rules = [r for g in groups for r in g["rules"]]
        if rules and all(r["health"] != "unknown" for r in rules):
            return groups
        assert time.monotonic() < deadline, groups
        time.sleep(0.5)
