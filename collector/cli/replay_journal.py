"""The local journal of ``tracehook replay``: what was delivered, so a rerun delivers only the rest.

The trace learns of a replay only once its REPLAY events are indexed; until then (index lag,
a crash mid-run) only this file knows.  One file per (bootstrap servers, topic, group) under
``$XDG_STATE_HOME/tracehook/replay`` (default ``~/.local/state/tracehook/replay``), or the
``--journal PATH`` given; JSON lines, appended and fsynced after every delivered batch::

    journal = Journal(default_path("127.0.0.1:9092", "orders", "sms"))
    journal.delivered()                    # {msg_id: delivered at (ms)}
    journal.append([Entry("m-1", 0, 41, "topic:sms.replay", "run-1", 1795341600000)])

A message counts as delivered when the journal has it later than the group's last attempt
(:func:`collector.cli.replay.plan`): one the group tried, and failed, after its replay is due again.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass

ENV_STATE_HOME = "XDG_STATE_HOME"


@dataclass(frozen=True)
class Entry:
    """One delivered record."""

    msg_id: str
    partition: int
    offset: int
    target: str
    run: str
    at_ms: int


def default_path(bootstrap: str, topic: str, group: str) -> pathlib.Path:
    """The journal of one (cluster, topic, group): readable names, a hash keeps them apart and safe."""
    state = os.environ.get(ENV_STATE_HOME) or os.path.join(os.path.expanduser("~"), ".local", "state")
    digest = hashlib.blake2b(f"{bootstrap}\0{topic}\0{group}".encode(), digest_size=6).hexdigest()
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in f"{topic}-{group}")[:80]
    return pathlib.Path(state) / "tracehook" / "replay" / f"{safe}-{digest}.jsonl"


class Journal:
    """Append-only JSON lines; a torn last line (a crash mid-write) is ignored when read."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path

    def delivered(self) -> dict[str, int]:
        """``{msg_id: the latest time it was delivered (ms)}``; empty when there is no journal yet."""
        out: dict[str, int] = {}
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return out
        for line in lines:
            try:
                entry = json.loads(line)
                msg_id, at_ms = entry["msg_id"], int(entry["at_ms"])
            except (ValueError, KeyError, TypeError):
                continue  # a torn line from a crash; what it was about is delivered again (at least once)
            out[msg_id] = max(out.get(msg_id, 0), at_ms)
        return out

    def append(self, entries: Iterable[Entry]) -> None:
        """Write ``entries`` durably (fsync) before they count as delivered."""
        data = "".join(json.dumps(asdict(e), ensure_ascii=False) + "\n" for e in entries)
        if not data:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+b") as out:
            if out.tell() > 0:
                out.seek(-1, os.SEEK_END)
                if out.read(1) != b"\n":  # a torn line from a crash: start on a line of our own
                    data = "\n" + data
            out.write(data.encode("utf-8"))
            out.flush()
            os.fsync(out.fileno())
