"""The index job keeps one open store per process and store URL across micro-batches
(spark_jobs.store_cache), and never one that is no longer the store its URL names.

No Spark needed: these call the functions a Python worker and the driver run per micro-batch.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from collector.store import OldLayoutError, Store, open_store
from collector.store.layout import LAYOUT_VERSION_COLUMN
from collector.store.reader import TraceQuery
from spark_jobs import store_cache
from spark_jobs.driver import finish_partitions
from spark_jobs.errors import IndexJobError
from spark_jobs.partition import index_partition
from tests.collector.store.v1_store import write_local
from tests.fixtures.sample import LogRow
from tracehook.wire import BatchHeader, EventType, encode_batch, make_event

T0 = 1_790_000_000_000


def _micro_batch(url: str, seq: int, msg_id: str) -> None:
    """One micro-batch (one message sent) through a task and the driver step, as a run does."""
    header = BatchHeader("client-1", seq, "shop", "host-a", T0, {})
    payload = encode_batch(header, [make_event(EventType.PUB, T0 + seq, "", "orders", msg_id, keys="k")])
    finish_partitions(url, list(index_partition(url, 1000)(iter([LogRow(payload)]))))


def _found(path: str, msg_id: str) -> bool:
    """Whether the store file at ``path`` answers ``msg_id``, read through a store of its own."""
    store = open_store(f"local:{path}")
    try:
        return TraceQuery(store).get_trace(msg_id) is not None
    finally:
        store.close()


def _remove_store(path: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


@pytest.fixture(autouse=True)
def opens(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The URLs the cache opened stores for, in order; no store kept before or after a test."""
    store_cache.close_stores()
    opened: list[str] = []

    def counting_open(url: str, **kwargs: Any) -> Store:
        store = open_store(url, **kwargs)
        opened.append(url)
        return store

    monkeypatch.setattr(store_cache, "open_store", counting_open)
    yield opened
    store_cache.close_stores()


def test_one_store_is_kept_across_micro_batches(tmp_path: Any, opens: list[str]) -> None:
    url = f"local:{tmp_path / 'index.sqlite3'}"
    open_store(url).close()  # the driver creates the tables (prepare_store)

    for seq in range(3):
        _micro_batch(url, seq, f"m{seq}")

    assert opens == [url], "one open for three micro-batches (task and driver steps alike)"
    kept = store_cache.kept_store(url)
    assert kept is not None
    assert all(_found(str(tmp_path / "index.sqlite3"), f"m{seq}") for seq in range(3))

    store_cache.close_stores()  # the end of the process (atexit) or of a measured run
    assert store_cache.kept_store(url) is None
    _micro_batch(url, 3, "m3")
    assert opens == [url, url] and store_cache.kept_store(url) is not kept


def test_a_store_replaced_at_the_same_path_is_opened_afresh(tmp_path: Any, opens: list[str]) -> None:
    """Deleted and made again (as a test or ``tracehook demo`` does), or deleted and another store
    moved in: the kept connection would write into the old file; the new file is opened instead."""
    path = str(tmp_path / "index.sqlite3")
    url = f"local:{path}"
    open_store(url).close()
    _micro_batch(url, 0, "before")
    first = store_cache.kept_store(url)

    _remove_store(path)
    open_store(url).close()  # a new, empty store at the same path
    _micro_batch(url, 1, "deleted")

    assert opens == [url, url]
    assert store_cache.kept_store(url) is not first
    assert _found(path, "deleted") and not _found(path, "before"), "written into the new file"

    other = str(tmp_path / "other.sqlite3")
    open_store(f"local:{other}").close()
    _remove_store(path)  # with its WAL: SQLite reads a WAL left beside a file as that file's
    os.replace(other, path)  # the kept store's path now names another inode
    _micro_batch(url, 2, "renamed")

    assert opens == [url, url, url]
    assert _found(path, "renamed") and not _found(path, "deleted")


def test_an_old_layout_store_is_still_refused_and_never_kept(tmp_path: Any, opens: list[str]) -> None:
    path = str(tmp_path / "old.sqlite3")
    url = f"local:{path}"
    write_local(path, [])  # a store the release before layout versions made
    with pytest.raises(OldLayoutError) as expected:
        open_store(url)

    with pytest.raises(OldLayoutError) as refused:
        _micro_batch(url, 0, "m0")
    assert str(refused.value) == str(expected.value) and "tracehook migrate-store" in str(refused.value)
    assert store_cache.kept_store(url) is None

    with pytest.raises(IndexJobError, match="layout 1"):  # the driver step says the same, as before
        finish_partitions(url, [])
    assert store_cache.kept_store(url) is None


def test_a_kept_store_whose_layout_record_changed_is_refused(tmp_path: Any, opens: list[str]) -> None:
    """Rewritten in place (same inode) by something else: the next micro-batch reopens it, and the
    reopen refuses it with the usual line."""
    path = str(tmp_path / "index.sqlite3")
    url = f"local:{path}"
    open_store(url).close()
    _micro_batch(url, 0, "m0")
    inode = os.stat(path).st_ino

    db = sqlite3.connect(path)
    db.execute('UPDATE "meta" SET value = ? WHERE col = ?', (b"1", LAYOUT_VERSION_COLUMN))
    db.commit()
    db.close()
    assert os.stat(path).st_ino == inode

    with pytest.raises(OldLayoutError, match="tracehook migrate-store"):
        _micro_batch(url, 1, "m1")
    assert store_cache.kept_store(url) is None


def test_a_store_whose_use_failed_is_not_kept(tmp_path: Any, opens: list[str]) -> None:
    url = f"local:{tmp_path / 'index.sqlite3'}"
    open_store(url).close()
    with pytest.raises(RuntimeError, match="lost"), store_cache.job_store(url) as store:
        store.put_rows("messages", [(b"row", {b"s:x": b"1"})])
        raise RuntimeError("lost")
    assert store_cache.kept_store(url) is None
    with store_cache.job_store(url) as again:
        assert again is not store and again.get_row("messages", b"row") == {b"s:x": b"1"}
    assert opens == [url, url]


def test_at_most_a_few_stores_are_kept(tmp_path: Any, opens: list[str]) -> None:
    urls = [f"local:{tmp_path / f'{i}.sqlite3'}" for i in range(store_cache.MAX_KEPT + 1)]
    for url in urls:
        with store_cache.job_store(url):
            pass
    assert store_cache.kept_store(urls[0]) is None, "the least recently used one was closed"
    assert all(store_cache.kept_store(url) is not None for url in urls[1:])


def test_other_stores_are_opened_per_use(monkeypatch: pytest.MonkeyPatch) -> None:
    """HBase: the Thrift server drops idle connections, so nothing is kept between uses."""
    closed: list[bool] = []

    class FakeStore:
        def close(self) -> None:
            closed.append(True)

    monkeypatch.setattr(store_cache, "open_store", lambda url, **kwargs: FakeStore())
    url = "hbase://127.0.0.1:9090?namespace=t"
    for _ in range(2):
        with store_cache.job_store(url):
            pass
    assert closed == [True, True] and store_cache.kept_store(url) is None
