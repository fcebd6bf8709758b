"""Scale-out figures: (a) ingest through 1 -> 3 collectors, file log vs Kafka log vs producing straight
to Kafka; (b) the index job reading Kafka in local[1] / local[2] vs raw happybase puts of the same rows.

(a) Every client posts the same pre-encoded batches (``--events-per-batch`` events, a fresh
    sequence number per request) and waits for each answer, like the library's dispatcher;
    clients are spread over the collectors.  Three ways to make a batch durable:

    * ``file log``:  collectors with the file trace log (default ``fsync`` group commit);
    * ``kafka log``: collectors with ``--log kafka://...`` (200 after acks=all);
    * ``direct``:    the peer a user would pick instead: the same batch bytes produced straight
      to the same broker by confluent-kafka with ``acks=all`` and the idempotent producer, the
      same number of clients each waiting for its record's acknowledgement (no collector, so
      the same figure for every collector count).

    Printed: events/s and p99 acknowledgement latency; target: kafka log >= 70 % of direct.
(b) ``tracehook index --source kafka://`` one-shot (AvailableNow) in local[1], local[2] and on
    scripts/spark's standalone cluster (``cluster``) into a fresh HBase namespace
    (tables created beforehand, as for the peer), events/s from its report line (the query's
    time, without the JVM start), vs
    ``benchmarks/index_throughput.raw_happybase``: exactly the rows the index job writes
    (``batched_rows(..., mark=False)``), precomputed, sent with happybase batched puts.
    Target: >= 60 % of raw.

PNG plots (matplotlib, ``pip install -e '.[bench]'``) go to ``--plot-dir``::

    scripts/kafka start && scripts/hbase start && scripts/spark-kafka fetch   # (b) cluster: scripts/spark start
    python benchmarks/scaling.py --quick          # about 3 minutes
    python benchmarks/scaling.py --part a --seconds 10 --collectors 1,2,3
"""

from __future__ import annotations

import argparse
import dataclasses
import http.client
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from index_throughput import events, raw_happybase

from collector.cli.demo import free_port
from tracehook import wire

EVENTS_PER_BATCH = 1000
"""About 108 KB: a busy app's batch (the library sends up to 5,000 events / 1 MiB per batch)."""
DEFAULT_PLOT_DIR = os.path.join(ROOT, "build", "benchmarks")


