"""Batch validation on the ingest and index paths: the C validator when it is built, else the wire module.

``collector/wirecheck/_wirecheck.c`` walks the msgpack bytes without building objects; it only
answers "valid", so anything else goes through :func:`tracehook.wire.check_batch`, which
names the problem. Its rules come from :func:`tracehook.wire.fast_path_rules`, so both
paths accept exactly the same batches (tests/collector/server/test_wirecheck.py,
scripts/fuzz). It is an optional extension: without a compiler at install time, or with
``TRACEHOOK_NO_EXTENSIONS=1`` (:mod:`collector.extensions`), the Python path does everything
(:data:`FAST_PATH` is False).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from collector import extensions
from tracehook import wire
from tracehook.wire import BatchHeader


def check_batch(data: bytes) -> tuple[BatchHeader, int]:
    """The batch's header and event count, or :class:`tracehook.wire.WireError` naming the problem."""
    return fast_check_batch(data) or wire.check_batch(data)


def check_batch_bodies(data: bytes) -> tuple[BatchHeader, int, bool]:
    """:func:`check_batch` plus whether the batch may carry captured bodies (a body, raw key or raw
    headers): False only when the C validator walked it and saw none (ingest then has nothing to strip)."""
    checked = _fast_check(data) if _fast_check is not None else None
    if checked is None:
        header, count = wire.check_batch(data)
        return header, count, True
    client_id, seq, app, host, sent_ms, stats, count = checked[:7]
    # An older build returns no count of bin values: then any batch may hold one.
    return BatchHeader(client_id, seq, app, host, sent_ms, stats), count, len(checked) < 8 or checked[7] > 0


def decode_batch(data: bytes) -> wire.Batch:
    """:func:`tracehook.wire.decode_batch`: the same :class:`~tracehook.wire.Batch`, or the same
    :class:`~tracehook.wire.WireError`, for every input (the index path's decode).  When the C
    validator is built and accepts ``data``, the events are built without the Python checks."""
    if _fast_check is not None and _fast_check(data) is not None:
        return wire.decode_checked_batch(data)
    return wire.decode_batch(data)


def fast_check_batch(data: bytes) -> tuple[BatchHeader, int] | None:
    """:func:`check_batch`'s result if the C validator is built and accepts ``data``, else
    None (then only :func:`check_batch` can say what is wrong)."""
    checked = _fast_check(data) if _fast_check is not None else None
    if checked is None:
        return None
    client_id, seq, app, host, sent_ms, stats, count = checked[:7]
    return BatchHeader(client_id, seq, app, host, sent_ms, stats), count


def _load_fast_check() -> Callable[[bytes], tuple[Any, ...] | None] | None:
    _wirecheck = extensions.load("collector.wirecheck._wirecheck")
    if _wirecheck is None:  # not built, or switched off
        return None
    try:
        _wirecheck.configure(**wire.fast_path_rules())
    except (ValueError, TypeError, OverflowError):  # rules it cannot express: stay exact
        logging.getLogger(__name__).warning("collector.wirecheck._wirecheck cannot model these rules; "
                                            "validating in Python", exc_info=True)
        return None
    return _wirecheck.check


_fast_check = _load_fast_check()
FAST_PATH = _fast_check is not None
"""True when :func:`check_batch` validates with the C extension ``collector.wirecheck._wirecheck``."""
