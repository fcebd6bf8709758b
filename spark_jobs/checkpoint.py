"""The index job's checkpoint: one Spark checkpoint directory per (log, store), and the commit
records in ``<log-dir>/index-commits/`` that the collector's retention and lag metrics read.

::

    checkpoint = default_checkpoint(log_dir, store_url)   # <log-dir>/index-checkpoints/<hash>
    claim_checkpoint(checkpoint, log_id, log_dir, store_url)
    spark_committed(checkpoint)                            # the source offset Spark last committed
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from typing import Any

from spark_jobs.errors import CheckpointMismatchError

CHECKPOINTS_DIR = "index-checkpoints"
IDENTITY_FILE = "tracehook-index.json"
"""In a checkpoint directory: the log id, log directory and store it belongs to."""

log = logging.getLogger(__name__)


def store_key(store_url: str) -> str:
    """A short stable name for a store URL (its default checkpoint directory's name)."""
    return hashlib.sha256(store_url.encode("utf-8")).hexdigest()[:16]


def default_checkpoint(log_dir: str, store_url: str) -> str:
    """``<log-dir>/index-checkpoints/<hash of the store URL>``: one checkpoint per (log, store)."""
    from collector.store import absolute_store_url

    return os.path.join(os.path.abspath(log_dir), CHECKPOINTS_DIR, store_key(absolute_store_url(store_url)))


def commit_key(checkpoint: str) -> str:
    """The name of a checkpoint's commit record in ``<log-dir>/index-commits/``."""
    return hashlib.sha256(os.path.abspath(checkpoint).encode("utf-8")).hexdigest()[:16]


def claim_checkpoint(checkpoint: str, log_id: str, log_dir: str, store_url: str) -> None:
    """Tie ``checkpoint`` to (log, store) on first use; refuse one that belongs to another pair."""
    path = os.path.join(checkpoint, IDENTITY_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            owner = json.load(f)
    except FileNotFoundError:
        owner = None
    except (OSError, ValueError) as exc:
        raise CheckpointMismatchError(f"checkpoint {checkpoint}: unreadable {IDENTITY_FILE}: {exc}") from exc
    if owner is None:
        if os.path.isdir(os.path.join(checkpoint, "offsets")):
            raise CheckpointMismatchError(
                f"checkpoint {checkpoint} holds Spark offsets but no {IDENTITY_FILE}: it was not made for this log")
        os.makedirs(checkpoint, exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump({"log": log_id, "log_dir": log_dir, "store": store_url}, f)
        os.replace(path + ".tmp", path)
        return
    if owner.get("log") != log_id:
        raise CheckpointMismatchError(
            f"checkpoint {checkpoint} belongs to another trace log ({owner.get('log_dir')}, log {owner.get('log')}), "
            f"not to {log_dir} (log {log_id})")
    if owner.get("store") != store_url:
        raise CheckpointMismatchError(
            f"checkpoint {checkpoint} belongs to store {owner.get('store')}, not {store_url}: "
            "each store needs its own checkpoint")


def spark_committed(checkpoint: str) -> dict[str, Any] | None:
    """The source offset of the newest batch in Spark's commit log (``commits/N`` + ``offsets/N``)."""
    try:
        done = [int(n) for n in os.listdir(os.path.join(checkpoint, "commits")) if n.isdigit()]
    except FileNotFoundError:
        return None
    if not done:
        return None
    try:
        with open(os.path.join(checkpoint, "offsets", str(max(done))), encoding="utf-8") as f:
            lines = f.read().splitlines()
        return json.loads(lines[2])
    except (OSError, ValueError, IndexError):
        return None


def sync_commit(log_dir: str, store_url: str, checkpoint: str) -> None:
    """Copy Spark's newest committed offset to the commit record retention reads.

    The source's ``commit`` does this too, but Spark calls it when it plans the *next* batch,
    so after an ``AvailableNow`` run the last batch would otherwise stay unrecorded.
    """
    from collector.log.state import LogPosition, read_commits, write_commit

    end = spark_committed(checkpoint)
    if end is None:
        return
    key = commit_key(checkpoint)
    known = {c.key: c.position.offset for c in read_commits(log_dir)}
    if known.get(key, -1) < end["offset"]:
        write_commit(log_dir, key, store_url, checkpoint, LogPosition(end["offset"], end["base"], end["pos"]))


def protect_from_retention(log_dir: str, store_url: str, checkpoint: str) -> None:
    """A new checkpoint records the log's first offset at once, so retention keeps what it has to read."""
    from collector.log.format import sealed_segments
    from collector.log.state import LogPosition, read_commits, readable_end, write_commit

    key = commit_key(checkpoint)
    if any(c.key == key for c in read_commits(log_dir)) or spark_committed(checkpoint) is not None:
        return
    sealed = sealed_segments(log_dir)
    first = sealed[0].base if sealed else readable_end(log_dir).base
    write_commit(log_dir, key, store_url, checkpoint, LogPosition(first, first, 0))


def lag(log_dir: str, checkpoint: str) -> tuple[int, float]:
    """(records, seconds) the checkpoint is behind the log's durable end; seconds from the
    receive time of the oldest record not yet indexed."""
    from collector.log.state import readable_end, receive_ms_at

    done = spark_committed(checkpoint)
    end = readable_end(log_dir)
    if done is None:
        return end.offset, 0.0
    behind = max(0, end.offset - done["offset"])
    if not behind:
        return 0, 0.0
    received = receive_ms_at(log_dir, done["offset"], done["base"], done["pos"])
    return behind, max(0.0, time.time() - received / 1000) if received else 0.0


def lag_after(log_dir: str, checkpoint: str, batch_id: int) -> tuple[int, float]:
    """Records and seconds behind the durable end once batch ``batch_id`` is written."""
    from collector.log.state import readable_end, receive_ms_at

    try:
        with open(os.path.join(checkpoint, "offsets", str(batch_id)), encoding="utf-8") as f:
            done = json.loads(f.read().splitlines()[2])
    except (OSError, ValueError, IndexError):
        return lag(log_dir, checkpoint)
    behind = max(0, readable_end(log_dir).offset - done["offset"])
    if not behind:
        return 0, 0.0
    received = receive_ms_at(log_dir, done["offset"], done["base"], done["pos"])
    return behind, max(0.0, time.time() - received / 1000) if received else 0.0


def drop_legacy_checkpoint(log_dir: str) -> None:
    """``indexed.json`` (the per-log checkpoint before index-checkpoints/) is replaced: remove it."""
    from collector.log.format import CHECKPOINT

    try:
        os.remove(os.path.join(log_dir, CHECKPOINT))
        log.info("removed the old checkpoint %s (replaced by index-checkpoints/)", CHECKPOINT)
    except FileNotFoundError:
        pass
