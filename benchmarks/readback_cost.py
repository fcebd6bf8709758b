"""What the rollup read-back costs per message: ``rollup.read_parts`` over one micro-batch's messages.

Indexes ``--events`` events of a mix (benchmarks/index_cost.py's) into a fresh embedded store in
micro-batches of ``--micro-batch`` events, keeping each batch's touched msg ids (no rollups), then
reads the last batch's messages back (best CPU time of ``--repeat`` runs), with the C extension
``collector.store._readback`` and without it (``readback.FAST_PATH`` off: the Python path)::

    python benchmarks/readback_cost.py --events 600000 --mix sends --micro-batch 200000
    python benchmarks/readback_cost.py --events 400000 --mix realistic --micro-batch 200000

The parts read are the same both ways (a digest of them is printed). A checkout without
collector/index/readback.py (before the extension) runs the first row only.
Exit codes: 0 done; 2 bad arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.index_cost_support import MIXES, encode, micro_batches
from collector.index import rollup
from collector.index.indexer import index_payloads
from collector.store import open_store, schema
from collector.store.base import Store
from tracehook import wire


def best_cpu(run: Callable[[], object], repeat: int) -> tuple[float, object]:
    """The least CPU seconds of ``repeat`` runs (the collector off, as read_parts' callers run it), and a result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        with wire.no_gc():
            start = time.process_time()
            result = run()
            best = min(best, time.process_time() - start)
    return best, result


def last_batch(store: Store, mix: str, events: int, micro_batch: int) -> set[str]:
    """Index the mix batch by batch; the msg ids the last batch touched."""
    touched: set[str] = set()
    for batch in micro_batches(encode(MIXES[mix](events)), micro_batch):
        touched = set()
        index_payloads(store, [p.data for p in batch], touched=touched)
    return touched


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=600_000)
    parser.add_argument("--mix", choices=sorted(MIXES), default="sends")
    parser.add_argument("--micro-batch", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    if min(args.events, args.micro_batch, args.repeat) < 1:
        parser.error("--events, --micro-batch and --repeat must be >= 1")
    with tempfile.TemporaryDirectory(prefix="readback-cost-") as tmp:
        store = open_store(f"local:{tmp}/index.sqlite3")
        ids = last_batch(store, args.mix, args.events, args.micro_batch)
        try:
            from collector.index import readback
        except ImportError:
            readback = None
        paths: list[tuple[str, Any]] = [("C extension" if readback and readback.FAST_PATH else "this checkout", None)]
        if readback is not None:
            paths.append(("msgspec + Python parts" if hasattr(readback, "_PartStored") else "Python path", readback))
        print(f"read_parts of {len(ids):,} messages ({args.mix}, {args.events:,} events in batches of "
              f"{args.micro_batch:,}): CPU µs per message, best of {args.repeat} alternated runs")
        rows = store.get_rows(schema.MESSAGES, readback.sorted_message_rows(ids)[0]) if readback else []
        values = [list(r.values()) for r in rows]
        events = sum(len(v) for v in values)
        best: dict[str, float] = {}
        digests: dict[str, str] = {}
        decode: dict[str, float] = {}
        for _ in range(args.repeat):  # alternated: the host's load moves both alike
            for label, module in paths:
                saved = module._readback if module else None
                if module:
                    module._readback = None
                try:
                    cpu, parts = best_cpu(lambda: rollup.read_parts(store, ids), 1)
                    if readback is not None:  # the decoding alone: every row's stored values -> PartEvents
                        dcpu, _ = best_cpu(lambda: [readback.part_events(v) for v in values], 1)
                        decode[label] = min(decode.get(label, float("inf")), dcpu)
                finally:
                    if module:
                        module._readback = saved
                best[label] = min(best.get(label, float("inf")), cpu)
                digests[label] = hashlib.sha256(pickle.dumps(sorted(parts.items()))).hexdigest()[:12]  # type: ignore[attr-defined]
        for label, _ in paths:
            print(f"  {label}: {best[label] / len(ids) * 1e6:.2f}  (parts digest {digests[label]})")
        if decode:
            print(f"decoding alone ({events:,} stored events -> PartEvent): CPU µs per event")
            for label, _ in paths:
                print(f"  {label}: {decode[label] / events * 1e6:.3f}")
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
