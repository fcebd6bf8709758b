"""``tracehook replay --from-trace``: the records come from the kept bodies in the index, not from the broker.

For Kafka records past retention (or removed by ``delete-records``) and RabbitMQ messages after
their ack.  Each listed message's trace and kept body (the bodies table: :mod:`collector.store.bodies`)
are read from the store (``--store``) or the collector (``--collector``, with a token that has the
``body`` scope).  A message is replayable only when its whole body was kept with the record's raw key
and headers; anything else is a problem with its reason, never half a message::

    for wanted, record, problem in read_kept(source, "orders", wanted):
        ...   # problem "": record is a TraceRecord, shaped like kafka-python's ConsumerRecord

The records go to the deliveries the broker path uses (:mod:`collector.cli.replay_kafka`), or to
RabbitMQ (:class:`collector.cli.replay_amqp.AmqpDelivery`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import msgpack

from collector.cli.errors import ReplayError
from collector.cli.query import StoreSource, table
from collector.cli.replay_kafka import Wanted
from collector.cli.replay_run import age
from tracehook.adapters._common import PROP_EXCHANGE, PROP_ROUTING_KEY
from tracehook.wire import amqp_header_value

NO_TRACE = "no trace for the message"
NOT_KEPT = ("no body kept (its topic is not in the library's body_topics or the collector's, "
            "or it is older than body_ttl_days)")
ERASED = "its body was erased (tracehook bodies erase)"
CORRUPT = "its kept body does not decode (corrupt)"
NO_HEADERS = "its body was kept without the record's headers: it cannot be re-sent as it was"
NO_DESTINATION = "no exchange or routing key in the trace: pass --exchange and --routing-key"
WITHHELD = ("the collector withholds bodies from this token: --from-trace needs a token with the body scope "
            "(or --store)")
LABELS = {NO_TRACE: "no trace", NOT_KEPT: "no body kept", ERASED: "erased", CORRUPT: "corrupt",
          NO_HEADERS: "no headers kept", NO_DESTINATION: "no destination"}
"""Each reason's short name in the summary line (a truncated body's is "truncated")."""


def truncated(kept: int, whole: int) -> str:
    """The reason a message whose body was cut at capture is not replayed."""
    return f"its body was kept truncated ({kept} of {whole} bytes): it is never sent half"


def label(problem: str) -> str:
    """The short name of a reason, for the counts."""
    return LABELS.get(problem, "truncated" if problem.startswith("its body was kept truncated") else "other")


@dataclass(frozen=True)
class TraceRecord:
    """A message rebuilt from its kept body, with the attributes of kafka-python's ``ConsumerRecord``
    the deliveries (and a ``--handler``) read; ``partition``/``offset`` are -1 where the trace has none."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes
    headers: list[tuple[str, Any]]
    """As the client sent them: Kafka values as bytes, RabbitMQ ``headers`` table values as AMQP values."""
    exchange: str | None = None
    """RabbitMQ: the exchange the send went to (its ``amqp.exchange`` prop; "" the default exchange)."""
    routing_key: str | None = None


def message_document(source: Any, msg_id: str) -> dict[str, Any] | None:
    """The message's document with its kept body (``GET /v1/messages/{id}``'s fields); None: no trace."""
    if isinstance(source, StoreSource):
        from collector.query.documents import body_document

        message = source.query.get_message(msg_id)
        if message is None:
            return None
        doc = {"props": message.trace.props}
        doc.update(body_document(message.body, True))
        return doc
    return source.http.trace(msg_id)


def kept_record(doc: dict[str, Any] | None, topic: str, wanted: Wanted, amqp: bool) -> tuple[TraceRecord | None, str]:
    """``(record, "")`` rebuilt from a message document, or ``(None, why it cannot be replayed)``;
    ``amqp``: the headers are an AMQP table's values (:func:`tracehook.wire.amqp_header_bytes`)."""
    if doc is None:
        return None, NO_TRACE
    if doc.get("body_withheld"):
        raise ReplayError(WITHHELD)
    if doc.get("body_erased"):
        return None, ERASED
    if doc.get("body_corrupt"):
        return None, CORRUPT
    if doc.get("body") is None:
        return None, NOT_KEPT
    try:
        value = bytes.fromhex(doc["body"])
        if doc.get("body_truncated"):
            return None, truncated(len(value), int(doc.get("body_len") or 0))
        if doc.get("raw_headers") is None:
            return None, NO_HEADERS
        headers: list[tuple[str, Any]] = [(str(n), bytes.fromhex(v)) for n, v in doc["raw_headers"]]
        if amqp:
            headers = [(n, amqp_header_value(v)) for n, v in headers]
        key = None if doc.get("raw_key") is None else bytes.fromhex(doc["raw_key"])
    except (ValueError, TypeError, msgpack.UnpackException):
        return None, CORRUPT
    props = doc.get("props") or {}
    return TraceRecord(topic, wanted.partition, wanted.offset, wanted.time_ms, key, value, headers,
                       props.get(PROP_EXCHANGE), props.get(PROP_ROUTING_KEY)), ""


def read_kept(source: Any, topic: str, wanted: list[Wanted], *, amqp: bool = False, exchange: str | None = None,
              routing_key: str | None = None) -> Iterator[tuple[Wanted, TraceRecord | None, str]]:
    """``(wanted, record or None, problem)`` for every wanted message, in the list's order, read one by one
    (a run holds one body at a time).  With ``amqp`` a message needs somewhere to go: the ``exchange`` /
    ``routing_key`` named, else the recorded ones."""
    for w in wanted:
        record, problem = kept_record(message_document(source, w.msg_id), topic, w, amqp)
        if record is not None and amqp and None in (exchange if exchange is not None else record.exchange,
                                                    routing_key if routing_key is not None else record.routing_key):
            record, problem = None, NO_DESTINATION
        yield w, record, problem


def survey(found: Iterable[tuple[Wanted, TraceRecord | None, str]]
           ) -> tuple[list[tuple[Wanted, str]], dict[str, list[Wanted]]]:
    """The problems of ``found``, and its replayable messages by recorded place (a Kafka partition, or a
    RabbitMQ exchange / routing key), without keeping the bodies."""
    problems: list[tuple[Wanted, str]] = []
    places: dict[str, list[Wanted]] = {}
    for w, record, problem in found:
        if record is None:
            problems.append((w, problem))
        elif record.exchange is None and record.routing_key is None:
            places.setdefault(f"partition {w.partition}" if w.partition >= 0 else "-", []).append(w)
        else:
            places.setdefault(f"{record.exchange or '(default exchange)'} / {record.routing_key}", []).append(w)
    return problems, places


def trace_counts(already: int, problems: list[tuple[Wanted, str]]) -> str:
    """What is not delivered: not replayable from the trace (by reason), already replayed."""
    by_label = Counter(label(p) for _, p in problems)
    reasons = ", ".join(f"{name} {n}" for name, n in sorted(by_label.items()))
    return (f"not replayable from the trace: {len(problems)}" + (f" ({reasons})" if reasons else "")
            + f"; already replayed: {already}")


def destination_table(places: dict[str, list[Wanted]], now_ms: int) -> str:
    """The replayable messages per recorded place (:func:`survey`): how many, the oldest age."""
    rows = [[place, len(ws), age(min(w.time_ms for w in ws), now_ms)] for place, ws in sorted(places.items())]
    return table(["recorded at", "messages", "oldest age"], rows) if rows else "nothing replayable"
