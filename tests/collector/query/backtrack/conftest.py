"""Fixtures: one embedded store per test module (examples use fresh topics), and a per-backend store."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from collector.store import Store, open_store
from collector.store.reader import TraceQuery


@pytest.fixture(scope="module")
def module_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """An embedded store shared by a module's tests; each test or example writes its own topic."""
    store = open_store(f"local:{tmp_path_factory.mktemp('backtrack') / 'index.sqlite3'}")
    yield store
    store.close()


@pytest.fixture(scope="module")
def query(module_store: Store) -> TraceQuery:
    return TraceQuery(module_store)


@pytest.fixture
def backend_query(store_url: str) -> Iterator[TraceQuery]:
    """A fresh store of each backend (real HBase for the second)."""
    store = open_store(store_url)
    yield TraceQuery(store)
    store.close()
