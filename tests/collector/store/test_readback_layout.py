"""The C read-back (``_readback.c`` and the ``_partof.h`` it includes) and the Python definitions agree on
every layout constant compiled into them: ``_readback.layout()`` against wire.py, keys.py, schema.py and
rollup_parts.py, the whole set (test_readback.py and test_partof.py compare drawn cases).
Fails, never skips, when the extension is not built.
"""

from __future__ import annotations

from typing import Any

from collector.index import rollup_parts
from collector.index.readback import PartEvent
from collector.store import codec, keys, schema
from collector.store.model import CONSUMED, DEAD, FAILED, PENDING, RETRYING
from tracehook import wire
from tracehook.wire import Event, EventType, Status

try:
    from collector.store import _readback
except ImportError:  # reported by the test below
    _readback = None


def python_layout() -> dict[str, Any]:
    """Each constant of ``_readback.layout()``, from its one definition in Python."""
    return {
        "positions": {name: Event._fields.index(name) for name in PartEvent._fields},
        "fields": codec.CELL_FIELDS,
        "min_fields": wire.MIN_FIELDS,
        "pub": int(EventType.PUB),
        "value_header": codec._V2_HEAD,
        "key_bytes": keys.pack_one(b"")[0],
        "key_str": keys.pack_one("")[0],
        "msg_hash_bytes": len(schema.msg_hash("")),
        "part_event_types": {t.name: int(t) for t in (EventType.SUB_BEFORE, EventType.SUB_AFTER, EventType.DEAD)},
        "part_statuses": {s.name: int(s) for s in (Status.OK, Status.RETRY_LATER)},
        "outcome_codes": tuple(rollup_parts._OUTCOME_CODES[o] for o in (CONSUMED, RETRYING, FAILED, DEAD, PENDING)),
    }


def test_every_compiled_constant_is_the_python_definition() -> None:
    assert _readback is not None, "collector.store._readback is not built: python3 setup.py build_ext --inplace"
    compiled, defined = _readback.layout(), python_layout()
    assert sorted(compiled) == sorted(defined)
    for name in defined:
        assert compiled[name] == defined[name], name
    # the C restores a request id kept as bytes to its hex digits, as codec._raw_event does for these fields
    assert Event._fields.index("request_id") in codec._HEX_FIELDS
