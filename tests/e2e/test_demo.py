"""``tracehook demo`` end to end: collector subprocess, library traffic, Spark index, printed traces,
and the printed hints run exactly as printed."""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest

# scripts/setup installs PySpark, so the demo must index with Spark here (its in-process
# fallback is for installs without the spark extra).
pytestmark = [pytest.mark.slow, pytest.mark.spark]

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(ROOT))
HINT = re.compile(r"^(?:== [^:]+: |try: )(tracehook .*)$", re.M)


def demo_command(data_dir: pathlib.Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "collector.cli", "demo", "--data-dir", str(data_dir), "--orders", "15", *extra]


def run_hint(line: str, cwd: pathlib.Path) -> subprocess.CompletedProcess[str]:
    """A printed ``tracehook ...`` line, as a user would paste it (from another directory)."""
    argv = shlex.split(line)
    assert argv[0] == "tracehook"
    return subprocess.run([sys.executable, "-m", "collector.cli", *argv[1:]], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env=ENV)


def under_index_follower(pid: int) -> bool:
    """Whether ``pid`` runs under the collector's ``tracehook index --follow`` child (its Spark JVM)."""
    while pid > 1:
        try:
            cmdline = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            pid = int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
        if b"index" in cmdline and b"--follow" in cmdline:
            return True
    return False


def java_descendants(pid: int) -> list[int]:
    """JVMs among the descendants of ``pid`` (PySpark's gateway is one)."""
    children: dict[int, list[int]] = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(pathlib.Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(name))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        try:
            if pathlib.Path(f"/proc/{child}/comm").read_text().strip() == "java":
                found.append(child)
        except OSError:
            continue
        todo += children.get(child, [])
    return found


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> tuple[pathlib.Path, subprocess.CompletedProcess[str]]:
    """One demo without --keep; the --keep test reuses its data directory (a repeated demo)."""
    data_dir = tmp_path_factory.mktemp("demo") / "data"
    done = subprocess.run(demo_command(data_dir), capture_output=True, text=True, timeout=600, env=ENV)
    return data_dir, done


def test_demo_runs_on_a_fresh_directory(first_run):
    data_dir, done = first_run
    out = done.stdout
    assert done.returncode == 0, done.stderr[-3000:] + out[-3000:]
    assert done.stderr == ""  # no warning banner: Spark's start-up lines stay in DATA/index.log
    for title in ("a normal message", "retried by shipping", "dead letter in shipping", "transactional"):
        assert f"== {title}: tracehook query --store local:{data_dir}/index.sqlite3 id demo-" in out
    assert "(not indexed)" not in out
    assert re.search(r"^traffic: 15 orders, 2 consumer groups; \d+ events sent, 0 dropped$", out, re.M)
    assert re.search(r"^index: Spark follow mode \(tracehook collector --index\): traces queryable", out, re.M), out
    dead_section = out.split("== dead letter in shipping")[1].split("\n== ")[0]
    assert re.search(r"consumer\s+shipping\s+dead", dead_section)
    retried_section = out.split("== retried by shipping")[1].split("\n== ")[0]
    statuses = re.findall(r"consumer\s+shipping\s+consume\s+\S+ \S+\s+(\w+)", retried_section)
    assert statuses == ["exception", "ok"]
    assert (data_dir / "index.sqlite3").exists()


def test_demo_hints_work_as_printed_after_the_collector_stopped(first_run, tmp_path):
    """Without --keep the collector is gone: every printed command reads the index file and succeeds."""
    _, done = first_run
    hints = HINT.findall(done.stdout)
    assert len(hints) == 6, done.stdout  # four traces, a key lookup, a replay list
    for line in hints:
        ran = run_hint(line, tmp_path)
        assert ran.returncode == 0, f"{line}\n{ran.stderr}"
        assert ran.stdout.strip(), line


def test_demo_keep_starts_fresh_serves_the_hints_and_stops_spark(first_run, tmp_path):
    """A second demo in the same directory: fresh data; with --keep the hints use the live collector.
    The only JVM is the collector's index follower (no idle Spark in the demo), and it ends with the demo."""
    data_dir, first = first_run
    assert first.returncode == 0
    proc = subprocess.Popen(demo_command(data_dir, "--keep"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV)
    try:
        out = ""
        for line in proc.stdout:
            out += line
            if "Ctrl-C stops it" in line:
                break
        assert "Ctrl-C stops it" in out, out + proc.stderr.read() if proc.poll() is not None else out
        jvms = java_descendants(proc.pid)
        # The follower's Spark JVM is up once the demo printed its traces: none found means the
        # search missed it, and "every JVM is the follower's" would hold of nothing.
        assert jvms, "no JVM under the demo: the index follower's Spark is not running"
        assert all(under_index_follower(pid) for pid in jvms), jvms
        url = re.search(r"^collector: (http://127\.0\.0\.1:\d+) ", out, re.M).group(1)
        hints = HINT.findall(out)
        assert len(hints) == 6 and all(f"--collector {url}" in h for h in hints), out
        for line in hints:
            ran = run_hint(line, tmp_path)
            assert ran.returncode == 0, f"{line}\n{ran.stderr}"
            if " key orders order-3" in line:  # the first run's order-3 is gone: one message, not two
                assert len(re.findall(r"^demo-0003-", ran.stdout, re.M)) == 1, ran.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    assert proc.returncode == 0
    for _ in range(100):  # a hang guard, not a timing assertion: a JVM may take a moment to exit
        if not [pid for pid in jvms if os.path.exists(f"/proc/{pid}")]:
            break
        time.sleep(0.2)
    assert not [pid for pid in jvms if os.path.exists(f"/proc/{pid}")], "the follower's JVM outlived the demo"
