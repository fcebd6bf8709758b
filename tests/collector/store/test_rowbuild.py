"""The C row builder (collector.store._rowbuild) gives exactly the Python path's rows.

For any records, :func:`collector.index.indexer.batched_rows` must hand out the same batches
through both paths: the same tables in the same order, the same row keys and cells byte for
byte, the same shared cell objects, the same count of rows left out for an over-long key, and
for input neither path can index, the same error after the same batches. The Python path
(``rowbuild.FAST_PATH`` off) is the reference. Events are random: every event type and status,
every optional field present or absent, ids that are lower-case hex or not, keys with odd
separators, times and positions at and beyond the signed 64-bit range, NUL bytes and Unicode.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from index_helpers import CONSUMER, PRODUCER, consumed, message

from collector.index import rowbuild
from collector.index import rows as index_rows
from collector.index.indexer import batched_rows
from collector.store import schema
from tracehook import wire
from tracehook.wire import BatchHeader, Event, EventType, Status, TxState

try:
    from collector.store import _rowbuild
except ImportError:  # checked by test_extension_is_built
    _rowbuild = None

MAX_INT = wire.MAX_INT
_SETTINGS = settings(max_examples=400, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def test_extension_is_built() -> None:
    # The suite needs a C compiler (and Python.h): without one `pip install -e .[all]` still succeeds
    # but leaves the extension out, and these tests fail rather than skipping silently.
    assert _rowbuild is not None, ("collector.store._rowbuild is not built (it needs a C compiler and Python.h): "
                                   "run pip install -e '.[all]'")
    assert rowbuild.FAST_PATH


def test_batched_rows_uses_the_extension(monkeypatch: pytest.MonkeyPatch) -> None:
    # With the extension built, batched_rows (so index_records and every store test) builds the rows
    # of ordinary events in C: the Python row builder is only its fallback, and is never called here.
    def no_python(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the Python row builder ran")

    monkeypatch.setattr(index_rows, "event_rows", no_python)
    records = message("orders", "a" * 32, 1_790_000_000_000, keys="k1 k2") + consumed("orders", "a" * 32,
                                                                                       1_790_000_000_000, "g")
    batches = list(batched_rows(records, 1000))
    assert {table for table, _ in batches} >= {schema.MESSAGES, schema.KEYIDX, schema.RECORDS, schema.TIMEIDX}


def test_environment_variable_forces_the_python_path() -> None:
    code = "from collector.index import rowbuild; print(rowbuild.FAST_PATH)"
    env = dict(os.environ, **{rowbuild.ENV_PYTHON_ROWS: "1"})
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_configure_refuses_a_wire_format_it_does_not_model() -> None:
    assert _rowbuild is not None
    with pytest.raises(ValueError, match="other fields"):
        _rowbuild.configure(event_type=Event, fields=(*Event._fields, "new_field"),
                            defaults=(*wire.DEFAULTS, ""), tables=(), index_cells=None, received_cells=None,
                            send_prefix=b"", consume_prefix=b"", received_column=b"", dead_all=b"",
                            dead_one=b"", dirty_msg=b"")
    modelled = Event._fields[:rowbuild.MODELLED_FIELDS]  # the body fields after them go to the Python path
    with pytest.raises(ValueError, match="queue"):
        _rowbuild.configure(event_type=Event, fields=modelled,
                            defaults=tuple(0 if f == "queue" else d for f, d in zip(modelled, wire.DEFAULTS)),
                            tables=(), index_cells=None, received_cells=None, send_prefix=b"", consume_prefix=b"",
                            received_column=b"", dead_all=b"", dead_one=b"", dirty_msg=b"")


@_SETTINGS
@given(data=st.binary(max_size=600), size=st.integers(1, 64))
def test_embedded_blake2b_is_hashlibs(data: bytes, size: int) -> None:
    assert _rowbuild is not None
    assert _rowbuild.blake2b(data, size) == hashlib.blake2b(data, digest_size=size).digest()


# -- random records ----------------------------------------------------------------------------

_NO_SURROGATES = st.characters(blacklist_categories=("Cs",))
_HEX = "0123456789abcdef"
texts = st.one_of(
    st.sampled_from(["", "a", "orders", "\x00", "a\x00b", "\x00\xff", "é", "\U0001d11e", " ", "x" * 40, "y" * 300]),
    st.text(_NO_SURROGATES, max_size=12),
)
# Hex of odd and even length, upper-case hex, valid and all-zero W3C trace ids, and anything else.
ids = st.one_of(
    st.text(_HEX, min_size=1, max_size=40),
    st.text(_HEX + "ABCDEF", min_size=1, max_size=34),
    st.text(_HEX, min_size=32, max_size=32),
    st.sampled_from(["0" * 32, "a" * 32, "A" * 32, "abc", "ab", "msg-1", "m\x00", "é" * 16, "a" * 31 + "é"]),
    texts,
)
msg_ids = st.one_of(st.sampled_from(["a" * 32, "m-1", "0" * 32, "b\x00"]), ids)  # a small pool: rows merge
keys_strings = st.one_of(
    st.lists(st.sampled_from(["", "k1", "k2", "k1", "\x00", "é", "a\tb", "\u00a0", "x" * 50]),
             max_size=5).map(" ".join),
    texts,
)
# Mostly what the wire accepts; what no path can index (a message time below 0, an integer beyond
# 64 bits) comes from `hostile` below, once in a while, so that most examples index every event.
small_times = st.sampled_from([0, 1, 1_790_000_000_000, 1_790_000_000_001])
ints64 = st.integers(wire.MIN_INT, MAX_INT)
times = st.one_of(small_times, small_times, st.integers(0, MAX_INT))
other_times = st.one_of(small_times, st.sampled_from([-1, wire.MIN_INT, MAX_INT]), ints64)  # born, store
positions = st.one_of(st.sampled_from([-1, 0, 3, -2, MAX_INT, wire.MIN_INT]), st.integers(-1, 10), ints64)
plain_ints = st.one_of(st.sampled_from([0, 1, 127, 128, 255, 256, 65535, 65536, 2**32, -1, -32, -33, -128, -129,
                                        -32768, -32769, -(2**31), -(2**31) - 1]), ints64)
long_strings = st.builds(lambda n, c: c * n, st.integers(16_360, 16_400), st.sampled_from("t\x00"))
props = st.one_of(st.none(), st.dictionaries(texts, texts, max_size=20))
bodies = st.one_of(st.none(), st.binary(max_size=70), st.binary(min_size=250, max_size=300))


def optional(default: Any, values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field at its default (trimmed off the stored event) or set."""
    return st.one_of(st.just(default), values)


