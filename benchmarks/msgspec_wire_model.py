"""The wire format's batch as msgspec types, for benchmarks/collector_ingest.py --check-only: what a
msgspec validator of the ingest path would cost.  A model of tracehook/wire.py's rules for their cost,
not their exact accepted set (msgspec counts string lengths in characters, not UTF-8 bytes; a batch
may carry more than 8 fields; the 400 reasons are msgspec's words, not docs/collector.md's).
No ``from __future__ import annotations``: msgspec reads these annotations at runtime."""

from typing import Annotated

import msgspec

from tracehook import wire

Int64 = Annotated[int, msgspec.Meta(ge=wire.MIN_INT, le=wire.MAX_INT)]
Pos = Annotated[int, msgspec.Meta(ge=-1, le=wire.MAX_INT)]
Time = Annotated[int, msgspec.Meta(ge=-1, le=wire.MAX_TIME_MS)]
Str = Annotated[str, msgspec.Meta(max_length=wire.MAX_STR_LEN)]
Id = Annotated[str, msgspec.Meta(min_length=1, max_length=wire.MAX_STR_LEN)]


class Event(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    type: Annotated[int, msgspec.Meta(ge=1, le=6)]
    time_ms: Annotated[int, msgspec.Meta(ge=0, le=wire.MAX_TIME_MS)]
    group: Str
    topic: Id
    msg_id: Id
    broker_msg_id: Str = ""
    keys: Str = ""
    tags: Str = ""
    broker: Str = ""
    queue: Pos = -1
    offset: Pos = -1
    born_ms: Time = 0
    store_ms: Time = 0
    cost_us: Int64 = 0
    status: Annotated[int, msgspec.Meta(ge=0, le=5)] = 0
    error: Str = ""
    retry: Int64 = 0
    body_len: Int64 = 0
    props: Annotated[dict[Str, Str], msgspec.Meta(max_length=wire.MAX_PROPS)] | None = None
    request_id: Str = ""
    tx_id: Str = ""
    tx_state: Annotated[int, msgspec.Meta(ge=0, le=2)] = 0
    body: Annotated[bytes, msgspec.Meta(max_length=wire.MAX_BODY_LEN)] | None = None
    trace_id: Str = ""
    span_id: Str = ""


class Batch(msgspec.Struct, array_like=True):
    version: Annotated[int, msgspec.Meta(ge=1, le=wire.SCHEMA_VERSION)]
    client_id: Id
    seq: Annotated[int, msgspec.Meta(ge=0, le=wire.MAX_INT)]
    app: Str
    host: Str
    sent_ms: Annotated[int, msgspec.Meta(ge=0, le=wire.MAX_TIME_MS)]
    client_stats: dict[Str, Int64]
    events: Annotated[list[Event], msgspec.Meta(max_length=wire.MAX_EVENTS_PER_BATCH)]


decode_batch = msgspec.msgpack.Decoder(Batch).decode
"""A :class:`Batch`, or msgspec.ValidationError / DecodeError."""
