"""Order-preserving tuple encoding for row keys and column qualifiers.

Every composite key in the index goes through :func:`pack`, so that comparing
two keys byte by byte (what HBase and SQLite do) gives the same answer as
comparing the tuples they came from, element by element::

    pack(("orders", 5)) < pack(("orders", 17)) < pack(("orders2", 0))
    unpack(pack(("orders", -1, b"\\x00"))) == ("orders", -1, b"\\x00")

Encoding of one element (a type tag, then the value):

* ``bytes``: ``0x01``, the bytes with every ``0x00`` written as ``0x00 0xFF``, then ``0x00``
* ``str``:   ``0x02``, its UTF-8 bytes escaped the same way, then ``0x00``
* ``int``:   ``0x03``, 8 bytes big-endian of ``value + 2**63`` (signed 64-bit range)

UTF-8 byte order is code point order, the terminator ``0x00`` sorts below every
escaped byte and every following tag, and a tuple's encoding is its elements'
encodings concatenated, so ``pack(a + b) == pack(a) + pack(b)`` and a prefix
tuple gives a prefix key (which is what range scans need).
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable

from collector.store.errors import KeyEncodingError

Element = bytes | str | int

INT_MIN = -(2**63)
INT_MAX = 2**63 - 1

_BYTES, _STR, _INT = 0x01, 0x02, 0x03
_INT_BIAS = 2**63
_INT_STRUCT = struct.Struct(">BQ")
INT_BYTES = _INT_STRUCT.size
"""Length of one encoded int element: a key ending in an int has its value in its last INT_BYTES bytes."""
_END = b"\x00"
_ESCAPED_NUL = b"\x00\xff"
# Greater than every byte an encoded element can start with: prefix + STOP bounds a prefix scan.
STOP = b"\xff"


def _escape(data: bytes) -> bytes:
    return data.replace(b"\x00", _ESCAPED_NUL)


def pack_one(value: Element) -> bytes:
    """Encode one element (``pack((value,))``)."""
    # Exact type checks first: this runs several times per indexed event.
    if type(value) is str:
        return _pack_str(value)
    if type(value) is int:
        if not INT_MIN <= value <= INT_MAX:
            raise KeyEncodingError(f"integer {value} is outside the signed 64-bit range")
        return _INT_STRUCT.pack(_INT, value + _INT_BIAS)
    if type(value) is bytes:
        return b"\x01" + value.replace(b"\x00", _ESCAPED_NUL) + _END
    # bool is an int subclass; a key holding True would silently become 1.
    if isinstance(value, bool):
        raise KeyEncodingError("booleans are not key elements")
    if isinstance(value, int):
        return pack_one(int(value))
    if isinstance(value, str):
        return pack_one(str(value))
    if isinstance(value, (bytearray, memoryview)):
        return pack_one(bytes(value))
    raise KeyEncodingError(f"cannot pack {type(value).__name__} into a key")


@functools.lru_cache(maxsize=4096)
def _pack_str(value: str) -> bytes:
    # Cached: an event's topic, group and msg_id appear in several of its row keys.
    return b"\x02" + value.encode("utf-8").replace(b"\x00", _ESCAPED_NUL) + _END


def pack(values: Iterable[Element]) -> bytes:
    """Encode a tuple of str / bytes / int into an order-preserving byte key."""
    # The two common element types inline: the indexer packs about twenty elements per event.
    out = []
    for v in values:
        if type(v) is str:
            out.append(_pack_str(v))
        elif type(v) is int and INT_MIN <= v <= INT_MAX:
            out.append(_INT_STRUCT.pack(_INT, v + _INT_BIAS))
        else:
            out.append(pack_one(v))
    return b"".join(out)


def unpack(data: bytes) -> tuple[Element, ...]:
    """Decode a key made by :func:`pack`; raise :class:`KeyEncodingError` on anything else."""
    out: list[Element] = []
    pos, n = 0, len(data)
    while pos < n:
        tag = data[pos]
        pos += 1
        if tag == _INT:
            if pos + 8 > n:
                raise KeyEncodingError("truncated integer")
            out.append(int.from_bytes(data[pos : pos + 8], "big") - _INT_BIAS)
            pos += 8
        elif tag in (_BYTES, _STR):
            raw, pos = _read_escaped(data, pos)
            if tag == _BYTES:
                out.append(raw)
            else:
                try:
                    out.append(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    raise KeyEncodingError("string element is not UTF-8") from None
        else:
            raise KeyEncodingError(f"unknown element tag 0x{tag:02x} at byte {pos - 1}")
    return tuple(out)


def _read_escaped(data: bytes, pos: int) -> tuple[bytes, int]:
    chunks: list[bytes] = []
    while True:
        end = data.find(b"\x00", pos)
        if end < 0:
            raise KeyEncodingError("unterminated string element")
        chunks.append(data[pos:end])
        if end + 1 < len(data) and data[end + 1] == 0xFF:
            chunks.append(b"\x00")
            pos = end + 2
        else:
            return b"".join(chunks), end + 1


def prefix_range(values: Iterable[Element]) -> tuple[bytes, bytes]:
    """``(start, stop)`` covering every key that extends the tuple ``values`` (stop exclusive)."""
    start = pack(values)
    return start, start + STOP


def successor(key: bytes) -> bytes:
    """The smallest key greater than ``key``: where a scan resumes after it."""
    return key + b"\x00"


def reverse_int(value: int) -> int:
    """Map a non-negative int so that larger values sort first (newest-first time keys)."""
    return INT_MAX - value
