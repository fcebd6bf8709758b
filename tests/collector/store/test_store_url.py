"""Store URLs parse into typed values (:mod:`collector.store.url`) without opening anything."""

from __future__ import annotations

import pytest

from collector.store import schema
from collector.store.errors import BadStoreUrlError
from collector.store.hbase_admin import FamilyStorage
from collector.store.url import HBaseUrl, LocalUrl, absolute_store_url, parse_store_url, resolve_store_url


def test_local_url_carries_path_options_and_cache() -> None:
    parsed = parse_store_url("local:rel/index.sqlite3?ttl_days=0.5&body_ttl_days=2&salt_buckets=8&cache_mib=3")
    assert parsed == LocalUrl(path="rel/index.sqlite3", options=parsed.options, cache_kib=3 * 1024)
    assert (parsed.options.ttl_s, parsed.options.body_ttl_s, parsed.options.salt_buckets) == (43200, 172800, 8)


def test_local_url_defaults() -> None:
    parsed = parse_store_url("local:/x")
    assert isinstance(parsed, LocalUrl)
    assert parsed.cache_kib is None
    assert (parsed.options.ttl_s, parsed.options.salt_buckets) == (schema.DEFAULT_TTL_S, None)


def test_hbase_url_carries_gateways_and_storage() -> None:
    parsed = parse_store_url("hbase://db:9191?namespace=ns&thrift2=gw:9092&compression=ZSTD&ttl_days=1")
    assert isinstance(parsed, HBaseUrl)
    assert (parsed.host, parsed.port, parsed.namespace, parsed.thrift2) == ("db", 9191, "ns", ("gw", 9092))
    assert parsed.storage == FamilyStorage(compression="zstd", block_encoding="fast_diff")
    assert parsed.options.ttl_s == 86400


def test_hbase_url_defaults() -> None:
    parsed = parse_store_url("hbase://")
    assert isinstance(parsed, HBaseUrl)
    assert (parsed.host, parsed.port, parsed.namespace, parsed.thrift2) == ("127.0.0.1", 9090, None, None)
    assert parsed.storage.block_encoding == "none"  # Thrift1 cannot set one


@pytest.mark.parametrize("url", ["hbase://h?thrift2=gw", "hbase://h?thrift2=gw:0", "hbase://h?thrift2=:9092"])
def test_bad_thrift2_address_is_named(url: str) -> None:
    with pytest.raises(BadStoreUrlError, match="thrift2 must be HOST:PORT"):
        parse_store_url(url)


def test_local_paths_resolve(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert absolute_store_url("local:a.sqlite3?ttl_days=1") == f"local:{tmp_path}/a.sqlite3?ttl_days=1"
    assert absolute_store_url("hbase://h") == "hbase://h"
    (tmp_path / "data").mkdir()
    with pytest.raises(BadStoreUrlError, match="no index.sqlite3 in it"):
        resolve_store_url("local:data")
    (tmp_path / "data" / "index.sqlite3").touch()
    assert resolve_store_url("local:data?cache_mib=2") == "local:data/index.sqlite3?cache_mib=2"
    with pytest.raises(BadStoreUrlError, match="no index at"):
        resolve_store_url("local:missing.sqlite3", must_exist=True)
