"""The Spark index job over real trace-log segments and the embedded store."""

from __future__ import annotations

import argparse
import os
import shutil
import time
from typing import Any

import pytest

from collector.index.rollup import read_minutes
from collector.log.file import TraceLog, sealed_segments
from collector.log.state import committed_offset, readable_end
from collector.store import open_store
from collector.store.reader import TraceQuery
from spark_jobs import add_arguments, index_once, run
from spark_jobs.checkpoint import default_checkpoint, spark_committed
from spark_jobs.errors import IndexJobError
from tracehook.wire import BatchHeader, EventType, encode_batch, make_event

pytestmark = pytest.mark.spark

T0 = 1_790_000_000_000


def _batch(seq: int, msg_ids: list[str], topic: str = "orders") -> bytes:
    header = BatchHeader("client-1", seq, "shop", "host-a", T0, {})
    events = [make_event(EventType.PUB, T0 + i, "", topic, m, keys=f"k-{m}") for i, m in enumerate(msg_ids)]
    return encode_batch(header, events)


def _write_log(log_dir: str, batches: list[list[bytes]]) -> None:
    """One sealed segment per inner list."""
    log = TraceLog.open(log_dir, durability="os")
    try:
        for payloads in batches:
            log.append([(T0, "client-1", i, p) for i, p in enumerate(payloads)])
            log.roll()
            _next_millisecond()  # retention tells segments apart by seal time: no two in one ms
    finally:
        log.close()


def _next_millisecond() -> None:
    """Return once the wall clock's millisecond has moved on."""
    start = time.time_ns() // 1_000_000
    while time.time_ns() // 1_000_000 == start:
        time.sleep(0.0002)


def _store_rows(path: str) -> list[Any]:
    """Every (table, row, column, value) in the embedded store, expired cells included (the SQL the store
    scans with, no oldest time, so a cell a purge should have deleted still shows); write times left out."""
    import sqlite3

    from collector.store import schema, sqlite_tables

    con = sqlite3.connect(path)
    try:
        names = [r[0] for r in con.execute("select name from sqlite_master where type='table' order by name")]
        rows = []
        for name in names:
            columns = sqlite_tables.table_columns(con.execute(f'PRAGMA table_info("{name}")').fetchall())
            table = (sqlite_tables.found(schema.TABLES_BY_NAME[name], columns) if name in schema.TABLES_BY_NAME
                     else sqlite_tables.whole_table(name))
            cells = con.execute(table.scan(reverse=False), (b"", b"\xff" * 256, 0, -1)).fetchall()
            rows.append((name, sorted((bytes(r), bytes(c), bytes(v)) for r, c, v in cells)))
        return rows
    finally:
        con.close()


def test_indexes_every_segment_then_checkpoints(spark: Any, tmp_path: Any) -> None:
    log_dir, db = str(tmp_path / "log"), str(tmp_path / "index.sqlite3")
    ids = [[f"m{s}-{i}" for i in range(50)] for s in range(3)]
    _write_log(log_dir, [[_batch(s, ids[s][:25]), _batch(s + 10, ids[s][25:])] for s in range(3)])

    report = index_once(spark, log_dir, f"local:{db}")

    assert (report.segments, report.records, report.events, report.bad) == (3, 6, 150, {})
    assert committed_offset(log_dir) == readable_end(log_dir).offset == 6  # what retention reads
    store = open_store(f"local:{db}")
    try:
        query = TraceQuery(store)
        for msg_id in (m for seg in ids for m in seg):
            trace = query.get_trace(msg_id)
            assert trace is not None and trace.topic == "orders" and trace.keys == f"k-{msg_id}"
        page = query.by_time("orders", T0 - 1, T0 + 1000, 1000)
        assert sorted(s.msg_id for s in page.items) == sorted(m for seg in ids for m in seg)
        # The driver's finish_batch wrote the rollups of every minute the run touched.
        assert sum(m.sent for m in read_minutes(store, "orders", T0 - 1, T0 + 1000)) == 150
    finally:
        store.close()


def test_second_run_and_reindex_change_nothing(spark: Any, tmp_path: Any) -> None:
    log_dir, db = str(tmp_path / "log"), str(tmp_path / "index.sqlite3")
    # The same batch twice (a client retry the collector kept): duplicates collapse.
    _write_log(log_dir, [[_batch(1, ["a", "b"]), _batch(1, ["a", "b"])]])
    index_once(spark, log_dir, f"local:{db}")
    before = _store_rows(db)

    assert index_once(spark, log_dir, f"local:{db}").segments == 0
    shutil.rmtree(default_checkpoint(log_dir, f"local:{db}"))  # force a full re-index
    assert index_once(spark, log_dir, f"local:{db}").events == 4
    assert _store_rows(db) == before


