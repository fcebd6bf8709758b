"""``tracehook demo``: the whole system on one machine, no broker and no HBase.

Starts a collector (a subprocess, embedded local store) in ``./demo-data``,
sends producer and consumer traffic through the tracehook library — failed
consumes, retries, a dead letter, a transaction and a failed send included —
with the index job following the log (``tracehook collector --index``, Spark in local
mode), waits until the traces are queryable, then prints a few traces, the web page's URL
and query commands that work as printed (without Spark: seals the log and indexes it
in-process)::

    tracehook demo                 # everything, then stop the collector
    tracehook demo --keep          # leave the collector running for the web page (Ctrl-C stops it)
    tracehook demo --data-dir /tmp/th --port 7070
    tracehook demo --keep-data     # add to the previous run's data instead of starting fresh

Each run starts from an empty data directory unless ``--keep-data``; a directory
the demo did not create (no ``.tracehook-demo`` marker) is never deleted.
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

from collector.cli.errors import DemoError

DEFAULT_DATA_DIR = "./demo-data"
MARKER = ".tracehook-demo"
"""Written into the data directory: only a directory holding it is wiped for a fresh run."""
DEFAULT_ORDERS = 20
MIN_ORDERS = 15
"""Orders 3, 7 and 13 fail in shipping (13 into the dead-letter queue); the last is transactional."""
START_TIMEOUT_S = 30.0
FOLLOW_TIMEOUT_S = 300.0
"""How long the demo waits for the follower (a cold Spark start on a busy machine) to index the traffic."""
TOPIC = "orders"
PRODUCER_GROUP = "shop-web"
GROUPS = ("billing", "shipping")
MAX_RETRIES = 3



@dataclass(frozen=True)
class DemoIds:
    """Message ids worth looking at after the run."""

    normal: str
    retried: str
    dead: str
    transactional: str


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_collector(data_dir: str, port: int, store_url: str | None = None,
                    index: bool = False) -> subprocess.Popen[bytes]:
    """Start ``tracehook collector`` (embedded store unless ``store_url``; ``index``: with its
    follow-mode index job) and wait until it answers."""
    env = dict(os.environ)
    env.update({
        "TRACEHOOK_COLLECTOR_DATA_DIR": data_dir,
        "TRACEHOOK_COLLECTOR_PORT": str(port),
        "TRACEHOOK_COLLECTOR_DURABILITY": "os",
    })
    if store_url:
        env["TRACEHOOK_COLLECTOR_STORE"] = store_url
    with open(os.path.join(data_dir, "collector.log"), "ab") as log:  # the child keeps its own copy
        proc = subprocess.Popen([sys.executable, "-m", "collector.cli", "collector", *(["--index"] if index else [])],
                                env=env, stdout=log, stderr=log)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DemoError(f"the collector exited ({proc.returncode}); see {log.name}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
                if response.status == 200:
                    return proc
        except OSError:
            time.sleep(0.2)
    stop_collector(proc)
    raise DemoError(f"the collector did not answer within {START_TIMEOUT_S:.0f}s; see {log.name}")


def stop_collector(proc: subprocess.Popen[bytes]) -> None:
    """Stop the collector gracefully (it drains in-flight batches)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=90)  # it stops its index follower (a Spark driver) first
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _consume(tracer: Any, group: str, send: dict[str, Any], fail_times: int, rng: random.Random) -> bool:
    """Deliver one message to ``group``; the handler fails ``fail_times`` times. True when handled."""
    for attempt in range(min(fail_times, MAX_RETRIES) + 1):
        try:
            with tracer.consume(TOPIC, send["msg_id"], group, keys=send["keys"], tags=send["tags"],
                                broker=send["broker"], queue=send["queue"], offset=send["offset"],
                                born_ms=send["born_ms"], store_ms=send["store_ms"], retry=attempt):
                time.sleep(rng.uniform(0.001, 0.006))
                if attempt < fail_times:
                    raise RuntimeError(f"{group}: warehouse service unavailable (attempt {attempt})")
            return True
        except RuntimeError:
            continue
    tracer.record_dead(TOPIC, send["msg_id"], group, error="gave up after retries", retry=MAX_RETRIES,
                       keys=send["keys"], queue=send["queue"], offset=send["offset"])
    return False


def _tracer(collector_url: str, app: str, host: str) -> Any:
    """One service's tracer (each demo service reports its own app name and host)."""
    import tracehook

    return tracehook.Tracer(tracehook.TracerConfig(app=app, collectors=(collector_url,), host=host))


