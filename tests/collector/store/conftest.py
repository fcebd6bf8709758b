"""Fixtures: every store test runs against the embedded store and against real HBase."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator

import pytest
from index_helpers import BACKENDS

from collector.store import Store, open_store


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> str:
    """A fresh, empty store URL of each backend."""
    if request.param == "local":
        return f"local:{tmp_path / 'index.sqlite3'}"
    return request.getfixturevalue("make_hbase_url")()


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    opened = open_store(store_url)
    yield opened
    opened.close()


def dump(store: Store) -> dict[str, list[tuple[bytes, dict[bytes, bytes]]]]:
    """Every row of every table: what "nothing changed" is checked against."""
    from collector.store import schema

    return {t.name: list(store.scan(t.name, b"", b"\xff")) for t in schema.TABLES}


@pytest.fixture
def dump_store() -> Callable[[Store], dict]:
    return dump
