"""A mixed fleet loses nothing (issue 43, item 6): this library against the collector of main at 10f7884
(before body_flags, raw_key and raw_headers), and the library of 10f7884 against this collector.

The old tree comes from ``git archive`` of the checkout's own history, run from a temporary directory
with PYTHONPATH pointing there; both collectors are real processes on free ports, ingest-only.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import tarfile
from collections.abc import Iterator

import pytest
import requests
from fixtures.collector_process import ROOT, CollectorProcess

from collector.log import file as tracelog
from tracehook import wire

pytestmark = pytest.mark.slow
OLD_COMMIT = "10f7884"  # main before the kept-record fields
HEADERS = [("tracehook-msg-id", b"x"), ("orderId", b"42")]


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory) -> str:
    """The library and collector of OLD_COMMIT, extracted (no compiled extensions: the Python paths)."""
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", OLD_COMMIT], capture_output=True).returncode:
        pytest.fail(f"commit {OLD_COMMIT} is not in this checkout's history (a shallow clone?)")
    target = tmp_path_factory.mktemp("old-tree")
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", OLD_COMMIT, "collector", "tracehook"],
                             capture_output=True, check=True).stdout
    archive_path = target / "old.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(target, filter="data")
    return str(target)


def logged_events(data_dir: str) -> list[wire.Event]:
    """Every event in a collector's trace log (decoded by this checkout's wire module)."""
    log_dir = os.path.join(data_dir, "log")
    events: list[wire.Event] = []
    for name in sorted(n for n in os.listdir(log_dir) if n.endswith(tracelog.SEGMENT_SUFFIX)):
        for record in tracelog.scan_segment(os.path.join(log_dir, name)).records:
            events.extend(wire.decode_batch(record.payload).events)
    return events


def rejected(url: str) -> int:
    text = requests.get(url + "/metrics", timeout=10).text
    return sum(int(float(v)) for v in re.findall(r"^tracehook_collector_rejected_total\{[^}]*\} (\S+)$", text, re.M))


@pytest.fixture
def old_collector(old_tree, tmp_path) -> Iterator[CollectorProcess]:
    env = {"PYTHONPATH": old_tree}
    server = CollectorProcess(str(tmp_path / "old-data"), store="none", env=env, cwd=old_tree)
    yield server
    server.kill()


def test_this_library_against_an_older_collector(old_collector, make_tracer, accounted):
    tracer = make_tracer(old_collector.url, body_topics={"orders"}, max_body_bytes=16, batch_events=50)
    whole = [tracer.record_send("orders", body=b"small", raw_key=b"k", raw_headers=HEADERS) for _ in range(100)]
    cut = [tracer.record_send("orders", body=b"x" * 40, raw_key=b"k") for _ in range(100)]
    plain = [tracer.record_send("payments", body=b"not kept") for _ in range(100)]
    for msg_id in whole[:50]:
        with tracer.consume("orders", msg_id, "billing"):
            pass
    assert tracer.flush(30)
    stats = accounted(tracer.stats())
    assert stats["sent"] == 400 and stats["dropped_total"] == 0
    assert stats["stripped"] == {"events": 200, "bodies": 100}
    assert rejected(old_collector.url) == 0
    assert old_collector.stop() == 0
    pubs = {e.msg_id: e for e in logged_events(old_collector.data_dir) if e.type == wire.EventType.PUB}
    assert sorted(pubs) == sorted(whole + cut + plain)
    assert all(pubs[m].body == b"small" and pubs[m].raw_key is None for m in whole)
    assert all(pubs[m].body is None for m in cut + plain)  # a cut body is never stored as if whole


OLD_LIBRARY = """
import json, sys, tracehook
tracer = tracehook.Tracer(tracehook.TracerConfig(app="old", collectors=(sys.argv[1],), capture_body=True,
                                                 max_body_bytes=8, linger_s=0.01, flush_at_exit=False))
ids = [tracer.record_send("orders", body=b"0123456789", props={"orderId": str(i)}) for i in range(300)]
for msg_id in ids[:100]:
    with tracer.consume("orders", msg_id, "billing"):
        pass
ok = tracer.flush(30)
print(json.dumps({"ok": ok, "ids": ids, "stats": tracer.stats()}))
"""


def test_an_older_library_against_this_collector(old_tree, collector_process):
    # The topic keeps its bodies here (the collector strips the others' before the trace log).
    collector = collector_process(None, env={"TRACEHOOK_COLLECTOR_BODY_TOPICS": "orders"})
    done = subprocess.run([sys.executable, "-c", OLD_LIBRARY, collector.url], capture_output=True, text=True,
                          timeout=120, cwd=old_tree, env={**os.environ, "PYTHONPATH": old_tree})
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["ok"] and result["stats"]["sent"] == 500 and result["stats"]["dropped_total"] == 0
    assert "stripped" not in result["stats"]  # the old library indeed
    assert rejected(collector.url) == 0
    assert collector.stop() == 0
    events = logged_events(collector.data_dir)
    pubs = {e.msg_id: e for e in events if e.type == wire.EventType.PUB}
    assert sorted(pubs) == sorted(result["ids"]) and len(events) == 500
    # An old library's cut body carries no flag: the collector keeps what it was given, as before.
    assert all((e.body, e.body_flags, e.raw_key, e.raw_headers) == (b"01234567", 0, None, None)
               for e in pubs.values())


def test_old_tree_is_older(old_tree):
    assert "body_flags" not in pathlib.Path(old_tree, "tracehook", "wire.py").read_text()