def run_traffic(collector_url: str, orders: int = DEFAULT_ORDERS, seed: int | None = None) -> DemoIds:
    """Produce ``orders`` messages and consume them in two groups through the library.

    Message ids are random per run (unless ``seed``), so a second demo in the same
    data directory adds new messages instead of merging into the old ones.
    """
    from tracehook.wire import Status, TxState

    rng = random.Random(seed)
    producer = _tracer(collector_url, PRODUCER_GROUP, "web-1")
    consumers = {group: _tracer(collector_url, group, f"{group}-1") for group in GROUPS}
    offsets = [0, 0, 0, 0]
    ids: list[str] = []
    retried = dead = tx_msg = ""
    for n in range(1, orders + 1):
        queue = n % len(offsets)
        born = int(time.time() * 1000)
        send = dict(keys=f"order-{n}", tags="created", broker="broker-a", queue=queue,
                    offset=offsets[queue], born_ms=born, store_ms=born + rng.randint(1, 3))
        offsets[queue] += 1
        msg_id = f"demo-{n:04d}-{rng.getrandbits(32):08x}"
        if n == 5:  # the first send times out; the producer retries the same message
            producer.record_send(TOPIC, msg_id, group=PRODUCER_GROUP, keys=send["keys"], tags="created",
                                 broker="broker-a", born_ms=born, cost_us=3_000_000, status=Status.TIMEOUT,
                                 error="send timed out after 3000 ms")
        tx_id = f"tx-{n}" if n == orders else ""
        producer.record_send(TOPIC, msg_id, group=PRODUCER_GROUP, cost_us=rng.randint(800, 4000),
                             tx_id=tx_id, props={"region": rng.choice(["eu", "us"])}, **send)
        if tx_id:
            producer.record_end_tx(TOPIC, msg_id, PRODUCER_GROUP, tx_id, TxState.COMMIT, keys=send["keys"])
            tx_msg = msg_id
        send["msg_id"] = msg_id
        ids.append(msg_id)
        _consume(consumers["billing"], "billing", send, 0, rng)
        fail_times = {3: 1, 7: 2, 13: MAX_RETRIES + 1}.get(n, 0)
        handled = _consume(consumers["shipping"], "shipping", send, fail_times, rng)
        if fail_times and handled and not retried:
            retried = msg_id
        if not handled:
            dead = msg_id
    tracers = [producer, *consumers.values()]
    if not all(t.flush(timeout=10.0) for t in tracers):
        raise DemoError("the library could not deliver every event to the collector")
    sent = sum(t.stats()["sent"] for t in tracers)
    dropped = sum(t.stats()["dropped_total"] for t in tracers)
    for tracer in tracers:
        tracer.close()
    print(f"traffic: {orders} orders, 2 consumer groups; {sent} events sent, {dropped} dropped")
    return DemoIds(normal=ids[0], retried=retried, dead=dead, transactional=tx_msg)


def spark_unavailable() -> str | None:
    """Why the Spark index job cannot run here, or None when it can."""
    import importlib.util

    if importlib.util.find_spec("pyspark") is None:
        return "PySpark is not installed"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        # PySpark imports fine without a JVM and only fails when the session starts.
        return "Spark needs Java (none on PATH, no JAVA_HOME)"
    return None


def wait_queryable(collector_url: str, ids: DemoIds, timeout_s: float = FOLLOW_TIMEOUT_S) -> float:
    """Wait until the collector answers every id in ``ids``; seconds waited (Spark starts first)."""
    started = time.monotonic()
    pending = [ids.normal, ids.retried, ids.dead, ids.transactional]
    while pending:
        try:
            with urllib.request.urlopen(f"{collector_url}/v1/messages/{pending[0]}", timeout=5):
                pending.pop(0)
                continue
        except OSError:  # 404 until indexed
            pass
        if time.monotonic() - started > timeout_s:
            raise DemoError(f"traces not queryable after {timeout_s:.0f}s; see the collector.log")
        time.sleep(0.2)
    return time.monotonic() - started


def query_prefix(collector_url: str | None, store_url: str) -> str:
    """``tracehook query`` with the source that answers after the demo: the live collector or the store file."""
    source = f"--collector {collector_url}" if collector_url else f"--store {shlex.quote(store_url)}"
    return f"tracehook query {source}"


