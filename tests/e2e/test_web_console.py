"""The console's views in real headless Chromium against a collector subprocess: the message page
(outcome per group, trace links), search (id, key, trace id, topic + outcome filters, cursor
paging, deep links), the offsets / reset-plan page, the replay list with downloads, an empty
store, and keyboard navigation."""

from __future__ import annotations

import csv
import io
import json
import os
import time
from urllib.parse import quote

import pytest
from fixtures.collector_process import CollectorProcess
from fixtures.pages import CursorPages

from collector.index.indexer import index_records
from collector.store import open_store, props
from tests.fixtures.chromium import chromium_page
from tests.fixtures.props_model import Msg, events
from tests.fixtures.sample import SHARED_KEY, TOPIC, scenario

TRACE_UI = "http://jaeger.example:16686/trace/{trace_id}"
NOW_MS = int(time.time() * 1000)
T0 = NOW_MS - 3_600_000  # scenario(): the first message is stored here, the next ones a second apart

PROP_TOPIC, PROP_NAME, PROP_VALUES = "props/t", "a:b=c", [" x=y: z", "", " x=y: z", "x=y: z"]
"""Messages found by an indexed property whose name and values hold ':', '=', spaces, or nothing."""

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def serve(data_dir: str, env: dict[str, str]) -> CollectorProcess:
    return CollectorProcess(data_dir, "--durability", "os", store=None, env=env)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A collector (with a trace UI configured) over the sample scenario."""
    data_dir = str(tmp_path_factory.mktemp("console"))
    store = open_store(f"local:{os.path.join(data_dir, 'index.sqlite3')}")
    props.save(store, props.NOTHING.with_names(None, ["region", PROP_NAME]))
    index_records(store, scenario(NOW_MS)[1])
    index_records(store, events([Msg(f"prop-{i}", PROP_TOPIC, T0 + i, True, {PROP_NAME: value}, None)
                                 for i, value in enumerate(PROP_VALUES)]))
    store.close()
    collector = serve(data_dir, {"TRACEHOOK_COLLECTOR_TRACE_UI_URL": TRACE_UI})
    yield collector.url
    collector.stop()


@pytest.fixture(scope="module")
def empty_site(tmp_path_factory):
    """A collector over an empty store, with no trace UI."""
    collector = serve(str(tmp_path_factory.mktemp("console-empty")), {})
    yield collector.url
    collector.stop()


@pytest.fixture(scope="module")
def page(site):
    with chromium_page(accept_downloads=True) as page:
        yield page


def api(page, url: str, path: str, **params) -> dict:
    response = page.request.get(url + path, params={k: str(v) for k, v in params.items()})
    assert response.ok, response.text()
    return response.json()


def row_ids(page, selector: str = "#results-table tr.result") -> list[str]:
    return page.eval_on_selector_all(selector, "rows => rows.map(r => r.dataset.msgId)")


def settle(page, left: str | None = None) -> None:
    """Wait until the URL is no longer ``left`` (when given) and the view it names has rendered
    (console.js sets <body data-shown> to the hash it rendered)."""
    for _ in range(600):
        href, hash_, shown = page.evaluate("[location.href, location.hash, document.body.dataset.shown]")
        if href != left and shown is not None and shown == hash_:
            return
        page.wait_for_timeout(25)
    raise AssertionError(f"the view {hash_!r} did not render")


def click(page, selector: str) -> None:
    """Click what changes the URL (a link, a form's button), and wait for the new view."""
    before = page.evaluate("location.href")
    page.click(selector)
    settle(page, before)


def test_message_page_shows_outcome_per_group_and_links_the_trace(site, page, artifacts_dir):
    doc = api(page, site, "/v1/messages/msg-dead")
    page.goto(site + "/#message?id=msg-dead")
    settle(page)
    page.wait_for_selector("#trace:not([hidden]) tr.group-outcome")
    rows = page.eval_on_selector_all("tr.group-outcome", "rs => rs.map(r => [r.dataset.group, r.dataset.outcome, "
                                     "[...r.cells].map(c => c.textContent)])")
    assert [(g, o) for g, o, _ in rows] == [("billing", "consumed"), ("shipping", "dead")]
    assert rows[1][2][2:4] == ["3", "failed"] and rows[1][2][5] == "max retries"
    # above the timeline
    table_y = page.eval_on_selector("#group-outcomes", "t => t.getBoundingClientRect().bottom")
    assert table_y <= page.eval_on_selector("#timeline", "t => t.getBoundingClientRect().top")
    assert page.text_content("#w3c-trace-id") == doc["trace_id"] and len(doc["trace_id"]) == 32
    page.wait_for_selector("#trace-ui-link:not([hidden])")
    assert page.get_attribute("#trace-ui-link", "href") == TRACE_UI.replace("{trace_id}", doc["trace_id"])
    page.screenshot(path=str(artifacts_dir / "console-message.png"), full_page=True)
    # A message a group received but never finished: "not yet consumed".
    page.goto(site + "/#message?id=msg-unfinished")
    settle(page)
    page.wait_for_selector('tr.group-outcome[data-group="billing"]')
    assert page.text_content('tr.group-outcome[data-group="billing"] .outcome') == "not yet consumed"
    # The trace id links to the search for its messages.
    page.goto(site + "/#message?id=msg-dead")
    settle(page)
    page.wait_for_selector("#trace-search-link:not([hidden])")
    click(page, "#trace-search-link")
    assert row_ids(page) == ["msg-dead"]
    assert page.url.endswith("#search?mode=trace&trace_id=" + doc["trace_id"])


def test_search_by_id_key_trace_and_topic_with_outcome_filters_and_paging(site, page):
    page.goto(site + "/")
    page.check("input[name=mode][value=id]")
    page.fill("#msg-id", "msg-retried")
    click(page, "#go")
    assert page.url.endswith("#message?id=msg-retried")
    # key: cursor paging through next-page links; each page is a URL (reload and back restore it)
    page.check("input[name=mode][value=key]")
    page.fill("#topic", TOPIC)
    page.fill("#key", SHARED_KEY)
    click(page, "#go")
    first = row_ids(page)
    assert len(first) == 20 and page.is_visible("#more")
    assert f"#search?mode=key&topic={TOPIC}&key={SHARED_KEY}" in page.url
    click(page, "#more")
    second = row_ids(page)
    everything = [i["msg_id"] for i in api(page, site, f"/v1/topics/{TOPIC}/messages", key=SHARED_KEY, limit=100)["items"]]
    assert first + second == everything and len(everything) == 25
    assert not page.is_visible("#more")
    page.reload()
    settle(page)
    assert row_ids(page) == second and page.input_value("#key") == SHARED_KEY
    page.go_back()
    settle(page)
    assert row_ids(page) == first
    # topic + time, filtered by group and outcome: the same messages as the reference computed here
    listing = api(page, site, f"/v1/topics/{TOPIC}/messages", limit=100)["items"]
    cases = [("shipping", "dead", lambda g: g.get("shipping", {}).get("outcome") == "dead"),
             ("billing", "not_consumed", lambda g: g.get("billing", {}).get("outcome") != "consumed"),
             ("", "pending", lambda g: any(o["outcome"] == "pending" for o in g.values()))]
    for group, outcome, keep in cases:
        page.goto(site + "/#search")
        settle(page)
        page.check("input[name=mode][value=topic]")
        page.fill("#topic", TOPIC)
        page.fill("#group", group)
        page.select_option("#outcome", outcome)
        click(page, "#go")
        assert f"outcome={outcome}" in page.url
        shown = row_ids(page)
        while page.is_visible("#more"):
            click(page, "#more")
            shown += row_ids(page)
        expected = [i["msg_id"] for i in listing if keep(i["groups"])]
        assert shown == expected and expected, (group, outcome)
    assert shown == ["msg-unfinished"]
    # trace id
    trace_id = api(page, site, "/v1/messages/msg-normal")["trace_id"]
    page.goto(site + "/#search")
    settle(page)
    page.check("input[name=mode][value=trace]")
    page.fill("#trace-id-q", trace_id)
    click(page, "#go")
    assert row_ids(page) == ["msg-normal"]


def test_search_by_an_indexed_property(site, page):
    for value, want in [(" x=y: z", ["prop-2", "prop-0"]), ("", ["prop-1"]), ("x=y: z", ["prop-3"])]:
        page.goto(site + "/#search")
        settle(page)
        page.check("input[name=mode][value=prop]")
        page.fill("#topic", PROP_TOPIC)
        page.fill("#prop-name", PROP_NAME)
        page.fill("#prop-value", value)
        page.fill("#begin", "7d")
        click(page, "#go")
        assert "mode=prop" in page.url
        assert row_ids(page) == want, value
        page.reload()  # the deep link searches the same property again
        settle(page)
        assert row_ids(page) == want and page.input_value("#prop-value") == value


def test_offsets_page_shows_the_reset_plan_and_the_cli_command(site, page, artifacts_dir):
    at = T0 + 1500
    page.goto(site + "/")
    click(page, '#console-nav a[data-view="offsets"]')
    page.fill("#off-topic", TOPIC)
    page.fill("#off-group", "billing")
    page.fill("#off-time", str(at))
    click(page, "#offsets-form button")
    page.wait_for_selector("#offsets-table tr.queue")
    plan = api(page, site, f"/v1/topics/{TOPIC}/offsets", time=at, group="billing")
    shown = page.eval_on_selector_all("#offsets-table tr.queue", "rs => rs.map(r => [...r.cells].map(c => c.textContent))")
    assert shown == [[str(q["queue"]), str(q["target"]), "-" if q["current"] is None else str(q["current"]),
                      str(q["planned"]), q["action"]] for q in plan["queues"]]
    assert {q["action"] for q in plan["queues"]} == {"rewind", "keep", "set"}  # the plan shows each kind
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at / 1000)) + f".{at % 1000:03d}Z"
    command = page.text_content("#off-cli-command")
    assert command == (f"tracehook kafka-reset --bootstrap BROKER:9092 --group billing --topic {TOPIC} "
                       f"--time={iso} --collector {site} --apply")
    assert "read-only" in page.text_content("#off-cli")
    page.screenshot(path=str(artifacts_dir / "console-offsets.png"), full_page=True)
    # later and forced, from a deep link: forward moves appear, and the command says --force
    page.goto(site + f"/#offsets?topic={TOPIC}&group=billing&time={T0 + 4500}&force=1")
    settle(page)
    page.wait_for_selector('#offsets-table tr.queue[data-action="forward"]')
    assert page.is_checked("#off-force") and page.text_content("#off-cli-command").endswith("--force --apply")
    # without a group: offsets at the time only
    page.goto(site + f"/#offsets?topic={TOPIC}&time={at}")
    settle(page)
    page.wait_for_selector("#offsets-table tr.queue:not([data-action])")
    offsets = api(page, site, f"/v1/topics/{TOPIC}/offsets", time=at)["queues"]
    assert page.eval_on_selector_all("#offsets-table tr.queue", "rs => rs.map(r => r.cells[1].textContent)") == \
        [str(q["offset"]) for q in offsets]
    assert page.is_hidden("#off-cli")
    # a misspelt group gets the API's reason, not a plan that sets every queue
    page.goto(site + f"/#offsets?topic={TOPIC}&group=billling&time={at}")
    settle(page)
    page.wait_for_selector("#status.error")
    assert "never consumed" in page.text_content("#status") and "billing" in page.text_content("#status")
    assert page.eval_on_selector_all("#offsets-table tr.queue", "rs => rs.length") == 0


