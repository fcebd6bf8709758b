"""``tracehook demo`` end to end: collector subprocess, library traffic, Spark index, printed traces."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

# scripts/setup installs PySpark, so the demo must index with Spark here (its in-process
# fallback is for installs without the spark extra).
pytestmark = [pytest.mark.slow, pytest.mark.spark]


def test_demo_runs_on_a_fresh_directory(tmp_path):
    data_dir = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "tracehook", "demo", "--data-dir", str(data_dir), "--orders", "15"],
        capture_output=True, text=True, timeout=600,
    )
    out = done.stdout
    assert done.returncode == 0, done.stderr[-3000:] + out[-3000:]
    for title in ("a normal message", "retried by shipping", "dead letter in shipping", "transactional"):
        assert f"== {title}: tracehook query id demo-" in out
    assert "(not indexed)" not in out
    assert re.search(r"^traffic: 15 orders, 2 consumer groups; \d+ events sent, 0 dropped$", out, re.M)
    assert re.search(r"^index: Spark follow mode \(tracehook collector --index\): traces queryable", out, re.M), out
    dead_section = out.split("== dead letter in shipping")[1].split("\n== ")[0]
    assert re.search(r"consumer\s+shipping\s+dead", dead_section)
    retried_section = out.split("== retried by shipping")[1].split("\n== ")[0]
    statuses = re.findall(r"consumer\s+shipping\s+consume\s+\S+ \S+\s+(\w+)", retried_section)
    assert statuses == ["exception", "ok"]
    assert re.search(r"web page: http://127\.0\.0\.1:\d+/#id=demo-", out)
    assert (data_dir / "index.sqlite3").exists()
