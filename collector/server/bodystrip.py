"""Ingest keeps captured bodies only for the topics the collector's ``body_topics`` names.

A batch's events of any other topic lose their body, body flags, raw key and raw headers
before the batch reaches the trace log (so nothing of them is ever written to disk, indexed or
replayed); the rest of each event is kept, the batch is never refused for it, and each event
stripped is counted in ``tracehook_collector_bodies_stripped_total{reason="topic"}``.

Cheap when there is nothing to strip: the C validator counts the bin values it walks
(:func:`collector.wirecheck.validate.check_batch_bodies`), and only a batch that holds one is
decoded again in Python and, when something of it is stripped, encoded again (same header, so
its dedup key is unchanged)::

    payload, stripped = strip_bodies(payload, frozenset({"sms"}))
"""

from __future__ import annotations

from tracehook import wire

TOPIC = "topic"
"""The ``reason`` label of a body stripped because its topic is not in ``body_topics``."""


_BODY, _FLAGS = wire.Event._fields.index("body"), wire.Event._fields.index("body_flags")
_NO_BODY_TAIL = wire.DEFAULTS[_FLAGS:]
_new = tuple.__new__


def strip_bodies(payload: bytes, keep: frozenset[str]) -> tuple[bytes, int]:
    """``(payload without the bodies of topics outside keep, how many events lost one)``.

    ``payload`` must be a batch the wire format accepts (it is decoded without checking it again);
    it comes back as is when nothing is stripped.
    """
    batch = wire.decode_checked_batch(payload)
    stripped = 0
    events: list[tuple[object, ...]] = []
    for event in batch.events:
        if event.topic not in keep and (event[_BODY] is not None or event[_FLAGS:] != _NO_BODY_TAIL):
            event = _new(wire.Event, event[:_BODY] + (None,) + event[_BODY + 1:_FLAGS] + _NO_BODY_TAIL)
            stripped += 1
        events.append(event)
    if not stripped:
        return payload, 0
    return wire.encode_batch(batch.header, events), stripped
