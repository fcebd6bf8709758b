"""Accepted means indexable (issue 41): whatever the collector accepts, across every field's whole range,
the indexer, the rollups and every query answer for, with the C extensions and without them; whatever
it refuses, it refuses with a documented 400 reason."""

from __future__ import annotations

import contextlib
import tempfile
from collections import Counter
from collections.abc import Iterator

import pytest
from fixtures import extremes
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from collector.index import readback, rowbuild
from collector.index.indexer import ROW_KEY_TOO_LONG, finish_batch, index_payloads
from collector.index.rollup_buckets import GroupBucket
from collector.store import local, open_store, schema
from collector.store.hbase import scan_bound
from collector.wirecheck import validate
from tracehook import wire

PATHS = ["c", "python"]


@contextlib.contextmanager
def extensions(path: str) -> Iterator[None]:
    """Every C fast path of ingest, indexing and read-back on (``"c"``) or off (``"python"``)."""
    with pytest.MonkeyPatch.context() as m:
        if path == "python":
            m.setattr(validate, "_fast_check", None)
            m.setattr(rowbuild, "FAST_PATH", False)
            m.setattr(readback, "_readback", None)
            m.setattr(local, "_sqlput", None)
        else:
            assert validate.FAST_PATH and rowbuild.FAST_PATH and readback.FAST_PATH and local.SQLPUT, \
                "build the C extensions in place: python3 setup.py build_ext --inplace"
        yield


def check_ingest(data: bytes) -> bool:
    """Whether the collector's check accepts ``data``; a refusal must name a documented 400 reason."""
    try:
        validate.check_batch(data)
    except wire.WireError as exc:
        assert exc.reason in extremes.documented_400_reasons(), exc.reason
        with pytest.raises(wire.WireError):
            validate.decode_batch(data)  # the index path refuses it too (an old log may hold it)
        return False
    return True


def index_and_ask(data: bytes, path: str) -> None:
    """Index one accepted batch into a fresh embedded store over ``path`` and ask every query of it."""
    with extensions(path), tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"local:{tmp}/index.sqlite3")
        try:
            events = validate.decode_batch(data).events
            dropped: Counter[str] = Counter()
            assert index_payloads(store, [data], dropped=dropped) == len(events)
            assert set(dropped) <= {ROW_KEY_TOO_LONG}, dropped
            finish_batch(store)
            extremes.ask_everything(store, events)
        finally:
            store.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(extremes.batches())
def test_every_accepted_event_is_indexed_and_answered_for(drawn: tuple) -> None:
    _, _, data = drawn
    accepted = check_ingest(data)
    event("accepted" if accepted else "refused")
    if accepted:
        for path in PATHS:
            index_and_ask(data, path)


def test_the_issues_poison_batch_is_refused_with_a_documented_reason() -> None:
    assert not check_ingest(extremes.POISON)
    with pytest.raises(wire.WireError) as caught:
        wire.decode_batch(extremes.POISON)
    assert caught.value.reason == "bad_field" and "store_ms" in caught.value.detail


@pytest.mark.parametrize("path", PATHS)
def test_hand_picked_edges_are_indexed(path: str) -> None:
    # What the poison batch becomes at the edge of the accepted range, and the longest strings' rows.
    assert check_ingest(extremes.HARD)
    index_and_ask(extremes.HARD, path)


def test_a_latency_sum_past_64_bits_is_held_at_the_limit() -> None:
    # 40,000 messages of one minute that each waited from 1970 to the year 9999: past 2^63 ms in all.
    bucket = GroupBucket(consumed=40_000, latency_sum_ms=40_000 * wire.MAX_TIME_MS)
    assert GroupBucket.decode(bucket.encode()).latency_sum_ms == wire.MAX_INT
    assert GroupBucket.decode(GroupBucket(latency_sum_ms=-bucket.latency_sum_ms).encode()).latency_sum_ms == wire.MIN_INT


_BYTES = st.binary(max_size=7).map(lambda b: bytes(x % 4 * 85 for x in b))  # 0x00, 0x55, 0xaa, 0xff: carries and ties


@given(_BYTES, _BYTES)
def test_an_hbase_scan_bound_cuts_the_rows_hbase_can_hold_where_the_key_does(row: bytes, key: bytes) -> None:
    # HBase refuses scan bounds longer than a row may be (a 16 KiB topic's 16 KiB key builds one);
    # scan_bound stands in for them, here with rows of at most 4 bytes.
    with pytest.MonkeyPatch.context() as m:
        m.setattr(schema, "MAX_ROW_KEY_BYTES", 4)
        bound = scan_bound(key)
    assume(len(row) <= 4)
    assert bound is None or len(bound) <= 4
    assert (row < key) == (bound is None or row < bound)
