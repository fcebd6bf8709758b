"""What indexing costs per event: CPU, throughput, disk, rows and cells, on whatever layout the store has.

One table per run; every row of one (events, mix) pair indexes the same events:

* ``a``  in-process -> SQLite: the index job's own partition step (``index_payloads``, rollup parts read
  back) then its driver step (``finish_batch``: dead-letter placement, rollups) per micro-batch of
  ~20,000 events, as a follow run does, without Spark; the store stays open from one micro-batch to
  the next as in the job's worker (spark_jobs.store_cache), and its last close (the WAL checkpoint) is
  measured too.  CPU: this process (writer threads included);
* ``b``  the Spark index job (``index_once``, ``--master``, default ``local[2]``) one-shot over a trace
  log written by the collector's log writer, into SQLite.  CPU: every process of the job (this driver,
  the JVM, the Python workers: /proc utime + stime over the process tree, reaped children included),
  in steady state: a run over an empty log is measured on the same warm session and subtracted
  (so is its wall time, for events/s);
* ``c``  both into real HBase (``scripts/hbase start``): client CPU as above, plus the CPU of the HBase
  JVM and the Thrift server (/proc of their pids) while indexing and flushing the memstores after;
  bytes in the namespace's table directories after that flush and a major compaction (the WAL apart;
  ``HBaseCompact.java``; the compaction's CPU and the bytes of each table are printed on stderr);
* ``d``  the floor: decode, then three SQLite tables (events by message id; topic+key+time -> id;
  topic+time -> id), one ``executemany`` transaction per micro-batch.  A yardstick, not a design.

SQLite bytes: the file after ``PRAGMA wal_checkpoint(TRUNCATE)``, no VACUUM.  Rows and cells: what the
store's own scans return over every table of the layout (the floor: its rows, one value each).

Mixes (``--mix``): ``simple``, a message sent and consumed once by one group (send, consume start,
consume end; benchmarks/index_throughput.py's events); ``realistic``, 3-6 events per message (a send,
one or two groups' consume start/end, some failures, retries and dead letters; one or two keys; four
topics; a fixed seed); ``sends``, only sends, each a new message, 50,000 per second (benchmarks/freshness.py's
load; not in the default run); ``props``, the simple mix with two indexed properties on every send
(``orderId``, one value per message, and ``tenant``, one of 50), and ``props-off``, the same events
with no property indexed (the difference is what indexing them costs); ``props-as-keys``, the same
events with those two values as each message's keys and no property indexed, so that a key's index row
and a property's with the same strings compare (each run prints bytes per indexed value of propidx
and keyidx: a table's bytes over its rows).  Trace-log records of 100 events each, from one client each::

    python benchmarks/index_cost.py --events 100000 --rows a,d --mix simple     # a quick look
    scripts/hbase start
    python benchmarks/index_cost.py --events 100000                             # every row, both mixes
    python benchmarks/index_cost.py --events 1000000 --rows a,d
    scripts/hbase thrift2-start    # HBase tables created pre-split (and as a newer layout creates them)
    python benchmarks/index_cost.py --rows c --hbase-options "thrift2=127.0.0.1:$(scripts/hbase thrift2-port)"

Exit codes: 0 done; 2 bad arguments, or HBase (rows c) or Spark (rows b, c) not reachable (one line).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.collector_ingest import tree_cpu_seconds
from benchmarks.index_cost_support import (
    DEFAULT_MIXES,
    INDEXED_PROPS,
    MICRO_BATCH_EVENTS,
    MIXES,
    PER_VALUE_TABLES,
    HBase,
    LogRow,
    Payload,
    Unreachable,
    admin,
    encode,
    find_hbase,
    floor,
    floor_rows,
    micro_batches,
    per_value,
    per_value_text,
    rows_and_cells,
    sqlite_bytes,
    sqlite_table_bytes,
    table_bytes,
    table_rows,
    write_log,
)
from collector.store import BadStoreUrlError, StoreUnavailableError, check_store_url, open_store, props
from collector.store import local as local_store
from spark_jobs.driver import finish_partitions
from spark_jobs.partition import DEFAULT_BATCH_SIZE, index_partition
from spark_jobs.store_cache import close_stores

DEFAULT_EVENTS = (100_000, 1_000_000)
ROWS = ("a", "b", "c", "d")
WARM_UP_RECORDS = 20
"""Trace-log records (2,000 events) a fresh Spark session indexes before anything is measured."""
PUTS = ("c", "python")
"""Row a's embedded-store write paths (``--puts``): ``c``, the puts and multi-row reads of
``collector.store._sqlput``; ``python``, Python's ``executemany`` and ``IN`` lookups (what
``TRACEHOOK_PYTHON_PUTS=1`` runs).  The trial of apsw against both (issue 42) is in benchmarks/RESULTS.md."""


@contextlib.contextmanager
def puts_path(path: str) -> Iterator[None]:
    """The embedded store's write path ``path`` (:data:`PUTS`) for the stores opened meanwhile."""
    saved = local_store._sqlput
    if path == "python":
        local_store._sqlput = None
    try:
        yield
    finally:
        local_store._sqlput = saved