def _script(name: str, command: str) -> str:
    out = subprocess.run([os.path.join(ROOT, "scripts", name), command], capture_output=True, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def _packed_events(n: int) -> list[bytes]:
    """``n`` benchmark events, each msgpack-encoded once (the dispatcher's per-event form)."""
    import msgpack

    return [msgpack.packb(list(e), use_bin_type=True) for _, e in events(n)]


def _body(client_id: str, seq: int, packed: list[bytes]) -> bytes:
    return wire.encode_batch_packed(wire.BatchHeader(client_id, seq, "bench", "bench-host", 0, {}), packed)


# -- (a) load generators: one process per `--procs`, `--threads` clients each ---------------------

def _http_clients(urls: list[str], threads: int, seconds: float, n_events: int, first: int,
                  out: multiprocessing.Queue) -> None:
    packed = _packed_events(n_events)
    latencies: list[float] = []
    done = [0]
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client(i: int) -> None:
        url = urls[(first + i) % len(urls)]
        host, port = url.split("//")[1].split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        cid, seq, mine = f"bench-{first}-{i}-{uuid.uuid4().hex[:6]}", 0, []
        while time.monotonic() < deadline:
            seq += 1
            started = time.perf_counter()
            conn.request("POST", "/v1/batches", body=_body(cid, seq, packed),
                         headers={"Content-Type": "application/msgpack"})
            resp = conn.getresponse()
            resp.read()
            if resp.status == 200:
                mine.append(time.perf_counter() - started)
        with lock:
            latencies.extend(mine)
            done[0] += len(mine) * n_events

    workers = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    out.put((done[0], latencies))


def _direct_clients(bootstrap: str, topic: str, threads: int, seconds: float, n_events: int, first: int,
                    out: multiprocessing.Queue) -> None:
    from confluent_kafka import Producer

    packed = _packed_events(n_events)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 1})
    latencies: list[float] = []
    done = [0]
    lock = threading.Lock()
    stop = threading.Event()
    deadline = time.monotonic() + seconds

    def poller() -> None:
        while not stop.is_set():
            producer.poll(0.01)

    def client(i: int) -> None:
        cid, seq, mine = f"bench-{first}-{i}-{uuid.uuid4().hex[:6]}", 0, []
        acked = threading.Event()
        ok = [False]

        def report(err: object, msg: object) -> None:
            ok[0] = err is None
            acked.set()

        while time.monotonic() < deadline:
            seq += 1
            acked.clear()
            started = time.perf_counter()
            producer.produce(topic, value=_body(cid, seq, packed), key=cid.encode(), on_delivery=report)
            acked.wait(30)
            if ok[0]:
                mine.append(time.perf_counter() - started)
        with lock:
            latencies.extend(mine)
            done[0] += len(mine) * n_events

    polling = threading.Thread(target=poller)
    polling.start()
    workers = [threading.Thread(target=client, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    polling.join()
    producer.flush(10)
    out.put((done[0], latencies))


def _drive(target: str, args: argparse.Namespace, urls: list[str], bootstrap: str, topic: str) -> tuple[float, float]:
    """Run the clients for ``args.seconds``; returns (events/s, p99 ms)."""
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue = ctx.Queue()
    procs = []
    for p in range(args.procs):
        if target == "direct":
            fn, fargs = _direct_clients, (bootstrap, topic, args.threads, args.seconds, args.events_per_batch,
                                          p * args.threads, out)
        else:
            fn, fargs = _http_clients, (urls, args.threads, args.seconds, args.events_per_batch, p * args.threads,
                                        out)
        procs.append(ctx.Process(target=fn, args=fargs))
    for proc in procs:
        proc.start()
    results = [out.get(timeout=args.seconds + 120) for _ in procs]
    for proc in procs:
        proc.join()
    total = sum(n for n, _ in results)
    lat = sorted(x for _, lats in results for x in lats)
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000 if lat else float("nan")
    return total / args.seconds, p99


def _start_collectors(n: int, log_url: str, tmp: str) -> tuple[list[subprocess.Popen[bytes]], list[str]]:
    import requests

    procs, urls = [], []
    for i in range(n):
        port, data = free_port(), os.path.join(tmp, f"c{i}-{uuid.uuid4().hex[:6]}")
        os.makedirs(data)
        log = open(os.path.join(data, "collector.out"), "wb")  # noqa: SIM115 - the child keeps it
        procs.append(subprocess.Popen([sys.executable, "-m", "collector.cli.main", "collector", "--data-dir", data,
                                       "--port", str(port), "--store", "none", "--log", log_url,
                                       "--log-level", "WARNING"], cwd=ROOT, stdout=log, stderr=log))
        urls.append(f"http://127.0.0.1:{port}")
    for url in urls:
        for _ in range(300):
            try:
                if requests.get(url + "/healthz", timeout=1).json()["log"]["state"] == "ok":
                    break
            except (requests.ConnectionError, KeyError):
                pass
            time.sleep(0.1)
    return procs, urls


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(timeout=60)


def part_a(args: argparse.Namespace, bootstrap: str) -> list[tuple[str, int, float, float]]:
    """Rows (log, collectors, events/s, p99 ms): the median of ``args.rounds`` rounds, the three
    ways taking turns within a round (other load on the machine then hits all three alike)."""
    import statistics

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.collectors:
            seen: dict[str, list[tuple[float, float]]] = {"file log": [], "kafka log": [], "direct": []}
            for _ in range(args.rounds):
                for mode in seen:
                    topic = f"bench-{uuid.uuid4().hex[:8]}"
                    procs, urls = [], []
                    if mode != "direct":
                        log_url = "file" if mode == "file log" else f"kafka://{bootstrap}/{topic}"
                        procs, urls = _start_collectors(n, log_url, tmp)
                    try:
                        seen[mode].append(_drive("direct" if mode == "direct" else "http", args, urls, bootstrap,
                                                 topic))
                    finally:
                        _stop(procs)
                    rate, p99 = seen[mode][-1]
                    print(f"  {mode:<10} {n} collector(s): {rate:>10,.0f} events/s  p99 {p99:7.1f} ms", flush=True)
            for mode, results in seen.items():
                rows.append((mode, n, statistics.median(r[0] for r in results),
                             statistics.median(r[1] for r in results)))
    return rows


# -- (b) index throughput ----------------------------------------------------------------------

def _produce_topic(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    records = events(n)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all"})
    for seq, start in enumerate(range(0, n, 500)):
        part = records[start:start + 500]
        header = dataclasses.replace(part[0][0], seq=seq)
        producer.produce(topic, value=wire.encode_batch(header, [tuple(e) for _, e in part]), key=b"bench")
        producer.poll(0)
    assert producer.flush(60) == 0


def part_b(args: argparse.Namespace, bootstrap: str, hbase_port: int) -> list[tuple[str, float]]:
    """Rows (path, events/s)."""
    from collector.index.indexer import DEFAULT_BATCH_SIZE, batched_rows
    from collector.store.hbase import HBaseStore

    topic = f"bench-index-{uuid.uuid4().hex[:8]}"
    _produce_topic(bootstrap, topic, args.index_events)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.masters:
            namespace = f"bench{uuid.uuid4().hex[:8]}"
            HBaseStore("127.0.0.1", hbase_port, namespace).close()  # tables created off the clock, as for raw puts
            env = {**os.environ, "TRACEHOOK_INDEX_CHECKPOINTS": tmp}
            master = name
            if name == "cluster":  # scripts/spark's standalone master and worker; the driver on loopback
                master = _script("spark", "start")
                env.update(SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
            done = subprocess.run([sys.executable, "-m", "collector.cli.main", "index", "--master", master,
                                   "--source", f"kafka://{bootstrap}/{topic}",
                                   "--store", f"hbase://127.0.0.1:{hbase_port}?namespace={namespace}"],
                                  cwd=ROOT, env=env, capture_output=True, text=True)
            store = HBaseStore("127.0.0.1", hbase_port, namespace, create_tables=False)
            store.drop_tables()
            store.close()
            match = re.search(r"([\d,]+) event\(s\) in ([\d.]+)s", done.stdout)
            if done.returncode != 0 or match is None:
                raise SystemExit(f"index run failed: {done.stderr[-2000:]}")
            rate = int(match.group(1).replace(",", "")) / float(match.group(2))
            rows.append((f"index from Kafka, {name}", rate))
            print(f"  index from Kafka, {name}: {rate:,.0f} events/s", flush=True)
    # The job's tasks read their messages' rollup parts back instead of writing markers (mark=False).
    writes = list(batched_rows(events(args.index_events), DEFAULT_BATCH_SIZE, mark=False))
    store = HBaseStore("127.0.0.1", hbase_port, f"bench{uuid.uuid4().hex[:8]}")
    try:
        started = time.perf_counter()
        raw_happybase(store, writes)
        rate = args.index_events / (time.perf_counter() - started)
    finally:
        store.drop_tables()
        store.close()
    rows.append(("raw happybase puts", rate))
    print(f"  raw happybase puts: {rate:,.0f} events/s", flush=True)
    return rows


# -- output --------------------------------------------------------------------------------------

def plot(rows_a: list[tuple[str, int, float, float]], rows_b: list[tuple[str, float]], plot_dir: str) -> list[str]:
    """One PNG per curve: ingest events/s and p99 over collectors, index events/s per master."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(plot_dir, exist_ok=True)
    written = []
    for column, name, label in ((2, "scaling_ingest_events.png", "events/s"),
                                (3, "scaling_ingest_p99.png", "p99 acknowledgement (ms)")):
        if not rows_a:
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        for mode in ("file log", "kafka log", "direct"):
            points = [(r[1], r[column]) for r in rows_a if r[0] == mode]
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=mode)
        ax.set_xlabel("collectors")
        ax.set_ylabel(label)
        ax.set_xticks(sorted({r[1] for r in rows_a}))
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(plot_dir, name), dpi=100)
        plt.close(fig)
        written.append(os.path.join(plot_dir, name))
    if rows_b:
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.bar([r[0].replace("index from Kafka, ", "") for r in rows_b], [r[1] for r in rows_b])
        ax.set_ylabel("events/s into HBase")
        ax.grid(alpha=0.3, axis="y")
        fig.tight_layout()
        path = os.path.join(plot_dir, "scaling_index_kafka.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def _exit_on_term(signum: int, frame: object) -> None:
    """SIGTERM (``timeout``, ``kill``) unwinds like Ctrl-C, so the ``finally`` blocks stop the collectors."""
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _exit_on_term)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few minutes: 3 s per point, 1 and 3 collectors, "
                                                                 "100k events to index")
    parser.add_argument("--part", choices=("a", "b", "all"), default="all")
    parser.add_argument("--seconds", type=float, default=10.0, help="(a) load time per point")
    parser.add_argument("--rounds", type=int, default=3, help="(a) rounds per point (the median is reported)")
    parser.add_argument("--collectors", default="1,2,3", help="(a) collector counts")
    parser.add_argument("--procs", type=int, default=3, help="(a) load-generating processes")
    parser.add_argument("--threads", type=int, default=8, help="(a) clients per process")
    parser.add_argument("--events-per-batch", type=int, default=EVENTS_PER_BATCH)
    parser.add_argument("--index-events", type=int, default=1_000_000, help="(b) events in the topic")
    parser.add_argument("--masters", default="local[1],local[2],cluster",
                        help="(b) Spark masters; cluster = scripts/spark's standalone master (one worker, one core)")
    parser.add_argument("--kafka", default=None, help="bootstrap HOST:PORT (default: scripts/kafka start)")
    parser.add_argument("--hbase-port", type=int, default=None, help="HBase Thrift port (default: scripts/hbase port)")
    parser.add_argument("--plot-dir", default=DEFAULT_PLOT_DIR)
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.rounds, args.collectors, args.procs, args.threads = 3.0, 2, "1,3", 2, 6
        args.index_events = 100_000
    args.collectors = [int(n) for n in args.collectors.split(",")]
    args.masters = args.masters.split(",")
    bootstrap = args.kafka or _script("kafka", "start")
    rows_a: list[tuple[str, int, float, float]] = []
    rows_b: list[tuple[str, float]] = []
    if args.part in ("a", "all"):
        print(f"(a) ingest: {args.procs}x{args.threads} clients, {args.events_per_batch} events/batch, "
              f"{args.seconds:g}s per point")
        rows_a = part_a(args, bootstrap)
    if args.part in ("b", "all"):
        port = args.hbase_port or int(_script("hbase", "port"))
        print(f"(b) index {args.index_events:,} events from Kafka into HBase")
        rows_b = part_b(args, bootstrap, port)

    print()
    if rows_a:
        print("| log | collectors | events/s | p99 ack (ms) | vs direct |\n|---|---:|---:|---:|---:|")
        for mode, n, rate, p99 in rows_a:
            direct = next(r[2] for r in rows_a if r[0] == "direct" and r[1] == n)
            print(f"| {mode} | {n} | {rate:,.0f} | {p99:.1f} | {rate / direct:.0%} |")
        kafka = max(r[2] for r in rows_a if r[0] == "kafka log")
        direct = max(r[2] for r in rows_a if r[0] == "direct")
        verdict = "met" if kafka >= 0.7 * direct else "NOT met"
        print(f"\nbest kafka log {kafka:,.0f} vs best direct {direct:,.0f} events/s: {kafka / direct:.0%} "
              f"(target >= 70 %: {verdict})")
    if rows_b:
        raw = rows_b[-1][1]
        print("\n| path | events/s | vs raw puts |\n|---|---:|---:|")
        for name, rate in rows_b:
            print(f"| {name} | {rate:,.0f} | {rate / raw:.0%} |")
        best = max(r[1] for r in rows_b[:-1])
        print(f"\nbest index from Kafka: {best / raw:.0%} of raw happybase (target >= 60 %: "
              f"{'met' if best >= 0.6 * raw else 'NOT met'})")
    for path in plot(rows_a, rows_b, args.plot_dir):
        print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
