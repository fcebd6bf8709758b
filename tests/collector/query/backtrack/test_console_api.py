"""The web console's API additions over a real collector app: outcome filters on the topic listing,
replay-list downloads, and the console config (trace UI link)."""

from __future__ import annotations

import csv
import datetime
import io
import json
import pathlib
import re
import time

import pytest
from backtrack_helpers import (
    BASE_MS,
    GROUP,
    OTHER_GROUP,
    OUTCOMES,
    Record,
    message,
    outcome_records,
    replay_reference,
)
from fixtures.pages import CursorPages

from collector.index.indexer import finish_batch, index_records
from collector.query import backtrack
from collector.server import console_routes, native
from collector.server.app import create_app
from collector.server.config import CollectorConfig
from collector.server.errors import CollectorConfigError
from collector.store import open_store
from collector.store.errors import StoreUnavailableError

pytestmark = pytest.mark.fallback

TOPIC = "console"
QUERY_TOKEN = "q-console"
TRACE_UI = "http://jaeger.example:16686/trace/{trace_id}"
# Message i has outcome OUTCOMES[i % len(OUTCOMES)] in GROUP, on queue i % 2.
COUNT = 3 * len(OUTCOMES)
# What GROUP's outcome in the API is, per helper outcome (None: GROUP has no event for it).
API_OUTCOME = {"ok": "consumed", "ok_after_retry": "consumed", "failed": "failed", "timeout": "failed",
               "exception": "failed", "retry_later": "retrying", "dead": "dead", "pending": "pending",
               "never": None, "other_group_only": None, "failed_send": None}


