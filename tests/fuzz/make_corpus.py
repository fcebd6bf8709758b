"""Write the fuzzing seed corpus (tests/fuzz/corpus/) from tracehook.wire.

    PYTHONPATH=$PWD python3 tests/fuzz/make_corpus.py

Small valid batches (minimal and full events, props, bodies, several encoding widths) and
one invalid batch per rejection reason, so the fuzzer starts past the envelope. The files
are committed; rerun this after a wire format change and commit the result.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import msgpack

from tracehook import wire

CORPUS = Path(__file__).parent / "corpus"
T = 1_700_000_000_000


def _batch(events: list[list], header: list | None = None, extra: list | None = None) -> bytes:
    head = header if header is not None else [wire.SCHEMA_VERSION, "client-1", 7, "shop", "host-a", T, {"queue_full": 2}]
    return msgpack.packb([*head, events, *(extra or [])], use_bin_type=True)


def _nested(depth: int) -> bytes:
    """A 9-field batch whose unread 9th field is ``depth`` nested one-item arrays."""
    body = _batch([])
    return b"\x99" + body[1:] + b"\x91" * depth + b"\x01"


def seeds() -> dict[str, bytes]:
    """name -> body; names say what the seed exercises."""
    minimal = list(wire.make_event(wire.EventType.PUB, T, "g", "orders", "id-1"))[:5]
    full = list(wire.make_event(
        wire.EventType.SUB_AFTER, T, "billing", "orders", "id-2", broker_msg_id="b-2", keys="k1 k2", tags="t",
        broker="broker-a:10911", queue=3, offset=2**40, born_ms=T - 5, store_ms=T - 3, cost_us=1200,
        status=int(wire.Status.RETRY_LATER), error="boom é", retry=2, body_len=11, props={"a": "1", "ü": "2"},
        request_id="r-1", tx_id="tx", tx_state=int(wire.TxState.COMMIT), body=b"hello world",
    ))
    header = wire.BatchHeader("client-1", 7, "shop", "host-a", T, {"queue_full": 2})
    out = {
        "valid_empty": _batch([]),
        "valid_minimal": _batch([minimal]),
        "valid_full": _batch([full]),
        "valid_mixed": wire.encode_batch(header, [tuple(minimal), tuple(full), tuple(minimal)]),
        "valid_nullables": _batch([full[:18] + [None, "r", "tx", 0, None]]),
        "valid_newer_fields": _batch([minimal], extra=[{"future": [1, 2]}, b"x"]),
        "valid_wide_ints": _batch([[1, wire.MAX_TIME_MS, "g", "t", "m", "", "", "", "", 2**31, wire.MAX_INT]]),
        "invalid_time_after_9999": _batch([[1, wire.MAX_TIME_MS + 1, "g", "t", "m"]]),
        "invalid_bad_msgpack": b"\xc1",
        "invalid_truncated": _batch([full])[:-4],
        "invalid_trailing_bytes": _batch([minimal]) + b"\x00",
        "invalid_bad_batch": msgpack.packb([1, "c"]),
        "invalid_unknown_version": _batch([], header=[99, "c", 1, "", "", 0, {}]),
        "invalid_bad_event": _batch([[1, T, "g"]]),
        "invalid_bad_field": _batch([[1, "x", "g", "t", "m"]]),
        "invalid_missing_field": _batch([[1, T, "g", "", "m"]]),
        "invalid_bad_props": _batch([full[:18] + [{"a": 1}]]),
        "invalid_bad_utf8": _batch([minimal])[:-2] + b"\xff\xfe",
        "valid_nested_trailing": _nested(40),
        "invalid_too_deep": _nested(1100),
        "invalid_huge_header": b"\x98\x01\xa1c\x01\xa0\xa0\x00\x80\xdd\xff\xff\xff\xff",
    }
    return out


def main() -> int:
    CORPUS.mkdir(exist_ok=True)
    for old in CORPUS.iterdir():
        old.unlink()
    for name, body in seeds().items():
        (CORPUS / f"{name}-{hashlib.sha1(body).hexdigest()[:8]}").write_bytes(body)
    print(f"wrote {len(seeds())} seeds to {CORPUS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
