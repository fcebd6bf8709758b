"""What readers of a live trace log need besides the segments: its identity, its durable end
and the offsets each index checkpoint has committed.

Files in the log directory (next to the segments and ``manifest.json``)::

    log-id                     a random id, written once when the log is created
    durable                    the collector's durable end: (active base, next offset, byte position)
    index-commits/<key>.json   per index checkpoint: the offset it has committed, and its store

The collector rewrites ``durable`` after every group commit's sync (one ``pwrite`` of a
checksummed 32-byte record, no fsync: after a crash the collector rewrites it when it
recovers), so a reader that stops there never sees a frame the collector has not
acknowledged, torn or not.  Retention deletes a sealed segment only when every checkpoint in
``index-commits/`` has committed past it: an index checkpoint belongs to (log, store), and
a new store starts from the oldest segment still in the log.

::

    from collector.log.state import read_durable, read_commits
    end = read_durable(log_dir)               # LogPosition(offset, base, pos)
    lowest = min(c.offset for c in read_commits(log_dir))
"""

from __future__ import annotations

import json
import os
import struct
import time
import uuid
from typing import NamedTuple

import crc32c

from collector.log.errors import NotATraceLogError
from collector.log.format import MANIFEST, SEGMENT_SUFFIX, _atomic_write_json, _load_manifest

LOG_ID = "log-id"
DURABLE = "durable"
COMMITS_DIR = "index-commits"
_DURABLE = struct.Struct(">4sQQQ")
_MAGIC = b"THD1"
_DURABLE_SIZE = _DURABLE.size + 4
_READ_ATTEMPTS = 20


class LogPosition(NamedTuple):
    """A place in the log: record ``offset``, which starts at byte ``pos`` of segment ``base``
    (or, at the durable end, the offset the next record will get and where it will be written)."""

    offset: int
    base: int
    pos: int


class Commit(NamedTuple):
    """What one index checkpoint has committed (``index-commits/<key>.json``)."""

    key: str
    store: str
    checkpoint: str
    position: LogPosition
    committed_ms: int


# -- identity -------------------------------------------------------------------------------

