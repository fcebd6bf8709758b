"""Fixtures: every store test runs against the embedded store and against real HBase (``store_url``,
from tests/fixtures/stores.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from collector.store import Store, open_store


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
