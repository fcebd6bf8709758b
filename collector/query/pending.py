"""What a trace log holds that a store's index does not have yet, and what to run about it.

A lookup that finds nothing may simply be early: the index job puts acknowledged records
into a store some time after the collector wrote them (about a second in follow mode,
``tracehook collector --index`` or ``tracehook index --follow``; a one-shot or ``--every``
run only when it runs).  :func:`pending` compares the log's durable end with the position
the store's index checkpoint has committed (:mod:`collector.log.state`), from the log
directory alone (no collector needed)::

    p = pending("/data/tracehook/log", "local:/data/tracehook/index.sqlite3")
    if p.records:
        print(not_found_hint(p))
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from collector.log.state import read_commits, readable_end
from collector.store import absolute_store_url


@dataclass(frozen=True)
class Pending:
    """Durable records (batches) of one trace log that one store's index has not committed."""

    log_dir: str
    store_url: str
    records: int
    indexed_before: bool  # whether an index job has committed anything into this store


def same_store(a: str, b: str) -> bool:
    """Whether two store URLs name one store (``local:`` paths compared absolute)."""
    return absolute_store_url(a) == absolute_store_url(b)


def pending(log_dir: str, store_url: str) -> Pending:
    """Count the durable records of ``log_dir`` not yet committed into ``store_url`` (zero without a log)."""
    if not os.path.isdir(log_dir):
        return Pending(log_dir, store_url, 0, False)
    end = readable_end(log_dir).offset
    committed = [c.position.offset for c in read_commits(log_dir) if same_store(c.store, store_url)]
    done = max(committed, default=0)
    return Pending(log_dir, store_url, max(0, end - done), bool(committed))


def index_command(log_dir: str, store_url: str) -> str:
    """The ``tracehook index`` command line for this log and store."""
    return f"tracehook index --log-dir {log_dir} --store {store_url}"


def not_found_hint(p: Pending) -> str:
    """Why a lookup may have found nothing yet, and the command that indexes what is pending ('' if nothing)."""
    if not p.records:
        return ""
    return (f"the trace log {p.log_dir} holds {p.records} record(s) (batches) not indexed into {p.store_url} yet; "
            f"index them with: {index_command(p.log_dir, p.store_url)} (add --follow to keep the index current, "
            "or run the collector with --index)")
