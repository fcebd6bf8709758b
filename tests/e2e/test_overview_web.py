"""The console's start page (the overview) in real headless Chromium against collector subprocesses."""

from __future__ import annotations

import datetime
import os
import time
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from fixtures.collector_process import CollectorProcess

from collector.store import open_store
from collector.store.indexer import finish_batch, index_records
from tests.fixtures.chromium import chromium_page
from tests.fixtures.sample import DEAD_GROUP, TOPIC, scenario

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _collector(data_dir: str, with_scenario: bool) -> CollectorProcess:
    if with_scenario:
        store = open_store(f"local:{os.path.join(data_dir, 'index.sqlite3')}")
        index_records(store, scenario(int(time.time() * 1000))[1])
        finish_batch(store)
        store.close()
    return CollectorProcess(data_dir, "--durability", "os", store=None)


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    """A collector over the sample scenario (sent about an hour ago) and one over an empty store."""
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
    row = f'.ov-topic[data-topic="{topic}"] tr.ov-group[data-group="{group}"]'
    return dict(page.eval_on_selector_all(f"{row} td[data-col]", "tds => tds.map(t => [t.dataset.col, t.textContent])"))


def test_start_page_shows_topics_groups_and_a_chart(sites, browser_page, artifacts_dir):
    url, _ = sites
    page = browser_page
    open_overview(page, url + "/?window=2h")
    api = requests.get(url + "/v1/overview", params={"window": "2h"}, timeout=30).json()
    (topic,) = api["topics"]
    assert page.text_content(f'.ov-topic[data-topic="{TOPIC}"] [data-col=sent]') == f"{topic['sent']} sent"
    # The scenario's send that timed out: counted apart, in red, and in no group's not-received count.
    failed_sends = f'.ov-topic[data-topic="{TOPIC}"] [data-col=failed_sends]'
    assert topic["failed_sends"] == 1 and page.text_content(failed_sends) == "1 failed send"
    assert "bad" in page.get_attribute(failed_sends, "class")
    for group in topic["groups"]:
        shown = cells(page, TOPIC, group["group"])
        assert {k: shown[k] for k in ("consumed", "failed", "dead", "pending", "not_received")} == {
            k: str(group[k]) for k in ("consumed", "failed", "dead", "pending", "not_received")}
    assert cells(page, TOPIC, DEAD_GROUP)["dead"] == "1"
    lag = float(page.get_attribute('tr.ov-group[data-group="billing"] td[data-col=lag]', "data-lag-s"))
    assert lag > 3000  # its oldest unconsumed message is about an hour old
    chart = f'.ov-chart[data-topic="{TOPIC}"]'
    assert page.locator(f"{chart} canvas").count() == 1
    assert page.text_content(f"{chart} .ov-tz") == "time axis: UTC"  # also the axis label on the canvas
    assert page.is_visible(".ov-windows button[aria-pressed=true][data-window=custom]")  # 2h is no preset
    assert page.text_content("#ov-range").endswith("UTC")
    page.screenshot(path=str(artifacts_dir / "web-overview.png"), full_page=True)
    assert page.errors == []  # no script error, no CSP violation (uPlot styles through the CSSOM only)


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
    page.click(f'.ov-topic[data-topic="{TOPIC}"] h3 a')
    page.wait_for_selector("#results:not([hidden]) tr.result")
    assert page.is_hidden("#overview")


def test_narrow_custom_window_counts_only_its_minute(sites, browser_page):
    url, _ = sites
    page = browser_page
    full = requests.get(url + "/v1/overview", params={"window": "2h"}, timeout=30).json()
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
    assert page.text_content(f'.ov-topic[data-topic="{TOPIC}"] [data-col=sent]') == \
        f"{topic['series']['sent'][first]} sent"
    page.fill("#ov-begin", "not a time")
    page.press("#ov-begin", "Enter")
    page.wait_for_selector(".ov-error[role=alert]")
    assert "begin" in page.text_content(".ov-error")


def test_empty_store(sites, browser_page):
    _, url = sites
    page = browser_page
    open_overview(page, url + "/?window=24h")
    assert page.text_content(".ov-empty") == "No traced messages in this window."
    assert page.locator(".ov-topic").count() == 0
