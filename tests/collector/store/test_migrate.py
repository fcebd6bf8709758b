"""Layout 1 → this layout: an old store is refused everywhere, and ``migrate-store`` moves it across.

The old stores are built byte by byte in layout 1 (tests/collector/store/v1_store.py), never
through today's indexer; the reference is a new store indexed fresh from the same events.
"""

from __future__ import annotations

import pathlib
import sqlite3
import subprocess
import sys
from collections.abc import Callable

import pytest
import v1_store
import v2_store
from index_helpers import message, unique
from layout_helpers import HOUR, NOW, ROOT, Record, answers, fresh, scenario, with_write_times

from collector.index.migrate import TIMESTAMP_STEP_MS, MigrationError, migrate_store, recorded_progress
from collector.store import OldLayoutError, layout, open_store, schema
from collector.store.local import LocalStore
from collector.store.reader import TraceQuery
from tracehook.wire import EventType

pytestmark = pytest.mark.fallback


@pytest.fixture
def old_local(tmp_path: pathlib.Path) -> tuple[str, str, list[Record]]:
    topic = unique("mig")
    records = scenario(topic)
    path = tmp_path / "old.sqlite3"
    v1_store.write_local(str(path), with_write_times(records))
    return f"local:{path}", topic, records


def test_an_old_store_is_refused_with_one_line_naming_the_migration(old_local, tmp_path: pathlib.Path) -> None:
    url, _, _ = old_local
    with pytest.raises(OldLayoutError) as refused:
        open_store(url)
    line = str(refused.value)
    assert "\n" not in line and "layout 1" in line and f"tracehook migrate-store --from {url} --to" in line
    from spark_jobs.driver import check_store

    with pytest.raises(OldLayoutError):
        check_store(url)  # the index job, before Spark starts
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    for argv in (["query", "id", "x"], ["query", "topic", "orders"], ["offsets", "orders", "--time", "-1h"]):
        done = subprocess.run([sys.executable, "-m", "collector.cli", *argv, "--store", url],
                              capture_output=True, text=True, timeout=60, cwd=ROOT, env=env)
        assert done.returncode == 5, (argv, done.stderr)
        assert done.stderr.strip().splitlines() == [f"error: {line}"]
    (tmp_path / "log").mkdir()  # an empty trace log
    index = subprocess.run([sys.executable, "-m", "collector.cli", "index", "--log-dir", str(tmp_path / "log"),
                            "--store", url], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert index.returncode == 5, index.stderr
    assert len(index.stderr.strip().splitlines()) == 1 and "tracehook migrate-store" in index.stderr


def test_a_new_store_records_its_layout_and_an_old_one_gets_no_new_tables(old_local, tmp_path: pathlib.Path) -> None:
    new = open_store(f"local:{tmp_path / 'new.sqlite3'}")
    assert new.layout_version == layout.LAYOUT_VERSION == 3
    assert new.get_meta(layout.LAYOUT_VERSION_COLUMN) == b"3"
    new.close()
    url, _, _ = old_local
    old = open_store(url, any_layout=True)
    assert old.layout_version == 1 and old.get_meta(layout.LAYOUT_VERSION_COLUMN) is None
    old.close()
    with sqlite3.connect(url.removeprefix("local:")) as db:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"meta", *v1_store.TABLES}  # opening it created nothing of a later layout


