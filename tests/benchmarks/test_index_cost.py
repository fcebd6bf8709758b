"""benchmarks/index_cost.py still runs: its in-process and floor rows at a tiny size print a whole
table of positive numbers, and the rows that need HBase say in one line (exit 2) when it is not there.

The figures themselves belong to benchmarks/RESULTS.md; this only keeps the script from rotting
as the layout changes under it.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "index_cost.py"
HEADER = ["events", "mix", "path", "CPU µs/event", "HBase JVM + Thrift µs/event", "events/s", "bytes/event",
          "rows/event", "cells/event"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=240, check=False)


def _number(cell: str) -> float:
    return float(cell.replace(",", ""))


def test_rows_a_and_d_print_one_table_of_positive_numbers() -> None:
    done = _run("--events", "1500", "--rows", "a,d")
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert cells[0] == HEADER
    body = cells[2:]
    assert [(row[1], row[2][0]) for row in body] == [("simple", "a"), ("simple", "d"), ("realistic", "a"),
                                                     ("realistic", "d")]
    for row in body:
        assert row[0] == "1,500"
        assert row[4] == "–"  # no HBase server in these rows
        assert all(_number(c) > 0 for c in row[3:4] + row[5:]), row
    in_process, floor = body[0], body[1]
    # The index answers ten tables' questions, the floor three: more rows per event, never fewer.
    assert _number(in_process[7]) > _number(floor[7])


@pytest.mark.slow  # two in-process runs: about 10 s
def test_puts_gives_a_row_a_per_write_path_storing_the_same_rows_and_cells() -> None:
    """``--puts c,python``: the C puts (``_sqlput``) and Python's ``executemany`` side by side, one row each."""
    done = _run("--events", "1500", "--rows", "a", "--mix", "simple", "--puts", "c,python")
    assert done.returncode == 0, done.stderr
    body = [[c.strip() for c in line.strip("|").split("|")] for line in done.stdout.splitlines()
            if line.startswith("|")][2:]
    assert [row[2] for row in body] == ["a in-process -> SQLite (c puts)", "a in-process -> SQLite (python puts)"]
    assert body[0][7:] == body[1][7:]  # rows and cells per event
    assert all(_number(c) > 0 for row in body for c in row[3:4] + row[5:]), body


@pytest.mark.slow  # two in-process runs: about 8 s
def test_props_as_keys_files_the_props_values_in_keyidx_and_bytes_per_value_are_printed() -> None:
    """The control mix: the props mix's two values per message as keys, none as a property; each row's
    bytes per indexed value (propidx, keyidx) in the summary under the table, over those rows."""
    done = _run("--events", "1500", "--rows", "a", "--mix", "props,props-as-keys")
    assert done.returncode == 0, done.stderr
    summary = done.stdout.split("bytes per indexed value", 1)[1].strip().splitlines()[1:]
    messages = 1500 // 3  # the simple mix: a send, a consume start and end per message
    counts = [{name: int(values.replace(",", "")) for name, values in
               re.findall(r"(propidx|keyidx) [0-9.]+ B \(([0-9,]+) values\)", line)} for line in summary]
    assert [line.strip().split(": ")[0] for line in summary] == [
        "1,500 props, a in-process -> SQLite", "1,500 props-as-keys, a in-process -> SQLite"]
    assert counts == [{"propidx": 2 * messages, "keyidx": messages}, {"keyidx": 2 * messages}]


def test_hbase_rows_without_hbase_say_so_in_one_line(tmp_path: pathlib.Path) -> None:
    done = _run("--events", "100", "--rows", "c", "--hbase-run-dir", str(tmp_path))
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    assert "HBase" in done.stderr and "scripts/hbase start" in done.stderr


def test_an_unknown_row_is_a_usage_error() -> None:
    done = _run("--rows", "a,x")
    assert done.returncode == 2
    assert "--rows" in done.stderr


def test_a_bad_hbase_store_option_is_refused_in_one_line() -> None:
    done = _run("--rows", "a", "--hbase-options", "thrift2=nowhere")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "thrift2" in done.stderr
