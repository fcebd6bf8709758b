"""The web page in real headless Chromium against a running collector subprocess."""

from __future__ import annotations

import os
import time

import pytest
from fixtures.collector_process import CollectorProcess

from collector.index.indexer import index_records
from collector.store import open_store
from tests.fixtures.chromium import chromium_page
from tests.fixtures.sample import SHARED_KEY, SHIPPING_HEADER, TOPIC, scenario, send
from tracehook.wire import Event, EventType, Status, make_event

QUERY_TOKEN = "web-query-token"
HOSTILE = '<img src=x onerror="window.__xss=1">'
DLQ_TOPIC, DLQ_SPAN_MS, BUCKET_MS = "refunds", 6 * 3_600_000, 15 * 60_000  # a 6 h window draws 24 bars of 15 min
# Dead letters per group: bucket index -> count (bucket 23 is the window's last).
DLQ_COUNTS = {"alpha": {0: 3, 5: 1, 23: 2}, "beta": {10: 1}}
DLQ_BEGIN = int(time.time() * 1000) - 10 * 3_600_000

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A collector on a local store that holds the sample scenario plus a hostile message."""
    data_dir = str(tmp_path_factory.mktemp("web"))
    now_ms = int(time.time() * 1000)
    ids, records = scenario(now_ms)
    t = now_ms - 60_000
    records.append(send("hostile-1", t, dict(keys=HOSTILE, tags=HOSTILE, broker=HOSTILE, queue=0, offset=1,
                                             born_ms=t, store_ms=t), error=HOSTILE,
                        props={"amqp.exchange": "", "amqp.routing_key": HOSTILE}))
    records += dead_letters(DLQ_BEGIN)
    records += paging_and_same_ms(now_ms - 120_000)
    store = open_store(f"local:{os.path.join(data_dir, 'index.sqlite3')}")
    index_records(store, records)
    store.close()
    collector = CollectorProcess(data_dir, "--durability", "os", store=None)
    yield collector.url, ids
    collector.stop()


PAGING_TOPIC, PAGING_COUNT, SAME_MS_ID = "paging", 20, "same-ms-1"


def paging_and_same_ms(t: int) -> list:
    """PAGING_COUNT messages on PAGING_TOPIC, one of them filed under two times (a failed first send
    without a store time), so the index holds one row more than the messages; and SAME_MS_ID, whose
    retry 1 is received in the millisecond its retry 0 finished, request ids sorting the other way."""
    from tests.fixtures.sample import BILLING_HEADER, _event

    records = []
    for n in range(PAGING_COUNT):
        msg = dict(topic=PAGING_TOPIC, keys=f"p-{n}", queue=0, offset=n, born_ms=t + n * 10 - 1, store_ms=t + n * 10)
        if n == 0:
            records.append(send(f"page-{n}", t - 5, dict(msg, store_ms=0), status=int(Status.TIMEOUT)))
        records.append(send(f"page-{n}", t + n * 10, msg))
    msg = dict(keys="same-ms", queue=1, offset=7, born_ms=t - 1, store_ms=t)
    records.append(send(SAME_MS_ID, t, msg))
    for retry, request_id in ((1, "a-second"), (0, "z-first")):
        for kind in (EventType.SUB_BEFORE, EventType.SUB_AFTER):
            status = int(Status.EXCEPTION if retry == 0 else Status.OK)
            records.append((BILLING_HEADER, _event(kind, t + 5, "billing", SAME_MS_ID, retry=retry,
                                                   request_id=request_id, status=status, **msg)))
    return records


def dead_letters(begin_ms: int) -> list:
    """DLQ_COUNTS as sends plus DEAD events on DLQ_TOPIC, spread inside their 15-minute buckets."""
    records, n = [], 0
    for group, buckets in DLQ_COUNTS.items():
        for bucket, count in buckets.items():
            for i in range(count):
                t = begin_ms + bucket * BUCKET_MS + 1000 + i * 60_000
                msg = dict(keys=f"refund-{n}", queue=0, offset=n, born_ms=t - 2, store_ms=t)
                msg_id = f"refund-{n}"
                records.append(send(msg_id, t, dict(msg, topic=DLQ_TOPIC)))  # sent to the topic it died on
                records.append((SHIPPING_HEADER, Event._make(make_event(
                    EventType.DEAD, t + 50, group, DLQ_TOPIC, msg_id, retry=3, error="max retries", **msg))))
                n += 1
    return records


@pytest.fixture
def secured_site(tmp_path, monkeypatch):
    """A collector that wants a query token, over a store holding the sample scenario."""
    ids, records = scenario(int(time.time() * 1000))
    store = open_store(f"local:{tmp_path / 'index.sqlite3'}")
    index_records(store, records)
    store.close()
    monkeypatch.setenv("TRACEHOOK_COLLECTOR_QUERY_TOKEN", QUERY_TOKEN)
    collector = CollectorProcess(str(tmp_path), "--durability", "os", store=None)
    yield collector.url, ids
    collector.stop()


@pytest.fixture(scope="module")
def page(site):
    with chromium_page() as page:
        yield page


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
    page.click("#more")  # the next page is a link (#search?...&cursor=...): it replaces the rows
    page.wait_for_selector('#status >> text="5 message(s) on this page"')
    assert page.locator("tr.result").count() == 5
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
    page.wait_for_selector("#dead-counts:not([hidden]) .dead-total")
    assert page.text_content('.dead-total[data-group="shipping"]') == "shipping 1"
    assert [page.text_content("tr.result >> nth=0 >> a")] == [ids.dead]
    assert page.locator("tr.result").count() == 1


def test_dead_letter_counts_per_group_over_time(site, page, artifacts_dir):
    url, _ = site
    page.goto(url + "/")
    page.check("input[name=mode][value=dead]")
    page.fill("#topic", DLQ_TOPIC)
    page.fill("#begin", str(DLQ_BEGIN))
    page.fill("#end", str(DLQ_BEGIN + DLQ_SPAN_MS - 1))
    page.click("#go")
    page.wait_for_selector("#dead-counts:not([hidden]) .dc-row")
    assert page.get_attribute("#dead-counts", "data-bucket-ms") == str(BUCKET_MS)
    rows = page.eval_on_selector_all(".dc-row", "rows => rows.map(r => r.dataset.group)")
    assert rows == ["alpha", "beta"]  # most dead letters first
    for group, buckets in DLQ_COUNTS.items():
        bars = f'.dc-row[data-group="{group}"] .dc-bar'
        counts = page.eval_on_selector_all(bars, "bars => bars.map(b => Number(b.dataset.count))")
        assert counts == [buckets.get(i, 0) for i in range(24)], group
        starts = page.eval_on_selector_all(bars, "bars => bars.map(b => Number(b.dataset.start))")
        assert starts == [DLQ_BEGIN + i * BUCKET_MS for i in range(24)]
        assert page.text_content(f'.dead-total[data-group="{group}"]') == f"{group} {sum(buckets.values())}"
    hover = page.get_attribute('.dc-row[data-group="alpha"] .dc-bar >> nth=0', "title")
    assert hover.startswith("alpha: 3 dead letter(s)\n")
    # Drawn to scale: the peak bucket (3) fills its column, a count of 1 a third of it, an empty bucket nothing.
    heights = page.eval_on_selector_all('.dc-row[data-group="alpha"] .dc-fill',
                                        "fills => fills.map(f => f.getBoundingClientRect().height)")
    column = page.eval_on_selector('.dc-row[data-group="alpha"] .dc-bar', "b => b.getBoundingClientRect().height")
    assert heights[0] == pytest.approx(column, abs=1) and heights[5] == pytest.approx(column / 3, abs=1)
    assert heights[1] == 0 and heights[23] == pytest.approx(2 * column / 3, abs=1)
    assert page.locator("tr.result").count() == 7
    page.screenshot(path=str(artifacts_dir / "web-dead-letter-counts.png"), full_page=True)


def test_unknown_id_says_so(site, page):
    url, _ = site
    page.goto(url + "/#id=no-such-message")
    page.wait_for_selector("#status.error")
    assert "No trace" in page.text_content("#status")


def test_data_is_rendered_as_text_never_as_html(site, page):
    url, _ = site
    search_id(page, url, "hostile-1")
    assert HOSTILE in page.text_content("#trace-info")
    # the RabbitMQ props show next to the topic, labelled, as text too
    fields = page.eval_on_selector_all("#trace-info dt",
                                       "dts => dts.map(d => [d.textContent, d.nextSibling.textContent])")
    assert fields[:3] == [["topic", TOPIC], ["exchange", "(default exchange)"], ["routing key", HOSTILE]]
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


def test_last_page_does_not_offer_more(site, page):
    """20 messages in 21 index rows: one full page, and nothing after it."""
    url, _ = site
    page.goto(url + "/")
    page.check("input[name=mode][value=topic]")
    page.fill("#topic", PAGING_TOPIC)
    page.click("#go")
    page.wait_for_selector("#results:not([hidden]) tr.result")
    page.wait_for_selector('#status >> text="20 message(s)"')  # after the look-ahead dropped "more available"
    assert page.locator("tr.result").count() == PAGING_COUNT
    assert not page.is_visible("#more")


def test_trace_times_say_utc_axis_has_ticks_events_keep_attempt_order(site, page, artifacts_dir):
    url, _ = site
    search_id(page, url, SAME_MS_ID)
    assert page.text_content(".tl-axis .tl-start").endswith(" UTC")
    ticks = page.eval_on_selector_all(".tl-tick", "ts => ts.map(t => [t.textContent, t.getBoundingClientRect().left])")
    assert len(ticks) >= 3 and ticks[0][0] == "+0 ms"
    assert [left for _, left in ticks] == sorted(left for _, left in ticks)
    born = page.eval_on_selector_all("#trace-info dd", "dds => dds.map(d => d.textContent)")
    assert any(text.endswith(" UTC") for text in born)
    rows = page.eval_on_selector_all(
        "#events-table tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))")
    assert all(row[0].endswith(" UTC") for row in rows)
    billing = [(row[1], row[6]) for row in rows if row[2] == "billing"]
    assert billing == [("received", "0"), ("finished", "0"), ("received", "1"), ("finished", "1")]
    page.screenshot(path=str(artifacts_dir / "web-trace-same-ms.png"), full_page=True)