def test_replay_page_lists_pages_and_downloads(site, page, artifacts_dir):
    page.goto(site + f"/#replay?topic={TOPIC}&group=billing")
    settle(page)
    pages = CursorPages()  # the whole replay list through the JSON API, page after page
    for cursor in pages:
        body = api(page, site, f"/v1/topics/{TOPIC}/unconsumed", group="billing", limit=500,
                   **({"cursor": cursor} if cursor else {}))
        pages.add(body["items"], body["next_cursor"])
    reference = pages.items
    shown = row_ids(page, "#replay-table tr.replay-item")
    assert shown == [i["msg_id"] for i in reference][:len(shown)] and len(shown) == min(50, len(reference))
    statuses = dict(zip(shown, page.eval_on_selector_all("#replay-table tr.replay-item", "rs => rs.map(r => r.dataset.status)")))
    assert statuses["msg-unfinished"] == "PENDING" and statuses["msg-tx"] == "NOT_RECEIVED"
    assert "tracehook replay-list orders --group billing --format csv" in page.text_content("#rp-cli-command")
    replay_command = page.text_content("#rp-replay-command")
    assert replay_command.startswith("tracehook replay orders --group billing --bootstrap BROKER:9092 "
                                     "--to-topic orders.billing-replay --collector http")
    assert set(page.eval_on_selector_all("#replay-table td.replayed", "ts => ts.map(t => t.textContent)")) == {"–"}
    page.screenshot(path=str(artifacts_dir / "console-replay.png"), full_page=True)
    with page.expect_download() as jsonl:
        page.click("#rp-jsonl")
    assert jsonl.value.suggested_filename == f"replay-{TOPIC}-billing.jsonl"
    lines = open(jsonl.value.path(), encoding="utf-8").read().splitlines()
    assert [json.loads(line) for line in lines] == reference
    with page.expect_download() as as_csv:
        page.click("#rp-csv")
    assert as_csv.value.suggested_filename == f"replay-{TOPIC}-billing.csv"
    rows = list(csv.DictReader(io.StringIO(open(as_csv.value.path(), encoding="utf-8").read())))
    assert rows == [{k: str(v) for k, v in item.items()} for item in reference]
    # A row opens its message.
    click(page, '#replay-table tr.replay-item[data-msg-id="msg-unfinished"] td:nth-child(5)')
    page.wait_for_selector("#trace:not([hidden]) tr.group-outcome")
    assert page.url.endswith("#message?id=msg-unfinished") and page.is_hidden("#replay-view")


