"""Helpers shared by the query API tests."""

from __future__ import annotations

from typing import Any

from fixtures.pages import CursorPages

from collector.index.indexer import index_records
from collector.store import open_store
from tests.fixtures.sample import ScenarioIds, scenario

MAX_PAGES = 100
QUERY_TOKEN = "query-secret"
INGEST_TOKEN = "ingest-secret"


async def collect_pages(client: Any, path: str, params: dict[str, str]) -> list[dict[str, Any]]:
    """Follow ``next_cursor`` until the end and return every item in order."""
    pages = CursorPages(max_pages=MAX_PAGES)
    for cursor in pages:
        query = dict(params, **({"cursor": cursor} if cursor else {}))
        response = await client.get(path, params=query)
        assert response.status == 200, await response.text()
        body = await response.json()
        pages.add(body["items"], body["next_cursor"])
    return pages.items


def fill_store(store_url: str, now_ms: int) -> ScenarioIds:
    """Index the sample scenario into the store at ``store_url``."""
    store = open_store(store_url)
    try:
        ids, records = scenario(now_ms)
        index_records(store, records)
    finally:
        store.close()
    return ids