def test_corrupt_and_unknown_version_records_are_counted_not_fatal(spark: Any, tmp_path: Any) -> None:
    import msgpack

    log_dir, db = str(tmp_path / "log"), str(tmp_path / "index.sqlite3")
    future = msgpack.packb([99, "c", 1, "app", "host", T0, {}, []])
    _write_log(log_dir, [[_batch(1, ["good-1"]), future, _batch(2, ["good-2"])], [_batch(3, ["tail"])]])
    second = sealed_segments(log_dir)[1].path
    _flip_byte(second, os.path.getsize(second) - 3)  # a payload byte: the CRC no longer matches

    report = index_once(spark, log_dir, f"local:{db}")

    assert report.bad == {"unknown_version": 1, "corrupt_records": 1, "corrupt_bytes": os.path.getsize(second)}
    assert report.events == 2
    store = open_store(f"local:{db}")
    try:
        assert TraceQuery(store).get_trace("good-2") is not None
    finally:
        store.close()


def _flip_byte(path: str, at: int) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_records_after_a_corrupt_frame_are_indexed_and_the_loss_counted(spark: Any, tmp_path: Any) -> None:
    from collector.log.format import encode_record

    log_dir, db = str(tmp_path / "log"), str(tmp_path / "index.sqlite3")
    payloads = [_batch(i, [f"m{i}-a", f"m{i}-b"]) for i in range(5)]
    _write_log(log_dir, [payloads])
    seg = sealed_segments(log_dir)[0]
    sizes = [len(encode_record(seg.base + i, T0, "client-1", i, p)) for i, p in enumerate(payloads)]
    _flip_byte(seg.path, sum(sizes[:2]) + sizes[2] - 1)  # the middle frame's last payload byte

    report = index_once(spark, log_dir, f"local:{db}")

    assert report.bad == {"corrupt_records": 1, "corrupt_bytes": sizes[2]}
    assert (report.records, report.events) == (4, 8)
    assert "1 corrupt_records" in str(report)
    assert committed_offset(log_dir) == seg.base + 5  # nothing left to read there: counted, not retried
    store = open_store(f"local:{db}")
    try:
        query = TraceQuery(store)
        assert [query.get_trace(f"m{i}-a") is not None for i in range(5)] == [True, True, False, True, True]
    finally:
        store.close()


def test_rows_over_the_key_limit_are_counted(spark: Any, tmp_path: Any) -> None:
    log_dir, db = str(tmp_path / "log"), str(tmp_path / "index.sqlite3")
    header = BatchHeader("client-1", 1, "shop", "host-a", T0, {})
    topic, key = "t" * 16_384, "k" * 16_380  # near the wire limit (16 KiB strings): that keyidx row is too long
    _write_log(log_dir, [[encode_batch(header, [make_event(EventType.PUB, T0, "", topic, "m", keys=f"{key} ok")])]])

    report = index_once(spark, log_dir, f"local:{db}")

    assert (report.events, report.bad) == (1, {"row_key_too_long": 1})


def test_retention_deletes_only_what_every_checkpoint_committed(spark: Any, tmp_path: Any) -> None:
    log_dir, db, other = str(tmp_path / "log"), str(tmp_path / "index.sqlite3"), str(tmp_path / "other.sqlite3")
    _write_log(log_dir, [[_batch(1, ["a"])], [_batch(2, ["b"])]])
    index_once(spark, log_dir, f"local:{db}")
    first, second = sealed_segments(log_dir)
    log = TraceLog.open(log_dir, durability="os")
    try:
        log.apply_retention(0, now_ms=first.sealed_ms + 1)  # deletes the first (sealed before) only
        assert [s.base for s in sealed_segments(log_dir)] == [second.base]
    finally:
        log.close()

    assert index_once(spark, log_dir, f"local:{db}").segments == 0  # the checkpoint is past the gap

    _write_log(log_dir, [[_batch(3, ["c"])]])
    # A second store gets its own checkpoint: it indexes everything still in the log, and until it
    # has, retention keeps the segments it has not read (the first store's checkpoint is past them).
    report = index_once(spark, log_dir, f"local:{other}")
    assert (report.events, report.segments) == (2, 2)
    assert index_once(spark, log_dir, f"local:{db}").events == 1
    assert committed_offset(log_dir) == readable_end(log_dir).offset


