"""Deferred index writes: ``index_records(deferred=...)`` returns once the tables the read-back and
``finish_batch`` use are written, lets the other index tables' puts run on, and ``finish_batch`` (or
``finish_writes``) waits for them and raises a failure among them; the embedded store reads on a
connection of its own, so a read does not wait for a put in progress."""

from __future__ import annotations

import pathlib
import threading
from concurrent.futures import Future
from typing import Any

import pytest

from collector.index.indexer import READ_BACK_TABLES, finish_batch, finish_writes, index_records
from collector.store import schema
from collector.store.local import LocalStore
from tests.fixtures.sample import bulk, scenario

pytestmark = pytest.mark.fallback

NOW_MS = 1_790_000_000_000
HELD = frozenset(t.name for t in schema.TABLES) - READ_BACK_TABLES - {schema.ROLLUPS}
GUARD_S = 60.0
"""Only a guard against hanging the suite: a test fails on it if the code under test waits for a held put."""


class HeldStore(LocalStore):
    """Holds every put of the ``HELD`` tables until ``release`` is set (then fails it with ``fail`` if set)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.release = threading.Event()
        self.fail: Exception | None = None
        self.written: list[str] = []

    def put_rows(self, table: str, rows: Any, *, ts: int | None = None) -> None:
        if table in HELD:
            assert self.release.wait(GUARD_S), "a held put was waited for"
            if self.fail is not None:
                raise self.fail
        super().put_rows(table, rows, ts=ts)
        self.written.append(table)


def _cells(store: LocalStore) -> dict[str, list[Any]]:
    return {t.name: list(store.scan(t.name, b"", b"\xff")) for t in schema.TABLES}


def _records() -> list[Any]:
    return [*scenario(NOW_MS)[1], *bulk(300, NOW_MS)]


def test_it_returns_once_the_tables_read_back_are_written(tmp_path: pathlib.Path) -> None:
    store = HeldStore(str(tmp_path / "held.sqlite3"))
    deferred: list[Future[None]] = []
    index_records(store, _records(), deferred=deferred, touched=set())
    assert deferred and not any(f.done() for f in deferred)
    assert {schema.MESSAGES, schema.TIMEIDX} <= set(store.written) <= READ_BACK_TABLES
    assert store.get_rows(schema.MESSAGES, [schema.message_row("bulk-000000007")])[0]  # readable meanwhile
    store.release.set()
    finish_writes(deferred)
    assert not deferred
    plain = LocalStore(str(tmp_path / "plain.sqlite3"))
    index_records(plain, _records(), touched=set())
    assert _cells(store) == _cells(plain)
    store.close()
    plain.close()


def test_finish_batch_waits_for_the_deferred_puts_and_raises_their_failure(tmp_path: pathlib.Path) -> None:
    store = HeldStore(str(tmp_path / "held.sqlite3"))
    deferred: list[Future[None]] = []
    index_records(store, _records(), deferred=deferred)
    store.fail = OSError("disk full")
    store.release.set()
    with pytest.raises(OSError, match="disk full"):
        finish_batch(store, written=deferred)
    store.close()


def test_a_read_does_not_wait_for_a_put_in_progress(tmp_path: pathlib.Path) -> None:
    store = LocalStore(str(tmp_path / "x.sqlite3"))
    store.put_rows(schema.KEYIDX, [(b"row", {b"i:": b""})])
    found: list[Any] = []
    with store._lock:  # what a put holds for its whole statement
        reader = threading.Thread(target=lambda: found.append(store.get_rows(schema.KEYIDX, [b"row"])))
        reader.start()
        reader.join(GUARD_S)
        assert not reader.is_alive(), "the read waited for the writing connection's lock"
    assert found == [[{b"i:": b""}]]
    store.close()
