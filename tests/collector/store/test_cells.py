"""The C cell maker (collector.store._cells) gives exactly the Python path's SQLite parameters.

``LocalStore.put_rows`` binds each cell as ``(row, col, ts, value)`` with the blobs as bytearrays
(:func:`collector.store.local._py_cells` is the reference); the extension must give the same
cells in the same order for any rows, index rows sharing one columns dict included.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.store import local

try:
    from collector.store import _cells
except ImportError:  # checked by test_extension_is_built
    _cells = None

_blobs = st.binary(max_size=40)
_columns = st.dictionaries(_blobs, _blobs, max_size=4)
_TS = 1_790_000_000_123


def test_extension_is_built() -> None:
    # Like collector.store._rowbuild: without a C compiler `pip install -e .[all]` leaves it out, and
    # this fails rather than skipping silently.
    assert _cells is not None, ("collector.store._cells is not built (it needs a C compiler and Python.h): "
                                "run pip install -e '.[all]'")
    assert local._cells is _cells.sqlite_cells


def _expected(rows: list[tuple[bytes, dict[bytes, bytes]]], ts: Any) -> list[tuple[Any, ...]]:
    """The cells, computed without the product code."""
    return [(row, col, ts, value) for row, columns in rows for col, value in columns.items()]


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.tuples(_blobs, _columns), max_size=30), shared=_columns,
       share=st.lists(st.booleans(), max_size=30))
def test_c_cells_equal_the_python_cells(rows: list[tuple[bytes, dict[bytes, bytes]]], shared: dict[bytes, bytes],
                                        share: list[bool]) -> None:
    # Some rows share one columns dict (as the indexer's index rows do), in runs and apart.
    rows = [(row, shared if i < len(share) and share[i] else columns) for i, (row, columns) in enumerate(rows)]
    assert _cells is not None
    made = _cells.sqlite_cells(rows, _TS)
    assert made == local._py_cells(rows, _TS) == _expected(rows, _TS)
    for cell in made:
        assert (type(cell), [type(x) for x in cell]) == (tuple, [bytearray, bytearray, int, bytearray])


def test_c_cells_take_any_buffer_and_mapping() -> None:
    class Columns:
        def items(self) -> list[tuple[Any, Any]]:
            return [(memoryview(b"c:m"), bytearray(b"v"))]

    rows: list[Any] = [(bytearray(b"r1"), Columns()), (memoryview(b"r2"), {b"c:a": b""}), (b"r3", {})]
    assert _cells is not None
    assert _cells.sqlite_cells(iter(rows), _TS) == local._py_cells(rows, _TS) == [
        (b"r1", b"c:m", _TS, b"v"), (b"r2", b"c:a", _TS, b"")]


@pytest.mark.parametrize(("rows", "error"), [
    ([("r", {b"c:a": b"v"})], TypeError),              # a str row key
    ([(b"r", {b"c:a": 3})], TypeError),                 # an int value (bytearray(3) would be 3 zero bytes)
    ([(b"r", {"c:a": b"v"})], TypeError),               # a str column
    ([(b"r", [(b"c:a", b"v")])], AttributeError),       # columns with no items()
    ([b"r"], TypeError),                                # not a (row, columns) pair
])
def test_c_cells_refuse_what_is_not_bytes(rows: list[Any], error: type[Exception]) -> None:
    assert _cells is not None
    with pytest.raises(error):
        _cells.sqlite_cells(rows, _TS)