def test_keyboard_reaches_and_opens_listing_rows(site, page):
    page.goto(site + f"/#search?mode=key&topic={TOPIC}&key={quote(SHARED_KEY)}")
    settle(page)
    page.focus("#go")
    page.keyboard.press("Tab")
    focused = page.evaluate("document.activeElement.dataset.msgId")
    assert focused == row_ids(page)[0]
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"  # focus is visible
    page.keyboard.press("ArrowDown")
    second = page.evaluate("document.activeElement.dataset.msgId")
    assert second == row_ids(page)[1]
    page.keyboard.press("Enter")
    page.wait_for_selector("#trace:not([hidden]) .tl-row")
    assert page.url.endswith("#message?id=" + second) and page.text_content("#trace-id") == second
    page.go_back()
    settle(page)
    assert len(row_ids(page)) == 20


def test_empty_store(empty_site, page, artifacts_dir):
    page.goto(empty_site + "/")
    assert page.is_visible("#search") and page.is_visible("#console-nav")
    page.goto(empty_site + f"/#search?mode=topic&topic={TOPIC}")
    settle(page)
    page.wait_for_selector('#status:text("0 message(s)")')
    assert row_ids(page) == [] and page.is_hidden("#more")
    page.goto(empty_site + "/#message?id=nothing")
    settle(page)
    page.wait_for_selector("#status.error")
    assert "No trace" in page.text_content("#status")
    page.goto(empty_site + f"/#offsets?topic={TOPIC}&group=billing&time=-1h")
    settle(page)
    page.wait_for_selector('#off-summary:text("no queue indexed")')
    page.goto(empty_site + f"/#replay?topic={TOPIC}&group=billing")
    settle(page)
    page.wait_for_selector("#status.error")
    assert "never consumed" in page.text_content("#status")
    page.goto(empty_site + "/#message?id=nothing")
    settle(page)
    page.wait_for_selector("#status.error")
    assert page.is_hidden("#trace-ui-link")