def print_traces(collector_url: str, store_url: str, ids: DemoIds, hint_prefix: str) -> None:
    """Print the interesting traces as the query CLI does, each under the command that shows it again."""
    from collector.cli.query import HttpSource, format_trace

    source = HttpSource(collector_url)
    try:
        for title, msg_id in (("a normal message", ids.normal), ("retried by shipping", ids.retried),
                              ("dead letter in shipping", ids.dead), ("transactional", ids.transactional)):
            doc = source.trace(msg_id)
            print(f"\n== {title}: {hint_prefix} id {msg_id}")
            print(format_trace(doc) if doc else "(not indexed)")
    finally:
        source.close()


def prepare_data_dir(data_dir: str, keep_data: bool) -> None:
    """Create the data directory; empty it first unless ``keep_data`` (only if the demo made it)."""
    if os.path.isdir(data_dir) and not keep_data and os.listdir(data_dir):
        if not os.path.exists(os.path.join(data_dir, MARKER)):
            raise DemoError(f"{data_dir} is not empty and was not made by the demo; "
                            "pick another --data-dir (or pass --keep-data to add to it)")
        shutil.rmtree(data_dir)
    os.makedirs(data_dir, exist_ok=True)
    with open(os.path.join(data_dir, MARKER), "w") as marker:
        marker.write("made by tracehook demo; a fresh demo run deletes this directory\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``tracehook demo``."""
    parser.add_argument("--data-dir", default=DEFAULT_DATA_DIR,
                        help=f"where the demo keeps its data ({DEFAULT_DATA_DIR})")
    parser.add_argument("--port", type=int, default=0, help="collector port (default: a free one)")
    parser.add_argument("--orders", type=int, default=DEFAULT_ORDERS, help="messages to produce")
    parser.add_argument("--keep", action="store_true", help="keep the collector running until Ctrl-C")
    parser.add_argument("--keep-data", action="store_true",
                        help="add to the data of a previous run (default: start from an empty data directory)")


def run(args: argparse.Namespace) -> int:
    """Run the demo end to end."""
    if args.orders < MIN_ORDERS:
        print(f"--orders must be at least {MIN_ORDERS}", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print(f"--port must be within 0..65535, not {args.port}", file=sys.stderr)
        return 2
    data_dir = os.path.abspath(args.data_dir)
    try:
        prepare_data_dir(data_dir, args.keep_data)
    except (DemoError, OSError) as exc:
        print(f"demo: cannot use --data-dir {data_dir}: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
        return 2
    port = args.port or free_port()
    url = f"http://127.0.0.1:{port}"
    store_url = f"local:{os.path.join(data_dir, 'index.sqlite3')}"
    print(f"collector: {url} (data in {data_dir})")
    # A plain `kill` must also stop the collector subprocess: exit through the finally below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    # Ctrl-C stops it even when started in the background of a script, whose shell starts it with
    # SIGINT ignored (Python then installs no KeyboardInterrupt handler of its own).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    no_spark = spark_unavailable()
    if no_spark is not None:  # scripts/setup installs both; the index job is the point of the demo
        print(f"demo: {no_spark}; the demo indexes with the Spark job (bash scripts/setup installs it)",
              file=sys.stderr)
        return 2
    try:
        proc = start_collector(data_dir, port, index=True)
    except DemoError as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    try:
        ids = run_traffic(url, args.orders)
        waited = wait_queryable(url, ids)
        print(f"index: Spark follow mode (tracehook collector --index): traces queryable {waited:.1f}s "
              "after the traffic, no segment sealed")
        # The hints must work as printed: the live collector with --keep, else the index file.
        prefix = query_prefix(url if args.keep else None, store_url)
        print_traces(url, store_url, ids, prefix)
        print(f"\ntry: {prefix} key {TOPIC} order-3")
        print(f"try: tracehook replay-list {TOPIC} --group shipping {prefix.removeprefix('tracehook query ')}")
        if args.keep:
            print(f"web page: {url}/#id={ids.retried}")
            print("the collector keeps running; Ctrl-C stops it", flush=True)
            proc.wait()
        else:
            print(f"web page: run the demo with --keep, or serve it with: tracehook collector --data-dir "
                  f"{shlex.quote(data_dir)} --port {port}   (then open {url}/#id={ids.retried})")
    except DemoError as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    finally:
        stop_collector(proc)
    return 0
