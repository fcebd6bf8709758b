"""Collector ingest throughput: durable appends vs a bare aiohttp handler, side by side.

Starts a real collector (``python -m collector``, fsync group-commit mode, no index
store) and a bare
aiohttp server whose handler only reads the body, each in its own process, then posts
1,000-event batches from 1, 4 and 16 concurrent clients to each and prints events/s and
the ratio::

    python benchmarks/collector_ingest.py [--seconds 5] [--clients 1,4,16] [--durability fsync]
    python benchmarks/collector_ingest.py --check-only [--repeat 7]

``--check-only`` starts nothing: it measures the ingest path's validation step alone on the same
batches, in this process (CPU µs per event, best of alternated runs): the C validator
(``collector/wirecheck/_wirecheck.c``), a msgspec typed decode of the batch (benchmarks/msgspec_wire_model.py,
a model of the accepted set for its cost, not its exact rules: msgspec counts string lengths in
characters, not bytes, and names problems in its own words) and the Python path
(``tracehook.wire.check_batch``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

import aiohttp
from aiohttp import web

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tracehook import wire  # noqa: E402

EVENTS_PER_BATCH = 1000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_bare(port: int) -> None:
    """The baseline: an aiohttp handler that reads the body and answers 200."""

    async def handler(request: web.Request) -> web.Response:
        body = await request.read()
        return web.json_response({"offset": len(body), "events": EVENTS_PER_BATCH, "duplicate": False})

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/batches", handler)
    app.router.add_get("/healthz", lambda r: web.json_response({"status": "ok"}))
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def check_only(repeat: int) -> None:
    """The validation step alone, per event: C, msgspec, Python (alternated, best of ``repeat``)."""
    from benchmarks import msgspec_wire_model
    from collector.wirecheck import validate

    data = wire.encode_batch_packed(wire.BatchHeader("client-1", 7, "shop", "web-1", int(time.time() * 1000)),
                                    _packed_events())
    paths = {"msgspec typed decode": msgspec_wire_model.decode_batch, "Python wire.check_batch": wire.check_batch}
    if validate.FAST_PATH:
        paths = {"C _wirecheck": validate.fast_check_batch, **paths}
    for name, check in paths.items():
        assert check(data) is not None, name
    best = dict.fromkeys(paths, float("inf"))
    for _ in range(repeat):
        for name, check in paths.items():
            with wire.no_gc():
                start = time.process_time()
                for _ in range(20):
                    check(data)
                best[name] = min(best[name], (time.process_time() - start) / 20)
    print(f"validation of a {EVENTS_PER_BATCH}-event batch ({len(data)} bytes): CPU µs per event, "
          f"best of {repeat} alternated runs")
    for name, cpu in best.items():
        print(f"  {name}: {cpu / EVENTS_PER_BATCH * 1e6:.3f}")


def _packed_events() -> list[bytes]:
    now = int(time.time() * 1000)
    return [
        wire.encode_event(wire.make_event(
            wire.EventType.PUB, now + i, "bench-producer", "orders", f"msg-{i:012d}", keys=f"order-{i}",
            tags="created", broker="broker-a:10911", queue=i % 8, offset=100_000 + i, born_ms=now,
            store_ms=now + 1, cost_us=150 + i % 50, body_len=512,
        ))
        for i in range(EVENTS_PER_BATCH)
    ]


async def _client(session: aiohttp.ClientSession, url: str, client_id: str, packed: list[bytes],
                  deadline: float) -> int:
    seq, events = 0, 0
    while time.perf_counter() < deadline:
        seq += 1
        body = wire.encode_batch_packed(wire.BatchHeader(client_id, seq, "bench", "bench-host"), packed)
        async with session.post(url, data=body, headers={"Content-Type": "application/msgpack"}) as resp:
            await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{url}: HTTP {resp.status}")
        events += EVENTS_PER_BATCH
    return events


async def measure(base_url: str, clients: int, seconds: float, run_id: str, pid: int | None = None
                  ) -> tuple[float, float]:
    """Events/s acknowledged by ``base_url`` with ``clients`` concurrent posters, and the
    server's CPU microseconds per event (when its ``pid`` is given)."""
    packed = _packed_events()
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        url = base_url + "/v1/batches"
        await _client(session, url, f"warmup-{run_id}", packed, time.perf_counter() + 0.5)
        cpu_before = tree_cpu_seconds(pid) if pid else 0.0
        started = time.perf_counter()
        deadline = started + seconds
        totals = await asyncio.gather(
            *(_client(session, url, f"{run_id}-{i}", packed, deadline) for i in range(clients))
        )
        elapsed = time.perf_counter() - started
        cpu = (tree_cpu_seconds(pid) - cpu_before) if pid else 0.0
        return sum(totals) / elapsed, cpu * 1e6 / max(sum(totals), 1)


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its descendants (decode workers; a Spark JVM and its Python
    workers), from /proc: each live process's own time plus that of the children it reaped."""
    tick = os.sysconf("SC_CLK_TCK")
    total, pending = 0.0, [pid]
    while pending:
        p = pending.pop()
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    pending.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError):  # it exited meanwhile (ESRCH while it is a zombie)
            continue
    return total


def _start(cmd: list[str], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import urllib.request

    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"server did not start: {cmd}")


def _collector_cmd(data_dir: str, port: int, durability: str) -> list[str]:
    return [sys.executable, "-m", "collector", "--data-dir", data_dir, "--port", str(port), "--store", "none",
            "--durability", durability, "--backlog-limit-bytes", "0", "--log-level", "WARNING"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--durability", default="fsync", choices=["fsync", "os"])
    parser.add_argument("--serve-bare", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--check-only", action="store_true", help="measure the validation step alone")
    parser.add_argument("--repeat", type=int, default=7, help="alternated runs of --check-only")
    args = parser.parse_args(argv)
    if args.check_only:
        check_only(args.repeat)
        return 0
    if args.serve_bare:
        serve_bare(args.serve_bare)
        return 0
    levels = [int(c) for c in args.clients.split(",")]
    with tempfile.TemporaryDirectory(prefix="collector-bench-") as tmp:
        ports = [_free_port() for _ in range(2)]
        servers = [
            _start(_collector_cmd(os.path.join(tmp, "collector"), ports[0], args.durability), ports[0]),
            _start([sys.executable, __file__, "--serve-bare", str(ports[1])], ports[1]),
        ]
        try:
            size = len(wire.encode_batch_packed(wire.BatchHeader("x", 1), _packed_events()))
            print(f"collector ingest: {EVENTS_PER_BATCH}-event batches ({size} bytes), durability={args.durability}, "
                  f"{args.seconds:g} s per cell; events/s acknowledged")
            print("(server CPU µs per event in brackets: the cost that does not depend on what else runs)")
            print("| clients | collector | bare handler | collector / bare |")
            print("|--------:|----------:|-------------:|------:|")
            for n in levels:
                cells = [asyncio.run(measure(f"http://127.0.0.1:{port}", n, args.seconds, f"r{n}-{port}", proc.pid))
                         for port, proc in zip(ports, servers)]
                rates = [rate for rate, _ in cells]
                shown = [f"{rate:,.0f} ({cpu:.2f} µs)" for rate, cpu in cells]
                print(f"| {n} | {shown[0]} | {shown[1]} | {rates[0] / rates[1]:.0%} |", flush=True)
        finally:
            for proc in servers:
                proc.terminate()
                proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