@dataclass(frozen=True)
class Result:
    """One row of the table: totals over ``events`` events."""

    events: int
    mix: str
    path: str
    cpu_s: float
    seconds: float
    bytes: int
    rows: int
    cells: int
    server_cpu_s: float | None = None  # HBase JVM + Thrift server
    per_value: dict[str, tuple[float, int]] = field(default_factory=dict)
    """Bytes per indexed value (per row) and rows of :data:`PER_VALUE_TABLES` (propidx, keyidx)."""


@dataclass(frozen=True)
class Cost:
    cpu_s: float
    seconds: float
    server_cpu_s: float | None = None


def prepare(url: str, indexed: Sequence[str]) -> None:
    """Create the store's tables before the clock starts, as the job's driver does, with ``indexed``
    as its indexed property names."""
    store = open_store(url)
    if indexed:
        props.save(store, props.NOTHING.with_names(None, indexed))
    store.close()


def in_process(url: str, batches: Sequence[Sequence[Payload]], hbase: HBase | None = None,
               indexed: Sequence[str] = ()) -> Cost:
    """Row a (and c's first): each micro-batch through the index job's partition and driver steps."""
    prepare(url, indexed)
    server0 = hbase.cpu_seconds() if hbase else 0.0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for batch in batches:
        task = index_partition(url, DEFAULT_BATCH_SIZE)
        finish_partitions(url, list(task(iter([LogRow(payload=p.data) for p in batch]))))
    # The job keeps its store open between micro-batches: its last close (the WAL checkpoint) is counted too.
    close_cpu0 = time.process_time()
    close_stores()
    seconds, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    print(f"  in process: the store's last close took {(cpu - (close_cpu0 - cpu0)) * 1e6 / max(1, n_events(batches)):.2f} "
          "µs of CPU per event (included)", file=sys.stderr, flush=True)
    return Cost(cpu, seconds, server_cpu(hbase, url, server0) if hbase else None)


def n_events(batches: Sequence[Sequence[Payload]]) -> int:
    return sum(p.events for batch in batches for p in batch)


def server_cpu(hbase: HBase, url: str, since: float) -> float:
    """The HBase processes' CPU seconds from ``since`` until the store's memstores are flushed
    (writing them out is part of what a write costs the server)."""
    admin(hbase, "flush", namespace(url))
    return hbase.cpu_seconds() - since


def namespace(url: str) -> str:
    return parse_qs(urlsplit(url).query)["namespace"][0]


def spark_job(spark: Any, log_dir: str, empty_log: str, make_url: Callable[[], str], events: int,
              hbase: HBase | None = None, indexed: Sequence[str] = ()) -> tuple[Cost, str]:
    """Row b (and c's second): the job over ``log_dir`` minus the same over ``empty_log``; and its store URL."""
    from spark_jobs import index_once

    def run(log: str) -> tuple[int, Cost, str]:
        url = make_url()
        prepare(url, indexed)
        server0 = hbase.cpu_seconds() if hbase else 0.0
        cpu0, wall0 = tree_cpu_seconds(os.getpid()), time.perf_counter()
        report = index_once(spark, log, url)
        seconds, cpu = time.perf_counter() - wall0, tree_cpu_seconds(os.getpid()) - cpu0
        return report.events, Cost(cpu, seconds, server_cpu(hbase, url, server0) if hbase else None), url

    _, empty, empty_url = run(empty_log)
    drop(empty_url)
    print(f"  a run over the empty log: {empty.cpu_s:.1f} CPU-s, {empty.seconds:.1f} s", file=sys.stderr, flush=True)
    n, full, url = run(log_dir)
    if n != events:
        raise RuntimeError(f"the index job indexed {n} events, not {events}")
    server = None if hbase is None else full.server_cpu_s - empty.server_cpu_s  # type: ignore[operator]
    return Cost(full.cpu_s - empty.cpu_s, full.seconds - empty.seconds, server), url


def drop(url: str) -> None:
    if url.startswith("hbase://"):
        store = open_store(url, create_tables=False)
        try:
            store.drop_tables()
        finally:
            store.close()


