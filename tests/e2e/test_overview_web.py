"""The console's start page (the overview) in real headless Chromium against collector subprocesses."""

from __future__ import annotations

import datetime
import os
import time
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from fixtures.collector_process import CollectorProcess

from collector.index.indexer import finish_batch, index_records
from collector.store import open_store
from tests.fixtures.chromium import chromium_page
from tests.fixtures.sample import BILLING_HEADER, DEAD_GROUP, TOPIC, Record, _message, consume, scenario, send

pytestmark = [pytest.mark.browser, pytest.mark.slow]


LONG_TOPIC = "t-" + "x" * 298  # 300 characters
BUSY_TOPIC = "payments"
QUIET_TOPIC = "audit"


def fleet(now_ms: int) -> list[Record]:
    """Beside the scenario's topic: a busy topic, a one-message topic no group reads, a 300-character name."""
    out: list[Record] = []
    for topic, count, group in ((BUSY_TOPIC, 40, "ledger"), (QUIET_TOPIC, 1, None), (LONG_TOPIC, 2, "billing")):
        for n in range(count):
            t = now_ms - 50 * 60_000 + n * 30_000
            msg_id = f"{topic[:12]}-{n}"
            msg = dict(_message(msg_id, t, 0, n, f"k{n}"), topic=topic)
            out.append(send(msg_id, t, msg))
            if group:
                out += consume(BILLING_HEADER, group, msg_id, t + 20, msg)
    return out


def _collector(data_dir: str, with_scenario: bool) -> CollectorProcess:
    if with_scenario:
        now_ms = int(time.time() * 1000)
        store = open_store(f"local:{os.path.join(data_dir, 'index.sqlite3')}")
        index_records(store, scenario(now_ms)[1] + fleet(now_ms))
        finish_batch(store)
        store.close()
    return CollectorProcess(data_dir, "--durability", "os", store=None)


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    """A collector over the sample scenario (sent about an hour ago) and a few more topics, and one
    over an empty store."""
    full = _collector(str(tmp_path_factory.mktemp("ov-full")), True)
    empty = _collector(str(tmp_path_factory.mktemp("ov-empty")), False)
    yield full.url, empty.url
    full.stop()
    empty.stop()


