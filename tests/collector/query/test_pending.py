"""A lookup that finds nothing says what the trace log holds unindexed, and the command to index it."""

from __future__ import annotations

import argparse
import time

from collector.cli.query import run
from collector.log.file import TraceLog
from collector.query.pending import pending
from collector.server.app import create_app
from collector.server.config import CollectorConfig
from collector.store import open_store

PAYLOAD = b"\x93not-decoded-here"  # the log keeps batches as bytes; counting needs no decoding


def write_log(log_dir: str, records: int, *, seal_first: int = 0) -> None:
    """``seal_first`` records in a sealed segment, the rest in the active one."""
    log = TraceLog.open(log_dir, durability="os")
    now = int(time.time() * 1000)
    if seal_first:
        log.append([(now, "client-1", i, PAYLOAD) for i in range(seal_first)])
        log.roll()
    log.append([(now, "client-1", 100 + i, PAYLOAD) for i in range(records - seal_first)])
    log.close()


def test_pending_counts_durable_records_the_store_has_not_committed(tmp_path):
    from collector.log.state import LogPosition, write_commit

    log_dir, store = str(tmp_path / "log"), f"local:{tmp_path / 'index.sqlite3'}"
    assert pending(log_dir, store).records == 0  # no log at all
    write_log(log_dir, 5, seal_first=2)
    p = pending(log_dir, store)
    assert (p.records, p.indexed_before) == (5, False)  # sealed and active records alike
    write_commit(log_dir, "k1", store, str(tmp_path / "ckpt"), LogPosition(3, 2, 0))
    assert (pending(log_dir, store).records, pending(log_dir, store).indexed_before) == (2, True)
    assert pending(log_dir, "local:" + str(tmp_path / "other.sqlite3")).records == 5  # commits are per store


def test_cli_lookup_on_an_index_with_pending_records_prints_the_index_command(tmp_path, capsys):
    write_log(str(tmp_path / "log"), 4)
    open_store(f"local:{tmp_path / 'index.sqlite3'}").close()
    args = argparse.Namespace(what="id", msg_id="m-404", store=f"local:{tmp_path}", collector=None, token=None,
                              json=False)
    assert run(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("no trace for message 'm-404'\nhint: ")
    assert "holds 4 record(s)" in err and "--follow" in err
    assert f"tracehook index --log-dir {tmp_path / 'log'} --store local:{tmp_path / 'index.sqlite3'}" in err


async def test_api_404_detail_says_what_is_not_indexed(aiohttp_client, tmp_path):
    write_log(str(tmp_path / "log"), 3, seal_first=1)
    config = CollectorConfig(data_dir=str(tmp_path), durability="os")
    client = await aiohttp_client(create_app(config))
    response = await client.get("/v1/messages/m-404")
    assert response.status == 404
    detail = (await response.json())["detail"]
    assert detail.startswith("no trace for message 'm-404'; the trace log")
    assert "3 record(s)" in detail
    assert f"tracehook index --log-dir {config.log_dir} --store {config.store_url}" in detail
