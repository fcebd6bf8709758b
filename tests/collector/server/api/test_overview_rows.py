"""``GET /v1/overview``'s compact rows: problems first, sorts, filters, pages, against a reference
worked out here from the messages the test sends (docs/console-overview.md's definitions)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from collector.index.indexer import finish_batch, index_records
from collector.server.app import create_app
from collector.store import open_store
from tests.fixtures.sample import BILLING_HEADER, Record, _event, _message, consume, send
from tracehook.wire import EventType, Status

pytestmark = pytest.mark.fallback

MIN = 60_000
LAG_TOLERANCE_S = 30  # the server's "now" is read a moment after the test's


@dataclass
class Plan:
    """One message: minutes ago, and per group what happens (consumed, failed, dead, pending)."""

    topic: str
    ago_min: int
    groups: dict[str, str] = field(default_factory=dict)
    send_failed: bool = False


def fleet() -> list[Plan]:
    plans = [Plan("t-dead", 200 - i, {"g1": "dead" if i == 2 else "consumed", "g2": "consumed"}) for i in range(4)]
    plans += [Plan("t-failed", 150 - i, {"g1": "failed" if i < 2 else "consumed"}) for i in range(5)]
    plans += [Plan("t-lag", 180 - 20 * i, {"g1": "consumed", "g2": "consumed"} if i < 3 else {"g2": "consumed"})
              for i in range(6)]
    plans += [Plan("t-lag-small", 40 - 10 * i, {"g1": "consumed"} if i < 3 else {}) for i in range(4)]
    plans += [Plan("t-busy", 100 - i, {"g1": "consumed"}) for i in range(30)]
    plans += [Plan("t-quiet", 70)]
    plans += [Plan("t-failsend", 65, send_failed=True), Plan("t-failsend", 64, {"g1": "consumed"})]
    plans += [Plan("t-pending", 30, {"g1": "pending"}), Plan("t-pending", 29, {"g1": "consumed"})]
    return plans


def records(plans: list[Plan], now_ms: int) -> list[Record]:
    out: list[Record] = []
    for n, p in enumerate(plans):
        t = now_ms - p.ago_min * MIN
        msg_id = f"fleet-{n}"
        msg = dict(_message(msg_id, t, 0, n, f"k{n}"), topic=p.topic)
        if p.send_failed:
            out.append(send(msg_id, t, dict(msg, store_ms=0), status=int(Status.FAILED)))
            continue
        out.append(send(msg_id, t, msg))
        for group, fate in p.groups.items():
            if fate == "consumed":
                out += consume(BILLING_HEADER, group, msg_id, t + 50, msg)
            elif fate == "pending":
                out += consume(BILLING_HEADER, group, msg_id, t + 50, msg, status=None)
            else:  # failed, or dead after a failed attempt
                out += consume(BILLING_HEADER, group, msg_id, t + 50, msg, status=Status.FAILED)
                if fate == "dead":
                    out.append((BILLING_HEADER, _event(EventType.DEAD, t + 60, group, msg_id, **msg)))
    return out


def expected_rows(plans: list[Plan], now_ms: int) -> list[dict]:
    """Each topic × group's counts and lag, from the plans alone; then sorted problems first."""
    rows = []
    for topic in sorted({p.topic for p in plans}):
        mine = sorted((p for p in plans if p.topic == topic), key=lambda p: -p.ago_min)
        stored = [p for p in mine if not p.send_failed]
        failed_sends = len(mine) - len(stored)
        groups = sorted({g for p in stored for g in p.groups})
        for group in groups or [None]:
            fates = [p.groups.get(group) for p in stored] if group else []
            lag_s = 0.0
            if group:
                first = next(i for i, f in enumerate(fates) if f is not None)
                waiting = [p for p, f in zip(stored[first:], fates[first:]) if f in (None, "pending")]
                lag_s = waiting[0].ago_min * 60.0 if waiting else 0.0
            rows.append({"topic": topic, "group": group, "sent": len(stored),
                         "consumed": fates.count("consumed"), "failed": fates.count("failed"),
                         "dead": fates.count("dead"), "failed_sends": failed_sends,
                         "not_received": fates.count(None) if group else 0, "lag_s": lag_s})
    rows.sort(key=lambda r: (-r["dead"], -(r["failed"] + r["failed_sends"]), -r["lag_s"], -r["sent"],
                             r["topic"], r["group"] or ""))
    return rows


