"""Model-based test of the message model: hypothesis generates message lifecycles, the library
sends them to a real collector, the Spark index job indexes them (embedded store; HBase in the
``hbase`` variant), and every query kind must answer what a reference model computed from the
lifecycles says: by id, key pages, time pages, dead letters, dead counts, offsets, the replay
list, QMQ's list/dead/detail/records, through HTTP and through the CLI's two sources.

Each example runs the whole pipeline, so each is small: 12-22 messages in 2-3 topics (one key
shared by 9 or more, so key pages of 1 and 7 cross pages; stores hold any number under one key,
which tests/collector/store/test_query.py pages through on both stores).  Small examples leave
time for more of them, and a failure shrinks to a short scenario and is kept in the example
database (tests/conftest.py), so the next run replays it first.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import message_model as mm
import pytest
import requests
from fixtures.collector_process import CollectorProcess
from fixtures.pages import CursorPages
from hypothesis import HealthCheck, given, settings

import tracehook
from collector.cli import main as tracehook_cli
from spark_jobs import index_once

pytestmark = [pytest.mark.slow, pytest.mark.spark]

HOUR, DAY = 3_600_000, 86_400_000
EXAMPLES = {"local": 8, "hbase": 4}
GROUPS_AND_NOBODY = (*mm.GROUPS, "nobody")


@dataclass
class Site:
    """A collector subprocess that ingests and answers queries from ``store_url``."""

    url: str
    data_dir: str
    store_url: str

    @property
    def log_dir(self) -> str:
        return os.path.join(self.data_dir, "log")


@contextlib.contextmanager
def running_site(data_dir: str, store_url: str) -> Iterator[Site]:
    collector = CollectorProcess(data_dir, "--durability", "os", store=store_url)
    try:
        yield Site(collector.url, data_dir, store_url)
    finally:
        collector.stop()


@pytest.fixture(scope="module")
def local_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    data_dir = str(tmp_path_factory.mktemp("model"))
    with running_site(data_dir, f"local:{os.path.join(data_dir, 'index.sqlite3')}") as site:
        yield site


@pytest.fixture
def site(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Site]:
    if request.param == "local":
        yield request.getfixturevalue("local_site")
        return
    with running_site(str(tmp_path), request.getfixturevalue("hbase_url")) as hbase_site:
        yield hbase_site


@contextlib.contextmanager
def global_tracer(site: Site, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    """The global tracer of README.md, sending to ``site``; the previous one is back afterwards."""
    monkeypatch.setattr(tracehook, "_global", None)
    tracehook.configure(app="shop", collectors=[site.url], linger_s=0.01)
    try:
        yield site
    finally:
        tracehook.close(timeout=10)


@pytest.fixture
def traced(site: Site, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    with global_tracer(site, monkeypatch):
        yield site


def now_ms() -> int:
    return int(time.time() * 1000)


def deliver_and_index(site: Site, spark: Any) -> None:
    """Everything recorded reaches the collector, is sealed and indexed by the Spark job."""
    assert tracehook.flush(timeout=60)
    stats = tracehook.stats()
    assert stats["dropped_total"] == 0, stats
    assert requests.post(site.url + "/v1/admin/roll", timeout=30).status_code == 200
    report = index_once(spark, site.log_dir, site.store_url)
    assert report.bad == {}


@dataclass
class Run:
    """One example after indexing: what was sent, and where to ask."""

    site: Site
    messages: list[mm.Lifecycle]
    topics: list[str]
    base_ms: int
    wall: tuple[int, int]  # when the consume and dead events were recorded
    client_id: str

    def of(self, topic: str) -> list[mm.Lifecycle]:
        return [m for m in self.messages if m.topic_name == topic]

    def get(self, path: str, status: int = 200, **params: Any) -> Any:
        response = requests.get(self.site.url + path, params=params, timeout=60)
        assert response.status_code == status, (path, params, response.text)
        return response.json()

    def pages(self, path: str, limit: int, **params: Any) -> list[dict[str, Any]]:
        """Every item of a cursor-paged native listing."""
        pages = CursorPages()
        for cursor in pages:
            page = self.get(path, limit=limit, **params, **({"cursor": cursor} if cursor else {}))
            assert len(page["items"]) <= limit
            pages.add(page["items"], page["next_cursor"])
        return pages.items


def run_example(site: Site, spark: Any, scenario: mm.Scenario) -> Run:
    base_ms = (now_ms() - 2 * DAY) // 1000 * 1000
    topics = mm.layout(scenario, f"m{uuid.uuid4().hex[:8]}", base_ms)
    late = [m for m in scenario.messages if m.late]
    wall_start = now_ms()
    if late:  # their consumers (and dead letters) are indexed a round before their sends
        mm.emit_consumes(late)
        deliver_and_index(site, spark)
    mm.emit_sends(scenario.messages)
    mm.emit_consumes([m for m in scenario.messages if not m.late])
    wall_end = now_ms()
    deliver_and_index(site, spark)
    return Run(site, scenario.messages, topics, base_ms, (wall_start, wall_end), tracehook.get_tracer().client_id)


@pytest.mark.timeout(1800)  # a hang guard: a timeout inside a Py4J call breaks the session's Spark for every later test
@pytest.mark.parametrize("site", ["local", pytest.param("hbase", marks=pytest.mark.hbase)], indirect=True)
def test_every_query_answers_what_the_model_says(site: Site, traced: Site, spark: Any, request: Any) -> None:
    kind = request.node.callspec.params["site"]
    sizes: list[int] = []  # messages per example run

    @settings(max_examples=EXAMPLES[kind], deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
    @given(scenario=mm.scenarios())
    def check(scenario: mm.Scenario) -> None:
        run = run_example(site, spark, scenario)
        sizes.append(len(run.messages))
        check_traces(run)
        for topic in run.topics:
            check_keys(run, topic)
            check_time_pages(run, topic)
            check_dead(run, topic)
            check_offsets(run, topic)
            check_replay(run, topic)
            check_qmq(run, topic)
        check_cli(run, run.topics[0])

    check()
    assert len(sizes) >= EXAMPLES[kind], sizes  # more when the database replayed a saved example first
    print(f"{kind}: {len(sizes)} examples, {sum(sizes)} messages")


# --- the checks ---------------------------------------------------------------------------


def assert_rows(items: list[dict[str, Any]], expected: dict[Any, dict[str, Any]], run: Run, *,
                dead: bool = False, newest_first: bool = True) -> None:
    """``items`` are exactly the expected rows, each once, in time order; untraced ones at their consume time."""
    ids = [(i["msg_id"], i["group"]) if dead else i["msg_id"] for i in items]
    assert len(ids) == len(set(ids)), [i for i, n in Counter(ids).items() if n > 1]
    assert set(ids) == set(expected), (set(ids) - set(expected), set(expected) - set(ids))
    for row_id, item in zip(ids, items):
        want = expected[row_id]
        assert mm.actual_row(item, want) == want
        if not item["send_traced"]:
            assert run.wall[0] <= item["time_ms"] <= run.wall[1]  # listed under its consume, never placed
    times = [i["time_ms"] for i in items]
    assert times == sorted(times, reverse=newest_first)


def windows(run: Run, topic: str) -> dict[str, tuple[int, int]]:
    """Named windows: all, the placement hour, a sub-window whose edges are tied store times, after all, now."""
    times = sorted({m.time_ms for m in run.of(topic) if m.traced})
    last = times[-1]
    return {
        "all": (run.base_ms - HOUR, run.wall[1] + 60_000),
        "placed": (run.base_ms - HOUR, run.base_ms + HOUR),
        "middle": (times[len(times) // 3], times[2 * len(times) // 3]),
        "after": (last + 1, last + HOUR),
        "consumed": (run.wall[0], run.wall[1] + 1),
    }


def in_window(m: mm.Lifecycle, window: tuple[int, int], name: str) -> bool:
    """Whether a listing with ``window`` shows ``m``: by placement; untraced only in the window with now."""
    if not m.traced:
        return name in ("all", "consumed")
    return window[0] <= m.time_ms <= window[1]


def check_traces(run: Run) -> None:
    for m in run.messages:
        if not m.seen:
            assert run.get(f"/v1/messages/{m.msg_id}", status=404)["error"] == "not_found"
            continue
        doc = run.get(f"/v1/messages/{m.msg_id}")
        want = mm.expected_row(m)
        fields = [k for k in want if k not in ("status", "group", "error", "groups")]
        assert {k: doc[k] for k in fields} == {k: want[k] for k in fields}, m
        assert {g: {k: o[k] for k in ("outcome", "attempts", "last_status", "error")}
                for g, o in doc["outcomes"].items()} == want["groups"], m
        assert doc["placed_ms"] == (m.time_ms if m.traced else None)


def check_keys(run: Run, topic: str) -> None:
    messages = run.of(topic)
    own = [(m, k) for m in messages for k in m.keys.split() if k != mm.SHARED_KEY]
    untraced = [k for m, k in own if not m.traced and mm.key_matches(m, k)]  # found through their consumers' keys
    keys = [mm.SHARED_KEY, *(k for _, k in own[:3]), *untraced]
    for key in keys:
        for name, window in windows(run, topic).items():
            if name in ("after", "consumed") and key != mm.SHARED_KEY:
                continue
            expected = {m.msg_id: mm.expected_row(m) for m in messages
                        if mm.key_matches(m, key) and in_window(m, window, name)}
            for limit in ((1, 7, 20) if key == mm.SHARED_KEY and name == "all" else (20,)):
                items = run.pages(f"/v1/topics/{topic}/messages", limit, key=key, begin=window[0], end=window[1])
                assert_rows(items, expected, run)
    shared = [m for m in run.messages if mm.SHARED_KEY in m.keys.split() and m.topic_name == run.topics[0]]
    assert len(shared) >= mm.N_SHARED


def check_time_pages(run: Run, topic: str) -> None:
    for name, window in windows(run, topic).items():
        expected = {m.msg_id: mm.expected_row(m) for m in run.of(topic) if m.traced and in_window(m, window, name)}
        if name in ("after", "consumed"):
            assert expected == {}
        for limit in ((7, 20) if name == "all" else (20,)):
            items = run.pages(f"/v1/topics/{topic}/messages", limit, begin=window[0], end=window[1])
            assert_rows(items, expected, run)
    window = windows(run, topic)["placed"]
    items = run.pages(f"/v1/topics/{topic}/messages", 20, begin=window[0], end=window[1], order="oldest")
    assert_rows(items, {m.msg_id: mm.expected_row(m) for m in run.of(topic) if m.traced}, run, newest_first=False)


def expected_dead(run: Run, topic: str, group: str | None, window: tuple[int, int], name: str) -> dict[Any, Any]:
    return {(m.msg_id, g): mm.expected_row(m, dead_group=g) for m in run.of(topic) for g in m.dead
            if group in (None, g) and in_window(m, window, name)}


def check_dead(run: Run, topic: str) -> None:
    for name, window in windows(run, topic).items():
        for group in (None, *mm.GROUPS):
            params = {"begin": window[0], "end": window[1], **({"group": group} if group else {})}
            items = run.pages(f"/v1/topics/{topic}/dead", 7 if group is None else 20, **params)
            assert_rows(items, expected_dead(run, topic, group, window, name), run, dead=True)
    # Counts per group and hour over the placement window: the traced dead letters, where their sends put them.
    begin, end = run.base_ms - HOUR, run.base_ms + HOUR - 1
    counts = run.get(f"/v1/topics/{topic}/dead/counts", begin=begin, end=end, bucket="1h")
    expected: dict[str, list[int]] = {}
    for m in run.of(topic):
        for g in m.dead:
            if m.traced:
                expected.setdefault(g, [0, 0])[(m.time_ms - begin) // HOUR] += 1
    assert counts["groups"] == expected
    begin, end = windows(run, topic)["all"]
    totals = run.get(f"/v1/topics/{topic}/dead/counts", begin=begin, end=end, bucket="1h")["totals"]
    assert totals == dict(Counter(g for m in run.of(topic) for g in m.dead))


def check_offsets(run: Run, topic: str) -> None:
    messages = run.of(topic)
    stored = sorted(m.store_ms for m in messages if m.stored)
    for time_ms in (run.base_ms - HOUR, stored[0], stored[len(stored) // 2], stored[-1], stored[-1] + 1, run.wall[1]):
        doc = run.get(f"/v1/topics/{topic}/offsets", time=time_ms)
        assert {q["queue"]: q["offset"] for q in doc["queues"]} == mm.offsets_at(messages, time_ms), time_ms


def expected_replay(run: Run, topic: str, group: str, window: tuple[int, int]) -> dict[str, dict[str, Any]]:
    out = {}
    for m in run.of(topic):
        status = mm.replay_status(m, group)
        if status is None or not mm.replayable(m) or not window[0] <= m.time_ms <= window[1]:
            continue
        row = mm.expected_row(m)
        out[m.msg_id] = {**{k: row[k] for k in ("msg_id", "topic", "keys", "tags", "queue", "offset", "born_ms",
                                                "store_ms", "time_ms")},
                         "status": status[0], "error": status[1], "attempts": status[2]}
    return out


def check_replay(run: Run, topic: str) -> None:
    for name in ("placed", "middle"):
        window = windows(run, topic)[name]
        for group in GROUPS_AND_NOBODY:
            seen = mm.group_seen(run.of(topic), group)
            if not seen:  # a typo until said otherwise (issue 12): 404, then allowed
                answer = run.get(f"/v1/topics/{topic}/unconsumed", 404, group=group, begin=window[0], end=window[1])
                assert answer["error"] == "unknown_group"
            allow = {} if seen else {"allow_unknown_group": "true"}
            items = run.pages(f"/v1/topics/{topic}/unconsumed", 20, group=group, begin=window[0], end=window[1],
                              **allow)
            expected = expected_replay(run, topic, group, window)
            ids = [i["msg_id"] for i in items]
            assert len(ids) == len(set(ids))
            assert {i["msg_id"]: {k: i[k] for k in next(iter(expected.values()), {})} for i in items} == expected
            assert all((i["last_attempt_ms"] == 0) == (i["status"] == "NOT_RECEIVED") for i in items)
            times = [i["time_ms"] for i in items]
            assert times == sorted(times)  # oldest first


def qmq_item(m: mm.Lifecycle) -> dict[str, str]:
    row = mm.expected_row(m)
    group = f"{row['broker']}/{row['queue']}" if row["queue"] >= 0 else row["broker"]
    return {"brokerGroup": group, "sequence": str(row["offset"]), "messageId": m.msg_id, "subject": m.topic_name,
            "createTime": str(row["born_ms"] or row["store_ms"])}


def qmq_pages(run: Run, path: str, topic: str, window: tuple[int, int], size: Any = 7,
              is_delay: Any = False) -> list[dict[str, Any]]:
    pages = CursorPages()
    for start in pages:
        query = {"subject": topic, "isDelay": is_delay, "len": size, "msgCreateTimeBegin": window[0],
                 "msgCreateTimeEnd": window[1], "start": start}
        page = run.get(path, backupQuery=json.dumps(query))
        pages.add(page["list"], page["next"])
    return pages.items


def check_qmq(run: Run, topic: str) -> None:
    window = windows(run, topic)["placed"]
    messages = run.of(topic)
    listed = qmq_pages(run, "/api/message", topic, window)
    assert sorted(listed, key=lambda i: i["messageId"]) == sorted(
        (qmq_item(m) for m in messages if m.traced), key=lambda i: i["messageId"])
    # Strings where QMQ's JSON parser coerces them, and a len above 500 (clamped: one page here).
    assert qmq_pages(run, "/api/message", topic, window, size=10_000, is_delay="false") == listed
    dead = qmq_pages(run, "/api/message/dead", topic, window, size="7")
    assert Counter(json.dumps(i, sort_keys=True) for i in dead) == Counter(
        json.dumps(qmq_item(m), sort_keys=True) for m in messages if m.traced for _ in m.dead)
    for m in messages[:40]:
        if m.stored:
            query = {"subject": topic, "brokerGroup": f"{m.broker}/{m.queue}", "sequence": m.offset}
        else:
            query = {"subject": topic, "messageId": m.msg_id}
        detail = run.get("/api/message/detail", status=200 if m.seen else 404, backupQuery=json.dumps(query))
        if not m.seen:
            continue
        assert detail["messageId"] == m.msg_id
        if m.traced:
            item = qmq_item(m)
            assert {k: detail[k] for k in ("brokerGroup", "sequence", "createTime")} == {
                k: item[k] for k in ("brokerGroup", "sequence", "createTime")}
            assert detail["storeTime"] == str(m.store_ms if m.stored else 0)
            assert detail["storeAtFailed"] is (not m.stored)
            assert detail["tags"] == [t for t in m.tags.split("||") if t]
            assert detail["attrs"].get("keys", "") == m.keys
        want = mm.records(m, run.client_id)
        for code in (0, 1, 2):
            query = {"subject": topic, "messageId": m.msg_id, "recordCode": code}
            got = run.get("/api/message/records", recordQuery=json.dumps(query))["records"]
            assert sorted((r["consumerGroup"], r["action"], r["type"], r["consumerId"], r["sequence"])
                          for r in got) == [r for r in want if r[2] == code], (m, code)


# --- the CLI: both sources, identical JSON, equal to the HTTP answers ----------------------------


def cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = tracehook_cli.main(list(argv))
    return code, out.getvalue()


def both_sources(run: Run, *argv: str) -> str:
    """The CLI's output through --collector and through --store: identical, exit 0 or 1."""
    over_http = cli(*argv, "--collector", run.site.url)
    from_store = cli(*argv, "--store", run.site.store_url)
    assert over_http == from_store, argv
    assert over_http[0] in (0, 1), (argv, over_http)
    return over_http[1]