events = st.builds(
    Event,
    type=st.one_of(st.sampled_from(list(EventType)), st.sampled_from([1, 2, 3, 4, 5, 6]), st.sampled_from([0, 7])),
    time_ms=times,
    group=st.one_of(st.sampled_from(["g", "h", "\x00"]), texts),
    topic=st.one_of(st.sampled_from(["orders", "t\x00"]), texts, long_strings),
    msg_id=msg_ids,
    broker_msg_id=optional("", ids),
    keys=optional("", st.one_of(keys_strings, long_strings)),
    tags=optional("", texts),
    broker=optional("", st.one_of(st.sampled_from(["b1", "broker-2"]), texts)),
    queue=optional(-1, positions),
    offset=optional(-1, positions),
    born_ms=optional(0, other_times),
    store_ms=optional(0, other_times),
    cost_us=optional(0, plain_ints),
    status=optional(Status.OK, st.one_of(st.sampled_from(list(Status)), st.integers(0, 5))),
    error=optional("", texts),
    retry=optional(0, plain_ints),
    body_len=optional(0, plain_ints),
    props=optional(None, props),
    request_id=optional("", ids),
    tx_id=optional("", texts),
    tx_state=optional(TxState.UNKNOWN, st.one_of(st.sampled_from(list(TxState)), st.integers(0, 2))),
    body=optional(None, bodies),
    trace_id=optional("", ids),
    span_id=optional("", ids),
    # The body fields after span_id: an event with any of them goes through the Python path (rowbuild._narrow).
    body_flags=optional(0, st.integers(0, 3)),
    raw_key=optional(None, bodies),
    raw_headers=optional(None, st.lists(st.tuples(texts, bodies).map(list), max_size=3)),
)
headers = st.builds(BatchHeader, client_id=texts, seq=st.integers(0, 10), app=texts, host=texts)


hostile = st.one_of(
    st.fixed_dictionaries({"time_ms": st.sampled_from([-1, -5, wire.MIN_INT]), "born_ms": st.just(0),
                           "store_ms": st.sampled_from([0, -1])}),
    st.fixed_dictionaries({"queue": st.sampled_from([MAX_INT + 1, wire.MIN_INT - 1, 2**64])}),
    st.fixed_dictionaries({"offset": st.sampled_from([MAX_INT + 1, wire.MIN_INT - 1, 2**64])}),
    st.fixed_dictionaries({"born_ms": st.sampled_from([wire.MIN_INT, MAX_INT + 1]), "time_ms": st.just(10)}),
    st.fixed_dictionaries({"cost_us": st.sampled_from([2**64, -(2**63) - 1, MAX_INT + 1])}),
)


