"""tracehook offsets / replay-list, on the store directly and through a running collector."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import pathlib

import pytest
from backtrack_helpers import BASE_MS, GROUP, message, outcome_records

from collector.cli.main import main
from collector.index.indexer import index_records
from collector.server.app import create_app
from collector.server.config import CollectorConfig
from collector.store import open_store

TOPIC = "orders"
OUTCOMES = ["ok", "timeout", "ok", "pending", "never", "ok"]  # queue i % 2, offset i // 2, stored i seconds in
BEGIN, END = str(BASE_MS), str(BASE_MS + 60_000)


@pytest.fixture
def config(tmp_path: pathlib.Path) -> CollectorConfig:
    config = CollectorConfig(data_dir=str(tmp_path), durability="os")
    store = open_store(config.store_url)
    for i, outcome in enumerate(OUTCOMES):
        index_records(store, outcome_records(TOPIC, f"m{i}", message(i % 2, i // 2, BASE_MS + i * 1000), outcome))
    store.close()
    return config


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_offsets_table_and_json(config, capsys) -> None:
    store = ["--store", config.store_url]
    code, out, _ = run(capsys, "offsets", TOPIC, f"--time={BASE_MS + 1500}", *store)
    assert code == 0
    assert out.split("\n")[2:4] == ["0      1", "1      1"]  # queue 0: m2 at 2 s; queue 1: m3 at 3 s
    code, out, _ = run(capsys, "offsets", TOPIC, "--time", "2020-01-01", "--group", GROUP, "--json", *store)
    plan = json.loads(out)
    assert code == 0 and plan["group"] == GROUP and plan["force"] is False
    # GROUP finished m0, m1 (timeout), m2 and m5: positions 2 (queue 0) and 3 (queue 1); time before all -> 0.
    assert [(q["queue"], q["current"], q["planned"]) for q in plan["queues"]] == [(0, 2, 0), (1, 3, 0)]
    code, out, _ = run(capsys, "offsets", TOPIC, "--time=now", "--group", GROUP, "--force", "--json", *store)
    assert [q["planned"] for q in json.loads(out)["queues"]] == [3, 3]


def test_relative_times_with_a_space_or_an_equals_sign(config, capsys) -> None:
    store = ["--store", config.store_url]
    spaced = run(capsys, "offsets", TOPIC, "--time", "-2h", "--json", *store)
    joined = run(capsys, "offsets", TOPIC, "--time=-2h", "--json", *store)
    assert spaced[0] == joined[0] == 0 and json.loads(spaced[1])["queues"] == json.loads(joined[1])["queues"]
    code, out, err = run(capsys, "replay-list", TOPIC, "--group", GROUP, "--begin", "-100000d", *store)
    assert code == 2 and "--begin" in err  # parsed as a time (before 1970), not taken for an option
    code, out, err = run(capsys, "replay-list", TOPIC, "--group", GROUP, "--begin", "-2s", "--end", "-1s", *store)
    assert code == 0 and out == "" and "0 message(s)" in err  # a window after every message


def test_offsets_exit_codes(config, capsys) -> None:
    assert run(capsys, "offsets", "unknown-topic", "--time=now", "--store", config.store_url)[0] == 1
    code, _, err = run(capsys, "offsets", TOPIC, "--time=whenever", "--store", config.store_url)
    assert code == 2 and "whenever" in err
    assert run(capsys, "offsets", TOPIC, "--time=now", "--force", "--store", config.store_url)[0] == 2


def test_replay_list_jsonl_and_csv(config, capsys) -> None:
    store = ["--store", config.store_url]
    code, out, err = run(capsys, "replay-list", TOPIC, "--group", GROUP, "--begin", BEGIN, "--end", END, *store)
    assert code == 0 and "3 message(s)" in err
    items = [json.loads(line) for line in out.splitlines()]
    assert [(i["msg_id"], i["queue"], i["offset"], i["status"]) for i in items] == [
        ("m1", 1, 0, "TIMEOUT"), ("m3", 1, 1, "PENDING"), ("m4", 0, 2, "NOT_RECEIVED"),
    ]
    code, out, _ = run(capsys, "replay-list", TOPIC, "--group", GROUP, "--begin", BEGIN, "--end", END,
                       "--format", "csv", *store)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(r["msg_id"], r["status"], r["error"]) for r in rows] == [
        ("m1", "TIMEOUT", "handler timeout"), ("m3", "PENDING", ""), ("m4", "NOT_RECEIVED", ""),
    ]
    code, _, err = run(capsys, "replay-list", TOPIC, "--group", GROUP, "--begin", END, "--end", BEGIN, *store)
    assert code == 2 and "after" in err


async def test_same_answers_through_a_collector(aiohttp_server, config, capsys) -> None:
    server = await aiohttp_server(create_app(config))
    url = str(server.make_url(""))
    args = ["replay-list", TOPIC, "--group", GROUP, "--begin", BEGIN, "--end", END, "--collector", url]
    code = await asyncio.to_thread(main, args)
    out, _ = capsys.readouterr()
    assert code == 0
    assert [json.loads(line)["msg_id"] for line in out.splitlines()] == ["m1", "m3", "m4"]
    code = await asyncio.to_thread(main, ["offsets", TOPIC, "--time", BEGIN, "--group", GROUP, "--json",
                                          "--collector", url])
    out, _ = capsys.readouterr()
    assert code == 0 and [q["planned"] for q in json.loads(out)["queues"]] == [0, 0]
    code = await asyncio.to_thread(main, ["offsets", TOPIC, "--time=now", "--collector", "http://127.0.0.1:9"])
    assert code == 2


@pytest.mark.parametrize("module_name", ["collector.cli.backtrack", "collector.cli.query",
                                         "collector.cli.kafka_reset"])
def test_docstring_examples_parse(module_name: str) -> None:
    # The examples are what users copy, parsed as main() parses them ("--time -2h" joined first).
    import importlib
    import shlex

    from collector.cli.main import build_parser, join_relative_times

    doc = importlib.import_module(module_name).__doc__ or ""
    examples = [shlex.split(line, comments=True) for line in doc.splitlines() if line.strip().startswith("tracehook ")]
    assert examples
    for words in examples:
        words = words[1:words.index(">")] if ">" in words else words[1:]
        build_parser().parse_args(join_relative_times(words))  # SystemExit (a failed test) on a rejected argument