def comparable(rows: list[dict]) -> list[dict]:
    keys = ("topic", "group", "sent", "consumed", "failed", "dead", "failed_sends", "not_received")
    return [{k: r[k] for k in keys} for r in rows]


@pytest.fixture
async def fleet_client(aiohttp_client, config, now_ms):
    plans = fleet()
    store = open_store(config.store_url)
    try:
        index_records(store, records(plans, now_ms))
        finish_batch(store)
    finally:
        store.close()
    client = await aiohttp_client(create_app(config))
    return client, expected_rows(plans, now_ms)


async def get_rows(client, **params: str) -> dict:
    response = await client.get("/v1/overview", params={"window": "4h", **params})
    assert response.status == 200, await response.text()
    return await response.json()


async def test_rows_are_problems_first_as_the_reference_orders_them(fleet_client) -> None:
    client, expected = fleet_client
    body = await get_rows(client)
    assert body["sort"] == "problems" and body["total_rows"] == len(expected) and body["next_cursor"] is None
    assert comparable(body["rows"]) == comparable(expected)
    for got, want in zip(body["rows"], expected, strict=True):
        assert got["lag_s"] == pytest.approx(want["lag_s"], abs=LAG_TOLERANCE_S), (got["topic"], got["group"])
    # The first rows say what is wrong: dead letters, then failures, then the hour-long lag.
    assert [(r["topic"], r["group"]) for r in body["rows"][:4]] == [
        ("t-dead", "g1"), ("t-failed", "g1"), ("t-failsend", "g1"), ("t-lag", "g1")]
    # Series only for the topics shown, in the rows' order.
    assert [t["topic"] for t in body["topics"]] == list(dict.fromkeys(r["topic"] for r in body["rows"]))
    assert all(sum(t["series"]["sent"]) == t["sent"] for t in body["topics"])
    # series=0 (the start page's table): the same rows and groups, no series.
    counts_only = await get_rows(client, series="0")
    assert comparable(counts_only["rows"]) == comparable(body["rows"])
    assert all(t["series"] == {} and all(g["series"] == {} for g in t["groups"]) for t in counts_only["topics"])


async def test_rows_page_with_a_cursor_and_filter_and_sort(fleet_client) -> None:
    client, expected = fleet_client
    seen: list[dict] = []
    cursor = ""
    for _ in range(10):
        body = await get_rows(client, limit="3", **({"cursor": cursor} if cursor else {}))
        seen += body["rows"]
        assert len({t["topic"] for t in body["topics"]}) <= 3  # only the page's topics carry series
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert comparable(seen) == comparable(expected)

    by_topic = await get_rows(client, sort="topic")
    assert [(r["topic"], r["group"] or "") for r in by_topic["rows"]] == sorted(
        (r["topic"], r["group"] or "") for r in expected)
    busiest = await get_rows(client, sort="sent", limit="1")
    assert busiest["rows"][0]["topic"] == "t-busy" and busiest["next_cursor"] == "1"
    lag = await get_rows(client, filter="LAG", group="g1")
    assert [r["topic"] for r in lag["rows"]] == ["t-lag", "t-lag-small"]
    quiet = await get_rows(client, filter="quiet")
    assert quiet["rows"] == [dict(comparable([r for r in expected if r["topic"] == "t-quiet"])[0],
                                  p99_ms=None, lag_s=0.0)]


@pytest.mark.parametrize("params, reason", [
    ({"sort": "loudest"}, "bad_sort"),
    ({"limit": "0"}, "bad_limit"),
    ({"limit": "10000"}, "bad_limit"),
    ({"limit": "ten"}, "bad_limit"),
    ({"cursor": "-1"}, "bad_cursor"),
    ({"cursor": "x"}, "bad_cursor"),
    ({"series": "yes"}, "bad_series"),
])
async def test_bad_row_params_are_400_with_the_reason(fleet_client, params, reason) -> None:
    client, _ = fleet_client
    response = await client.get("/v1/overview", params=params)
    assert response.status == 400
    body = await response.json()
    assert body["error"] == reason and body["detail"]
