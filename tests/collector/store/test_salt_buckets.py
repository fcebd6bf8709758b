"""The salt bucket count: recorded with the tables, used by the indexer and queries, checked on open,
and (HBase) the regions the tables are pre-split into."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from collections.abc import Callable

import pytest
from fixtures.stores import BACKENDS
from index_helpers import message, page_ids, unique

from collector.index.indexer import index_records
from collector.store import SaltBucketsMismatchError, keys, open_store, schema
from collector.store.reader import TraceQuery

pytestmark = pytest.mark.fallback

T0 = 1_790_000_000_000
ROOT = pathlib.Path(__file__).resolve().parents[3]


def _url(backend: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest, **options: str) -> str:
    if backend == "local":
        query = "&".join(f"{k}={v}" for k, v in options.items())
        return f"local:{tmp_path / 'index.sqlite3'}" + (f"?{query}" if query else "")
    return request.getfixturevalue("make_hbase_url")(**options)


def _with(url: str, option: str) -> str:
    return url + ("&" if "?" in url else "?") + option


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_recorded_count_is_used_and_a_different_one_is_refused(
    backend: str, tmp_path: pathlib.Path, request: pytest.FixtureRequest
) -> None:
    url = _url(backend, tmp_path, request, salt_buckets="16")
    topic = unique("hot")
    writer = open_store(url)
    try:
        index_records(writer, [r for i in range(200) for r in message(topic, f"id-{i:06d}", T0 + i)])
        buckets = {keys.unpack(row)[0] for row, _ in writer.scan(schema.TIMEIDX, b"", b"\xff")}
    finally:
        writer.close()
    assert buckets == set(range(16))  # the indexer filed under the store's 16 buckets, not the default 8

    plain = url.replace("salt_buckets=16", "").replace("?&", "?").rstrip("?&")
    reader = open_store(plain)  # no count in the URL: the recorded one
    try:
        assert reader.salt_buckets == 16
        query = TraceQuery(reader)
        found = page_ids(lambda limit, cursor: query.by_time(topic, T0 - 10, T0 + 1000, limit, cursor), 100)
        assert sorted(found) == [f"id-{i:06d}" for i in range(200)]
    finally:
        reader.close()

    with pytest.raises(SaltBucketsMismatchError, match="salt_buckets=8 but its tables were created with 16"):
        open_store(_with(plain, "salt_buckets=8"))


def test_a_store_made_before_counts_were_recorded_keeps_the_default(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "index.sqlite3"
    open_store(f"local:{path}").close()
    import sqlite3

    with sqlite3.connect(path) as db:  # what a store from before this change looks like
        db.execute('DROP TABLE "meta"')
    with pytest.raises(SaltBucketsMismatchError, match="created with 8"):
        open_store(f"local:{path}?salt_buckets=16")
    old = open_store(f"local:{path}", any_layout=True)  # such a store is layout 1: only the migration reads it
    assert (old.salt_buckets, old.layout_version) == (schema.DEFAULT_SALT_BUCKETS, 1)
    old.close()


def test_the_cli_reports_a_mismatch_in_one_line(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "index.sqlite3"
    open_store(f"local:{path}?salt_buckets=4").close()
    done = subprocess.run(
        [sys.executable, "-m", "collector.cli", "query", "topic", "orders", "--store", f"local:{path}?salt_buckets=8"],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "salt_buckets=8 but its tables were created with 4" in done.stderr
    (tmp_path / "log").mkdir()  # an empty log directory: a log not written yet
    index = subprocess.run(  # the index job refuses it before Spark starts
        [sys.executable, "-m", "collector.cli", "index", "--log-dir", str(tmp_path / "log"),
         "--store", f"local:{path}?salt_buckets=8"],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert index.returncode == 2, index.stderr
    assert index.stderr.count("\n") == 1 and "salt_buckets=8 but its tables were created with 4" in index.stderr


@pytest.mark.hbase
@pytest.mark.slow
def test_a_hot_topic_with_sequential_ids_lands_in_every_pre_split_region(
    make_hbase_url: Callable[..., str], hbase_thrift2: str
) -> None:
    import happybase

    buckets = 4  # few regions: the suite shares one standalone HBase
    url = make_hbase_url(salt_buckets=str(buckets), thrift2=hbase_thrift2)
    store = open_store(url)
    try:
        index_records(store, [r for i in range(2000) for r in message("hot", f"order-{i:08d}", T0 + i)])
        host, port = url.removeprefix("hbase://").split("?")[0].split(":")
        conn = happybase.Connection(host, int(port), table_prefix=store.namespace, table_prefix_separator="_")
        try:
            for table in (schema.TIMEIDX, schema.MESSAGES):
                regions = conn.table(table).regions()
                assert len(regions) == buckets, (table, regions)
                per_region = [
                    sum(1 for _ in conn.table(table).scan(row_start=r["start_key"] or None,
                                                          row_stop=r["end_key"] or None))
                    for r in regions
                ]
                assert sum(per_region) == 2000, (table, per_region)
                # An even spread: every region takes a share, none takes all.
                assert all(n > 2000 // (3 * buckets) for n in per_region), (table, per_region)
        finally:
            conn.close()
    finally:
        try:
            store.drop_tables()  # now, not at session end: its regions would load the shared HBase
        finally:
            store.close()
