"""How new HBase tables store their cells: the ``compression`` and ``block_encoding`` store URL
options, set when the store creates its tables and read back from real HBase through Thrift2."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from collections.abc import Callable

import pytest

from collector.store import BadStoreUrlError, check_store_url, open_store, schema
from collector.store.hbase_admin import FamilyStorage, table_families, table_storage

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _storage_of_every_family(url: str, thrift2: str) -> set[FamilyStorage]:
    """Each family's storage as HBase's table descriptors give it, over every table of the store.

    Every family must also keep its block cache and a row bloom filter: Thrift1's ColumnDescriptor
    defaults would turn both off, and every Get and scan would then read and decompress its blocks
    from disk (queries measured 2-3x slower on GZ tables)."""
    store = open_store(url)  # creates the tables; make_hbase_url's teardown drops them (or scripts/hbase clean)
    try:
        host, port = thrift2.rsplit(":", 1)
        found: set[FamilyStorage] = set()
        for table in schema.TABLES:
            name = f"{store.namespace}_{table.name}"
            families = table_storage(host, int(port), name, timeout_ms=20_000)
            assert sorted(families) == sorted(table.families), table.name
            found |= set(families.values())
            settings = {(f.blockCacheEnabled, f.bloomnFilterType)
                        for f in table_families(host, int(port), name, timeout_ms=20_000)}
            assert settings == {(True, 1)}, (url, table.name)  # 1: TBloomFilterType.ROW
        return found
    finally:
        # Not dropped here: 11 tables' disable + delete, five times, cost this test about half its time,
        # and five namespaces of one idle region per table are few next to the ready namespaces' tables.
        store.close()


@pytest.mark.hbase
@pytest.mark.slow
def test_tables_get_the_storage_the_url_asks_for_and_keep_block_cache_and_bloom_filter(
    make_hbase_url: Callable[..., str], hbase_thrift2: str
) -> None:
    # salt_buckets=1: one region per table (the suite shares one standalone HBase).
    # LZ4 and ZSTD load only with the aircompressor codecs scripts/hbase puts on HBase's classpath:
    # HBase refuses to create a table whose codec it cannot load.
    for compression, encoding in [("zstd", "row_index_v1"), ("lz4", "none"), ("none", "fast_diff")]:
        url = make_hbase_url(thrift2=hbase_thrift2, salt_buckets="1", compression=compression,
                             block_encoding=encoding)
        assert _storage_of_every_family(url, hbase_thrift2) == {FamilyStorage(compression, encoding)}
    default = make_hbase_url(thrift2=hbase_thrift2, salt_buckets="1")
    assert _storage_of_every_family(default, hbase_thrift2) == {FamilyStorage("gz", "fast_diff")}
    # Through Thrift1 alone (no thrift2= in the URL): compressed, but Thrift1 cannot set an encoding.
    thrift1_only = make_hbase_url(salt_buckets="1")
    assert _storage_of_every_family(thrift1_only, hbase_thrift2) == {FamilyStorage("gz", "none")}


@pytest.mark.parametrize(("query", "message"), [
    ("compression=snappy", "compression must be one of gz|lz4|zstd|none, not 'snappy'"),
    ("thrift2=h:9091&block_encoding=prefix",
     "block_encoding must be one of fast_diff|row_index_v1|none, not 'prefix'"),
    ("block_encoding=fast_diff",
     "block_encoding=fast_diff needs thrift2=HOST:PORT (only HBase's Thrift2 gateway creates tables "
     "with a data block encoding)"),
])
def test_a_bad_storage_option_is_refused(query: str, message: str) -> None:
    with pytest.raises(BadStoreUrlError) as caught:
        check_store_url(f"hbase://127.0.0.1:9090?namespace=t&{query}")
    assert str(caught.value) == message


def test_values_are_case_insensitive_and_none_needs_no_thrift2() -> None:
    check_store_url("hbase://127.0.0.1:9090?namespace=t&compression=ZSTD&block_encoding=None")
    check_store_url("hbase://127.0.0.1:9090?namespace=t&thrift2=h:9091&block_encoding=ROW_INDEX_V1")


def test_the_cli_refuses_a_bad_codec_in_one_line() -> None:
    # Refused before any connection: nothing listens on port 1.
    done = subprocess.run(
        [sys.executable, "-m", "collector.cli", "query", "topic", "orders",
         "--store", "hbase://127.0.0.1:1?namespace=t&compression=brotli"],
        capture_output=True, text=True, timeout=60, cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "compression must be one of gz|lz4|zstd|none, not 'brotli'" in done.stderr
