"""The index job's open stores: one per (process, store URL), kept from one micro-batch to the next.

Opening the embedded store for every micro-batch threw its SQLite page cache away each time
and checkpointed the WAL on every close; a Python worker (Spark reuses them between tasks) and
the in-process driver step now keep the store open instead::

    with job_store("local:/data/index.sqlite3") as store:   # the same open store, batch after batch
        index_payloads(store, payloads)
    close_stores()                                           # also run at exit (atexit)

A kept store is used again only while it is still the store its URL names: the file at the
path is the one it opened (same device and inode: a store deleted or replaced at the same path,
as tests and ``tracehook demo`` do, is opened afresh) and its recorded layout version and salt
bucket count are the ones it was opened with (otherwise it is reopened, which refuses a store of
another layout with the usual one line).  A store whose use raised is closed, never kept.

Only ``local:`` stores are kept.  An HBase store is opened per use as before: the Thrift server
closes connections idle longer than its read timeout (60 s by default), so a kept connection pool
would fail the first batch after a quiet minute, and HBase keeps its block cache on the server.

Spark kills idle Python workers without running ``atexit``; a store kept there is then closed by
the kill: its committed writes are in the WAL, which the next open or checkpoint carries on.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass

from collector.store import Store, StoreError, local_path, open_store
from collector.store.layout import LAYOUT_VERSION_COLUMN, SALT_BUCKETS_COLUMN, decode_count

MAX_KEPT = 2
"""Stores one process keeps open at most (a job uses one; a test session's long-lived Spark
workers see many stores in turn): the least recently used one beyond it is closed."""

FileId = tuple[int, int]
"""(device, inode) of a store's file."""


@dataclass(frozen=True)
class _Kept:
    store: Store
    file_id: FileId | None


_kept: OrderedDict[str, _Kept] = OrderedDict()
_inherited: list[_Kept] = []
"""Stores a forked child inherited: held (never closed, never used) so that garbage collection
does not close the parent's SQLite connection from the child."""
_lock = threading.Lock()


def _file_id(path: str) -> FileId | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _still_current(url: str, kept: _Kept) -> bool:
    """Whether ``kept`` is still the store ``url`` names, in the layout it was opened with."""
    path = local_path(url)
    if kept.file_id is None or path is None or _file_id(path) != kept.file_id:
        return False
    try:
        version, buckets = (kept.store.get_meta(column) for column in (LAYOUT_VERSION_COLUMN, SALT_BUCKETS_COLUMN))
    except (StoreError, sqlite3.Error):
        return False
    return (version is not None and decode_count(version) == kept.store.layout_version
            and buckets is not None and decode_count(buckets) == kept.store.salt_buckets)


def _checkout(url: str) -> Store:
    """The kept store of ``url`` if it is still current, else a newly opened (and now kept) one."""
    with _lock:
        for other, kept in list(_kept.items()):  # also closes stores of files deleted since
            if not _still_current(other, kept):
                _close(other)
        kept = _kept.get(url)
        if kept is not None:
            _kept.move_to_end(url)
            return kept.store
        # The driver created the tables (spark_jobs.driver.prepare_store); a store in another
        # layout is refused here exactly as before, and nothing is kept.
        store = open_store(url, create_tables=False)
        path = local_path(url)
        _kept[url] = _Kept(store, _file_id(path) if path else None)
        while len(_kept) > MAX_KEPT:
            _close(next(iter(_kept)))
        return store


def _close(url: str) -> None:
    kept = _kept.pop(url, None)
    if kept is not None:
        kept.store.close()


@contextlib.contextmanager
def job_store(url: str) -> Iterator[Store]:
    """The store ``url`` names, open for the job's writes: kept open afterwards for a ``local:``
    URL (see the module docstring), closed afterwards otherwise.  If the block raises, the store
    is closed and forgotten, so the next use opens it afresh.  Raises what
    :func:`collector.store.open_store` raises (``OldLayoutError`` and the other ``StoreError``\\ s)."""
    if local_path(url) is None:
        store = open_store(url, create_tables=False)
        try:
            yield store
        finally:
            store.close()
        return
    store = _checkout(url)
    try:
        yield store
    except BaseException:
        with _lock:
            if url in _kept and _kept[url].store is store:
                _close(url)
        raise


def kept_store(url: str) -> Store | None:
    """The store kept open for ``url`` in this process, if any (for tests and benchmarks)."""
    with _lock:
        kept = _kept.get(url)
        return kept.store if kept is not None else None


def close_stores() -> None:
    """Close every store this process keeps (the last close checkpoints an SQLite store's WAL)."""
    with _lock:
        while _kept:
            _close(next(iter(_kept)))


def _forget_in_child() -> None:
    # The parent's connections are not this process's to use or close; its lock may have been
    # held by another thread at the fork.
    global _lock
    _inherited.extend(_kept.values())
    _kept.clear()
    _lock = threading.Lock()


atexit.register(close_stores)
os.register_at_fork(after_in_child=_forget_in_child)
