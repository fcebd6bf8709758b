"""Two processes creating the same HBase tables at once (the collector and the index job on a fresh
namespace): whichever loses the race opens the tables the other created, it does not fail."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import happybase  # noqa: F401  (loads the Hbase_thrift module)
import pytest
from Hbase_thrift import AlreadyExists
from Hbase_thrift import IOError as HBaseIOError

from collector.store import open_store, schema
from collector.store.hbase import _create_if_absent

IN_PROGRESS = (b"org.apache.hadoop.hbase.TableExistsException: org.apache.hadoop.hbase.TableExistsException: "
               b"t0_traceidx\n\tat org.apache.hadoop.hbase.master.procedure.CreateTableProcedure.prepareCreate")


class RacingConnection:
    """A connection whose create_table fails as Thrift1 does when another client created the table."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.calls: list[str] = []

    def create_table(self, name: str, families: dict[str, Any]) -> None:
        self.calls.append(name)
        raise self.error


@pytest.mark.parametrize("error", [AlreadyExists(message="t0_traceidx"), HBaseIOError(message=IN_PROGRESS)],
                         ids=["created-before", "create-in-progress"])
def test_a_table_another_client_created_counts_as_created(error: Exception) -> None:
    conn = RacingConnection(error)
    _create_if_absent(conn, "traceidx", {"f": {}})  # type: ignore[arg-type]
    assert conn.calls == ["traceidx"]


def test_other_hbase_errors_still_raise() -> None:
    conn = RacingConnection(HBaseIOError(message=b"org.apache.hadoop.hbase.NamespaceNotFoundException: t0"))
    with pytest.raises(HBaseIOError):
        _create_if_absent(conn, "traceidx", {"f": {}})  # type: ignore[arg-type]


@pytest.mark.hbase
@pytest.mark.slow
def test_concurrent_first_opens_of_one_namespace_all_succeed(make_hbase_url: Any) -> None:
    url = make_hbase_url()

    def first_open(_: int) -> None:
        open_store(url).close()  # creates the missing tables, racing the other threads

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(first_open, range(4)))  # re-raises any thread's error
    store = open_store(url, create_tables=False)
    try:
        for table in schema.TABLES:
            assert list(store.scan(table.name, b"", b"\xff")) == [], table.name
    finally:
        store.close()