def check_cli(run: Run, topic: str) -> None:
    messages = run.of(topic)
    picks = [next((m for m in messages if pred(m)), None) for pred in (
        lambda m: m.traced and len(m.dead) == 2, lambda m: not m.traced, lambda m: m.send == "failed",
        lambda m: m.send == "retried")]
    for m in filter(None, picks):
        doc = json.loads(both_sources(run, "query", "id", m.msg_id, "--json"))
        assert doc == run.get(f"/v1/messages/{m.msg_id}")
    begin, end = (str(t) for t in windows(run, topic)["all"])
    span = ["--begin", begin, "--end", end, "--json"]
    first = json.loads(both_sources(run, "query", "key", topic, mm.SHARED_KEY, "--limit", "7", *span))
    assert first == run.get(f"/v1/topics/{topic}/messages", key=mm.SHARED_KEY, begin=begin, end=end, limit=7)
    if first["next_cursor"] is not None:  # a drawn model may file seven or fewer messages under the key
        second = json.loads(both_sources(run, "query", "key", topic, mm.SHARED_KEY, "--limit", "7",
                                         "--cursor", first["next_cursor"], *span))
        assert second == run.get(f"/v1/topics/{topic}/messages", key=mm.SHARED_KEY, begin=begin, end=end,
                                 limit=7, cursor=first["next_cursor"])
        assert not {i["msg_id"] for i in first["items"]} & {i["msg_id"] for i in second["items"]}
    page = json.loads(both_sources(run, "query", "topic", topic, "--limit", "20", *span))
    assert page == run.get(f"/v1/topics/{topic}/messages", begin=begin, end=end, limit=20)
    for group in (None, mm.GROUPS[0]):
        extra = ["--group", group] if group else []
        page = json.loads(both_sources(run, "query", "dead", topic, "--limit", "20", *extra, *span))
        assert page == run.get(f"/v1/topics/{topic}/dead", begin=begin, end=end, limit=20,
                               **({"group": group} if group else {}))
    for time_ms in (str(run.base_ms), str(run.wall[1])):
        doc = json.loads(both_sources(run, "offsets", topic, "--time", time_ms, "--json"))
        assert {q["queue"]: q["offset"] for q in doc["queues"]} == mm.offsets_at(messages, int(time_ms))
    # The tables too, and the default window (the last 30 days).
    tables = [("query", "id", m.msg_id) for m in filter(None, picks)] + [
        ("query", "key", topic, mm.SHARED_KEY, "--begin", begin, "--end", end), ("query", "topic", topic),
        ("query", "dead", topic, "--limit", "50"), ("offsets", topic, "--time", str(run.base_ms))]
    for argv in tables:
        assert both_sources(run, *argv).strip()
    placed = windows(run, topic)["placed"]
    for group in (mm.GROUPS[1], "nobody"):
        allow = [] if mm.group_seen(messages, group) else ["--allow-unknown-group"]
        lines = both_sources(run, "replay-list", topic, "--group", group, *allow, "--begin", str(placed[0]),
                             "--end", str(placed[1])).splitlines()
        items = [json.loads(line) for line in lines]
        query = {"allow_unknown_group": "true"} if allow else {}
        assert items == run.pages(f"/v1/topics/{topic}/unconsumed", 500, group=group, begin=placed[0], end=placed[1],
                                  **query)


