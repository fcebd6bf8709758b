"""The events an index checkpoint set aside: ``<checkpoint>/set-aside.jsonl``, beside Spark's own files.

An event the indexer could not store (:mod:`collector.index.isolate`) is recorded here with its
place in the trace log and the reason, and the rest of its batch is indexed and committed.  The
file is outside the index tables (no layout change) and beside the checkpoint whose run set the
events aside: the collector counts them (``/metrics``, ``/healthz``, the console) through the
commit records that name each checkpoint, and ``tracehook set-aside`` lists, shows and re-indexes
them.  One JSON object per line; a record written twice (a batch redone after a crash) is one
entry::

    record(checkpoint, [SetAside(base=0, offset=17, event=3, ...)])
    for entry in read(checkpoint): ...
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

SET_ASIDE_FILE = "set-aside.jsonl"
LOCK_FILE = "set-aside.lock"


@dataclass(frozen=True)
class SetAside:
    """One event set aside: where it is in the trace log, what it is, and why it was not indexed.

    ``base`` is the segment's base offset for a file log (the Kafka partition for a Kafka source),
    ``offset`` the record's offset, ``event`` the event's index in the record's batch.
    """

    base: int
    offset: int
    event: int
    msg_id: str
    topic: str
    type: str
    reason: str
    set_aside_ms: int

    @property
    def key(self) -> tuple[int, int, int]:
        """Its place in the log: one entry per place."""
        return self.base, self.offset, self.event


def path_of(checkpoint: str) -> str:
    """The set-aside file of ``checkpoint``."""
    return os.path.join(checkpoint, SET_ASIDE_FILE)


def read(checkpoint: str) -> list[SetAside]:
    """Every entry, in log order (a line that does not parse, e.g. torn by a crash, is skipped)."""
    try:
        with open(path_of(checkpoint), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    entries: dict[tuple[int, int, int], SetAside] = {}
    for line in lines:
        try:
            entry = SetAside(**json.loads(line))
        except (ValueError, TypeError):
            continue
        entries.setdefault(entry.key, entry)
    return sorted(entries.values(), key=lambda e: e.key)


def count(checkpoint: str) -> int:
    """How many events ``checkpoint`` has set aside (0 when it has no file)."""
    return len(read(checkpoint))


@contextlib.contextmanager
def _locked(checkpoint: str) -> Iterator[None]:
    """Hold the checkpoint's set-aside lock: the index job appends while ``tracehook set-aside
    reindex`` rewrites, and neither may lose the other's entries."""
    os.makedirs(checkpoint, exist_ok=True)
    with open(os.path.join(checkpoint, LOCK_FILE), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        yield


def record(checkpoint: str, entries: Iterable[SetAside]) -> int:
    """Append the entries not recorded yet, flushed to disk before the batch commits; returns how many."""
    return update(checkpoint, add=entries)


def update(checkpoint: str, *, add: Iterable[SetAside] = (), remove: Iterable[tuple[int, int, int]] = ()) -> int:
    """Remove the entries at the places ``remove`` names, then add those of ``add`` not recorded yet
    (one place, one entry); returns how many were added."""
    add, remove = list(add), set(remove)
    with _locked(checkpoint):
        entries = read(checkpoint)
        known = {e.key for e in entries if e.key not in remove}
        new = [e for e in add if e.key not in known]
        if remove & {e.key for e in entries}:
            _write(checkpoint, [e for e in entries if e.key not in remove] + new)
        elif new:
            with open(path_of(checkpoint), "ab+") as f:
                size = f.seek(0, os.SEEK_END)
                torn = size > 0 and os.pread(f.fileno(), 1, size - 1) != b"\n"  # a crash cut the last append short
                f.write((("\n" if torn else "") + _lines(new)).encode("utf-8"))
                f.flush()
                os.fsync(f.fileno())
    return len(new)


def prune(checkpoint: str, first_offset: int) -> int:
    """Forget the entries whose record the trace log no longer keeps (offset below ``first_offset``,
    the first offset of its oldest segment); returns how many were dropped."""
    with _locked(checkpoint):
        entries = read(checkpoint)
        kept = [e for e in entries if e.offset >= first_offset]
        if len(kept) < len(entries):
            _write(checkpoint, kept)
    return len(entries) - len(kept)


def _lines(entries: Iterable[SetAside]) -> str:
    return "".join(json.dumps(asdict(e), sort_keys=True) + "\n" for e in entries)


def _write(checkpoint: str, entries: list[SetAside]) -> None:
    """Replace the file with ``entries`` (none: remove it)."""
    path = path_of(checkpoint)
    if not entries:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        return
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(_lines(sorted({e.key: e for e in entries}.values(), key=lambda e: e.key)))
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)
