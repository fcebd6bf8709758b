"""Every ``tracehook`` subcommand, given bad arguments, unreachable services or wrong paths,
answers with one line on stderr, no traceback, and the exit status docs/exit-codes.md gives."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys

import pytest

from collector.index.indexer import index_records
from collector.store import open_store
from tests.fixtures.sample import scenario

ROOT = pathlib.Path(__file__).resolve().parents[3]
FOUND, NOT_FOUND, FAILED, BAD = 0, 1, 1, 2


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict[str, str]:
    """Paths and URLs the cases use: a data dir with an index, wrong paths, closed ports."""
    base = tmp_path_factory.mktemp("cli-errors")
    data = base / "data"
    (data / "log").mkdir(parents=True)
    (data / "log" / "manifest.json").write_text('{"version": 1, "end": 0, "segments": []}')
    store = open_store(f"local:{data / 'index.sqlite3'}")
    index_records(store, scenario(1_790_000_000_000)[1])
    store.close()
    (base / "empty").mkdir()
    (base / "foreign").mkdir()
    (base / "foreign" / "notes.txt").write_text("not the demo's")
    (base / "not-sqlite.txt").write_text("hello")
    (base / "deployed" / "systemd").mkdir(parents=True)
    (base / "deployed" / "systemd" / "collector.toml").write_text("# edited by the operator\n")
    with socket.socket() as sock:  # a port nobody listens on (bound, not listening, then closed)
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    yield {
        "DATA": str(data), "LOG": str(data / "log"), "IDX": f"local:{data / 'index.sqlite3'}",
        "EMPTY": str(base / "empty"), "FOREIGN": str(base / "foreign"), "TEXT": str(base / "not-sqlite.txt"),
        "DEPLOYED": str(base / "deployed"),
        "NOWHERE": str(base / "no" / "such" / "dir"), "CLOSED": str(closed), "BUSY": str(busy.getsockname()[1]),
    }
    busy.close()


CASES: list[tuple[str, int, str]] = [
    # (id, expected exit status, arguments with {PLACEHOLDERS})
    ("no-command", BAD, ""),
    ("unknown-command", BAD, "frobnicate"),
    ("collector-bad-port", BAD, "collector --port notanumber"),
    ("collector-bad-durability", BAD, "collector --data-dir {TMP} --durability sometimes"),
    ("collector-missing-config", BAD, "collector --config {NOWHERE}/collector.toml"),
    ("collector-port-in-use", FAILED, "collector --data-dir {TMP} --port {BUSY}"),
    ("index-missing-args", BAD, "index --log-dir {LOG}"),
    ("index-no-log-dir", BAD, "index --log-dir {NOWHERE} --store {IDX}"),
    ("index-data-dir-for-log-dir", BAD, "index --log-dir {DATA} --store {IDX}"),
    ("index-store-dir-without-index", BAD, "index --log-dir {LOG} --store local:{EMPTY}"),
    ("index-unknown-store-scheme", BAD, "index --log-dir {LOG} --store mysql://x"),
    ("index-bad-writers", BAD, "index --log-dir {LOG} --store {IDX} --writers 0"),
    ("index-nan-trigger", BAD, "index --log-dir {LOG} --store {IDX} --follow --trigger nan"),
    ("index-inf-every", BAD, "index --log-dir {LOG} --store {IDX} --every inf"),
    ("set-aside-no-source", BAD, "set-aside list --store {IDX}"),
    ("set-aside-no-such-entry", BAD, "set-aside show 3 --log-dir {LOG} --store {IDX}"),
    ("query-collector-not-a-url", BAD, "query --collector notaurl id m-1"),
    ("query-collector-unreachable", BAD, "query --collector http://127.0.0.1:{CLOSED} id m-1"),
    ("query-store-dir-without-index", BAD, "query --store local:{EMPTY} id m-1"),
    ("query-store-missing-file", BAD, "query --store local:{NOWHERE}/index.sqlite3 id m-1"),
    ("query-store-not-sqlite", BAD, "query --store local:{TEXT} id m-1"),
    ("query-hbase-unreachable", BAD, "query --store hbase://127.0.0.1:{CLOSED} id m-1"),
    ("query-missing-key", BAD, "query key orders"),
    ("query-bad-since", BAD, "query --store {IDX} topic orders --since yesterdayish"),
    ("query-bad-limit", BAD, "query --store {IDX} topic orders --limit 0"),
    ("query-id-not-found", NOT_FOUND, "query --store local:{DATA} id no-such-message"),
    ("offsets-bad-time", BAD, "offsets orders --time yesterdayish --store {IDX}"),
    ("offsets-collector-unreachable", BAD, "offsets orders --time=-1h --collector http://127.0.0.1:{CLOSED}"),
    ("offsets-unknown-group", BAD, "offsets orders --time=-1h --group nosuchgroup --store {IDX}"),
    ("replay-unknown-group", BAD, "replay-list orders --group nosuchgroup --store {IDX}"),
    ("replay-bad-begin", BAD, "replay-list orders --group billing --begin someday --store {IDX}"),
    ("replay-collector-not-a-url", BAD, "replay-list orders --group billing --collector notaurl"),
    ("kafka-reset-no-bootstrap", BAD, "kafka-reset --group g --topic orders --time=-1h --store {IDX}"),
    ("kafka-reset-broker-unreachable", BAD,
     "kafka-reset --bootstrap 127.0.0.1:{CLOSED} --group g --topic orders --time=-1h --store {IDX}"),
    ("kafka-topic-no-action", BAD, "kafka-topic"),
    ("kafka-topic-no-bootstrap", BAD, "kafka-topic create --topic traces --partitions 4"),
    ("kafka-topic-no-partitions", BAD, "kafka-topic create --bootstrap 127.0.0.1:{CLOSED} --topic traces"),
    ("kafka-topic-zero-partitions", BAD, "kafka-topic create --bootstrap 127.0.0.1:{CLOSED} --topic t --partitions 0"),
    ("kafka-topic-bad-config", BAD,
     "kafka-topic create --bootstrap 127.0.0.1:{CLOSED} --topic t --partitions 4 --config min.insync.replicas"),
    ("kafka-topic-broker-unreachable", BAD,
     "kafka-topic create --bootstrap 127.0.0.1:{CLOSED} --topic t --partitions 4"),
    ("kafka-replay-no-bootstrap", BAD, "replay orders --group g --to-topic r --store {IDX}"),
    ("kafka-replay-no-delivery", BAD, "replay orders --group g --bootstrap 127.0.0.1:{CLOSED} --store {IDX}"),
    ("kafka-replay-broker-unreachable", BAD,
     "replay orders --group g --to-topic r --bootstrap 127.0.0.1:{CLOSED} --store {IDX}"),
    ("kafka-replay-to-itself", BAD, "replay orders --group g --to-topic orders --bootstrap 127.0.0.1:{CLOSED}"),
    ("kafka-replay-bad-rate", BAD, "replay orders --group g --to-topic r --bootstrap 127.0.0.1:{CLOSED} --rate 0"),
    ("kafka-replay-bad-end", BAD, "replay orders --group g --to-topic r --bootstrap 127.0.0.1:{CLOSED} --end soon"),
    ("demo-too-few-orders", BAD, "demo --orders 3"),
    ("demo-bad-port", BAD, "demo --port 99999"),
    ("demo-foreign-data-dir", BAD, "demo --data-dir {FOREIGN}"),
    ("demo-data-dir-not-creatable", BAD, "demo --data-dir /proc/tracehook-demo"),
    ("deploy-files-exist", BAD, "deploy-files {DEPLOYED}"),
    ("deploy-files-dir-not-creatable", BAD, "deploy-files /proc/tracehook-deploy"),
]


@pytest.mark.parametrize(("expected", "template"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_one_line_error_and_documented_exit_status(places, tmp_path, expected, template):
    args = template.format(**places, TMP=tmp_path / "data").split()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)
    env.pop("TRACEHOOK_QUERY_URL", None)
    done = subprocess.run([sys.executable, "-m", "collector.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=env)
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert len(lines) == 1, f"stderr of tracehook {' '.join(args)}:\n{done.stderr}"
    assert done.returncode == expected, f"exit {done.returncode}: {done.stderr}"
    if template.startswith("demo --data-dir {FOREIGN}"):
        assert (pathlib.Path(places["FOREIGN"]) / "notes.txt").exists()  # never wiped
    if template.startswith("deploy-files {DEPLOYED}"):  # nothing written, the operator's file kept
        assert "collector.toml exists" in done.stderr and "--force" in done.stderr
        assert [p.name for p in pathlib.Path(places["DEPLOYED"]).rglob("*")] == ["systemd", "collector.toml"]
        assert (pathlib.Path(places["DEPLOYED"]) / "systemd" / "collector.toml").read_text().startswith("# edited")