def start_spark(master: str, work: str, payloads: Sequence[Payload]) -> Any:
    """A Spark session that has indexed a small log already (JVM, JIT and Python workers warm)."""
    from spark_jobs import index_once, spark_session

    spark = spark_session(master)
    warm_log = os.path.join(work, "warm-log")
    write_log(warm_log, payloads[:WARM_UP_RECORDS])
    index_once(spark, warm_log, f"local:{os.path.join(work, 'warm.sqlite3')}")
    return spark


def check_spark() -> None:
    if importlib.util.find_spec("pyspark") is None or shutil.which("java") is None:
        raise Unreachable("the Spark rows need PySpark and Java 17+ (pip install -e '.[index]'; a JDK on PATH)")


def measure(n: int, mix: str, rows: set[str], args: argparse.Namespace, hbase: HBase | None,
            spark_holder: list[Any], work: str) -> list[Result]:
    """Every asked row for ``n`` events of ``mix``, in the order a, d, b, c."""
    payloads = encode(MIXES[mix](n))
    indexed = INDEXED_PROPS.get(mix, ())
    batches = list(micro_batches(payloads, args.micro_batch))
    results: list[Result] = []

    def local(tag: str) -> str:
        return f"local:{os.path.join(work, f'{tag}.sqlite3')}"

    def add(path: str, cost: Cost, url: str) -> None:
        if url.startswith("local:"):
            size = sqlite_bytes(url.removeprefix("local:"))
            tables = sqlite_table_bytes(url.removeprefix("local:"))
            print(f"  {path}: bytes per event by table: " + ", ".join(
                f"{name} {b / n:.1f}" for name, b in sorted(tables.items(), key=lambda t: -t[1])),
                file=sys.stderr, flush=True)
        else:
            assert hbase is not None
            server0 = hbase.cpu_seconds()
            admin(hbase, "compact", namespace(url))
            print(f"  {path}: the major compaction took {(hbase.cpu_seconds() - server0) * 1e6 / n:.1f} µs "
                  "of HBase CPU per event", file=sys.stderr, flush=True)
            tables = table_bytes(hbase, namespace(url))
            size = sum(tables.values())
            print(f"  {path}: bytes per event by table: " + ", ".join(
                f"{name} {b / n:.1f}" for name, b in sorted(tables.items(), key=lambda t: -t[1])),
                file=sys.stderr, flush=True)
        n_rows, n_cells = rows_and_cells(url)
        figures = per_value(tables, table_rows(url, PER_VALUE_TABLES))
        print(f"  {path}: bytes per indexed value: {per_value_text(figures)}", file=sys.stderr, flush=True)
        results.append(Result(n, mix, path, cost.cpu_s, cost.seconds, size, n_rows, n_cells, cost.server_cpu_s,
                              figures))
        drop(url)
        print(f"  {n:,} {mix}: {path} done", file=sys.stderr, flush=True)

    if "a" in rows:
        for path in args.puts or [None]:
            url = local(f"a-{path}")
            with puts_path(path) if path else contextlib.nullcontext():
                add("a in-process -> SQLite" + (f" ({path} puts)" if path else ""), in_process(url, batches, indexed=indexed), url)
    if "d" in rows:
        path = os.path.join(work, "floor.sqlite3")
        cpu0, wall0 = time.process_time(), time.perf_counter()
        floor(path, batches)
        cost = Cost(time.process_time() - cpu0, time.perf_counter() - wall0)
        n_rows = floor_rows(path)
        results.append(Result(n, mix, "d floor: decode + 3 SQLite tables", cost.cpu_s, cost.seconds,
                              sqlite_bytes(path), n_rows, n_rows))
    if "b" in rows or "c" in rows:
        log_dir, empty_log = os.path.join(work, "log"), os.path.join(work, "empty-log")
        write_log(log_dir, payloads)
        write_log(empty_log, [])
        if not spark_holder:
            spark_holder.append(start_spark(args.master, work, payloads))
        spark = spark_holder[0]
        if "b" in rows:
            cost, url = spark_job(spark, log_dir, empty_log, lambda: local(f"b-{uuid.uuid4().hex[:8]}"), n,
                                  indexed=indexed)
            add(f"b Spark job {args.master} -> SQLite", cost, url)
        if "c" in rows:
            assert hbase is not None

            def hbase_url() -> str:
                options = f"&{args.hbase_options}" if args.hbase_options else ""
                return f"hbase://127.0.0.1:{hbase.port}?namespace=cost{uuid.uuid4().hex[:8]}{options}"

            url = hbase_url()
            add("c in-process -> HBase", in_process(url, batches, hbase, indexed), url)
            cost, url = spark_job(spark, log_dir, empty_log, hbase_url, n, hbase, indexed)
            add(f"c Spark job {args.master} -> HBase", cost, url)
        shutil.rmtree(log_dir, ignore_errors=True)
        shutil.rmtree(empty_log, ignore_errors=True)
    return results