# --- the web page -----------------------------------------------------------------------------


@pytest.mark.browser
def test_web_listing_says_dead_for_the_group_that_dead_lettered(
    local_site: Site, spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A topic listing row in Chromium: the send's status, and per group its outcome (dead for the DLQ group)."""
    from playwright.sync_api import sync_playwright

    from tests.fixtures.chromium import CHROMIUM_ARGS, chromium_path

    exception, dead = int(tracehook.Status.EXCEPTION), "shipping"
    ok = mm.Attempt(0, mm.OK, "readme")
    retried = (mm.Attempt(0, exception, "readme"), mm.Attempt(1, exception, "batch"))
    lifecycles = [
        mm.Lifecycle(0, 0, "order-1", "created", "broker-a", 0, 10, 5, 1, "ok", 0,
                     {"billing": (ok,), dead: retried}, (dead,), False),
        mm.Lifecycle(1, 0, "order-2", "", "broker-a", 0, 20, 5, 1, "retried", int(tracehook.Status.TIMEOUT),
                     {"billing": (ok,), dead: (ok,)}, (), False),
    ]
    scenario = mm.Scenario(1, lifecycles, two_rounds=False)
    with global_tracer(local_site, monkeypatch):
        run = run_example(local_site, spark, scenario)
    topic, dead_id = run.topics[0], lifecycles[0].msg_id
    begin, end = windows(run, topic)["placed"]
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(local_site.url + "/")
            page.check("input[name=mode][value=topic]")
            page.fill("#topic", topic)
            page.fill("#begin", str(begin))
            page.fill("#end", str(end))
            page.click("#go")
            page.wait_for_selector("#results:not([hidden]) tr.result")
            assert page.locator("tr.result").count() == 2
            row = page.locator("tr.result", has=page.locator(f"a:text-is('{dead_id}')"))
            assert row.locator(f'span.outcome[data-group="{dead}"][data-outcome="dead"]').count() == 1
            assert row.locator('span.outcome[data-group="billing"][data-outcome="consumed"]').count() == 1
            assert row.locator("td.send-status").text_content() == "ok"
            other = page.locator("tr.result", has=page.locator(f"a:text-is('{lifecycles[1].msg_id}')"))
            assert other.locator(f'span.outcome[data-group="{dead}"]').get_attribute("data-outcome") == "consumed"
            assert other.locator("td.send-status").text_content() == "ok"  # the retried send, not the timeout
        finally:
            browser.close()
