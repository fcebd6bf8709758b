"""``tracehook query`` against a store URL and against a running collector."""

from __future__ import annotations

import asyncio
import json

import pytest
from api_helpers import QUERY_TOKEN, fill_store

from collector.cli.main import main
from collector.server.app import create_app
from collector.server.config import CollectorConfig
from tests.fixtures.sample import SHARED_KEY, SHARED_KEY_COUNT, TOPIC

pytestmark = pytest.mark.fallback


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["query", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_trace_table_from_the_store(config, ids, capsys):
    code, out, _ = run_cli(capsys, "--store", config.store_url, "id", ids.retried)
    assert code == 0
    assert f"message  {ids.retried}" in out
    lines = [line.split() for line in out.splitlines()]
    shipping = [line for line in lines if line[:2] == ["consumer", "shipping"]]
    assert [line[5] for line in shipping] == ["exception", "ok"]  # status column, in time order


def test_key_pages_as_json_follow_the_cursor(config, ids, capsys):
    code, out, _ = run_cli(capsys, "--store", config.store_url, "--json", "key", TOPIC, SHARED_KEY, "--limit", "20")
    first = json.loads(out)
    assert code == 0 and len(first["items"]) == 20 and first["next_cursor"]
    code, out, _ = run_cli(capsys, "--store", config.store_url, "--json", "key", TOPIC, SHARED_KEY,
                           "--cursor", first["next_cursor"])
    second = json.loads(out)
    assert len(second["items"]) == 5 and second["next_cursor"] is None
    assert not {i["msg_id"] for i in first["items"]} & {i["msg_id"] for i in second["items"]}


def test_not_found_and_bad_arguments_exit_codes(config, ids, capsys):
    code, _, err = run_cli(capsys, "--store", config.store_url, "id", "nope")
    assert code == 1 and "no trace" in err
    code, _, err = run_cli(capsys, "--store", config.store_url, "topic", TOPIC, "--since", "soon")
    assert code == 2 and "--since" in err
    code, _, err = run_cli(capsys, "--store", config.store_url, "topic", TOPIC, "--cursor", "zzz")
    assert code == 2 and "cursor" in err


async def test_against_a_collector_with_a_query_token(aiohttp_server, tmp_path, now_ms, capsys):
    config = CollectorConfig(data_dir=str(tmp_path), durability="os", query_token=QUERY_TOKEN)
    ids = fill_store(config.store_url, now_ms)
    server = await aiohttp_server(create_app(config))
    url = str(server.make_url(""))
    # The CLI blocks on HTTP: run it in a thread while the loop serves the collector.
    code = await asyncio.to_thread(main, ["query", "--collector", url, "dead", TOPIC, "--group", "shipping"])
    out, err = capsys.readouterr()
    assert code == 2 and "401" in err
    code = await asyncio.to_thread(main, ["query", "--collector", url, "--token", QUERY_TOKEN, "dead", TOPIC])
    out, _ = capsys.readouterr()
    assert code == 0 and ids.dead in out and "order-3" in out


def test_unreachable_collector(capsys):
    code, _, err = run_cli(capsys, "--collector", "http://127.0.0.1:9", "id", "x")
    assert code == 2 and "cannot reach" in err


def test_common_options_after_the_subcommand(config, ids, capsys):
    # The module docstring's own example: `tracehook query dead orders --group billing --json`.
    code, out, _ = run_cli(capsys, "dead", TOPIC, "--group", "shipping", "--json", "--store", config.store_url)
    assert code == 0 and [i["msg_id"] for i in json.loads(out)["items"]] == [ids.dead]
    code, out, _ = run_cli(capsys, "id", ids.dead, "--store", config.store_url, "--json")
    assert code == 0 and json.loads(out)["msg_id"] == ids.dead
    # Before the subcommand still works, and a subcommand that does not repeat it keeps it.
    code, out, _ = run_cli(capsys, "--json", "--store", config.store_url, "id", ids.dead)
    assert code == 0 and json.loads(out)["msg_id"] == ids.dead


def test_common_options_after_the_subcommand_over_http(capsys):
    code, _, err = run_cli(capsys, "id", "x", "--collector", "http://127.0.0.1:9", "--token", "t")
    assert code == 2 and "127.0.0.1:9" in err


def _listed(capsys, config, *argv: str) -> tuple[int, list[str], str]:
    code, out, err = run_cli(capsys, "--store", config.store_url, "--json", "topic", TOPIC, "--limit", "500", *argv)
    return code, [i["msg_id"] for i in json.loads(out)["items"]] if code in (0, 1) else [], err


def test_relative_begin_and_end_with_a_space_or_an_equals_sign(config, ids, capsys):
    everything = SHARED_KEY_COUNT + 6  # all stored between 1 h and 59.5 min ago
    assert len(_listed(capsys, config, "--begin", "-2h")[1]) == everything
    assert len(_listed(capsys, config, "--begin=-2h", "--end=now")[1]) == everything
    assert len(_listed(capsys, config, "--begin", "-2h", "--end", "-1s")[1]) == everything
    code, found, _ = _listed(capsys, config, "--begin", "-2h", "--end", "-90m")
    assert code == 1 and found == []
    code, found, _ = _listed(capsys, config, "--begin", "-2h", "--end", "-3599s")
    assert ids.normal in found and ids.failed_send not in found  # the first ones only: end is relative too


def test_since_takes_compound_durations_and_excludes_begin_and_end(config, ids, capsys):
    assert len(_listed(capsys, config, "--since", "1h30m")[1]) == SHARED_KEY_COUNT + 6
    code, found, _ = _listed(capsys, config, "--since", "30m")
    assert code == 1 and found == []
    for other in (["--begin", "-2h"], ["--end", "now"]):
        code, _, err = _listed(capsys, config, "--since", "1h", *other)
        assert code == 2 and "--since" in err
    code, _, err = _listed(capsys, config, "--since", "-1h")  # a duration, not a time
    assert code == 2 and "--since" in err


def test_join_relative_times():
    from collector.cli.main import join_relative_times

    assert join_relative_times(["q", "--begin", "-6h", "--end", "-1h", "--time", "-2h"]) == [
        "q", "--begin=-6h", "--end=-1h", "--time=-2h"]
    assert join_relative_times(["--begin", "2026-01-01", "--since", "1h", "--begin", "--json", "-1"]) == [
        "--begin", "2026-01-01", "--since", "1h", "--begin", "--json", "-1"]
    assert join_relative_times(["--", "--begin", "-6h"]) == ["--", "--begin", "-6h"]
