"""Rollups written by an older release, brought up to :data:`~collector.store.rollup.ROLLUP_FORMAT` once per store.

The format a store's rollups are written in is recorded in its ``meta`` table, beside the salt
bucket count (:mod:`collector.store.layout`); a store without the record was rolled up in
format 1, or not at all yet.  Format 1 counted a send that failed at the broker as sent and as
never received by every group, which made a false lag that stayed for the whole lag horizon
(24 hours).  :func:`upgrade_rollups` runs before each batch's rollups are refreshed
(:func:`collector.store.indexer.finish_batch`, on the index job's driver), so the first batch
after an upgrade rewrites them; afterwards it costs one read of the meta row.

What it rewrites, the same way on both stores (only ``get_meta``/``put_meta`` are adapter code):

- the part of every message no group received (the only messages that can be failed sends: a
  failed send has no consume or dead event), read back from its message row (:func:`read_parts`),
  and each minute those parts are in, re-aggregated (:func:`write_parts`);
- minutes rolled up before parts rows existed (a rollup row, no parts row), rebuilt from the
  messages placed in them;
- (format 2 to 3) the hourly rollups, merged from the minute rows
  (:func:`collector.store.rollup_hours.rewrite_hours`).

The format is recorded last, so an upgrade that dies half-way is redone by the next batch; every
step writes what a recompute from the messages gives, so redoing it changes nothing.

Example::

    from collector.store.rollup_upgrade import upgrade_rollups
    upgrade_rollups(store)      # None: already current; else the minutes rewritten
"""

from __future__ import annotations

import logging

from collector.store import keys, layout, schema
from collector.store.base import Store
from collector.store.rollup import DEFAULT_CHUNK, MOVED, ROLLUP_FORMAT, Minute, Part, read_parts, write_parts
from collector.store.rollup_hours import all_hours, rewrite_hours

log = logging.getLogger(__name__)


def recorded_format(store: Store) -> int:
    """The rollup format recorded with the store's tables (1 when none is)."""
    value = store.get_meta(layout.ROLLUP_FORMAT_COLUMN)
    return 1 if value is None else layout.decode_count(value)


def upgrade_rollups(store: Store, *, chunk: int = DEFAULT_CHUNK) -> int | None:
    """Rewrite the rollups of a store recorded in an older format, then record :data:`ROLLUP_FORMAT`.

    Returns the minutes rewritten, or None when the store was current already.  Idempotent.
    """
    recorded = recorded_format(store)
    if recorded >= ROLLUP_FORMAT:
        return None
    rewritten = _upgrade_failed_sends(store, chunk) if recorded < 2 else 0
    hours = rewrite_hours(store, all_hours(store))  # format 3: hourly rollups merged from the minutes
    store.put_meta(layout.ROLLUP_FORMAT_COLUMN, layout.encode_count(ROLLUP_FORMAT))
    if rewritten or hours:
        log.warning("rollups upgraded from format %d to %d: %d minute(s) rewritten, %d hour(s) merged",
                    recorded, ROLLUP_FORMAT, rewritten, hours)
    return rewritten


def _upgrade_failed_sends(store: Store, chunk: int) -> int:
    """Format 1 to 2: rewrite the parts of messages no group received, and minutes without parts rows."""
    rewritten = 0
    with_parts: set[Minute] = set()
    unreceived: list[str] = []
    start, stop = keys.prefix_range((schema.ROLLUP_PARTS,))
    for row, cells in store.scan(schema.ROLLUPS, start, stop):
        _, topic, minute_ms = keys.unpack(row)
        with_parts.add((str(topic), int(minute_ms)))
        unreceived += [schema.rollup_part_msg_id(c) for c, v in cells.items()
                       if v != MOVED and not Part.decode("", v).groups]
        if len(unreceived) >= chunk:
            rewritten += write_parts(store, read_parts(store, unreceived, chunk=chunk), chunk=chunk)
            unreceived = []
    rewritten += write_parts(store, read_parts(store, unreceived, chunk=chunk), chunk=chunk)
    start, stop = keys.prefix_range((schema.ROLLUP_MINUTE,))
    rolled_up = {(str(topic), int(minute_ms))
                 for _, topic, minute_ms in (keys.unpack(row) for row, _ in store.scan(schema.ROLLUPS, start, stop))}
    rewritten += write_parts(store, {}, rolled_up - with_parts, chunk=chunk)
    return rewritten
