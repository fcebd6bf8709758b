"""Accepted means indexable (issue 41): whatever the collector accepts, across every field's whole range,
the indexer, the rollups and every query answer for, with the C extensions and without them; whatever
it refuses, it refuses with a documented 400 reason."""

from __future__ import annotations

import contextlib
import tempfile
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, event, given, settings

from collector.store import local, open_store, readback, rowbuild
from collector.store.indexer import ROW_KEY_TOO_LONG, finish_batch, index_payloads
from collector.wirecheck import validate
from fixtures import extremes
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
            m.setattr(local, "_cells", local._py_cells)
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
def test_the_largest_accepted_values_of_the_issues_fields_are_indexed(path: str) -> None:
    # What the poison batch becomes at the edge of the accepted range: found, by every query.
    header = wire.BatchHeader("client-41", 2, "app", "host", wire.MAX_TIME_MS, {})
    event = wire.make_event(wire.EventType.PUB, wire.MAX_TIME_MS, "pg", "orders", "edge-41", broker="b",
                            queue=wire.MAX_INT, offset=wire.MAX_INT, store_ms=wire.MAX_TIME_MS, keys="k")
    data = wire.encode_batch(header, [event])
    assert check_ingest(data)
    index_and_ask(data, path)