def test_purge_deletes_expired_cells_of_a_local_store(spark: Any, tmp_path: Any) -> None:
    from collector.store.local import LocalStore

    log_dir, db = str(tmp_path / "log"), str(tmp_path / "index.sqlite3")
    old = LocalStore(db, clock=lambda: T0 - 40 * 86_400_000)  # written 40 days ago: past the 30-day TTL
    old.put_rows("messages", [(b"old-row", {b"s:x": b"v"})])
    old.close()
    _write_log(log_dir, [[_batch(1, ["fresh"])]])

    report = index_once(spark, log_dir, f"local:{db}", purge=True)

    assert report.purged == 1 and "purged 1 expired cell(s)" in str(report)
    rows = dict(_store_rows(db))["messages"]
    assert rows and all(row != b"old-row" for row, _, _ in rows)
    assert index_once(spark, log_dir, f"local:{db}").purged is None  # only when asked


def test_store_failure_fails_the_job_without_advancing_the_checkpoint(spark: Any, tmp_path: Any) -> None:
    log_dir = str(tmp_path / "log")
    _write_log(log_dir, [[_batch(1, ["x"])]])
    # A store that cannot be opened on the executor: its "directory" is a regular file.
    (tmp_path / "not-a-dir").write_text("")
    bad_url = f"local:{tmp_path / 'not-a-dir' / 'index.sqlite3'}"

    with pytest.raises(IndexJobError):
        index_once(spark, log_dir, bad_url)
    assert spark_committed(default_checkpoint(log_dir, bad_url)) is None
    assert committed_offset(log_dir) is None  # a store that never opened does not hold retention back

    db = str(tmp_path / "index.sqlite3")
    assert index_once(spark, log_dir, f"local:{db}").events == 1
    assert spark_committed(default_checkpoint(log_dir, f"local:{db}"))["offset"] == 1


def test_bad_input_is_refused_with_nothing_written(spark: Any, tmp_path: Any, capsys: Any) -> None:
    from collector.log.state import COMMITS_DIR
    from spark_jobs.errors import CheckpointMismatchError, LogInputError

    url = f"local:{tmp_path / 'index.sqlite3'}"
    # A directory that is not a trace log.
    (tmp_path / "not-a-log").mkdir()
    with pytest.raises(LogInputError, match="is not a trace-log directory"):
        index_once(spark, str(tmp_path / "not-a-log"), url)
    assert os.listdir(tmp_path / "not-a-log") == [] and not os.path.exists(tmp_path / "index.sqlite3")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    # (One-shot: a follower waits for an empty directory to become a log, tests/spark_jobs/test_lifecycle.py.)
    assert run(parser.parse_args(["--log-dir", str(tmp_path / "not-a-log"), "--store", url])) == 3
    assert "is not a trace-log directory" in capsys.readouterr().err

    # A checkpoint that belongs to another log.
    log_a, log_b, ckpt = str(tmp_path / "a"), str(tmp_path / "b"), str(tmp_path / "ckpt")
    _write_log(log_a, [[_batch(1, ["a1"])]])
    _write_log(log_b, [[_batch(1, ["b1"])]])
    index_once(spark, log_a, url, checkpoint=ckpt)
    with pytest.raises(CheckpointMismatchError, match="belongs to another trace log"):
        index_once(spark, log_b, url, checkpoint=ckpt)
    assert not os.path.exists(os.path.join(log_b, COMMITS_DIR))

    # Records deleted from the log before this checkpoint indexed them.
    _write_log(log_a, [[_batch(2, ["a2"])], [_batch(3, ["a3"])]])
    gone = sealed_segments(log_a)[1]
    os.remove(gone.path)
    before = spark_committed(ckpt)
    with pytest.raises(LogInputError, match="no longer in"):
        index_once(spark, log_a, url, checkpoint=ckpt)
    assert spark_committed(ckpt) == before
    store = open_store(url)
    try:
        assert TraceQuery(store).get_trace("a3") is None  # nothing after the gap was written either
    finally:
        store.close()


