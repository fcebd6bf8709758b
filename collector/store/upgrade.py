"""An index upgraded in place to this release's layout: O(1), nothing rewritten, with a way back.

Layout 3 is layout 2 with tables added, and its readers read layout 2's cells as well as their own
(:mod:`collector.store.layout`).  So a layout-2 store becomes a layout-3 one by recording the new
version in its ``meta`` row; the next open creates the missing tables (both adapters create a
store's missing tables on every open).  Old rows stay where they are and expire by their TTL.

The way back is a snapshot taken before the record (the record is the one step the old release
notices: it refuses a store in a newer layout):

- ``local:`` — SQLite's online backup API copies the file, in one step, into a file beside it
  (:func:`snapshot_path`), while the collector and the index job go on (WAL: readers never block
  the writer).  :func:`roll_back` copies a snapshot back with the same API.
- ``hbase://`` — HBase snapshots are taken by HBase's admin API, which neither Thrift gateway
  offers; :func:`hbase_shell_script` prints the HBase shell commands that take, restore and drop
  them, and the upgrade of an HBase store runs only with ``snapshot=False`` (taken already).

Example::

    report = upgrade_store("local:/data/index.sqlite3")
    print(report.snapshot, report.seconds)
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from collector.store import layout, layout_v2, local_path, open_store, resolve_store_url, schema
from collector.store.errors import LayoutVersionError, OldLayoutError, StoreError, UpgradeError

SNAPSHOT_SUFFIX = ".snapshot"
PARTIAL_SUFFIX = ".partial"
"""A snapshot being written: renamed to its name only once complete."""
HBASE_SNAPSHOT_TAG = "layout2"
"""The end of every HBase snapshot name the upgrade's shell script takes."""


@dataclass(frozen=True)
class UpgradeReport:
    """What :func:`upgrade_store` did."""

    from_version: int
    to_version: int
    snapshot: str | None
    """The snapshot file (``local:``), or None (none taken, or an HBase store)."""
    snapshot_bytes: int
    seconds: float
    """Wall time, snapshot included."""
    snapshot_seconds: float
    already: bool = False
    """The store was in this release's layout already: nothing was recorded or copied."""


def added_tables() -> list[str]:
    """The tables this layout has and layout 2 has not: created by the first open after the upgrade."""
    return [t.name for t in schema.TABLES if t.name not in layout_v2.TABLES]


