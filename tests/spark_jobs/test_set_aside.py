"""One event the indexer cannot store costs that event, never the index: it is set aside with its
log position and reason, and the rest of its batch and every later batch are indexed.

The fast tests run a task's work in process (no Spark: the functions the job's tasks run);
the Spark test runs ``tracehook index`` itself on a trace log with a failure injected at one event.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from typing import Any

import msgpack
import pytest

from collector.index.errors import InjectedFault
from collector.index.indexer import FAULT_MSG_ID_ENV
from collector.index.isolate import Item, index_isolating
from collector.log import setaside
from collector.store import StoreUnavailableError, open_store
from collector.store.reader import TraceQuery
from spark_jobs.partition import index_partition
from tests.fixtures.sample import LogRow
from tracehook.wire import BatchHeader, Event, EventType, encode_batch, make_event

T0 = 1_790_000_000_000


def _payload(seq: int, msg_ids: list[str]) -> bytes:
    header = BatchHeader("client-1", seq, "shop", "host-a", T0, {})
    return encode_batch(header, [make_event(EventType.PUB, T0 + seq, "", "orders", m, keys=f"k-{m}", queue=0,
                                            offset=i, store_ms=T0 + seq) for i, m in enumerate(msg_ids)])


def _found(url: str, msg_ids: list[str]) -> set[str]:
    store = open_store(url)
    try:
        query = TraceQuery(store)
        return {m for m in msg_ids if query.get_trace(m) is not None}
    finally:
        store.close()


def test_a_failing_event_is_set_aside_and_the_rest_of_the_batch_indexed(tmp_path: Any, monkeypatch: Any) -> None:
    """The batch fails as a whole (the injected failure at m2); indexed again with ``isolate``, every
    other event of it and of the next record is indexed, and m2 comes back with its place and reason."""
    url = f"local:{tmp_path / 'index.sqlite3'}"
    open_store(url).close()
    rows = [LogRow(_payload(1, ["m1", "m2", "m3"]), base=0, offset=5), LogRow(_payload(2, ["m4"]), base=0, offset=6)]
    monkeypatch.setenv(FAULT_MSG_ID_ENV, "m2")
    with pytest.raises(InjectedFault):
        list(index_partition(url, 1000, finish=True)(iter(rows)))

    [result] = index_partition(url, 1000, finish=True, isolate=True)(iter(rows))

    assert (result.records, result.events) == (2, 3)
    [entry] = result.set_aside
    assert (entry.base, entry.offset, entry.event, entry.msg_id, entry.type) == (0, 5, 1, "m2", "PUB")
    assert entry.reason.startswith("InjectedFault: injected failure at msg_id 'm2'")
    assert _found(url, ["m1", "m2", "m3", "m4"]) == {"m1", "m3", "m4"}


def test_an_event_the_wire_format_refuses_is_set_aside_in_a_normal_run(tmp_path: Any) -> None:
    """A logged batch with one event today's wire rules refuse (an unknown status: a batch logged by an
    older or laxer collector) no longer loses its other events: they are indexed, that one set aside."""
    url = f"local:{tmp_path / 'index.sqlite3'}"
    open_store(url).close()
    good = list(make_event(EventType.PUB, T0, "", "orders", "good", queue=0, offset=1, store_ms=T0))
    bad = list(make_event(EventType.PUB, T0, "", "orders", "bad", status=99))
    batch = [1, "client-1", 1, "shop", "host-a", T0, {}, [good, bad]]
    payload = msgpack.packb(batch, use_bin_type=True)

    [result] = index_partition(url, 1000, finish=True)(iter([LogRow(payload, base=0, offset=3)]))

    [entry] = result.set_aside
    assert (entry.offset, entry.event, entry.msg_id, entry.topic) == (3, 1, "bad", "orders")
    assert "refused by the wire format" in entry.reason and "status" in entry.reason
    assert result.events == 1 and _found(url, ["good", "bad"]) == {"good"}


def test_a_store_failure_is_raised_not_set_aside(tmp_path: Any) -> None:
    """A store that fails is not a batch of bad events: the failure is raised and nothing set aside,
    also when the store fails only the writes (the read probe after a lone failing event fails too)."""
    store = open_store(f"local:{tmp_path / 'index.sqlite3'}")
    header = BatchHeader("c", 1)
    items = [Item((0, 0, i), header, Event(*make_event(EventType.PUB, T0, "", "t", f"m{i}"))) for i in range(5)]

    def down(_store: Any, _items: Any) -> None:
        raise StoreUnavailableError("HBase at hbase://x is unavailable")

    with pytest.raises(StoreUnavailableError):
        index_isolating(store, items, index=down)

    def refuses_writes(_store: Any, _items: Any) -> None:
        raise ValueError("write refused")

    class Unreadable:
        """A store whose reads fail too: a lone failing event is then the store's doing."""

        def get_rows(self, table: str, rows: Any) -> Any:
            raise sqlite3.DatabaseError("file is not a database")

    with pytest.raises(StoreUnavailableError, match="fails reads too"):
        index_isolating(Unreadable(), items, index=refuses_writes)  # type: ignore[arg-type]
    store.close()