def table(results: Sequence[Result]) -> str:
    """The markdown table of ``results``."""
    lines = ["| events | mix | path | CPU µs/event | HBase JVM + Thrift µs/event | events/s | bytes/event "
             "| rows/event | cells/event |", "|---:|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        server = "–" if r.server_cpu_s is None else f"{r.server_cpu_s * 1e6 / r.events:.1f}"
        lines.append(f"| {r.events:,} | {r.mix} | {r.path} | {r.cpu_s * 1e6 / r.events:.1f} | {server} "
                     f"| {r.events / r.seconds:,.0f} | {r.bytes / r.events:,.0f} | {r.rows / r.events:.2f} "
                     f"| {r.cells / r.events:.2f} |")
    return "\n".join(lines)


def parse_list(text: str, allowed: Sequence[str], what: str) -> list[str]:
    items = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in items if s not in allowed]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"{what} must be a comma list of {', '.join(allowed)}, not {text!r}")
    return items


def parse_events(text: str) -> list[int]:
    try:
        sizes = [int(float(s)) for s in text.split(",") if s.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"--events must be a comma list of positive counts, not {text!r}")
    return sizes


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=parse_events, default=list(DEFAULT_EVENTS),
                        help="comma list of event counts (default 100000,1000000)")
    parser.add_argument("--mix", type=lambda s: parse_list(s, tuple(MIXES), "--mix"), default=list(DEFAULT_MIXES),
                        help="comma list of " + ", ".join(MIXES) + " (default simple,realistic)")
    parser.add_argument("--micro-batch", type=int, default=MICRO_BATCH_EVENTS,
                        help=f"events per in-process micro-batch (row a; default {MICRO_BATCH_EVENTS:,}: a follow run "
                             "behind the log takes bigger ones)")
    parser.add_argument("--rows", type=lambda s: parse_list(s, ROWS, "--rows"), default=list(ROWS),
                        help="comma list of a, b, c, d (default all)")
    parser.add_argument("--puts", type=lambda s: parse_list(s, PUTS, "--puts"), default=None,
                        help="comma list of row a's embedded-store write paths, one row each: c (_sqlput), "
                             "python (TRACEHOOK_PYTHON_PUTS=1); default: whichever the store uses")
    parser.add_argument("--master", default="local[2]", help="Spark master of rows b and c")
    parser.add_argument("--hbase-run-dir", default=os.environ.get("HBASE_RUN_DIR", os.path.join(ROOT, ".run", "hbase")),
                        help="scripts/hbase's run directory (default $HBASE_RUN_DIR or .run/hbase)")
    parser.add_argument("--hbase-options", default="",
                        help="more HBase store URL options, e.g. 'thrift2=127.0.0.1:PORT&salt_buckets=8' "
                             "(tables created pre-split through scripts/hbase thrift2-start's gateway)")
    args = parser.parse_args(argv)
    rows = set(args.rows)
    try:
        check_store_url(f"hbase://127.0.0.1:9090?namespace=check&{args.hbase_options}")
        hbase = find_hbase(args.hbase_run_dir) if "c" in rows else None
        if rows & {"b", "c"}:
            check_spark()
        if "c" in (args.puts or ()) and not local_store.SQLPUT:
            raise Unreachable("--puts c needs collector/store/_sqlput.c built (python3 setup.py build_ext --inplace)")
    except (Unreachable, BadStoreUrlError) as exc:
        print(f"index_cost: {exc}", file=sys.stderr)
        return 2

    results: list[Result] = []
    spark_holder: list[Any] = []
    work = tempfile.mkdtemp(prefix="index-cost-")
    try:
        for n in args.events:
            for mix in args.mix:
                run_dir = tempfile.mkdtemp(dir=work)
                results += measure(n, mix, rows, args, hbase, spark_holder, run_dir)
                shutil.rmtree(run_dir, ignore_errors=True)
    except StoreUnavailableError as exc:  # HBase (or its Thrift2 gateway) went away or never answered
        print(f"index_cost: {exc}", file=sys.stderr)
        return 2
    finally:
        for spark in spark_holder:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nindex cost per event ({os.cpu_count()} cores; trace-log records of 100 events; "
          f"micro-batches of ~{args.micro_batch:,} events in process)")
    print(table(results))
    print("\nbytes per indexed value (an index table's bytes over its rows)")
    for r in results:
        if r.per_value:
            print(f"  {r.events:,} {r.mix}, {r.path}: {per_value_text(r.per_value)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