@pytest.fixture(scope="module")
def body_site(tmp_path_factory):
    """A collector (open queries: bodies shown) over three messages of topic sms with kept bodies, one erased."""
    from collector.store.bodies import erase_messages
    from tracehook import wire

    data_dir = str(tmp_path_factory.mktemp("console-bodies"))
    store = open_store(f"local:{os.path.join(data_dir, 'index.sqlite3')}")
    header = wire.BatchHeader("c", 1, "shop", "host")
    bodies = {"body-text": (b"<b>code 4711</b>", 0, 16), "body-bin": (b"\xff\x00\xfe", wire.BODY_TRUNCATED, 4096),
              "body-erased": (b"gone", 0, 4)}
    index_records(store, [(header, wire.Event(*wire.make_event(1, NOW_MS - 1000, "p", "sms", m, body=b, body_flags=f,
                                                               body_len=n))) for m, (b, f, n) in bodies.items()])
    erase_messages(store, ["body-erased"])
    store.close()
    collector = serve(data_dir, {})
    yield collector.url
    collector.stop()


def test_message_page_shows_the_kept_body_as_text_never_as_markup(body_site, page):
    shown = {}
    for msg_id in ("body-text", "body-bin", "body-erased"):
        page.goto(body_site + "/#message?id=" + msg_id)
        settle(page)
        page.wait_for_selector("#message-body[data-body]")
        shown[msg_id] = (page.get_attribute("#message-body", "data-body"), page.text_content("#body-state"),
                         page.text_content("#body-text"))
    assert shown["body-text"] == ("shown", "16 bytes", "<b>code 4711</b>")  # text, not markup
    assert shown["body-bin"] == ("hex", "3 bytes kept of 4096 (truncated), shown as hex", "ff00fe")
    assert shown["body-erased"][:2] == ("erased", "The body was erased; the trace stays.")
    assert page.query_selector("#message-body b") is None
