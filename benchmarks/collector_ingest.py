"""Collector ingest throughput: durable appends vs a bare aiohttp handler, side by side.

Starts a real collector (``python -m collector``, fsync group-commit mode, no index
store) and a bare aiohttp server whose handler only reads the body, each in its own
process, then posts 1,000-event batches from 1, 4 and 16 concurrent clients to each
and prints events/s and the ratio::

    python benchmarks/collector_ingest.py [--seconds 5] [--clients 1,4,16] [--durability fsync]
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
from typing import Sequence

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


async def measure(base_url: str, clients: int, seconds: float, run_id: str) -> float:
    """Events/s acknowledged by ``base_url`` with ``clients`` concurrent posters."""
    packed = _packed_events()
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        url = base_url + "/v1/batches"
        await _client(session, url, f"warmup-{run_id}", packed, time.perf_counter() + 0.5)
        started = time.perf_counter()
        deadline = started + seconds
        totals = await asyncio.gather(
            *(_client(session, url, f"{run_id}-{i}", packed, deadline) for i in range(clients))
        )
        return sum(totals) / (time.perf_counter() - started)


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--durability", default="fsync", choices=["fsync", "os"])
    parser.add_argument("--decode-workers", type=int, default=0)
    parser.add_argument("--serve-bare", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve_bare:
        serve_bare(args.serve_bare)
        return 0
    levels = [int(c) for c in args.clients.split(",")]
    with tempfile.TemporaryDirectory(prefix="collector-bench-") as data_dir:
        cport, bport = _free_port(), _free_port()
        collector = _start([sys.executable, "-m", "collector", "--data-dir", data_dir, "--port", str(cport),
                            "--store-url", "none", "--durability", args.durability,
                            "--backlog-limit-bytes", "0", "--log-level", "WARNING",
                            "--decode-workers", str(args.decode_workers)], cport)
        bare = _start([sys.executable, __file__, "--serve-bare", str(bport)], bport)
        try:
            print(f"collector ingest, {EVENTS_PER_BATCH}-event batches "
                  f"({len(wire.encode_batch_packed(wire.BatchHeader('x', 1), _packed_events()))} bytes), "
                  f"durability={args.durability}, decode workers={args.decode_workers}, {args.seconds:g} s per cell")
            print(f"| clients | collector events/s | bare handler events/s | collector / bare |")
            print(f"|--------:|-------------------:|----------------------:|-----------------:|")
            for n in levels:
                durable = asyncio.run(measure(f"http://127.0.0.1:{cport}", n, args.seconds, f"c{n}"))
                baseline = asyncio.run(measure(f"http://127.0.0.1:{bport}", n, args.seconds, f"b{n}"))
                print(f"| {n:7d} | {durable:18,.0f} | {baseline:21,.0f} | {durable / baseline:15.0%} |", flush=True)
        finally:
            for proc in (collector, bare):
                proc.terminate()
                proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