def test_the_migrated_store_answers_as_one_indexed_fresh(old_local, tmp_path: pathlib.Path) -> None:
    url, topic, records = old_local
    new_url, ref_url = f"local:{tmp_path / 'new.sqlite3'}", f"local:{tmp_path / 'ref.sqlite3'}"
    seen: list[float] = []
    report = migrate_store(url, new_url, chunk=5, on_chunk=lambda p, f: seen.append(f))
    ids = {e.msg_id for _, e in records}
    assert (report.messages, report.events, report.already_done) == (len(ids), len(records), False)
    assert seen == sorted(seen) and seen[-1] == 1.0 and len(seen) == -(-len(ids) // 5) + (len(ids) % 5 == 0)
    fresh(ref_url, records)
    new, ref = open_store(new_url), open_store(ref_url)
    try:
        got, want = answers(new, topic, records), answers(ref, topic, records)
        assert got == want
        assert want["traces"][f"{topic}-m05"]["outcomes"] and want["dead"][None][0]["items"]  # not vacuous
        assert want["overview"]["topics"]
    finally:
        new.close()
        ref.close()


def _date_like_an_index_job(path: pathlib.Path, records: list[Record]) -> None:
    """Give a layout-2 file's message cells the write times :func:`with_write_times` gives (v2_store writes
    them all at once): a real store's cells were written over its whole TTL."""
    with sqlite3.connect(path) as db:
        db.executemany('UPDATE "messages" SET ts = ? WHERE row = ? AND col = ?',
                       [(ts, v2_store.message_row(e.msg_id), v2_store.cell(h, e)[0])
                        for h, e, ts in with_write_times(records)])


@pytest.mark.parametrize("old_layout", [1, 2])
def test_the_copy_holds_every_cell_of_a_fresh_index_each_dated_by_its_message(
        old_layout: int, tmp_path: pathlib.Path, dump_store) -> None:
    """Cell for cell (values; write times apart) what a fresh index of the same events holds, and every
    cell but the rollups' written at its message's oldest write time rounded down to the step."""
    topic = unique("cells")
    records = scenario(topic)
    old = tmp_path / "old.sqlite3"
    if old_layout == 1:
        v1_store.write_local(str(old), with_write_times(records))
    else:
        v2_store.write(f"local:{old}", records)
        _date_like_an_index_job(old, records)
    written: dict[str, int] = {}
    for _, e, ts in with_write_times(records):
        written[e.msg_id] = min(written.get(e.msg_id, ts), ts)
    new_path = tmp_path / "new.sqlite3"
    report = migrate_store(f"local:{old}", f"local:{new_path}", chunk=7)  # chunks of several write times
    assert (report.messages, report.events, report.bad) == (len(written), len(records), 0)
    fresh(f"local:{tmp_path / 'ref.sqlite3'}", records)
    new, ref = open_store(f"local:{new_path}"), open_store(f"local:{tmp_path / 'ref.sqlite3'}")
    try:
        got, want = dump_store(new), dump_store(ref)
    finally:
        new.close()
        ref.close()
    for table in (schema.MESSAGES, schema.RECORDS, schema.KEYIDX, schema.TIMEIDX, schema.DEAD, schema.PENDING,
                  schema.ROLLUPS):
        assert want[table], table  # not vacuous
        assert got[table] == want[table], table
    assert got == want
    steps = {m: ts - ts % TIMESTAMP_STEP_MS for m, ts in written.items()}
    assert len(set(steps.values())) > 10  # many write times, within chunks too
    longest_first = sorted(written, key=len, reverse=True)
    with sqlite3.connect(new_path) as db:
        for table in schema.TABLES:
            if table.name == schema.ROLLUPS:
                continue  # aggregates over many messages: written at migration time
            for row, ts_s in db.execute(f'SELECT row, ts_s FROM "{table.name}"'):  # whole seconds
                ts = ts_s * 1000  # the steps are whole hours
                msg_id = next((m for m in longest_first if m.encode() in row), None)
                if msg_id is None:  # a key without the msg id (queueidx: topic, queue, offset)
                    assert ts in steps.values(), (table.name, row)
                else:
                    assert ts == steps[msg_id], (table.name, row)


def test_an_interrupted_migration_resumes_and_ends_identical(old_local, tmp_path: pathlib.Path, dump_store) -> None:
    url, topic, records = old_local
    once, resumed = f"local:{tmp_path / 'once.sqlite3'}", f"local:{tmp_path / 'resumed.sqlite3'}"
    migrate_store(url, once, chunk=4)
    first = migrate_store(url, resumed, chunk=4, max_chunks=2)  # as if stopped after two chunks
    assert first.messages == 8 and not first.already_done
    rest = migrate_store(url, resumed, chunk=4)
    assert rest.resumed_at == 8 and rest.messages == len({e.msg_id for _, e in records})
    a, b = open_store(once), open_store(resumed)
    try:
        before = dump_store(b)
        assert before == dump_store(a)
        again = migrate_store(url, resumed, chunk=4)  # after the end: says so, writes nothing
        assert again.already_done and (again.messages, again.events) == (rest.messages, rest.events)
        assert dump_store(b) == before
        assert recorded_progress(b, url).done
    finally:
        a.close()
        b.close()


def test_the_copies_expire_no_later_than_the_originals(old_local, tmp_path: pathlib.Path) -> None:
    url, _, records = old_local
    new_path = tmp_path / "new.sqlite3"
    migrate_store(url, f"local:{new_path}")
    ttl_ms = schema.DEFAULT_TTL_S * 1000
    pub = next(e for _, e in records if e.type == EventType.PUB)  # a message of one event: nobody consumed it
    assert [e for _, e in records if e.msg_id == pub.msg_id] == [pub]
    written = pub.time_ms + 1_500  # when the old index wrote it (with_write_times)

    def found(path: pathlib.Path, at_ms: int) -> bool:
        store = LocalStore(str(path), clock=lambda: at_ms)
        try:
            return TraceQuery(store).get_trace(pub.msg_id) is not None
        finally:
            store.close()

    old_path = pathlib.Path(url.removeprefix("local:"))
    assert found(old_path, written + ttl_ms) and not found(old_path, written + ttl_ms + 1)  # the original's schedule
    assert not found(new_path, written + ttl_ms + 1)  # the copy is gone by then too
    assert found(new_path, written - written % TIMESTAMP_STEP_MS + ttl_ms)  # at most one step earlier
    with sqlite3.connect(new_path) as db:
        newest = max(ts_s for (ts_s,) in db.execute('SELECT ts_s FROM "messages"'))  # whole seconds
    assert newest * 1000 <= max(e.time_ms for _, e in records) + 1_500


def test_cells_the_old_store_had_expired_stay_behind(tmp_path: pathlib.Path) -> None:
    topic = unique("exp")
    gone, kept = message(topic, "gone", NOW - 40 * 24 * HOUR), message(topic, "kept", NOW - 2 * 24 * HOUR)
    old = tmp_path / "old.sqlite3"
    v1_store.write_local(str(old), with_write_times(gone + kept))
    report = migrate_store(f"local:{old}?ttl_days=30", f"local:{tmp_path / 'new.sqlite3'}")
    assert (report.messages, report.events) == (1, 1)
    new = open_store(f"local:{tmp_path / 'new.sqlite3'}")
    try:
        assert TraceQuery(new).get_trace("kept") is not None and TraceQuery(new).get_trace("gone") is None
    finally:
        new.close()


def test_the_migration_refuses_a_store_in_no_layout_it_reads(old_local, tmp_path: pathlib.Path) -> None:
    url, _, _ = old_local
    new_url = f"local:{tmp_path / 'new.sqlite3'}"
    open_store(new_url).close()
    with pytest.raises(MigrationError, match="not 1 or 2"):
        migrate_store(new_url, f"local:{tmp_path / 'other.sqlite3'}")
    with pytest.raises(MigrationError, match="same store"):
        migrate_store(url, url + "?ttl_days=3")
    other_old = tmp_path / "other-old.sqlite3"
    v1_store.write_local(str(other_old), [])
    with pytest.raises(OldLayoutError):
        migrate_store(url, f"local:{other_old}")  # into an old store


def test_the_command_prints_progress_and_a_final_line(old_local, tmp_path: pathlib.Path) -> None:
    url, _, records = old_local
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    argv = [sys.executable, "-m", "collector.cli", "migrate-store", "--from", url,
            "--to", f"local:{tmp_path / 'new.sqlite3'}", "--chunk", "7"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr
    n = len({e.msg_id for _, e in records})
    final = done.stdout.strip().splitlines()[-1]
    assert final.startswith(f"migrate-store: done: {n} messages, {len(records)} events in "), final
    again = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert again.returncode == 0 and "already" in again.stdout and again.stderr == ""
    bad = subprocess.run(argv[:-4] + ["--to", url], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


@pytest.mark.hbase
@pytest.mark.slow
def test_hbase_to_hbase(make_hbase_url: Callable[..., str]) -> None:
    topic = unique("migh")
    records = scenario(topic)
    old_url, new_url, ref_url = make_hbase_url(), make_hbase_url(), make_hbase_url()
    v1_store.write_hbase(old_url, with_write_times(records))
    with pytest.raises(OldLayoutError):
        open_store(old_url)
    first = migrate_store(old_url, new_url, chunk=6, max_chunks=1)
    assert first.messages == 6
    report = migrate_store(old_url, new_url, chunk=6)
    assert report.resumed_at == 6 and report.events == len(records)
    fresh(ref_url, records)
    new, ref = open_store(new_url), open_store(ref_url)
    try:
        assert answers(new, topic, records) == answers(ref, topic, records)
        pub = next(e for _, e in records if e.type == EventType.PUB)
        row = new.scan_cells(schema.MESSAGES, schema.message_row(pub.msg_id), limit=1)  # type: ignore[attr-defined]
        assert all(ts <= pub.time_ms + 1_500 for _, ts in row[0][1].values())
    finally:
        new.close()
        ref.close()