def test_bisection_sets_aside_exactly_the_failing_events(tmp_path: Any) -> None:
    """Several failing events among many: exactly they are set aside, each other one indexed once or more."""
    store = open_store(f"local:{tmp_path / 'index.sqlite3'}")
    header = BatchHeader("c", 1)
    items = [Item((0, i, 0), header, Event(*make_event(EventType.PUB, T0, "", "t", f"m{i}"))) for i in range(37)]
    poison = {"m3", "m17", "m18", "m36"}
    indexed: set[str] = set()

    def index(_store: Any, chunk: Any) -> None:
        if any(item.event.msg_id in poison for item in chunk):
            raise KeyError("poison")
        indexed.update(item.event.msg_id for item in chunk)

    out = index_isolating(store, items, chunk=10, index=index)
    store.close()
    assert {f.item.event.msg_id for f in out} == poison
    assert indexed == {f"m{i}" for i in range(37)} - poison
    assert all(f.reason == "KeyError: 'poison'" for f in out)


@pytest.mark.slow
@pytest.mark.spark
def test_the_index_job_sets_aside_one_event_and_reindexes_it_after_the_fix(tmp_path: Any) -> None:
    """``tracehook index`` on a log whose second record holds an event that fails (injected): the run
    exits 0, indexes every other event of that record and of the later ones, advances its checkpoint,
    and says so on its progress line; ``tracehook set-aside list`` shows the event, and ``reindex``
    without the failure indexes it and empties the list. """
    from spark_jobs.checkpoint import spark_committed
    from tests.spark_jobs.test_index_job import _write_log as write_log

    log_dir = tmp_path / "log"
    write_log(str(log_dir), [[_payload(1, ["a1", "a2"])], [_payload(2, ["b1", "bad", "b2"]), _payload(3, ["c1"])]])
    url = f"local:{tmp_path / 'index.sqlite3'}"
    env = {**os.environ, FAULT_MSG_ID_ENV: "bad"}
    cmd = [sys.executable, "-m", "collector.cli.main"]
    where = ["--log-dir", str(log_dir), "--store", url]

    run = subprocess.run([*cmd, "index", *where], env=env, capture_output=True, text=True, timeout=300)

    assert run.returncode == 0, run.stderr
    assert "set aside: 1 event(s)" in run.stdout, run.stdout
    everyone = ["a1", "a2", "b1", "bad", "b2", "c1"]
    assert _found(url, everyone) == set(everyone) - {"bad"}
    listed = subprocess.run([*cmd, "set-aside", "list", *where], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and listed.stdout.startswith("1 event(s) set aside"), listed
    assert "'bad'" in listed.stdout and "InjectedFault" in listed.stdout
    shown = subprocess.run([*cmd, "set-aside", "show", "1", *where], capture_output=True, text=True, timeout=60)
    assert "msg_id: 'bad'" in shown.stdout, shown

    again = subprocess.run([*cmd, "set-aside", "reindex", *where], env=env, capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 4 and "1 still set aside" in again.stdout, again  # not fixed yet
    fixed = subprocess.run([*cmd, "set-aside", "reindex", *where], capture_output=True, text=True, timeout=60)

    assert fixed.returncode == 0 and "indexed 1 event(s)" in fixed.stdout, fixed
    assert _found(url, everyone) == set(everyone)
    [checkpoint] = [str(p) for p in (log_dir / "index-checkpoints").iterdir()]
    assert setaside.count(checkpoint) == 0
    assert spark_committed(checkpoint)["offset"] == 3, "the checkpoint moved past all three records"
