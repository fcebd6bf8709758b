"""Freshness: time from the hook call to ``GET /v1/messages/{id}`` returning the event, with the
index job following the log (``tracehook index --follow``), and follow-mode throughput next to a
one-shot ``Trigger.AvailableNow`` run over the same backlog.

Part 1, per offered load (events/s from the library, one ``record_send`` per event):
a collector subprocess (embedded store, fsync durability, default 60 s segment age) and a
follower subprocess (``--trigger 1``, warmed up before the load starts).  Every k-th message is
sampled (about ``--samples`` per run): its hook-call time, then the time the collector's query
API first answers it.  The same-run peer is today's seal-then-index path: a message becomes
queryable at the earliest when its segment seals (the manifest's ``sealed_ms``) plus a one-shot
index run over that segment (its events / the one-shot throughput of part 2); a periodic
``--every 60`` run adds up to 60 s more, not counted here.  Where the follower's time goes, from
the load's start until the last sample answers: events/s (the load's events over that time: the
follower's own rate when it stayed behind, else a lower bound), and the CPU its process tree
(driver, JVM, Python workers) was on, next to the thread-seconds it spent runnable but waiting
for a core (``/proc/.../schedstat``), per second; with the load average, since the 2-core
machine these benchmarks run on is shared.  ``--work-dir`` keeps the follower's progress lines
(``procs.out``).

Part 2: ``--backlog`` events written straight into a log (4 sealed segments), indexed once with
``index_once`` (AvailableNow) and once by a follow-mode query (trigger 1 s) into fresh stores, in
one Spark session (JVM start excluded from both).

    python benchmarks/freshness.py --rates 1000,50000 --seconds 20 --backlog 300000
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import requests  # noqa: E402

TOKEN = "bench-token"
WAIT_S = 900.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(session: requests.Session, url: str, msg_id: str) -> bool:
    try:
        return session.get(f"{url}/v1/messages/{msg_id}", timeout=10).status_code == 200
    except requests.RequestException:
        return False


def _healthy(session: requests.Session, url: str) -> bool:
    try:
        return session.get(url + "/healthz", timeout=5).ok
    except requests.RequestException:
        return False


def _until(check, what: str, timeout_s: float = WAIT_S) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


class Poller(threading.Thread):
    """Polls the oldest sampled id not yet answered; records (hook time, answered time)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.pending: deque[tuple[str, float]] = deque()
        self.done: list[tuple[str, float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        session = requests.Session()
        while not self.stop.is_set():
            if not self.pending:
                time.sleep(0.01)
                continue
            msg_id, hooked = self.pending[0]
            if _answers(session, self.url, msg_id):
                self.done.append((msg_id, hooked, time.time()))
                self.pending.popleft()
            else:
                time.sleep(0.02)


def _tree_sched(root: int) -> tuple[float, float]:
    """(CPU seconds, seconds runnable but waiting for a CPU) of ``root`` and its descendants so far:
    a follower that falls behind either works, waits for a core, or waits for something else.
    CPU from ``/proc/<pid>/stat`` (with the process's exited threads and reaped children); the
    wait from the live threads' ``/proc/<pid>/task/<tid>/schedstat`` only (exited ones are gone)."""
    parents: dict[int, int] = {}
    cpu_ticks: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", encoding="utf-8") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                parents[int(name)] = int(fields[1])
                cpu_ticks[int(name)] = sum(int(t) for t in fields[11:15])  # utime stime cutime cstime
            except (OSError, ValueError, IndexError):
                continue
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    wait = 0
    for pid in tree:
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="utf-8") as f:
                    wait += int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return sum(cpu_ticks.get(pid, 0) for pid in tree) / os.sysconf("SC_CLK_TCK"), wait / 1e9


def _load() -> float:
    return os.getloadavg()[0]


def freshness(rate: int, seconds: float, samples: int, master: str, work: str) -> dict[str, float]:
    import tracehook

    data_dir = os.path.join(work, f"fresh-{rate}")
    os.makedirs(data_dir)
    log_dir, store = os.path.join(data_dir, "log"), f"local:{os.path.join(data_dir, 'index.sqlite3')}"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    out = open(os.path.join(data_dir, "procs.out"), "wb")  # noqa: SIM115
    collector = subprocess.Popen([sys.executable, "-m", "collector", "--data-dir", data_dir, "--port", str(port),
                                  "--store-url", store, "--ingest-token", TOKEN], stdout=out, stderr=out)
    session = requests.Session()
    _until(lambda: _healthy(session, url), "the collector")
    follower = subprocess.Popen([sys.executable, "-m", "collector.cli.main", "index", "--follow", "--trigger", "1",
                                 "--log-dir", log_dir, "--store", store, "--master", master],
                                stdout=out, stderr=out, start_new_session=True)
    tracer = tracehook.Tracer(tracehook.TracerConfig(app="bench", collectors=(url,), token=TOKEN))
    try:
        tracer.record_send("warm", msg_id="warm-up")
        tracer.flush(30)
        _until(lambda: _answers(session, url, "warm-up"), "the follower's first batch (Spark start)")
        # The load starts a fresh segment, so its seal time (the peer) is the load's own.
        session.post(url + "/v1/admin/roll", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        poller = Poller(url)
        poller.start()
        total = int(rate * seconds)
        every = max(1, total // samples)
        load_before, sched_before, wall_before = _load(), _tree_sched(follower.pid), time.time()
        started = time.perf_counter()
        for i in range(total):
            due = started + i / rate
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            msg_id = f"r{rate}-{i}"
            if i % every == 0:
                poller.pending.append((msg_id, time.time()))
            tracer.record_send("bench", msg_id=msg_id, keys=f"k{i % 100}", queue=i % 8, offset=i)
        offered_s = time.perf_counter() - started
        tracer.flush(120)
        stats = tracer.stats()
        _until(lambda: not poller.pending, "every sampled message to answer")
        load_after, sched_after, wall_after = _load(), _tree_sched(follower.pid), time.time()
        poller.stop.set()
        lat = sorted(answered - hooked for _, hooked, answered in poller.done)
        # The peer: when the segment holding the load seals (default 60 s age), plus a one-shot run.
        from collector.log.file import sealed_segments

        last_hook = max(hooked for _, hooked, _ in poller.done)
        _until(lambda: any(s.sealed_ms / 1000 > last_hook for s in sealed_segments(log_dir)),
               "the load's segment to seal (60 s age)", 300)
        seals = sorted(s.sealed_ms / 1000 for s in sealed_segments(log_dir))
        peer = sorted(min(t for t in seals if t > hooked) - hooked for _, hooked, _ in poller.done)
        window = wall_after - wall_before
        return {"rate": rate, "sent": stats["sent"], "dropped": stats["dropped_total"],
                # Until the last sample answered: the follower's rate when it stayed behind the load.
                "indexed": total / window, "cores": (sched_after[0] - sched_before[0]) / window,
                "cpu_us": (sched_after[0] - sched_before[0]) / total * 1e6,
                "queued": (sched_after[1] - sched_before[1]) / window, "load": (load_before, load_after),
                "achieved": total / offered_s, "n": len(lat),
                "p50": _pct(lat, 50), "p99": _pct(lat, 99), "max": lat[-1],
                "peer_p50": _pct(peer, 50), "peer_p99": _pct(peer, 99), "peer_max": peer[-1]}
    finally:
        tracer.close(10)
        if follower.poll() is None:
            os.killpg(follower.pid, signal.SIGINT)
            follower.wait(120)
        collector.terminate()
        collector.wait(60)
        out.close()


def _pct(values: list[float], p: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[min(98, int(p) - 1)] if p < 100 else values[-1]


def throughput(backlog: int, master: str, work: str) -> tuple[float, float]:
    """(one-shot events/s, follow events/s) over the same backlog."""
    from index_spark import write_log

    from collector.log.state import readable_end
    from spark_jobs import index_once, index_stream, spark_session
    from spark_jobs.checkpoint import default_checkpoint, spark_committed

    log_dir = os.path.join(work, "backlog")
    write_log(log_dir, backlog, 4)
    write_log(os.path.join(work, "warm"), 1000, 1)
    spark = spark_session(master)
    try:
        index_once(spark, os.path.join(work, "warm"), f"local:{os.path.join(work, 'warm.sqlite3')}")  # JVM, workers
        def one_shot(tag: str) -> float:
            started = time.perf_counter()
            n = index_once(spark, log_dir, f"local:{os.path.join(work, tag + '.sqlite3')}").events
            return n / (time.perf_counter() - started)

        events = backlog
        before = one_shot("oneshot-1")

        url = f"local:{os.path.join(work, 'follow.sqlite3')}"
        end = readable_end(log_dir).offset
        result: dict[str, object] = {}

        def follow() -> None:
            result["report"] = index_stream(spark, log_dir, url, follow_s=1.0)

        started = time.perf_counter()
        thread = threading.Thread(target=follow)
        thread.start()
        checkpoint = default_checkpoint(log_dir, url)
        _until(lambda: (spark_committed(checkpoint) or {"offset": -1})["offset"] >= end, "follow to catch up")
        follow_s = time.perf_counter() - started
        for query in spark.streams.active:
            query.stop()
        thread.join(120)
        after = one_shot("oneshot-2")  # before and after the follow run: the order effect shows
        print(f"one-shot runs: {before:,.0f} and {after:,.0f} events/s", flush=True)
        return (before + after) / 2, events / follow_s
    finally:
        spark.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="1000,50000", help="offered loads, events/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=20.0, help="load duration per rate")
    parser.add_argument("--samples", type=int, default=300, help="sampled messages per rate")
    parser.add_argument("--backlog", type=int, default=300_000, help="events for the throughput comparison")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--work-dir", default=None,
                        help="keep the data and the processes' output (procs.out) here (default: a temporary "
                             "directory, removed afterwards)")
    args = parser.parse_args(argv)
    work = args.work_dir or tempfile.mkdtemp(prefix="freshness-")
    if args.work_dir:
        os.makedirs(work)
    try:
        print("| offered events/s | achieved | sent | dropped | samples | p50 s | p99 s | max s "
              "| seal-then-index p50 / p99 / max s | follower events/s | follower CPU µs/event "
              "| follower cores: on CPU / waiting for one | load avg start → end |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for rate in (int(r) for r in args.rates.split(",")):
            r = freshness(rate, args.seconds, args.samples, args.master, work)
            print(f"| {rate:,} | {r['achieved']:,.0f} | {r['sent']:,} | {r['dropped']:,} | {r['n']} "
                  f"| {r['p50']:.2f} | {r['p99']:.2f} | {r['max']:.2f} "
                  f"| {r['peer_p50']:.1f} / {r['peer_p99']:.1f} / {r['peer_max']:.1f} + one index run "
                  f"| {r['indexed']:,.0f} | {r['cpu_us']:.0f} | {r['cores']:.2f} / {r['queued']:.2f} "
                  f"| {r['load'][0]:.1f} → {r['load'][1]:.1f} |", flush=True)
        if args.backlog:
            oneshot, follow = throughput(args.backlog, args.master, work)
            print(f"\nbacklog of {args.backlog:,} events: one-shot AvailableNow (mean of 2) {oneshot:,.0f} events/s, "
                  f"follow (trigger 1 s) {follow:,.0f} events/s = {follow / oneshot:.0%} of one-shot")
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
