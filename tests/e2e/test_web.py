"""The web page in real headless Chromium against a running collector subprocess."""

from __future__ import annotations

import os
import shutil
import time

import pytest

from collector.demo import free_port, start_collector, stop_collector
from collector.sample import SHARED_KEY, TOPIC, scenario, send
from collector.store import open_store
from collector.store.indexer import index_records

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
QUERY_TOKEN = "web-query-token"
HOSTILE = '<img src=x onerror="window.__xss=1">'

pytestmark = [pytest.mark.browser, pytest.mark.slow]
playwright_api = pytest.importorskip("playwright.sync_api")
if not os.path.exists(CHROMIUM) and not shutil.which("chromium"):
    pytest.skip("needs Debian's chromium (apt-get install chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A collector on a local store that holds the sample scenario plus a hostile message."""
    data_dir = str(tmp_path_factory.mktemp("web"))
    now_ms = int(time.time() * 1000)
    ids, records = scenario(now_ms)
    t = now_ms - 60_000
    records.append(send("hostile-1", t, dict(keys=HOSTILE, tags=HOSTILE, broker=HOSTILE, queue=0, offset=1,
                                             born_ms=t, store_ms=t), error=HOSTILE))
    store = open_store(f"local:{os.path.join(data_dir, 'index.sqlite3')}")
    index_records(store, records)
    store.close()
    port = free_port()
    proc = start_collector(data_dir, port)
    yield f"http://127.0.0.1:{port}", ids
    stop_collector(proc)


@pytest.fixture
def secured_site(tmp_path, monkeypatch):
    """A collector that wants a query token, over a store holding the sample scenario."""
    ids, records = scenario(int(time.time() * 1000))
    store = open_store(f"local:{tmp_path / 'index.sqlite3'}")
    index_records(store, records)
    store.close()
    monkeypatch.setenv("TRACEHOOK_COLLECTOR_QUERY_TOKEN", QUERY_TOKEN)
    port = free_port()
    proc = start_collector(str(tmp_path), port)
    yield f"http://127.0.0.1:{port}", ids
    stop_collector(proc)


@pytest.fixture(scope="module")
def page(site):
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        yield page
        browser.close()


def search_id(page, url: str, msg_id: str) -> None:
    page.goto(url + "/")
    page.check("input[name=mode][value=id]")
    page.fill("#msg-id", msg_id)
    page.click("#go")
    page.wait_for_selector("#trace:not([hidden]) .tl-row")


def outcomes(page, group: str) -> list[str]:
    return page.eval_on_selector_all(
        f'.tl-row[data-group="{group}"] .tl-bar', "bars => bars.map(b => b.dataset.outcome)")


def test_timeline_of_a_dead_letter(site, page, artifacts_dir):
    url, ids = site
    search_id(page, url, ids.dead)
    assert page.text_content("#trace-id") == ids.dead
    groups = page.eval_on_selector_all(".tl-row", "rows => rows.map(r => [r.dataset.kind, r.dataset.group])")
    assert groups == [["producer", "shop-web"], ["consumer", "billing"], ["consumer", "shipping"]]
    assert outcomes(page, "shop-web") == ["success"]
    assert outcomes(page, "billing") == ["success"]
    assert outcomes(page, "shipping") == ["failed", "failed", "failed", "failed"]
    kinds = page.eval_on_selector_all('.tl-row[data-group="shipping"] .tl-bar', "bars => bars.map(b => b.dataset.kind)")
    assert kinds[-1] == "dead"
    lefts = page.eval_on_selector_all('.tl-row[data-group="shipping"] .tl-bar',
                                      "bars => bars.map(b => b.getBoundingClientRect().left)")
    assert lefts == sorted(lefts) and lefts[0] < lefts[-1]  # placed along the time axis
    hover = page.get_attribute('.tl-row[data-group="shipping"] .tl-bar >> nth=1', "title")
    assert "host: ship-1" in hover and "retry: 1" in hover and "cost: 4.0 ms" in hover
    page.screenshot(path=str(artifacts_dir / "web-trace-dead-letter.png"), full_page=True)


def test_retried_and_unfinished_consumes(site, page):
    url, ids = site
    search_id(page, url, ids.retried)
    assert outcomes(page, "shipping") == ["failed", "success"]
    search_id(page, url, ids.unfinished)
    assert outcomes(page, "billing") == ["unknown"]


def test_search_by_key_lists_messages_and_opens_a_trace(site, page, artifacts_dir):
    url, _ = site
    page.goto(url + "/")
    page.check("input[name=mode][value=key]")
    page.fill("#topic", TOPIC)
    page.fill("#key", SHARED_KEY)
    page.click("#go")
    page.wait_for_selector("#results:not([hidden]) tr.result")
    assert page.locator("tr.result").count() == 20
    assert page.is_visible("#more")
    page.click("#more")
    page.locator("tr.result").nth(24).wait_for()  # (wait_for_function would need eval, which the CSP forbids)
    assert page.locator("tr.result").count() == 25
    assert not page.is_visible("#more")
    first = page.text_content("tr.result >> nth=0 >> a")
    page.screenshot(path=str(artifacts_dir / "web-key-search.png"), full_page=True)
    page.click("tr.result >> nth=0 >> a")
    page.wait_for_selector("#trace:not([hidden]) .tl-row")
    assert page.text_content("#trace-id") == first


def test_dead_letter_search_shows_totals_per_group(site, page):
    url, ids = site
    page.goto(url + "/")
    page.check("input[name=mode][value=dead]")
    page.fill("#topic", TOPIC)
    page.click("#go")
    page.wait_for_selector("#dead-totals:not([hidden]) .dead-total")
    assert page.text_content('.dead-total[data-group="shipping"]') == "shipping 1"
    assert [page.text_content("tr.result >> nth=0 >> a")] == [ids.dead]
    assert page.locator("tr.result").count() == 1


def test_unknown_id_says_so(site, page):
    url, _ = site
    page.goto(url + "/#id=no-such-message")
    page.wait_for_selector("#status.error")
    assert "No trace" in page.text_content("#status")


def test_data_is_rendered_as_text_never_as_html(site, page):
    url, _ = site
    search_id(page, url, "hostile-1")
    assert HOSTILE in page.text_content("#trace-info")
    assert page.locator("#trace img").count() == 0
    assert page.evaluate("window.__xss") is None


def test_the_token_field_authorizes_queries(secured_site, page):
    url, ids = secured_site
    page.goto(url + "/#id=" + ids.normal)
    page.wait_for_selector("#status.error")
    assert "token" in page.text_content("#status")
    page.fill("#token", QUERY_TOKEN)
    page.dispatch_event("#token", "change")
    search_id(page, url, ids.normal)
    assert page.text_content("#trace-id") == ids.normal
    page.fill("#token", "")  # the module's other tests use an open collector
    page.dispatch_event("#token", "change")
