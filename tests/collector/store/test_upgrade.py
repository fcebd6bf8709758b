"""Layout 2 → this layout: refused with one line naming ``tracehook upgrade-store``, upgraded in place
(nothing rewritten, a snapshot first, rolled back from it), or copied by ``migrate-store``.

The layout-2 stores are built by tests/collector/store/v2_store.py (layout 2's own message cells);
the reference is a store indexed fresh from the same events by today's indexer.
"""

from __future__ import annotations

import os
import pathlib
import sqlite3
import subprocess
import sys
import types
from collections.abc import Callable

import msgpack
import pytest
import v1_store
import v2_store
from index_helpers import message, unique
from layout_helpers import HOUR, NOW, ROOT, Record, answers, fresh, scenario

from collector.cli.main import main
from collector.index.indexer import finish_batch, index_records
from collector.index.migrate import migrate_store
from collector.store import (
    LayoutVersionError,
    OldLayoutError,
    layout,
    layout_v2,
    open_store,
    schema,
    sqlite_tables,
    upgrade,
)
from collector.store.errors import UpgradeError
from collector.store.upgrade import hbase_shell_script, roll_back, upgrade_store
from tracehook.wire import EventType, WireError

ENV = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}


def cli(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``tracehook ARGV`` as a process of its own."""
    return subprocess.run([sys.executable, "-m", "collector.cli", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=ENV)


def command(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``tracehook ARGV`` in this process (the same entry point, without a second interpreter's start)."""
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def sqlite_dump(path: pathlib.Path) -> dict[str, set[tuple[bytes, bytes, int, bytes]]]:
    """Every cell of every table of a ``local:`` file, as SQLite holds it (write times included)."""
    with sqlite3.connect(path) as db:
        names = [n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {n: {tuple(r) for r in db.execute(f'SELECT * FROM "{n}"')} for n in names}


@pytest.fixture
def v2_local(tmp_path: pathlib.Path) -> tuple[str, str, list[Record]]:
    topic = unique("up")
    records = scenario(topic)
    url = f"local:{tmp_path / 'index.sqlite3'}"
    v2_store.write(url, records)
    return url, topic, records


def test_a_layout_2_store_is_refused_with_one_line_naming_the_upgrade(v2_local, tmp_path: pathlib.Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    url, _, _ = v2_local
    with pytest.raises(OldLayoutError) as refused:
        open_store(url)
    line = str(refused.value)
    assert "\n" not in line and "layout 2" in line and f"`tracehook upgrade-store {url}`" in line
    for argv in (["query", "id", "x"], ["offsets", "orders", "--time", "-1h"]):
        code, _, err = command(capsys, *argv, "--store", url)
        assert code == 5, (argv, err)
        assert err.strip().splitlines() == [f"error: {line}"]
    (tmp_path / "log").mkdir()  # the index job as its own process: refused before Spark starts
    index = cli("index", "--log-dir", str(tmp_path / "log"), "--store", url)
    assert index.returncode == 5, index.stderr
    assert len(index.stderr.strip().splitlines()) == 1 and "tracehook upgrade-store" in index.stderr


def test_upgraded_in_place_it_answers_as_a_store_indexed_fresh(v2_local, tmp_path: pathlib.Path) -> None:
    url, topic, records = v2_local
    path = pathlib.Path(url.removeprefix("local:"))
    before = sqlite_dump(path)
    report = upgrade_store(url, snapshot_to=str(tmp_path / "snap"))
    assert (report.from_version, report.to_version, report.already) == (2, layout.LAYOUT_VERSION, False)
    assert report.snapshot == str(tmp_path / "snap") and report.snapshot_bytes == os.path.getsize(report.snapshot)
    after = sqlite_dump(path)
    assert set(after) == {"meta", *(t.name for t in schema.TABLES)}
    for name, cells in before.items():  # nothing rewritten: every old cell as it was, write time included
        if name != "meta":
            assert after[name] == cells, name
    assert sqlite_dump(tmp_path / "snap") == before  # the snapshot is the old store
    ref_url = f"local:{tmp_path / 'ref.sqlite3'}"
    fresh(ref_url, records)
    upgraded, ref = open_store(url), open_store(ref_url)
    try:
        assert upgraded.layout_version == layout.LAYOUT_VERSION
        shapes = upgraded._tables  # type: ignore[attr-defined]
        assert all(shapes[n] == sqlite_tables.whole_table(n) for n in layout_v2.TABLES)  # layout 2's, as they were
        assert all(shapes[n] == sqlite_tables.lean(schema.TABLES_BY_NAME[n]) for n in upgrade.added_tables())
        want = answers(ref, topic, records)
        assert answers(upgraded, topic, records) == want
        assert want["traces"][f"{topic}-m05"]["outcomes"] and want["overview"]["topics"]  # not vacuous
    finally:
        upgraded.close()
        ref.close()
    again = upgrade_store(url)  # done before: nothing copied, nothing changed
    assert again.already and again.snapshot is None and sqlite_dump(path) == after


def test_old_events_indexed_again_after_the_upgrade_are_not_doubled(v2_local, tmp_path: pathlib.Path) -> None:
    """The index job re-reads the log after a restart: an event a layout-2 cell holds, indexed again
    into the upgraded store, must land on that cell (or be read once), beside new events."""
    url, topic, records = v2_local
    upgrade_store(url, snapshot=False)
    later = message(topic, f"{topic}-new", NOW - HOUR, keys="order-1")
    store = open_store(url)
    try:
        index_records(store, records + later)
        finish_batch(store)
        ref_url = f"local:{tmp_path / 'ref.sqlite3'}"
        fresh(ref_url, records + later)
        ref = open_store(ref_url)
        try:
            assert answers(store, topic, records + later) == answers(ref, topic, records + later)
        finally:
            ref.close()
    finally:
        store.close()


def test_the_snapshot_rolls_the_store_back(v2_local, tmp_path: pathlib.Path) -> None:
    url, topic, records = v2_local
    path = pathlib.Path(url.removeprefix("local:"))
    before = sqlite_dump(path)
    report = upgrade_store(url)
    assert report.snapshot is not None and report.snapshot.startswith(f"{path}.layout2-")
    store = open_store(url)  # this release writes for a while
    try:
        index_records(store, message(topic, f"{topic}-after", NOW - HOUR))
        finish_batch(store)
    finally:
        store.close()
    assert roll_back(url, report.snapshot) == 2
    assert sqlite_dump(path) == before  # the old store, exactly: the added tables gone too
    with pytest.raises(OldLayoutError):
        open_store(url)
    with pytest.raises(UpgradeError, match="no snapshot"):
        roll_back(url, str(tmp_path / "missing"))
    fresh(f"local:{tmp_path / 'new.sqlite3'}", [])
    with pytest.raises(UpgradeError, match="layout 3"):
        roll_back(url, str(tmp_path / "new.sqlite3"))  # a store of this layout is no way back


def test_what_is_not_upgraded_in_place_is_refused_and_left_alone(v2_local, tmp_path: pathlib.Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    v1 = tmp_path / "v1.sqlite3"
    v1_store.write_local(str(v1), [])
    with pytest.raises(OldLayoutError, match=f"tracehook migrate-store --from local:{v1}"):
        upgrade_store(f"local:{v1}")
    newer = tmp_path / "newer.sqlite3"
    fresh(f"local:{newer}", [])
    with sqlite3.connect(newer) as db:
        db.execute('UPDATE "meta" SET value = ? WHERE col = ?', (b"9", layout.LAYOUT_VERSION_COLUMN))
    with pytest.raises(LayoutVersionError, match="upgrade tracehook"):
        upgrade_store(f"local:{newer}")
    url, _, _ = v2_local
    path = pathlib.Path(url.removeprefix("local:"))
    before = sqlite_dump(path)
    (tmp_path / "taken").write_text("")
    with pytest.raises(UpgradeError, match="exists already"):
        upgrade_store(url, snapshot_to=str(tmp_path / "taken"))
    monkeypatch.setattr(upgrade.shutil, "disk_usage", lambda _: types.SimpleNamespace(free=1000))
    with pytest.raises(UpgradeError, match="no-snapshot"):
        upgrade_store(url)
    assert sqlite_dump(path) == before and not list(tmp_path.glob("*.partial"))  # still layout 2, untouched


def test_a_layout_2_store_is_copied_by_migrate_store(v2_local, tmp_path: pathlib.Path) -> None:
    url, topic, records = v2_local
    new_url, ref_url = f"local:{tmp_path / 'copy.sqlite3'}", f"local:{tmp_path / 'ref.sqlite3'}"
    report = migrate_store(url, new_url, chunk=7)
    assert (report.messages, report.events, report.bad) == (len({e.msg_id for _, e in records}), len(records), 0)
    fresh(ref_url, records)
    new, ref = open_store(new_url), open_store(ref_url)
    try:
        assert answers(new, topic, records) == answers(ref, topic, records)
    finally:
        new.close()
        ref.close()


def test_the_command(v2_local, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]) -> None:
    url, _, _ = v2_local
    done = cli("upgrade-store", url, "--snapshot-to", str(tmp_path / "s"))
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith(f"upgrade-store: {url} upgraded from layout 2 to {layout.LAYOUT_VERSION} in ")
    assert len(done.stdout.splitlines()) == 1 and f"--roll-back {tmp_path / 's'}" in done.stdout
    code, out, _ = command(capsys, "upgrade-store", url)
    assert code == 0 and "already" in out and not list(tmp_path.glob("*.snapshot"))
    code, out, err = command(capsys, "upgrade-store", url, "--roll-back", str(tmp_path / "s"))
    assert code == 0 and "back in layout 2" in out, err
    v1 = tmp_path / "v1.sqlite3"
    v1_store.write_local(str(v1), [])
    code, _, err = command(capsys, "upgrade-store", f"local:{v1}")
    assert code == 5 and len(err.splitlines()) == 1 and "tracehook migrate-store" in err
    hbase = "hbase://127.0.0.1:1?namespace=ns:tr"
    code, out, _ = command(capsys, "upgrade-store", hbase, "--hbase-shell", "snapshot")
    assert code == 0 and "snapshot 'ns:tr_messages', 'ns-tr_messages-layout2'" in out.splitlines()
    assert len(out.splitlines()) == len(v2_store.layout_v2.TABLES) + 1
    code, _, err = command(capsys, "upgrade-store", hbase)
    assert code == 2 and len(err.splitlines()) == 1, err


def test_the_hbase_restore_script_drops_what_layout_3_added() -> None:
    script = hbase_shell_script("hbase://h:9090?namespace=trace", "restore")
    for table in (*v2_store.layout_v2.TABLES, "meta"):
        assert f"disable 'trace_{table}'\nrestore_snapshot 'trace_{table}-layout2'\nenable 'trace_{table}'" in script
    for table in upgrade.added_tables():
        assert f"disable 'trace_{table}'\ndrop 'trace_{table}'" in script
    assert "restore" not in hbase_shell_script("hbase://h:9090?namespace=trace", "drop-snapshot")


@pytest.mark.hbase
@pytest.mark.slow
def test_hbase_in_place_and_copied(make_hbase_url: Callable[..., str], tmp_path: pathlib.Path) -> None:
    topic = unique("uph")
    records = scenario(topic)
    url, ref_url = make_hbase_url(), f"local:{tmp_path / 'ref.sqlite3'}"  # the reference: answers are the store's
    v2_store.write(url, records)
    with pytest.raises(OldLayoutError, match="tracehook upgrade-store"):
        open_store(url)
    with pytest.raises(UpgradeError, match="hbase shell"):
        upgrade_store(url)  # its snapshot is the HBase shell's
    copy_url = f"local:{tmp_path / 'copy.sqlite3'}"
    migrate_store(url, copy_url)  # copied to another backend first, while still layout 2
    assert upgrade_store(url, snapshot=False).from_version == 2
    fresh(ref_url, records)
    upgraded, ref, copy = open_store(url), open_store(ref_url), open_store(copy_url)
    try:
        want = answers(ref, topic, records)
        assert answers(upgraded, topic, records) == want
        assert answers(copy, topic, records) == want
    finally:
        for store in (upgraded, ref, copy):
            store.close()


def test_layout_2_cells_decode_to_the_events_they_hold() -> None:
    topic = unique("dec")
    records = scenario(topic)
    header, send = records[0]
    records.append((header, send._replace(msg_id="ab" * 16, props={"orderId": "42"}, body=b"\x00\xff",
                                          trace_id="0af7651916cd43dd8448eb211c80319c", request_id="r-1")))
    for h, e in records:
        stored = layout_v2.decode_event(v2_store.cell(h, e)[1])
        assert stored.event == e and (stored.header.app, stored.header.host, stored.header.client_id) == (
            h.app, h.host, h.client_id)
    damaged = msgpack.packb(["a", "h", "c", [int(EventType.PUB), "not a time", "", topic, "m"]])
    with pytest.raises(WireError):
        layout_v2.decode_event(damaged)  # counted and left out by the migration