@st.composite
def record_lists(draw: st.DrawFn) -> list[tuple[BatchHeader, Event]]:
    """Records sharing a few header objects (the builder encodes a header once), some events repeated,
    now and then one that no path can index (then both must fail alike, after the same batches)."""
    pool = draw(st.lists(headers, min_size=1, max_size=3)) + [PRODUCER, CONSUMER]
    evs = draw(st.lists(events, max_size=12))
    evs += draw(st.lists(st.sampled_from(evs), max_size=3)) if evs else []
    if evs and draw(st.integers(0, 4)) == 0:
        i = draw(st.integers(0, len(evs) - 1))
        evs.insert(i, evs[i]._replace(**draw(hostile)))
    return [(draw(st.sampled_from(pool)), e) for e in evs]


def run(records: list[tuple[BatchHeader, Event]], batch_size: int, salt_buckets: int, mark: bool) -> Any:
    """What batched_rows hands out, cells tagged by kind (so shared cell objects must match too),
    then the dropped counts and the error it ended with, if any."""
    shared = {id(schema.INDEX_CELLS): "index", id(schema.RECEIVED_CELLS): "received", id(index_rows.MARK): "mark"}
    out: list[Any] = []
    dropped: Counter[str] = Counter()
    error = None
    try:
        for table, rows in batched_rows(records, batch_size, dropped=dropped, salt_buckets=salt_buckets, mark=mark):
            out.append((table, [(type(row), row, shared.get(id(cells), type(cells).__name__), dict(cells))
                                for row, cells in rows]))
    except Exception as exc:  # noqa: BLE001  (both paths must fail alike)
        error = (type(exc), str(exc))
    return out, dict(dropped), error


def both_paths(monkeypatch: pytest.MonkeyPatch, *args: Any) -> tuple[Any, Any]:
    fast = run(*args)
    with monkeypatch.context() as m:
        m.setattr(rowbuild, "FAST_PATH", False)
        reference = run(*args)
    return fast, reference


@_SETTINGS
@given(records=record_lists(), batch_size=st.one_of(st.integers(1, 4), st.just(1000), st.sampled_from([0, -1])),
       salt_buckets=st.one_of(st.integers(1, 9), st.just(2**40)), mark=st.booleans())
def test_same_batches_as_the_python_path(records: list[tuple[BatchHeader, Event]], batch_size: int,
                                         salt_buckets: int, mark: bool) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast, reference = both_paths(monkeypatch, records, batch_size, salt_buckets, mark)
    assert fast == reference


@settings(max_examples=100, deadline=None)
@given(records=record_lists(), batch_size=st.integers(1, 3))
def test_odd_types_go_through_the_python_path(records: list[tuple[BatchHeader, Event]], batch_size: int) -> None:
    # Values the extension does not model (a bool, a str subclass, bytearray body, non-str header
    # fields, a surrogate) take the fallback, which gives the Python path's rows or its error.
    class Name(str):
        pass

    odd = [(BatchHeader(Name("c"), 1, app=7, host="h"), records[0][1]._replace(cost_us=True))] if records else []
    odd += [(PRODUCER, e._replace(topic=Name(e.topic), body=bytearray(b"x"))) for _, e in records[:2]]
    odd += [(PRODUCER, e._replace(tags="\ud800")) for _, e in records[2:3]]
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast, reference = both_paths(monkeypatch, records + odd, batch_size, 8, True)
    assert fast == reference


def test_over_long_row_keys_are_counted_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    # Key rows of exactly schema.MAX_ROW_KEY_BYTES (kept) and one byte more (left out), beside the
    # same events' shorter rows; and an event whose rows holding its topic are over the limit.
    base = message("orders", "a" * 32, 1_790_000_000_000)[0][1]
    fixed = len(schema.key_row(schema.event_key(base.topic, base.msg_id, base.store_ms), ""))
    records = [(PRODUCER, base._replace(keys="k" * (schema.MAX_ROW_KEY_BYTES - fixed + d))) for d in (-1, 0, 1, 2)]
    records += [(PRODUCER, base._replace(topic="t" * schema.MAX_ROW_KEY_BYTES, msg_id="b" * 32))]
    fast, reference = both_paths(monkeypatch, records, 5, 8, True)
    assert fast == reference
    kept = [row for table, rows in reference[0] if table == schema.KEYIDX for _, row, _, _ in rows]
    assert sorted(map(len, kept)) == [schema.MAX_ROW_KEY_BYTES - 1, schema.MAX_ROW_KEY_BYTES]
    # Two key rows, and the long topic's time, queue and sequence rows (its message, trace and marker rows stay).
    assert reference[1] == {index_rows.ROW_KEY_TOO_LONG: 2 + 3} and reference[2] is None