def ensure_log_id(log_dir: str) -> str:
    """The log's id, created (atomically, synced) if the log has none yet (the writer calls this)."""
    try:
        return read_log_id(log_dir)
    except NotATraceLogError:
        pass
    log_id = uuid.uuid4().hex
    path = os.path.join(log_dir, LOG_ID)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(log_id + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return log_id


def read_log_id(log_dir: str) -> str:
    """The log's id; :class:`NotATraceLogError` if ``log_dir`` is not a trace log the collector opened."""
    try:
        with open(os.path.join(log_dir, LOG_ID), encoding="ascii") as f:
            log_id = f.read().strip()
    except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
        log_id = ""
    if len(log_id) == 32 and all(c in "0123456789abcdef" for c in log_id):
        return log_id
    if not os.path.isdir(log_dir):
        raise NotATraceLogError(f"{log_dir} is not a trace-log directory (it does not exist or is not a directory)")
    has_log = os.path.exists(os.path.join(log_dir, MANIFEST)) or any(
        n.endswith(SEGMENT_SUFFIX) for n in os.listdir(log_dir))
    if has_log:
        raise NotATraceLogError(f"{log_dir} has no valid {LOG_ID}: start the collector on it once (it adds one)")
    raise NotATraceLogError(f"{log_dir} is not a trace-log directory (no {LOG_ID}, manifest or segments)")


# -- the durable end --------------------------------------------------------------------------

class DurableWriter:
    """The collector's side: one open file, rewritten in place after each sync."""

    def __init__(self, log_dir: str) -> None:
        self._fd = os.open(os.path.join(log_dir, DURABLE), os.O_RDWR | os.O_CREAT, 0o644)

    def publish(self, position: LogPosition) -> None:
        """Make ``position`` the durable end readers see (call only after the bytes are synced)."""
        body = _DURABLE.pack(_MAGIC, *position)
        os.pwrite(self._fd, body + crc32c.crc32c(body).to_bytes(4, "big"), 0)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_durable(log_dir: str) -> LogPosition | None:
    """The collector's durable end, or None when it has never published one (then only the
    manifest's sealed segments are safe to read)."""
    path = os.path.join(log_dir, DURABLE)
    for _ in range(_READ_ATTEMPTS):
        try:
            with open(path, "rb") as f:
                raw = f.read(_DURABLE_SIZE)
        except FileNotFoundError:
            return None
        if len(raw) == _DURABLE_SIZE:
            body, crc = raw[:-4], int.from_bytes(raw[-4:], "big")
            magic, offset, base, pos = _DURABLE.unpack(body)
            if magic == _MAGIC and crc32c.crc32c(body) == crc:
                return LogPosition(offset, base, pos)
        time.sleep(0.001)  # a write in progress: read again
    return None


def readable_end(log_dir: str) -> LogPosition:
    """Where a reader must stop: the durable end, or the end of the last sealed segment."""
    durable = read_durable(log_dir)
    sealed, end = _load_manifest(log_dir)
    if durable is not None and durable.offset >= end:
        return durable
    if sealed:
        last = sealed[-1]
        return LogPosition(last.base + last.records, last.base, last.size)
    return LogPosition(end, end, 0)


# -- commits ----------------------------------------------------------------------------------

def write_commit(log_dir: str, key: str, store: str, checkpoint: str, position: LogPosition) -> None:
    """Record that checkpoint ``key`` has indexed every record before ``position`` into ``store``."""
    directory = os.path.join(log_dir, COMMITS_DIR)
    os.makedirs(directory, exist_ok=True)
    _atomic_write_json(os.path.join(directory, f"{key}.json"), {
        "version": 1, "store": store, "checkpoint": checkpoint, "offset": position.offset,
        "base": position.base, "pos": position.pos, "committed_ms": int(time.time() * 1000)})


def read_commits(log_dir: str) -> list[Commit]:
    """Every checkpoint's committed position (an unreadable file counts as committed nothing)."""
    directory = os.path.join(log_dir, COMMITS_DIR)
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".json"))
    except FileNotFoundError:
        return []
    commits = []
    for name in names:
        key = name[:-len(".json")]
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                doc = json.load(f)
            position = LogPosition(int(doc["offset"]), int(doc["base"]), int(doc["pos"]))
            commits.append(Commit(key, str(doc["store"]), str(doc["checkpoint"]), position,
                                  int(doc.get("committed_ms", 0))))
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError):
            commits.append(Commit(key, "?", "?", LogPosition(0, 0, 0), 0))
    return commits


def committed_offset(log_dir: str) -> int | None:
    """The lowest offset committed by every index checkpoint; None when there is none."""
    commits = read_commits(log_dir)
    return min(c.position.offset for c in commits) if commits else None


def remove_commit(log_dir: str, key: str) -> None:
    """Forget a checkpoint (a store no longer indexed): retention stops waiting for it."""
    try:
        os.remove(os.path.join(log_dir, COMMITS_DIR, f"{key}.json"))
    except FileNotFoundError:
        pass


def receive_ms_at(log_dir: str, offset: int, base: int, pos: int) -> int | None:
    """When the collector received record ``offset`` (at byte ``pos`` of segment ``base``); None if
    it cannot be read there (index lag is then reported without its age)."""
    from collector.log.format import segment_name

    for seg, at in ((base, pos), (offset, 0)):
        try:
            with open(os.path.join(log_dir, segment_name(seg)), "rb") as f:
                f.seek(at)
                head = f.read(24)
        except OSError:
            continue
        if len(head) == 24 and int.from_bytes(head[8:16], "big") == offset:
            return int.from_bytes(head[16:24], "big")
    return None