def records() -> list[Record]:
    out: list[Record] = []
    for i in range(COUNT):
        out += outcome_records(TOPIC, f"c{i:02d}", message(i % 2, i // 2, BASE_MS + i * 1000), OUTCOMES[i % len(OUTCOMES)])
    return out


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> CollectorConfig:
    data_dir = tmp_path_factory.mktemp("console")
    config = CollectorConfig(data_dir=str(data_dir), durability="os", query_token=QUERY_TOKEN,
                             trace_ui_url=TRACE_UI)
    store = open_store(config.store_url)
    index_records(store, records())
    store.close()
    return config


@pytest.fixture
async def client(aiohttp_client, config):
    return await aiohttp_client(create_app(config), headers={"Authorization": f"Bearer {QUERY_TOKEN}"})


WINDOW = {"begin": str(BASE_MS - 60_000), "end": str(BASE_MS + COUNT * 1000 + 60_000)}


async def walk(client, topic: str = TOPIC, **params: str) -> tuple[list[str], int]:
    """Every msg_id of a filtered listing, following next_cursor; and how many pages it took."""
    pages = CursorPages()
    for cursor in pages:
        query = dict(WINDOW, **params, **({"cursor": cursor} if cursor else {}))
        response = await client.get(f"/v1/topics/{topic}/messages", params=query)
        assert response.status == 200, await response.text()
        body = await response.json()
        pages.add([item["msg_id"] for item in body["items"]], body["next_cursor"])
    return pages.items, pages.count


def reference(items: list[dict], group: str | None, outcome: str | None) -> list[str]:
    """The filter computed here over the unfiltered listing's per-group outcomes."""
    out = []
    for item in items:
        groups = item["groups"]
        if group is not None and outcome == "not_consumed":
            ok = groups.get(group, {}).get("outcome") != "consumed"
        elif group is not None and outcome == "not_received":  # stored: a failed send nobody received is not
            ok = group not in groups and (item["status_name"] == "OK" or bool(groups))
        elif group is not None:
            ok = group in groups and outcome in (None, groups[group]["outcome"])
        else:
            ok = any(g["outcome"] == outcome for g in groups.values())
        if ok:
            out.append(item["msg_id"])
    return out


FILTERS = [(GROUP, "failed"), (GROUP, "dead"), (GROUP, "not_consumed"), (GROUP, "retrying"), (GROUP, "pending"),
           (GROUP, "consumed"), (GROUP, None), (OTHER_GROUP, "not_consumed"), (None, "failed"), (None, "consumed"),
           (GROUP, "not_received")]


async def test_outcome_filters_page_through_the_listing_server_side(client, monkeypatch) -> None:
    response = await client.get(f"/v1/topics/{TOPIC}/messages", params=dict(WINDOW, limit="500"))
    everything = (await response.json())["items"]
    assert len(everything) == COUNT  # the unfiltered listing the reference filters
    for group, outcome in FILTERS:
        params = {k: v for k, v in (("group", group), ("outcome", outcome)) if v is not None}
        ids, _ = await walk(client, limit="2", **params)
        assert ids == reference(everything, group, outcome), (group, outcome)
    # The reference is not vacuous: GROUP's outcomes are the ones the traces were built with.
    failed, _ = await walk(client, group=GROUP, outcome="failed")
    assert len(failed) == 3 * sum(API_OUTCOME[o] == "failed" for o in OUTCOMES) == 9
    unconsumed, _ = await walk(client, group=GROUP, outcome="not_consumed")
    assert len(unconsumed) == 3 * sum(API_OUTCOME[o] != "consumed" for o in OUTCOMES)
    # A scan budget smaller than the listing: short (even empty) pages, each with a cursor, lose nothing.
    monkeypatch.setattr(native, "FILTER_SCAN_ROWS", 3)
    dead, pages = await walk(client, limit="2", group=GROUP, outcome="dead")
    assert dead == reference(everything, GROUP, "dead") and len(dead) == 3
    assert pages >= COUNT // 3
    by_key, _ = await walk(client, key="k1", group=GROUP, outcome="not_consumed")
    assert by_key == [i["msg_id"] for i in everything if i["keys"] == "k1"
                      and i["groups"].get(GROUP, {}).get("outcome") != "consumed"]


@pytest.mark.parametrize("params, reason", [
    ({"outcome": "lost"}, "bad_value"),
    ({"outcome": "not_consumed"}, "missing_param"),
    ({"outcome": "not_received"}, "missing_param"),
    ({"group": GROUP, "outcome": "DEAD!"}, "bad_value"),
])
async def test_bad_filters_are_400(client, params, reason) -> None:
    response = await client.get(f"/v1/topics/{TOPIC}/messages", params=params)
    assert response.status == 400
    assert (await response.json())["error"] == reason


async def test_replay_list_downloads_as_json_lines_and_csv(client, monkeypatch) -> None:
    monkeypatch.setattr(console_routes, "MAX_LIMIT", 3)  # the download follows the pages' cursors
    expected = replay_reference(records(), TOPIC, GROUP, int(WINDOW["begin"]), int(WINDOW["end"]))
    assert len(expected) == 3 * sum(API_OUTCOME[o] != "consumed" and o != "failed_send" for o in OUTCOMES)
    path = f"/v1/topics/{TOPIC}/unconsumed/export"
    jsonl = await client.get(path, params=dict(WINDOW, group=GROUP))
    assert jsonl.status == 200 and jsonl.content_type == "application/x-ndjson"
    assert jsonl.headers["Content-Disposition"] == f'attachment; filename="replay-{TOPIC}-{GROUP}.jsonl"'
    assert [json.loads(line) for line in (await jsonl.text()).splitlines()] == expected
    as_csv = await client.get(path, params=dict(WINDOW, group=GROUP, format="csv"))
    assert as_csv.status == 200 and as_csv.content_type == "text/csv"
    assert as_csv.headers["Content-Disposition"].endswith(f'filename="replay-{TOPIC}-{GROUP}.csv"')
    rows = list(csv.DictReader(io.StringIO(await as_csv.text())))
    assert rows == [{k: str(v) for k, v in item.items()} for item in expected]


@pytest.mark.parametrize("params, status, reason", [
    ({"group": GROUP, "format": "xml"}, 400, "bad_value"),
    ({"group": "bilking"}, 404, "unknown_group"),
    ({}, 400, "missing_param"),
])
async def test_download_errors_are_json(client, params, status, reason) -> None:
    response = await client.get(f"/v1/topics/{TOPIC}/unconsumed/export", params=params)
    assert response.status == status
    assert (await response.json())["error"] == reason


async def test_console_config_gives_the_trace_ui_template_to_token_holders(client, aiohttp_client, config) -> None:
    response = await client.get("/v1/console/config")
    assert response.status == 200 and await response.json() == {"trace_ui_url": TRACE_UI}
    anonymous = await aiohttp_client(create_app(config))
    assert (await anonymous.get("/v1/console/config")).status == 401


@pytest.mark.parametrize("url", ["http://jaeger/trace/", "javascript:alert(1)//{trace_id}", "jaeger/{trace_id}"])
def test_trace_ui_url_must_be_http_with_a_trace_id_placeholder(tmp_path: pathlib.Path, url: str) -> None:
    with pytest.raises(CollectorConfigError, match="trace_ui_url"):
        CollectorConfig(data_dir=str(tmp_path), trace_ui_url=url)


async def test_a_store_error_during_a_download_breaks_it_instead_of_ending_it(client, monkeypatch) -> None:
    from aiohttp import ClientPayloadError

    real = backtrack.replay_list
    calls = []

    def failing_second_page(*args, **kwargs):
        calls.append(args)
        if len(calls) == 2:
            raise StoreUnavailableError("hbase went away")
        return real(*args, **kwargs)

    monkeypatch.setattr(console_routes, "MAX_LIMIT", 2)
    monkeypatch.setattr(console_routes.backtrack, "replay_list", failing_second_page)
    response = await client.get(f"/v1/topics/{TOPIC}/unconsumed/export", params=dict(WINDOW, group=GROUP))
    assert response.status == 200  # the first page was fine
    with pytest.raises(ClientPayloadError):
        await response.read()


OVERVIEW_JS = pathlib.Path(console_routes.__file__).parent / "static" / "overview.js"


def iso(ms: int) -> str:
    """``new Date(ms).toISOString()``, as overview.js writes a listing's window."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


async def test_each_overview_count_opens_a_listing_of_exactly_that_many(aiohttp_client, tmp_path) -> None:
    """The overview's group counts link (overview.js ROW_COLUMNS) to the topic listing of the same window,
    filtered by the group and an outcome: each listing holds as many messages as its count says.  A
    failed send is in no group's *not received*, and so not in its listing (``not_consumed`` has it)."""
    links = dict(re.findall(r'\["(\w+)", "[^"]*", \{ mode: "topic", group: true, outcome: "(\w+)" \}\]',
                            OVERVIEW_JS.read_text(encoding="utf-8")))
    assert links == {"consumed": "consumed", "failed": "failed", "not_received": "not_received"}
    topic, t = "overview-links", int(time.time() * 1000) - 30 * 60_000
    records: list[Record] = []
    for i, outcome in enumerate(OUTCOMES):  # one message per fate, failed send and never received included
        records += outcome_records(topic, f"o{i:02d}", message(0, i, t + i * 1000), outcome)
    config = CollectorConfig(data_dir=str(tmp_path), durability="os")
    store = open_store(config.store_url)
    try:
        index_records(store, records)
        finish_batch(store)
    finally:
        store.close()
    client = await aiohttp_client(create_app(config))
    overview = await (await client.get("/v1/overview", params={"window": "1h", "topic": topic})).json()
    rows = {row["group"]: row for row in overview["rows"]}
    window = {"begin": iso(overview["begin_ms"]), "end": iso(overview["end_ms"])}
    for group in (GROUP, OTHER_GROUP):
        for column, outcome in links.items():
            listed, _ = await walk(client, topic, group=group, outcome=outcome, **window)
            assert len(listed) == rows[group][column], (group, column)
    # Not vacuous: GROUP never received "never" and "other_group_only"; the failed send is left out.
    assert rows[GROUP]["not_received"] == 2 and rows[OTHER_GROUP]["not_received"] == 1
    failed_send = f"o{OUTCOMES.index('failed_send'):02d}"
    not_consumed, _ = await walk(client, topic, group=GROUP, outcome="not_consumed", **window)
    assert failed_send in not_consumed and len(not_consumed) == len(OUTCOMES) - 2  # all but ok, ok_after_retry