@pytest.fixture(scope="module")
def browser_page():
    with chromium_page() as page:
        errors: list[str] = []
        # Chromium asks for /favicon.ico on its own; every other failed request or console error counts.
        page.on("response", lambda r: errors.append(f"{r.status} {r.url}")
                if r.status >= 400 and not r.url.endswith("/favicon.ico") else None)
        page.on("console", lambda msg: errors.append(msg.text)
                if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.errors = errors
        yield page


def open_overview(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("#overview[data-loaded]:not([aria-busy])")


def cells(page, topic: str, group: str) -> dict[str, str]:
    """A group's cells in the group table of the topic's opened chart."""
    row = f'.ov-topic[data-topic="{topic}"] tr.ov-group[data-group="{group}"]'
    return dict(page.eval_on_selector_all(f"{row} td[data-col]", "tds => tds.map(t => [t.dataset.col, t.textContent])"))


def shown_rows(page) -> list[tuple[str, str]]:
    return [tuple(r) for r in page.eval_on_selector_all(
        "#ov-table tr.ov-row", "trs => trs.map(t => [t.dataset.topic, t.dataset.group])")]


def api_rows(url: str, **params: str) -> list[dict]:
    return requests.get(url + "/v1/overview", params={"window": "2h", **params}, timeout=30).json()["rows"]


def row_selector(topic: str, group: str) -> str:
    return f'#ov-table tr.ov-row[data-topic="{topic}"][data-group="{group}"]'


def test_start_page_is_one_problems_first_table(sites, browser_page, artifacts_dir):
    url, _ = sites
    page = browser_page
    open_overview(page, url + "/?window=2h")
    rows = api_rows(url)
    assert shown_rows(page) == [(r["topic"], r["group"] or "") for r in rows]
    # Problems first: the dead letter's group, then the failed send's topic, then the lag; quiet topics last.
    assert shown_rows(page)[0] == (TOPIC, DEAD_GROUP)
    assert shown_rows(page)[-1] == (QUIET_TOPIC, "")
    assert page.locator(".ov-chart canvas").count() == 0  # no chart until asked for
    for r in rows:
        shown = dict(page.eval_on_selector_all(f"{row_selector(r['topic'], r['group'] or '')} td[data-col]",
                                               "tds => tds.map(t => [t.dataset.col, t.textContent])"))
        assert {k: shown[k] for k in ("sent", "consumed", "failed", "dead", "not_received", "failed_sends")} == {
            k: str(r[k]) for k in ("sent", "consumed", "failed", "dead", "not_received", "failed_sends")}
    dead = f"{row_selector(TOPIC, DEAD_GROUP)} td[data-col=dead]"
    assert "bad" in page.get_attribute(dead, "class")
    lag = float(page.get_attribute(f"{row_selector(TOPIC, 'billing')} td[data-col=lag]", "data-lag-s"))
    assert lag > 3000  # its oldest unconsumed message is about an hour old
    page.screenshot(path=str(artifacts_dir / "web-overview.png"), full_page=True)
    # Each count links to the listing behind it: the dead letters of that group, for the same window.
    page.click(f"{dead} a")
    page.wait_for_selector("#results:not([hidden]) tr.result")
    assert page.is_hidden("#overview")
    hash_params = parse_qs(urlsplit(page.url).fragment.split("?", 1)[1])
    assert hash_params["mode"] == ["dead"] and hash_params["group"] == [DEAD_GROUP] and hash_params["topic"] == [TOPIC]
    assert page.errors == []


def test_a_topics_chart_and_groups_open_on_demand(sites, browser_page, artifacts_dir):
    url, _ = sites
    page = browser_page
    open_overview(page, url + "/?window=2h")
    api = requests.get(url + "/v1/overview", params={"window": "2h", "topic": TOPIC}, timeout=30).json()
    (topic,) = api["topics"]
    page.click(f"{row_selector(TOPIC, 'billing')} button.ov-toggle")
    chart = f'.ov-chart[data-topic="{TOPIC}"]'
    page.wait_for_selector(f"{chart} canvas")
    assert page.locator(".ov-chart canvas").count() == 1  # only the topic asked for
    assert page.text_content(f'.ov-topic[data-topic="{TOPIC}"] [data-col=sent]') == f"{topic['sent']} sent"
    failed_sends = f'.ov-topic[data-topic="{TOPIC}"] [data-col=failed_sends]'
    assert topic["failed_sends"] == 1 and page.text_content(failed_sends) == "1 failed send"
    for group in topic["groups"]:
        shown = cells(page, TOPIC, group["group"])
        assert {k: shown[k] for k in ("consumed", "failed", "dead", "pending", "not_received")} == {
            k: str(group[k]) for k in ("consumed", "failed", "dead", "pending", "not_received")}
    assert page.text_content(f"{chart} .ov-tz") == "time axis: UTC"
    page.screenshot(path=str(artifacts_dir / "web-overview-chart.png"), full_page=True)
    page.click(f"{row_selector(TOPIC, 'billing')} button.ov-toggle")  # and closes again
    assert page.locator(".ov-chart").count() == 0
    assert page.errors == []  # no script error, no CSP violation (uPlot styles through the CSSOM only)


def test_sort_and_filter_live_in_the_url_and_survive_a_reload(sites, browser_page):
    url, _ = sites
    page = browser_page
    open_overview(page, url + "/?window=2h")
    page.select_option("#ov-sort", "sent")
    page.wait_for_selector("#overview[data-loaded]:not([aria-busy])")
    page.wait_for_function("() => new URLSearchParams(location.search).get('sort') === 'sent'")
    assert shown_rows(page)[0] == (BUSY_TOPIC, "ledger")
    page.fill("#ov-filter", "BILL")
    page.press("#ov-filter", "Enter")
    page.wait_for_function("() => new URLSearchParams(location.search).get('filter') === 'BILL'")
    page.wait_for_selector("#overview[data-loaded]:not([aria-busy])")
    expected = [(r["topic"], r["group"] or "") for r in api_rows(url, sort="sent", filter="BILL")]
    assert {g for _, g in expected} == {"billing"} and len(expected) == 2
    assert shown_rows(page) == expected
    page.reload()
    page.wait_for_selector("#overview[data-loaded]:not([aria-busy])")
    assert shown_rows(page) == expected
    assert page.input_value("#ov-sort") == "sent" and page.input_value("#ov-filter") == "BILL"
    assert parse_qs(urlsplit(page.url).query) == {"window": ["2h"], "sort": ["sent"], "filter": ["BILL"]}


def test_a_300_character_topic_name_does_not_widen_the_page(sites, browser_page):
    url, _ = sites
    page = browser_page
    open_overview(page, url + "/?window=2h")
    cell = f"{row_selector(LONG_TOPIC, 'billing')} td.ov-name"
    assert page.get_attribute(cell, "title") == LONG_TOPIC  # the full name on hover
    assert page.eval_on_selector(cell, "td => td.scrollWidth > td.clientWidth")  # cut with an ellipsis
    width = "() => [document.documentElement.scrollWidth, window.innerWidth]"
    page.click(f"{row_selector(LONG_TOPIC, 'billing')} button.ov-toggle")
    page.wait_for_selector(f'.ov-chart[data-topic="{LONG_TOPIC}"]')
    document_width, viewport = page.evaluate(width)
    assert document_width == viewport
    page.set_viewport_size({"width": 800, "height": 900})
    try:
        open_overview(page, url + "/?window=2h")
        document_width, viewport = page.evaluate(width)
        assert document_width == viewport == 800
    finally:
        page.set_viewport_size({"width": 1280, "height": 900})


def test_window_picker_keyboard_and_url(sites, browser_page):
    url, _ = sites
    page = browser_page
    open_overview(page, url + "/")
    assert page.get_attribute("[data-window='1h']", "aria-pressed") == "true"  # the default window
    page.focus("[data-window='15m']")
    page.keyboard.press("Tab")  # to "1 h"
    page.keyboard.press("Tab")  # to "24 h"
    page.keyboard.press("Enter")
    page.wait_for_selector("[data-window='24h'][aria-pressed=true]")
    page.wait_for_selector("#overview[data-loaded]:not([aria-busy])")
    assert parse_qs(urlsplit(page.url).query) == {"window": ["24h"]}
    page.go_back()  # the window is history: back shows the previous one
    page.wait_for_selector("[data-window='1h'][aria-pressed=true]")
    open_overview(page, url + "/?window=2h")
    # The topic name opens the topic + time listing for the same window; the overview steps aside.
    page.click(f"{row_selector(TOPIC, 'billing')} td.ov-name a")
    page.wait_for_selector("#results:not([hidden]) tr.result")
    assert page.is_hidden("#overview")


def test_narrow_custom_window_counts_only_its_minute(sites, browser_page):
    url, _ = sites
    page = browser_page
    full = requests.get(url + "/v1/overview", params={"window": "2h", "topic": TOPIC}, timeout=30).json()
    (topic,) = full["topics"]
    first = next(i for i, n in enumerate(topic["series"]["sent"]) if n)  # the scenario's first minute
    begin = full["times"][first]
    iso = [datetime.datetime.fromtimestamp(t / 1000, datetime.UTC).isoformat() for t in (begin, begin + 59_999)]
    open_overview(page, url + "/")
    page.click("[data-window=custom]")
    page.fill("#ov-begin", iso[0])
    page.fill("#ov-end", iso[1])
    page.press("#ov-end", "Enter")
    minute = datetime.datetime.fromtimestamp(begin / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M")
    page.wait_for_selector(f"#ov-range:has-text('{minute} –')")
    assert parse_qs(urlsplit(page.url).query) == {"begin": [iso[0]], "end": [iso[1]]}
    assert page.text_content(f"{row_selector(TOPIC, 'billing')} [data-col=sent]") == \
        str(topic["series"]["sent"][first])
    page.fill("#ov-begin", "not a time")
    page.press("#ov-begin", "Enter")
    page.wait_for_selector(".ov-error[role=alert]")
    assert "begin" in page.text_content(".ov-error")


def test_empty_store(sites, browser_page):
    _, url = sites
    page = browser_page
    open_overview(page, url + "/?window=24h")
    assert page.text_content(".ov-empty") == "No traced messages in this window."
    assert page.locator("#ov-table").count() == 0