def snapshot_path(path: str, now_s: float | None = None) -> str:
    """The default snapshot file of the SQLite store at ``path``: beside it, named by layout and UTC time."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now_s is None else now_s))
    return f"{path}.layout{layout_v2.VERSION}-{stamp}{SNAPSHOT_SUFFIX}"


def upgrade_store(url: str, *, snapshot: bool = True, snapshot_to: str | None = None,
                  clock: Callable[[], float] = time.monotonic) -> UpgradeReport:
    """Upgrade the store at ``url`` in place to :data:`~collector.store.layout.LAYOUT_VERSION`.

    With ``snapshot`` (a ``local:`` store), the file is first copied to ``snapshot_to`` (default
    :func:`snapshot_path`).  A store in this layout already is left as it is (its missing tables
    are created: an upgrade interrupted after its record is finished so).  Raises
    :class:`OldLayoutError` for a layout that is not upgraded in place (its line names
    ``tracehook migrate-store``), :class:`LayoutVersionError` for a newer one,
    :class:`UpgradeError` for a snapshot it cannot take, and the stores' errors.
    """
    started = clock()
    url = resolve_store_url(url, must_exist=True)
    store = open_store(url, create_tables=False, any_layout=True)
    try:
        version = store.layout_version
        if version == layout.LAYOUT_VERSION and store.get_meta(layout.LAYOUT_VERSION_COLUMN) is None:
            raise UpgradeError(f"{url} holds no index: nothing to upgrade")
        if version > layout.LAYOUT_VERSION:
            raise LayoutVersionError(layout.newer_layout_line(url, version))
        if version != layout.LAYOUT_VERSION and version not in layout.IN_PLACE_FROM:
            raise OldLayoutError(layout.old_layout_line(url, version))
        taken, size, snap_s = None, 0, 0.0
        if version != layout.LAYOUT_VERSION:
            if snapshot:
                path = local_path(url)
                if path is None:
                    raise UpgradeError(
                        f"an HBase store's snapshot is taken in the HBase shell: run `tracehook upgrade-store "
                        f"'{url}' --hbase-shell snapshot | hbase shell -n`, then this command with --no-snapshot")
                snap_started = clock()
                taken = snapshot_to or snapshot_path(path)
                size = take_snapshot(path, taken)
                snap_s = clock() - snap_started
            # The one step the old release notices: from here it refuses the store (a newer layout).
            store.put_meta(layout.LAYOUT_VERSION_COLUMN, layout.encode_count(layout.LAYOUT_VERSION))
    finally:
        store.close()
    upgraded = open_store(url)  # creates the tables layout 3 adds; checks the record reads back
    upgraded.close()
    return UpgradeReport(version, layout.LAYOUT_VERSION, taken, size, clock() - started, snap_s,
                         already=version == layout.LAYOUT_VERSION)


def take_snapshot(path: str, dest: str) -> int:
    """Copy the SQLite store at ``path`` to ``dest`` with the online backup API; the bytes written.

    One backup step copies every page inside one read transaction: a consistent copy while the
    collector and index job keep writing (WAL).  Written as ``dest.partial`` and renamed when
    complete.  :class:`UpgradeError` when ``dest`` exists or its disk has no room for the copy.
    """
    if os.path.exists(dest):
        raise UpgradeError(f"{dest} exists already: pass another --snapshot-to, or remove it")
    need = sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))
    folder = os.path.dirname(os.path.abspath(dest))
    free = shutil.disk_usage(folder).free
    if free < need:
        raise UpgradeError(f"the snapshot needs about {_mib(need)} in {folder} and {_mib(free)} are free: "
                           "pass --snapshot-to PATH on another disk, free space, or upgrade with --no-snapshot")
    partial = dest + PARTIAL_SUFFIX
    try:
        _backup(path, partial)
        os.replace(partial, dest)
    except sqlite3.Error as exc:
        _remove(partial)
        raise StoreError(f"could not snapshot {path} to {dest}: {exc}") from exc
    except BaseException:
        _remove(partial)
        raise
    return os.path.getsize(dest)


def roll_back(url: str, snapshot: str) -> int:
    """Copy ``snapshot`` (from :func:`upgrade_store`) back into the ``local:`` store at ``url``; its layout.

    Stop every tracehook process that opens the store first: what this release wrote after the
    snapshot is gone, and the old release re-indexes it from the trace log (docs/index-store.md).
    :class:`UpgradeError` when ``snapshot`` is no tracehook store in an older layout.
    """
    path = local_path(resolve_store_url(url, must_exist=True))
    if path is None:
        raise UpgradeError("a rollback copies a local: snapshot back; an HBase store is restored in the HBase "
                           f"shell: `tracehook upgrade-store '{url}' --hbase-shell restore | hbase shell -n`")
    version = _snapshot_version(snapshot)
    if version is None or version >= layout.LAYOUT_VERSION:
        raise UpgradeError(f"{snapshot} is no snapshot of a tracehook index in an older layout "
                           f"(found {'no index' if version is None else f'layout {version}'})")
    try:
        _backup(snapshot, path)
    except sqlite3.Error as exc:
        raise StoreError(f"could not copy {snapshot} into {path}: {exc}") from exc
    return version


def _snapshot_version(path: str) -> int | None:
    if not os.path.isfile(path):
        return None
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            found = db.execute(f'SELECT value FROM "{layout.META_TABLE}" WHERE row = ? AND col = ?',
                               (layout.META_ROW, layout.LAYOUT_VERSION_COLUMN)).fetchone()
        finally:
            db.close()
    except sqlite3.Error:
        return None
    return None if found is None else layout.decode_count(bytes(found[0]))


def _backup(src_path: str, dest_path: str) -> None:
    src = sqlite3.connect(src_path, timeout=30.0)
    try:
        dest = sqlite3.connect(dest_path, timeout=30.0)
        try:
            src.backup(dest)  # pages=-1: every page in one step, one read transaction
        finally:
            dest.close()
    finally:
        src.close()


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def hbase_shell_script(url: str, what: str) -> str:
    """HBase shell commands for the HBase store at ``url``: ``snapshot`` takes a snapshot of each of
    its layout-2 tables (and ``meta``), ``restore`` puts them back and drops the tables layout 3
    added, ``drop-snapshot`` deletes the snapshots.  Pipe into ``hbase shell -n``."""
    parts = urlsplit(url)
    if parts.scheme != "hbase":
        raise UpgradeError(f"--hbase-shell is for an hbase:// store, not {url}")
    from collector.store.hbase import DEFAULT_NAMESPACE

    namespace = parse_qs(parts.query).get("namespace", [DEFAULT_NAMESPACE])[-1]
    tables = [f"{namespace}_{t}" for t in (*layout_v2.TABLES, layout.META_TABLE)]

    def name(table: str) -> str:  # a snapshot name takes no ':' (a namespace's separator)
        return f"{table.replace(':', '-')}-{HBASE_SNAPSHOT_TAG}"

    if what == "snapshot":
        lines = [f"snapshot '{t}', '{name(t)}'" for t in tables]
    elif what == "restore":
        lines = [f"disable '{t}'\nrestore_snapshot '{name(t)}'\nenable '{t}'" for t in tables]
        lines += [f"disable '{namespace}_{t}'\ndrop '{namespace}_{t}'" for t in added_tables()]
    elif what == "drop-snapshot":
        lines = [f"delete_snapshot '{name(t)}'" for t in tables]
    else:
        raise ValueError(f"what must be snapshot, restore or drop-snapshot, not {what!r}")
    return "\n".join(lines) + "\n"
