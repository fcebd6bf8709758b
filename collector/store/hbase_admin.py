"""Create HBase tables pre-split, through HBase's Thrift2 gateway (``hbase thrift2``).

Thrift1, which happybase speaks, creates a table as one region and has no call to
split one.  Thrift2's ``THBaseService.createTable(desc, splitKeys)`` takes the initial
region boundaries, so tables are created there; every read and write still goes
through Thrift1.  Only the few IDL declarations this needs are loaded (the field ids
are those of ``org/apache/hadoop/hbase/thrift2/hbase.thrift`` in hbase-thrift).
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import thriftpy2
from thriftpy2.rpc import make_client

_IDL = """
struct TTableName {
  1: optional binary ns
  2: required binary qualifier
}
struct TColumnFamilyDescriptor {
  1: required binary name
  10: optional i32 maxVersions
  13: optional i32 timeToLive
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
}
"""
_thrift2 = thriftpy2.load_fp(io.StringIO(_IDL), module_name="tracehook_hbase_thrift2_thrift")
TIOError = _thrift2.TIOError


def _table_name(name: str) -> object:
    ns, sep, qualifier = name.rpartition(":")
    return _thrift2.TTableName(ns=ns.encode() if sep else None, qualifier=qualifier.encode())


def create_table(
    host: str, port: int, name: str, families: Sequence[str], *, max_versions: int, ttl_s: int,
    split_keys: Sequence[bytes], timeout_ms: int,
) -> None:
    """Create ``name`` (``ns:table`` or ``table``) with ``len(split_keys) + 1`` regions.

    Raises ``TIOError`` (an existing table among them: its message names ``TableExistsException``)
    and the transport's errors when the gateway does not answer.
    """
    client = make_client(_thrift2.THBaseService, host, port, timeout=timeout_ms)
    try:
        columns = [_thrift2.TColumnFamilyDescriptor(name=f.encode(), maxVersions=max_versions, timeToLive=ttl_s)
                   for f in families]
        desc = _thrift2.TTableDescriptor(tableName=_table_name(name), columns=columns)
        client.createTable(desc, list(split_keys))
    finally:
        client.close()