def _sample_payloads() -> tuple[int, list[bytes]]:
    """(events, encoded batches) of 600 messages consumed by two groups; each client's events in batches of 200."""
    from tests.fixtures.sample import bulk

    records = list(bulk(600, T0, span_ms=5 * 60_000, consumers=("billing", "audit")))
    headers = {h.client_id: h for h, _ in records}
    batches = [(header, [e for h, e in records if h.client_id == client]) for client, header in headers.items()]
    return len(records), [encode_batch(header, events[i:i + 200]) for header, events in batches
                          for i in range(0, len(events), 200)]


def _reference_rows(tmp_path: Any, payloads: list[bytes]) -> list[Any]:
    """Every cell the in-process indexer writes for ``payloads`` (one batch, then finish_batch)."""
    from collector.index.indexer import finish_batch, index_payloads

    reference = open_store(f"local:{tmp_path / 'reference.sqlite3'}")
    try:
        index_payloads(reference, payloads)
        finish_batch(reference)
    finally:
        reference.close()
    return _store_rows(str(tmp_path / "reference.sqlite3"))


def test_rollups_read_back_by_tasks_equal_the_in_process_index(spark: Any, tmp_path: Any) -> None:
    """The job's task reads its messages' rollup parts back itself (no markers) and, into a local:
    store, finishes the batch itself (two segments' slices, coalesced into one task): every cell,
    rollups and their parts rows included, is what indexing in process writes, and no marker is left."""
    events, payloads = _sample_payloads()
    log_dir = str(tmp_path / "log")
    _write_log(log_dir, [payloads[:len(payloads) // 2], payloads[len(payloads) // 2:]])

    report = index_once(spark, log_dir, f"local:{tmp_path / 'spark.sqlite3'}")

    assert (report.segments, report.events) == (2, events)
    rows = _store_rows(str(tmp_path / "spark.sqlite3"))
    assert dict(rows)["rollups"], "rollups were written"
    assert rows == _reference_rows(tmp_path, payloads)


def test_partitions_finished_on_the_driver_equal_the_in_process_index(tmp_path: Any) -> None:
    """The path of a store with parallel tasks (HBase): two partitions, sends and consumes of one
    message in different ones, each returning its messages' rollup parts; the driver merges them
    and finishes the batch. No Spark needed: the same functions the tasks and the driver run."""
    from spark_jobs.driver import finish_partitions
    from spark_jobs.partition import index_partition
    from tests.fixtures.sample import LogRow

    events, payloads = _sample_payloads()
    url = f"local:{tmp_path / 'split.sqlite3'}"
    open_store(url).close()  # the driver creates the tables (prepare_store)
    task = index_partition(url, 1000)
    half = len(payloads) // 2
    results = [r for part in (payloads[:half], payloads[half:]) for r in task(iter(LogRow(p) for p in part))]
    assert sum(r[1] for r in results) == events and all(r[5] for r in results), "each task returns its parts"

    finish_partitions(url, results)

    assert _store_rows(str(tmp_path / "split.sqlite3")) == _reference_rows(tmp_path, payloads)


def test_the_job_indexes_the_properties_named_in_the_store(spark: Any, tmp_path: Any) -> None:
    """`tracehook props set` before the run: the job's tasks read the lists from the store and file the
    named properties of sends (and of a consume whose send is not traced), and no other name."""
    from collector.store import props
    from tests.fixtures.props_model import Msg, events

    msgs = [Msg(f"p{i}", "orders", T0 + i, i % 4 != 0, {"orderId": str(i % 3), "other": "x"},
                {"orderId": "c"} if i % 2 == 0 else None) for i in range(40)]
    records = events(msgs)
    log_dir = str(tmp_path / "log")
    _write_log(log_dir, [[encode_batch(header, [e for h, e in records if h is header])
                          for header in {h.client_id: h for h, _ in records}.values()]])
    url = f"local:{tmp_path / 'props.sqlite3'}"
    store = open_store(url)
    props.save(store, props.NOTHING.with_names("orders", ["orderId"]))
    store.close()

    assert index_once(spark, log_dir, url).events == len(records)

    q = TraceQuery(open_store(url))
    try:
        for value in ("0", "1", "c"):
            want = sorted((m for m in msgs if m.props.get("orderId") == value), key=lambda m: (-m.t, m.msg_id))
            got = q.by_prop("orders", "orderId", value, 0, T0 + 100, 100).items
            assert [i.msg_id for i in got] == [m.msg_id for m in want] and want, value
        assert not q.by_prop("orders", "other", "x", 0, T0 + 100, 100).items
    finally:
        q.store.close()
