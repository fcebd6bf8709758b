"""The embedded store's WAL: its settings on every connection, and a checkpoint after each index batch."""

from __future__ import annotations

import os
import shutil
import sqlite3

import pytest
from index_helpers import message, unique

from collector.index.indexer import finish_batch, index_records
from collector.store import local, schema
from collector.store.local import LocalStore

pytestmark = pytest.mark.fallback


def wal_bytes(path: str) -> int:
    return os.path.getsize(path + "-wal") if os.path.exists(path + "-wal") else 0


def index_messages(store: LocalStore, n: int) -> list[str]:
    topic = unique("orders")  # and so new msg ids
    ids = [f"{topic}-m{i}" for i in range(n)]
    index_records(store, [record for i, msg_id in enumerate(ids)
                          for record in message(topic, msg_id, 1000 + i, keys=f"k{i % 7}")])
    return ids


def messages_in_file_alone(path: str, tmp_path) -> int:
    """Message rows a copy of the store's file holds without its WAL (what a checkpoint copied in)."""
    copy = str(tmp_path / "file-alone.sqlite3")
    shutil.copyfile(path, copy)
    db = sqlite3.connect(copy)
    try:
        return db.execute(f'SELECT count(DISTINCT row) FROM "{schema.MESSAGES}"').fetchone()[0]
    finally:
        db.close()


@pytest.mark.parametrize("existing", [False, True])
def test_wal_settings_apply_to_new_and_existing_files(tmp_path, existing: bool) -> None:
    path = str(tmp_path / "index.sqlite3")
    if existing:  # a store file written before: SQLite keeps none of these settings in the file
        LocalStore(path).close()
        db = sqlite3.connect(path)
        try:
            assert db.execute("PRAGMA journal_size_limit").fetchone() != (local.WAL_KEEP_BYTES,)
        finally:
            db.close()
    store = LocalStore(path)
    try:
        settings = {name: store._db.execute(f"PRAGMA {name}")[0][0]
                    for name in ("journal_mode", "wal_autocheckpoint", "journal_size_limit")}
    finally:
        store.close()
    assert settings == {"journal_mode": "wal", "wal_autocheckpoint": local.WAL_AUTOCHECKPOINT_PAGES,
                        "journal_size_limit": local.WAL_KEEP_BYTES}


def test_a_small_wal_is_left_to_the_auto_checkpoints(tmp_path) -> None:
    path = str(tmp_path / "index.sqlite3")
    store = LocalStore(path)
    try:
        index_messages(store, 300)
        finish_batch(store)
        assert 0 < wal_bytes(path) <= local.WAL_KEEP_BYTES
    finally:
        store.close()


def test_a_finished_batch_is_in_the_file_and_its_wal_truncated(tmp_path, monkeypatch) -> None:
    """A WAL over ``WAL_KEEP_BYTES`` when a batch ends (0 here: any) is copied into the file and cut."""
    monkeypatch.setattr(local, "WAL_KEEP_BYTES", 0)
    path = str(tmp_path / "index.sqlite3")
    store = LocalStore(path)
    try:
        assert store.end_batch() is True  # the new file's tables, into the file
        ids = index_messages(store, 300)
        assert wal_bytes(path) > 0  # written, not yet checkpointed (far below the auto-checkpoint)
        assert messages_in_file_alone(path, tmp_path) == 0
        finish_batch(store)
        assert wal_bytes(path) == 0
        assert messages_in_file_alone(path, tmp_path) == len(ids)
    finally:
        store.close()


def test_a_reader_puts_the_checkpoint_off_to_the_next_batch(tmp_path, monkeypatch) -> None:
    """A query reading an older snapshot keeps the WAL, and the batch does not wait for it (the store's
    busy timeout is 30 s); the next batch's checkpoint, once no reader holds it, truncates it: the
    WAL does not keep growing."""
    monkeypatch.setattr(local, "WAL_KEEP_BYTES", 0)
    path = str(tmp_path / "index.sqlite3")
    store = LocalStore(path)
    reader = sqlite3.connect(path, isolation_level=None)
    try:
        index_messages(store, 50)
        finish_batch(store)
        reader.execute("BEGIN")
        seen = reader.execute(f'SELECT count(DISTINCT row) FROM "{schema.MESSAGES}"').fetchone()[0]
        index_messages(store, 200)
        assert store.end_batch() is False
        # The writes still wait for another process's write lock as before.
        busy_ms = int(local.DEFAULT_BUSY_TIMEOUT_S * 1000)
        assert store._db.execute("PRAGMA busy_timeout") == [(busy_ms,)]
        assert wal_bytes(path) > 0
        # The reader still sees its snapshot, not the rows written after it began.
        assert reader.execute(f'SELECT count(DISTINCT row) FROM "{schema.MESSAGES}"').fetchone()[0] == seen
        reader.execute("COMMIT")
        index_messages(store, 200)
        finish_batch(store)
        assert wal_bytes(path) == 0
        assert messages_in_file_alone(path, tmp_path) == 450
    finally:
        reader.close()
        store.close()
