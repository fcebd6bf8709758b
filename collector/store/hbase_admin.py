"""Create HBase tables pre-split and encoded, through HBase's Thrift2 gateway (``hbase thrift2``).

Thrift1, which happybase speaks, creates a table as one region, has no call to split
one and cannot set a family's data block encoding (only its compression).  Thrift2's
``THBaseService.createTable(desc, splitKeys)`` takes the initial region boundaries and
the full family descriptor, so tables are created there; every read and write still
goes through Thrift1.  Only the few IDL declarations this needs are loaded (the field
ids are those of ``org/apache/hadoop/hbase/thrift2/hbase.thrift`` in hbase-thrift).

:class:`FamilyStorage` is how the families store their cells on disk: the store URL
options ``compression=`` and ``block_encoding=`` (:func:`family_storage`).
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping, Sequence
from typing import Any

import thriftpy2
from thriftpy2.rpc import make_client

from collector.store.errors import BadStoreUrlError

COMPRESSIONS = ("gz", "lz4", "zstd", "none")
"""Codecs a store URL may name (``compression=``).  LZ4 and ZSTD need a codec on the region servers
(Hadoop's native one, or the pure-Java aircompressor ones that scripts/hbase sets up); GZ loads anywhere."""
BLOCK_ENCODINGS = ("fast_diff", "row_index_v1", "none")
"""Data block encodings a store URL may name (``block_encoding=``); set only through Thrift2."""
# Measured (docs/index-store.md): GZ and ZSTD both cut the tables to about a sixth of their bytes (layout 2); GZ is
# the default as every HBase can load it.  FAST_DIFF takes 5-8 % more off and keeps cached blocks small.
DEFAULT_COMPRESSION = "gz"
DEFAULT_BLOCK_ENCODING = "fast_diff"


@dataclasses.dataclass(frozen=True)
class FamilyStorage:
    """How new tables' column families store cells: a compression codec and a data block encoding."""

    compression: str = DEFAULT_COMPRESSION
    block_encoding: str = DEFAULT_BLOCK_ENCODING


def family_storage(opts: Mapping[str, str], *, thrift2: bool) -> FamilyStorage:
    """The ``compression`` and ``block_encoding`` store URL options; ``BadStoreUrlError`` for a bad value.

    Without a Thrift2 gateway the encoding cannot be set: an explicit one is refused, the default is ``none``.
    """
    compression = _choice(opts, "compression", COMPRESSIONS, DEFAULT_COMPRESSION)
    encoding = _choice(opts, "block_encoding", BLOCK_ENCODINGS, DEFAULT_BLOCK_ENCODING if thrift2 else "none")
    if encoding != "none" and not thrift2:
        raise BadStoreUrlError(f"block_encoding={encoding} needs thrift2=HOST:PORT (only HBase's Thrift2 gateway "
                               "creates tables with a data block encoding)")
    return FamilyStorage(compression=compression, block_encoding=encoding)


def _choice(opts: Mapping[str, str], name: str, allowed: Sequence[str], default: str) -> str:
    value = opts.get(name, default).lower()
    if value not in allowed:
        raise BadStoreUrlError(f"{name} must be one of {'|'.join(allowed)}, not {opts[name]!r}")
    return value


_IDL = """
struct TTableName {
  1: optional binary ns
  2: required binary qualifier
}
enum TCompressionAlgorithm {
  LZO = 0, GZ = 1, NONE = 2, SNAPPY = 3, LZ4 = 4, BZIP2 = 5, ZSTD = 6
}
enum TDataBlockEncoding {
  NONE = 0, PREFIX = 2, DIFF = 3, FAST_DIFF = 4, ROW_INDEX_V1 = 7
}
enum TBloomFilterType {
  NONE = 0, ROW = 1, ROWCOL = 2, ROWPREFIX_FIXED_LENGTH = 3
}
struct TColumnFamilyDescriptor {
  1: required binary name
  5: optional TBloomFilterType bloomnFilterType
  6: optional TCompressionAlgorithm compressionType
  8: optional TDataBlockEncoding dataBlockEncoding
  10: optional i32 maxVersions
  13: optional i32 timeToLive
  14: optional bool blockCacheEnabled
}
struct TTableDescriptor {
  1: required TTableName tableName
  2: optional list<TColumnFamilyDescriptor> columns
}
exception TIOError {
  1: optional string message
  2: optional bool canRetry
}
service THBaseService {
  void createTable(1: required TTableDescriptor desc, 2: optional list<binary> splitKeys) throws (1: TIOError io)
  bool tableExists(1: TTableName tableName) throws (1: TIOError io)
  TTableDescriptor getTableDescriptor(1: required TTableName table) throws (1: TIOError io)
}
"""
_thrift2 = thriftpy2.load_fp(io.StringIO(_IDL), module_name="tracehook_hbase_thrift2_thrift")
TIOError = _thrift2.TIOError


def _table_name(name: str) -> object:
    ns, sep, qualifier = name.rpartition(":")
    return _thrift2.TTableName(ns=ns.encode() if sep else None, qualifier=qualifier.encode())


def create_table(
    host: str, port: int, name: str, families: Sequence[str], *, max_versions: int, ttl_s: int,
    split_keys: Sequence[bytes], timeout_ms: int, storage: FamilyStorage = FamilyStorage(),
) -> None:
    """Create ``name`` (``ns:table`` or ``table``) with ``len(split_keys) + 1`` regions.

    Raises ``TIOError`` (an existing table among them: its message names ``TableExistsException``;
    a codec the region servers cannot load: ``DoNotRetryIOException`` naming it) and the
    transport's errors when the gateway does not answer.
    """
    compression = _thrift2.TCompressionAlgorithm._NAMES_TO_VALUES[storage.compression.upper()]
    encoding = _thrift2.TDataBlockEncoding._NAMES_TO_VALUES[storage.block_encoding.upper()]
    client = make_client(_thrift2.THBaseService, host, port, timeout=timeout_ms)
    try:
        columns = [_thrift2.TColumnFamilyDescriptor(
            name=f.encode(), maxVersions=max_versions, timeToLive=ttl_s, compressionType=compression,
            dataBlockEncoding=encoding) for f in families]
        desc = _thrift2.TTableDescriptor(tableName=_table_name(name), columns=columns)
        client.createTable(desc, list(split_keys))
    finally:
        client.close()


def table_families(host: str, port: int, name: str, *, timeout_ms: int) -> list[Any]:
    """Table ``name``'s column family descriptors as HBase reports them (Thrift2 ``TColumnFamilyDescriptor``)."""
    client = make_client(_thrift2.THBaseService, host, port, timeout=timeout_ms)
    try:
        return list(client.getTableDescriptor(_table_name(name)).columns)
    finally:
        client.close()


def table_storage(host: str, port: int, name: str, *, timeout_ms: int) -> dict[str, FamilyStorage]:
    """Each family of table ``name`` and how it stores cells, as HBase reports it."""
    return {
        column.name.decode(): FamilyStorage(
            compression=_thrift2.TCompressionAlgorithm._VALUES_TO_NAMES[column.compressionType].lower(),
            block_encoding=_thrift2.TDataBlockEncoding._VALUES_TO_NAMES[column.dataBlockEncoding].lower())
        for column in table_families(host, port, name, timeout_ms=timeout_ms)
    }
