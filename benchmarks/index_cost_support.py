"""What benchmarks/index_cost.py measures with: the traffic mixes as trace-log payloads, the
trace log they are written to, the lean floor, CPU seconds from /proc, the index tables' bytes per
indexed value, and HBase's side (its processes, flush + major compaction, the bytes of a namespace's
table directories).

::

    payloads = encode(realistic_mix(100_000))
    write_log(log_dir, payloads)
    cpu = tree_cpu_seconds(os.getpid())          # this process and every descendant (a Spark JVM, its workers)
"""

from __future__ import annotations

import os
import random
import socket
import sqlite3
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from benchmarks.collector_ingest import tree_cpu_seconds
from benchmarks.index_throughput import T0
from benchmarks.index_throughput import events as simple_mix  # noqa: F401 - the simple mix, re-exported
from collector.log.file import TraceLog
from collector.store import open_store, schema
from tests.fixtures.sample import (  # noqa: F401 - LogRow re-exported for index_cost.py
    BILLING_HEADER,
    PRODUCER_HEADER,
    SHIPPING_HEADER,
    LogRow,
    _event,
    consume,
    send,
)
from tracehook import wire
from tracehook.wire import BatchHeader, Event, EventType, Status, make_event

Record = tuple[BatchHeader, Event]
BATCH_EVENTS = 100
"""Events per trace-log record (a dispatcher's batch), each from one client."""
MICRO_BATCH_EVENTS = 20_000
"""Events per in-process micro-batch: ``index_partition`` then ``finish_partitions``, as a follow run."""
SEGMENT_RECORDS = 1000
"""Trace-log records per sealed segment (100,000 events)."""
SEED = 27
TOPICS = ("orders", "payments", "shipments", "refunds")
SENDS_HEADER = BatchHeader("bench-1", 1, app="bench", host="load-1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ADMIN_TOOL = os.path.join(ROOT, "benchmarks", "HBaseCompact.java")


class Unreachable(Exception):
    """A row's server (HBase) or runtime (Spark) is not there; the message is the one line to print."""


# -- traffic ---------------------------------------------------------------------------------

def realistic_mix(n: int, seed: int = SEED) -> list[Record]:
    """``n`` events in time order: per message a send, then one or two groups' consume start/end,
    some failed and retried consumes and some dead letters (3-6 events, 3.8 on average), one or
    two keys, four topics; the same events for the same ``seed``."""
    rng = random.Random(seed)
    out: list[Record] = []
    i = 0
    while len(out) < n:
        t, msg_id = T0 + 5 * i, f"real-{i:09d}"
        keys = f"order-{i}" + (f" customer-{rng.randrange(50_000)}" if rng.random() < 0.4 else "")
        m = dict(topic=TOPICS[i % len(TOPICS)], keys=keys, tags="created", broker="broker-a", queue=i % 8,
                 offset=i // 8, born_ms=t - 2, store_ms=t, body_len=rng.randrange(200, 2000))
        out.append(send(msg_id, t, m))
        u = rng.random()
        if u < 0.94:  # consumed, by billing and (28 %) shipping; 6 % after a failed first attempt
            failed_first = u >= 0.88
            out += consume(BILLING_HEADER, "billing", msg_id, t + 5, m,
                           status=Status.EXCEPTION if failed_first else Status.OK)
            if failed_first:
                out += consume(BILLING_HEADER, "billing", msg_id, t + 1000, m, retry=1)
            elif u >= 0.60:
                out += consume(SHIPPING_HEADER, "shipping", msg_id, t + 8, m)
        elif u < 0.97:  # billing consumed it, shipping's attempt failed (not retried yet)
            out += consume(BILLING_HEADER, "billing", msg_id, t + 5, m)
            out += consume(SHIPPING_HEADER, "shipping", msg_id, t + 8, m, status=Status.FAILED)
        else:  # failed once (2 %) or twice (1 %), then dead-lettered
            attempts = 1 if u < 0.99 else 2
            for retry in range(attempts):
                out += consume(BILLING_HEADER, "billing", msg_id, t + 5 + 1000 * retry, m, retry=retry,
                               status=Status.FAILED)
            out.append((BILLING_HEADER, _event(EventType.DEAD, t + 3000, "billing", msg_id, retry=attempts,
                                               error="max retries", **m)))
        i += 1
    out.sort(key=lambda r: r[1].time_ms)  # as clients send them: consumes and dead letters come later
    return out[:n]


def sends_mix(n: int) -> list[Record]:
    """``n`` messages, each only sent (benchmarks/freshness.py's load: one ``record_send`` per message,
    no trace id, one of 100 keys, eight queues) at 50,000 per second: every event is a new message,
    and a minute holds up to 3 million of them."""
    out: list[Record] = []
    for i in range(n):
        t = T0 + i // 50
        out.append((SENDS_HEADER, Event._make(make_event(EventType.PUB, t, "", "bench", f"r-{i:09d}", keys=f"k{i % 100}",
                                                         queue=i % 8, offset=i))))
    return out


def props_mix(n: int) -> list[Record]:
    """The simple mix with two properties on every send (``orderId``, one value per message, and
    ``tenant``, one of 50), as an adapter records them from the message's headers."""
    out: list[Record] = []
    for header, event in simple_mix(n):
        if event.type == EventType.PUB:
            i = int(event.msg_id.rsplit("-", 1)[1])
            event = event._replace(props={"orderId": f"order-{i}", "tenant": f"tenant-{i % 50}"})
        out.append((header, event))
    return out


def props_as_keys_mix(n: int) -> list[Record]:
    """The props mix's events with its two property values as each message's keys (``order-<i>
    tenant-<i % 50>``, in place of ``order-<i>``): what keyidx costs for the strings propidx files."""
    out: list[Record] = []
    for header, event in props_mix(n):
        i = int(event.msg_id.rsplit("-", 1)[1])
        out.append((header, event._replace(keys=f"order-{i} tenant-{i % 50}")))
    return out


MIXES = {"simple": simple_mix, "realistic": realistic_mix, "sends": sends_mix, "props": props_mix,
         "props-off": props_mix, "props-as-keys": props_as_keys_mix}
INDEXED_PROPS = {"props": ("orderId", "tenant")}
"""The property names a mix's store indexes (``props-off`` and ``props-as-keys``: none)."""
PER_VALUE_TABLES = (schema.PROPIDX, schema.KEYIDX)
"""The index tables whose bytes per indexed value (per row) a run prints: a property's and a key's."""
DEFAULT_MIXES = ("simple", "realistic")
"""The mixes a run measures unless ``--mix`` says otherwise (issue 27's two)."""


class Payload(NamedTuple):
    client_id: str
    seq: int
    data: bytes
    events: int


def encode(records: Sequence[Record]) -> list[Payload]:
    """Trace-log records: each client's events in batches of :data:`BATCH_EVENTS`, in arrival order."""
    pending: dict[str, tuple[BatchHeader, list[Event]]] = {}
    seqs: dict[str, int] = {}
    out: list[Payload] = []

    def emit(header: BatchHeader, events: list[Event]) -> None:
        seq = seqs[header.client_id] = seqs.get(header.client_id, 0) + 1
        batch = BatchHeader(header.client_id, seq, header.app, header.host)
        out.append(Payload(header.client_id, seq, wire.encode_batch(batch, events), len(events)))

    for header, event in records:
        _, events = pending.setdefault(header.client_id, (header, []))
        events.append(event)
        if len(events) == BATCH_EVENTS:
            emit(header, events)
            del pending[header.client_id]
    for header, events in pending.values():
        emit(header, events)
    return out


def micro_batches(payloads: Sequence[Payload], events: int = MICRO_BATCH_EVENTS) -> Iterator[list[Payload]]:
    """``payloads`` in consecutive groups of at least ``events`` events (the last one may be smaller)."""
    batch: list[Payload] = []
    count = 0
    for payload in payloads:
        batch.append(payload)
        count += payload.events
        if count >= events:
            yield batch
            batch, count = [], 0
    if batch:
        yield batch


def write_log(log_dir: str, payloads: Sequence[Payload]) -> None:
    """The payloads as a trace log written by the collector's writer, sealed every :data:`SEGMENT_RECORDS`
    records (an empty ``payloads`` gives an empty log)."""
    log = TraceLog.open(log_dir, durability="os")
    try:
        for s in range(0, len(payloads), SEGMENT_RECORDS):
            log.append([(T0, p.client_id, p.seq, p.data) for p in payloads[s:s + SEGMENT_RECORDS]])
            log.roll()
    finally:
        log.close()


# -- counting --------------------------------------------------------------------------------

def sqlite_table_bytes(path: str) -> dict[str, int]:
    """Bytes of each table's pages in the SQLite file at ``path`` (SQLite's ``dbstat``; after the same
    checkpoint as :func:`sqlite_bytes`), for the per-table line row a prints."""
    with sqlite3.connect(path) as db:
        return {name: size for name, size in db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")}


def sqlite_bytes(path: str) -> int:
    """The SQLite file's size after ``PRAGMA wal_checkpoint(TRUNCATE)`` (no VACUUM), its WAL included."""
    db = sqlite3.connect(path)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    wal = path + "-wal"
    return os.path.getsize(path) + (os.path.getsize(wal) if os.path.exists(wal) else 0)


def rows_and_cells(url: str) -> tuple[int, int]:
    """Rows and cells in every table of the store's layout, read through the store's own scans."""
    rows = cells = 0
    store = open_store(url, create_tables=False)
    try:
        for table in schema.TABLES:
            for _, columns in store.scan(table.name, b"", b"\xff" * 8):
                rows += 1
                cells += len(columns)
    finally:
        store.close()
    return rows, cells


def table_rows(url: str, names: Sequence[str]) -> dict[str, int]:
    """Rows in each of the store's tables ``names`` (an index table's rows are its indexed values)."""
    store = open_store(url, create_tables=False)
    try:
        return {name: sum(1 for _ in store.scan(name, b"", b"\xff" * 8)) for name in names}
    finally:
        store.close()


def per_value(table_sizes: dict[str, int], rows: dict[str, int]) -> dict[str, tuple[float, int]]:
    """``{table: (bytes per row, rows)}`` of the tables in ``rows`` that have any."""
    return {name: (table_sizes.get(name, 0) / n, n) for name, n in rows.items() if n}


def per_value_text(figures: dict[str, tuple[float, int]]) -> str:
    """``propidx 78.6 B (66,668 values), keyidx 69.9 B (33,334 values)``."""
    return ", ".join(f"{name} {b:.1f} B ({n:,} values)" for name, (b, n) in figures.items()) or "no indexed values"


# -- the floor -------------------------------------------------------------------------------

_FLOOR_TABLES = (
    "CREATE TABLE events (id TEXT, t INTEGER, type INTEGER, grp TEXT, retry INTEGER, ev BLOB, "
    "PRIMARY KEY (id, t, type, grp, retry)) WITHOUT ROWID",
    "CREATE TABLE keyidx (topic TEXT, key TEXT, t INTEGER, id TEXT, PRIMARY KEY (topic, key, t, id)) WITHOUT ROWID",
    "CREATE TABLE timeidx (topic TEXT, t INTEGER, id TEXT, PRIMARY KEY (topic, t, id)) WITHOUT ROWID",
)


def floor(path: str, batches: Sequence[Sequence[Payload]]) -> None:
    """The lean floor: decode, then the events by message id, topic+key+time -> id and topic+time -> id
    (sends only) in three SQLite tables, one ``executemany`` per table in one transaction per batch."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    for ddl in _FLOOR_TABLES:
        db.execute(ddl)
    for batch in batches:
        events, keyed, timed = [], [], []
        for payload in batch:
            for e in wire.decode_batch(payload.data).events:
                events.append((e.msg_id, e.time_ms, e.type, e.group, e.retry, wire.encode_event(e)))
                if e.type == EventType.PUB:
                    t = e.store_ms or e.time_ms
                    keyed += [(e.topic, k, t, e.msg_id) for k in e.keys.split(" ") if k]
                    timed.append((e.topic, t, e.msg_id))
        db.execute("BEGIN")
        db.executemany("INSERT OR REPLACE INTO events VALUES (?, ?, ?, ?, ?, ?)", events)
        db.executemany("INSERT OR REPLACE INTO keyidx VALUES (?, ?, ?, ?)", keyed)
        db.executemany("INSERT OR REPLACE INTO timeidx VALUES (?, ?, ?)", timed)
        db.execute("COMMIT")
    db.close()


def floor_rows(path: str) -> int:
    """Rows in the floor's three tables (one value each, so also its cells)."""
    db = sqlite3.connect(path)
    try:
        return sum(db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("events", "keyidx", "timeidx"))
    finally:
        db.close()


# -- HBase -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class HBase:
    """A standalone HBase started by ``scripts/hbase start``: its Thrift port, JVMs and data directory."""

    run_dir: str
    port: int
    pids: tuple[int, ...]  # the HBase JVM (master + region server + ZooKeeper) and the Thrift server

    @property
    def tables_dir(self) -> str:
        return os.path.join(self.run_dir, "data", "root", "data", "default")

    def cpu_seconds(self) -> float:
        return sum(tree_cpu_seconds(pid) for pid in self.pids)


def find_hbase(run_dir: str) -> HBase:
    """The HBase whose ``scripts/hbase`` run directory is ``run_dir``; :class:`Unreachable` if it is not running."""
    try:
        with open(os.path.join(run_dir, "thrift.port")) as f:
            port = int(f.read())
        pids = []
        for name in ("master", "thrift"):
            with open(os.path.join(run_dir, f"{name}.pid")) as f:
                pids.append(int(f.read()))
            os.kill(pids[-1], 0)
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except (OSError, ValueError) as exc:
        raise Unreachable(f"HBase (scripts/hbase, run dir {run_dir}) is not reachable: {exc}; "
                          "start it with scripts/hbase start") from exc
    return HBase(run_dir, port, tuple(pids))


def admin(hbase: HBase, action: str, namespace: str) -> None:
    """``flush`` or ``compact`` (major, then the replaced files archived) the namespace's tables
    (:data:`ADMIN_TOOL`, run on the server's own classpath and JVM flags)."""
    with open(f"/proc/{hbase.pids[0]}/cmdline", "rb") as f:
        argv = [a.decode() for a in f.read().split(b"\0") if a]
    flags = [a for i, a in enumerate(argv[1:], 1)
             if a.startswith(("--add-", "-cp")) or argv[i - 1].startswith(("--add-", "-cp"))]
    names = sorted(d for d in os.listdir(hbase.tables_dir) if d.startswith(namespace + "_"))
    if not names:  # the wrong run directory, or a namespace spelt differently: no figure rather than 0 bytes
        raise RuntimeError(f"no tables {namespace}_* in {hbase.tables_dir}")
    log = os.path.join(hbase.run_dir, "logs", "index-cost-admin.log")  # for the server's log4j2 config
    done = subprocess.run(["java", *flags, f"-Dhbase.log.file={log}", ADMIN_TOOL, action, *names],
                          capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{ADMIN_TOOL} {action} failed (exit {done.returncode}): {done.stderr[-2000:]}")


def table_bytes(hbase: HBase, namespace: str) -> dict[str, int]:
    """Bytes of each of the namespace's table directories (store files; the WAL lives elsewhere),
    by table name without the namespace prefix."""
    sizes: dict[str, int] = {}
    for name in os.listdir(hbase.tables_dir):
        if name.startswith(namespace + "_"):
            sizes[name.removeprefix(namespace + "_")] = sum(
                os.path.getsize(os.path.join(parent, f))
                for parent, _, files in os.walk(os.path.join(hbase.tables_dir, name)) for f in files)
    return sizes

