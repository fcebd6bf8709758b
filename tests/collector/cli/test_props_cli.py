"""``tracehook props``: set, list and unset the lists in a store; backfill; one-line errors and exit codes."""

from __future__ import annotations

import json

from collector.cli import props as props_cli
from collector.cli.main import OneLineParser, main
from collector.index.indexer import index_records
from collector.store import open_store
from tests.fixtures.props_model import Msg, events

_PARSER = OneLineParser(prog="tracehook props")
props_cli.add_arguments(_PARSER)  # `tracehook props`' own arguments (main() would import every command each call)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = props_cli.run(_PARSER.parse_args(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_set_list_unset(tmp_path, capsys):
    url = f"local:{tmp_path / 'index.sqlite3'}"
    assert main(["props", "set", "--store", url, "orderId", "a:b=c"]) == 0  # the command as typed
    capsys.readouterr()
    code, out, err = run(capsys, "set", "--store", url, "--topic", "pay", "--", "-x", "ü")
    assert code == 0 and "within 10 s" in err
    code, out, _ = run(capsys, "list", "--store", url, "--json")
    assert json.loads(out) == {"default": ["orderId", "a:b=c"], "topics": {"pay": ["-x", "ü"]}}
    assert run(capsys, "unset", "--store", url, "a:b=c")[0] == 0
    assert run(capsys, "unset", "--store", url, "--topic", "pay")[0] == 0
    code, out, _ = run(capsys, "list", "--store", url)
    assert code == 0 and out.splitlines() == ['default: "orderId"']


def test_bad_names_and_stores_are_one_line_exit_2(tmp_path, capsys):
    url = f"local:{tmp_path / 'index.sqlite3'}"
    code, _, err = run(capsys, "set", "--store", url, "n" * 300)
    assert code == 2 and err.count("\n") == 1 and "256 bytes" in err
    code, _, err = run(capsys, "list", "--store", f"local:{tmp_path / 'none.sqlite3'}")
    assert code == 2 and "no index at" in err
    code, _, err = run(capsys, "backfill", "--store", url, "--topic", "t", "--name", "orderId")
    assert code == 2 and "not indexed on topic 't'" in err


def test_backfill_makes_older_messages_findable(tmp_path, capsys):
    url = f"local:{tmp_path / 'index.sqlite3'}"
    store = open_store(url)
    index_records(store, events([Msg(f"m{i}", "t", 1_000 + i, True, {"orderId": str(i % 2)}, None)
                                 for i in range(10)]))
    store.close()
    query = ["query", "--store", url, "--json", "prop", "t", "orderId", "1", "--begin", "0", "--end", "2000"]
    assert main(query) == 1  # not indexed yet
    capsys.readouterr()
    assert run(capsys, "set", "--store", url, "orderId")[0] == 0
    code, out, _ = run(capsys, "backfill", "--store", url, "--topic", "t", "--name", "orderId", "--chunk", "3")
    assert code == 0 and "done: 10 messages read, 10 rows written" in out
    assert main(query) == 0
    assert [i["msg_id"] for i in json.loads(capsys.readouterr().out)["items"]] == ["m9", "m7", "m5", "m3", "m1"]
    code, _, err = run(capsys, "backfill", "--store", url, "--topic", "t", "--name", "orderId", "--since", "1h",
                       "--begin", "0")
    assert code == 2 and "--since" in err
