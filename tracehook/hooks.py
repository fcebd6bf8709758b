"""The hooks: what an app calls when it sends or consumes a message.

Each hook builds one plain tuple in :class:`tracehook.wire.Event` field order,
stamps the time and hands it to the dispatcher's queue.  Hooks never block
and never raise into the app: misuse (a missing topic, say) is logged once
per kind and the event counted as ``dropped.invalid``.

Example::

    tracer = Tracer(TracerConfig(app="shop", collectors=("http://127.0.0.1:7070",)))
    msg_id = tracer.record_send("orders", keys="order-1", headers=headers)
    with tracer.consume("orders", msg_id, "billing") as span:
        handle(message)          # an exception is recorded as EXCEPTION and re-raised
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Self, TypeVar

from . import _lifecycle
from .bodies import BodyPolicy
from .config import TracerConfig
from .context import (
    HEADER_MSG_ID,
    HEADER_TRACEPARENT,
    active_otel_span,
    derived_msg_id,
    extract_headers,
    get_header,
    inject_context,
    new_msg_id,
    new_request_id,
    new_span_id,
    recorded_trace,
)
from .dispatcher import Dispatcher
from .wire import BODY_TRUNCATED, MAX_PROPS, MAX_STR_LEN, EventType, Status

log = logging.getLogger("tracehook")

MAX_ERROR_LEN = 512
"""Error texts are cut to this many characters (the trace keeps a short reason, not a stack)."""

_PUB, _BEFORE, _AFTER = int(EventType.PUB), int(EventType.SUB_BEFORE), int(EventType.SUB_AFTER)
_END_TX, _DEAD, _REPLAY = int(EventType.END_TX), int(EventType.DEAD), int(EventType.REPLAY)
_OK, _EXCEPTION = int(Status.OK), int(Status.EXCEPTION)
REPLAY_TARGET_PROP, REPLAY_RUN_PROP = "replay.target", "replay.run"
"""The props of a REPLAY event: where it went (``topic:T``, ``handler:module:function``) and the run's id."""
_time_ns = time.time_ns
_perf_ns = time.perf_counter_ns  # the clock consume costs are measured with (a module name, so tests can stand in)
_modules = sys.modules

F = TypeVar("F", bound=Callable[..., Any])


def _clean_props(props: Any) -> dict[str, str] | None:
    # The collector accepts only str -> str, at most MAX_PROPS of them, each string up to MAX_STR_LEN
    # bytes: coercing and capping here keeps one odd value from costing the event.
    if not props:
        return None
    cleaned = {str(k): str(v) for k, v in dict(props).items()}
    if len(cleaned) > MAX_PROPS or max(map(len, cleaned)) > _LONG or max(map(len, cleaned.values())) > _LONG:
        cleaned = {_fit(k): _fit(v) for k, v in list(cleaned.items())[:MAX_PROPS]}
    return cleaned


_LONG = MAX_STR_LEN // 4  # characters that surely fit MAX_STR_LEN bytes of UTF-8


def _fit(text: str) -> str:
    """``text`` cut to at most MAX_STR_LEN bytes of UTF-8 (whole characters)."""
    if len(text) <= _LONG:
        return text
    return text.encode("utf-8", "surrogatepass")[:MAX_STR_LEN].decode("utf-8", "ignore")


_BODY_TYPES = (bytes, bytearray, memoryview, str)


def _snapshot(headers: Any) -> Any:
    """A shallow copy of a record's headers (the dispatcher reads them later, on its thread)."""
    if headers is None:
        return None
    return dict(headers) if isinstance(headers, Mapping) else list(headers)


def _otel_imported() -> bool:
    # The cheap half of active_otel_span(), inlined into record_send's no-headers path.
    return "opentelemetry.trace" in _modules


def _consumed_ids(topic: Any, msg_id: Any, headers: Any, queue: Any, offset: Any) -> tuple[Any, str, str]:
    """(msg_id, trace_id, span_id) of a consumed message: the id given, else the headers', else one
    derived from its place (topic, queue, offset); the trace and parent span of its traceparent."""
    traceparent = None
    if headers is not None:
        if not msg_id:
            msg_id = get_header(headers, HEADER_MSG_ID)
        traceparent = get_header(headers, HEADER_TRACEPARENT)
    if not msg_id and type(topic) is str and topic and type(queue) is int and type(offset) is int \
            and queue >= 0 and offset >= 0:
        msg_id = derived_msg_id(topic, queue, offset)
    if traceparent is None or not msg_id or type(msg_id) is not str:
        return msg_id, "", ""
    trace_id, span_id = recorded_trace(traceparent, msg_id)
    return msg_id, trace_id, span_id


def _error_text(error: Any) -> str:
    if not error:
        return ""
    if isinstance(error, BaseException):
        error = f"{type(error).__name__}: {error}"
    return str(error)[:MAX_ERROR_LEN]


class Tracer:
    """Records trace events for one app; thread-safe, fork-safe, never raises from a hook."""

    def __init__(self, config: TracerConfig | None = None) -> None:
        self.config = config if config is not None else TracerConfig.from_env()
        config = self.config
        self._bodies = BodyPolicy(config.body_topics, config.capture_body, config.max_body_bytes, config.redact_body)
        self._dispatcher = Dispatcher(config, self._bodies)
        self._put = self._dispatcher.put
        self._misuse_seen: set[str] = set()
        _lifecycle.track(self)  # fork and exit handling

    # -- sending ----------------------------------------------------------------------------

    def record_send(
        self, topic: str, msg_id: str | None = None, *, group: str = "", keys: str = "", tags: str = "",
        broker: str = "", queue: int = -1, offset: int = -1, born_ms: int = 0, store_ms: int = 0,
        cost_us: int = 0, status: int = _OK, error: str = "", body_len: int = 0,
        props: Mapping[str, Any] | None = None, broker_msg_id: str = "", tx_id: str = "", headers: Any = None,
        body: bytes | None = None, traceparent: str | None = None, raw_key: bytes | None = None,
        raw_headers: Any = None,
    ) -> str:
        """Record a send result (PUB); returns the message id (generated when ``msg_id`` is None).

        With ``headers`` (a mutable mapping, or a list of (name, bytes) pairs as
        Kafka uses), the id and a W3C ``traceparent`` are written there if absent;
        inside an active OpenTelemetry span the send continues its trace.  Pass
        ``traceparent`` instead when the headers were written earlier (it names the
        send's trace and span).  ``body`` is kept only for the topics of ``body_topics`` (or with
        ``capture_body=True``), with ``raw_key`` and ``raw_headers`` (the record's key and headers as
        sent: (name, bytes) pairs) for a replay from the trace; see docs/library.md, "Bodies".
        """
        try:
            if traceparent is not None:
                if msg_id is None:
                    msg_id = new_msg_id()
                trace_id, span_id = recorded_trace(traceparent, msg_id)
            elif headers is not None:
                msg_id, trace_id, span_id, _ = inject_context(headers, msg_id,
                                                              sample_ratio=self.config.trace_sample_ratio)
            else:
                if msg_id is None:
                    msg_id = new_msg_id()
                trace_id = span_id = ""
                if _otel_imported():  # nothing propagates, but the send still belongs to the app's trace
                    otel_span = active_otel_span()
                    if otel_span is not None:
                        trace_id, span_id = otel_span[0], new_span_id()
            if not topic or type(topic) is not str or type(msg_id) is not str or not msg_id:
                self._misuse("record_send", "topic and msg_id must be non-empty strings")
                return msg_id or ""
            if body is None or not self._bodies.active or not self.keeps_body(topic):
                self._put((
                    _PUB, _time_ns() // 1_000_000, group, topic, msg_id, broker_msg_id, keys, tags, broker,
                    queue, offset, born_ms, store_ms, cost_us, status, error and _error_text(error), 0, body_len,
                    props and _clean_props(props), "", tx_id, 0, None, trace_id, span_id,
                ))
                return msg_id
            kept = self._kept(body)  # redacted, not yet cut
            flags = 0
            if kept is not None and len(kept) > self._bodies.max_bytes:
                kept, flags = kept[:self._bodies.max_bytes], BODY_TRUNCATED
            self._put((
                _PUB, _time_ns() // 1_000_000, group, topic, msg_id, broker_msg_id, keys, tags, broker,
                queue, offset, born_ms, store_ms, cost_us, status, error and _error_text(error), 0,
                body_len or (len(body) if isinstance(body, _BODY_TYPES) else 0), props and _clean_props(props), "",
                tx_id, 0, kept, trace_id, span_id,
                flags, raw_key if kept is not None else None,
                None if raw_headers is None or kept is None else _snapshot(raw_headers),
            ))
        except Exception as exc:  # never into the app
            self._misuse("record_send", repr(exc))
        return msg_id or ""

    def record_end_tx(
        self, topic: str, msg_id: str, group: str, tx_id: str, tx_state: int, *, keys: str = "", tags: str = "",
        broker: str = "", queue: int = -1, offset: int = -1, born_ms: int = 0, store_ms: int = 0,
        status: int = _OK, error: str = "", props: Mapping[str, Any] | None = None,
    ) -> None:
        """Record a transaction's end (END_TX): ``tx_state`` is a :class:`~tracehook.wire.TxState`."""
        self._record(_END_TX, topic, msg_id, group, keys, tags, broker, queue, offset, born_ms, store_ms,
                     status, error, 0, 0, props, tx_id, int(tx_state), "record_end_tx")

    def record_dead(
        self, topic: str, msg_id: str, group: str, *, error: str = "", retry: int = 0, keys: str = "",
        tags: str = "", broker: str = "", queue: int = -1, offset: int = -1, born_ms: int = 0,
        store_ms: int = 0, body_len: int = 0, props: Mapping[str, Any] | None = None,
    ) -> None:
        """Record that ``group`` moved the message to its dead-letter queue (DEAD)."""
        self._record(_DEAD, topic, msg_id, group, keys, tags, broker, queue, offset, born_ms, store_ms,
                     _OK, error, retry, body_len, props, "", 0, "record_dead")

    def record_replay(
        self, topic: str, msg_id: str, group: str, target: str, *, retry: int = 0, keys: str = "", tags: str = "",
        broker: str = "", queue: int = -1, offset: int = -1, born_ms: int = 0, store_ms: int = 0,
        run_id: str = "",
    ) -> None:
        """Record that the message was re-delivered to consumer ``group`` (REPLAY; ``tracehook replay``).

        ``target`` says where: ``topic:T`` or ``handler:module:function``; ``retry`` is the
        attempt number the re-delivered consume carries.
        """
        props = {REPLAY_TARGET_PROP: target, REPLAY_RUN_PROP: run_id} if run_id else {REPLAY_TARGET_PROP: target}
        self._record(_REPLAY, topic, msg_id, group, keys, tags, broker, queue, offset, born_ms, store_ms,
                     _OK, "", retry, 0, props, "", 0, "record_replay")

    def _record(self, kind: int, topic: str, msg_id: str, group: str, keys: str, tags: str, broker: str,
                queue: int, offset: int, born_ms: int, store_ms: int, status: int, error: Any, retry: int,
                body_len: int, props: Any, tx_id: str, tx_state: int, hook: str) -> None:
        try:
            if not topic or type(topic) is not str or not msg_id or type(msg_id) is not str:
                self._misuse(hook, "topic and msg_id must be non-empty strings")
                return
            self._put((
                kind, _time_ns() // 1_000_000, group, topic, msg_id, "", keys, tags, broker, queue, offset,
                born_ms, store_ms, 0, int(status), _error_text(error), retry, body_len, _clean_props(props), "",
                tx_id, tx_state, None, "", "",
            ))
        except Exception as exc:
            self._misuse(hook, repr(exc))

    # -- consuming --------------------------------------------------------------------------

    def start_consume(
        self, topic: str, msg_id: str | None, group: str, *, keys: str = "", tags: str = "", broker: str = "",
        queue: int = -1, offset: int = -1, born_ms: int = 0, store_ms: int = 0, retry: int = 0,
        body_len: int = 0, props: Mapping[str, Any] | None = None, headers: Any = None,
    ) -> ConsumeSpan:
        """Record SUB_BEFORE now; the returned span's ``finish()`` (or ``with`` exit) records SUB_AFTER.

        ``msg_id`` may be None when ``headers`` carry a ``tracehook-msg-id``; without one,
        a message placed by ``queue`` and ``offset`` gets :func:`~tracehook.context.derived_msg_id`.
        The events keep the trace and parent span of the headers' ``traceparent``.
        """
        span = ConsumeSpan(self)
        try:
            if headers is None and msg_id:
                trace_id = span_id = ""  # an id and no headers: the message's own trace, nothing propagated
            else:
                msg_id, trace_id, span_id = _consumed_ids(topic, msg_id, headers, queue, offset)
            if not topic or type(topic) is not str or not msg_id or type(msg_id) is not str:
                self._misuse("start_consume", "topic and msg_id must be non-empty strings")
                return span
            span._head = (group, topic, msg_id, "", keys, tags, broker, queue, offset, born_ms, store_ms)
            span._tail = (retry, body_len, props and _clean_props(props), new_request_id(), "", 0, None,
                          trace_id, span_id)
            self._put((_BEFORE, _time_ns() // 1_000_000) + span._head + (0, _OK, "") + span._tail)
            span._started_ns = _perf_ns()
        except Exception as exc:
            span._head = None
            self._misuse("start_consume", repr(exc))
        return span

    consume = start_consume
    """``with tracer.consume(topic, msg_id, group) as span:`` — the span is its own context manager."""

    def consume_batch(
        self, topic: str, group: str, messages: Iterable[Mapping[str, Any]], *, broker: str = "",
    ) -> BatchConsumeSpan:
        """Record SUB_BEFORE for each message now, SUB_AFTER for each at exit; one request id, cost divided.

        Each message is a mapping with ``msg_id`` and optionally keys, tags, queue,
        offset, born_ms, store_ms, retry, body_len, props, broker, headers (read as
        :meth:`start_consume` reads them).
        """
        span = BatchConsumeSpan(self)
        try:
            request_id = new_request_id()
            now_ms = _time_ns() // 1_000_000
            for message in messages:
                queue, offset = message.get("queue", -1), message.get("offset", -1)
                msg_id, trace_id, span_id = _consumed_ids(topic, message.get("msg_id"), message.get("headers"),
                                                          queue, offset)
                if not topic or type(topic) is not str or not msg_id or type(msg_id) is not str:
                    self._misuse("consume_batch", "topic and every message's msg_id must be non-empty strings")
                    continue
                head = (group, topic, msg_id, "", message.get("keys", ""), message.get("tags", ""),
                        message.get("broker", broker), queue, offset, message.get("born_ms", 0),
                        message.get("store_ms", 0))
                tail = (message.get("retry", 0), message.get("body_len", 0), _clean_props(message.get("props")),
                        request_id, "", 0, None, trace_id, span_id)
                span._parts.append((head, tail))
                self._put((_BEFORE, now_ms) + head + (0, _OK, "") + tail)
            span._started_ns = _perf_ns()
        except Exception as exc:
            self._misuse("consume_batch", repr(exc))
        return span

    def consumer(self, topic: str, group: str, *, get_msg_id: Callable[[Any], str | None] | None = None) -> Callable[[F], F]:
        """Decorate a handler ``handler(message, ...)``: each call is traced like ``with consume(...)``.

        The message id comes from ``get_msg_id(message)``, by default: the
        message itself if it is a str, else its ``msg_id`` (key or attribute),
        else the ``tracehook-msg-id`` in its ``headers``.  Works on async handlers too.
        """
        return traced_handler(lambda: self, topic, group, get_msg_id)

    # -- the dispatcher's side --------------------------------------------------------------

    @property
    def client_id(self) -> str:
        """The id batches carry (unique per process; renewed in a forked child)."""
        return self._dispatcher.client_id

    def stats(self) -> dict[str, Any]:
        """Exact counters: emitted, sent, dropped by reason, queued, in_flight, retried, batches."""
        return self._dispatcher.stats()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until everything recorded so far is delivered or dropped; False if ``timeout`` ran out."""
        try:
            return self._dispatcher.flush(timeout)
        except Exception as exc:
            self._misuse("flush", repr(exc))
            return False

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued within ``timeout``, then stop; later events count as dropped.shutdown."""
        try:
            self._dispatcher.close(timeout)
        except Exception as exc:
            self._misuse("close", repr(exc))

    def keeps_body(self, topic: str) -> bool:
        """Whether a send to ``topic`` keeps its body (``body_topics`` / ``capture_body``): adapters ask
        before preparing a record's body, key and headers."""
        try:
            return self._bodies.active and self._bodies.keeps(topic)
        except Exception as exc:  # the app's callable
            self._warn_once("body_topics", f"failed, body not kept: {exc!r}")
            return False

    def _kept(self, body: Any) -> bytes | None:
        """The body to keep, redacted (the caller cuts it to max_body_bytes), or None."""
        try:
            return self._bodies.take(body)
        except Exception as exc:  # a failing redaction keeps nothing rather than the raw body
            self._warn_once("redact_body", f"failed, body not kept: {exc!r}")
            return None

    def _after_fork_in_child(self) -> None:
        self._dispatcher.after_fork_in_child()
        self._put = self._dispatcher.put

    def _misuse(self, kind: str, detail: str) -> None:
        """An event was not recorded: count it as dropped.invalid and log once per kind."""
        try:
            self._dispatcher.drop(1, "invalid")
        finally:
            self._warn_once(kind, f"ignored an event: {detail}")

    def _warn_once(self, kind: str, detail: str) -> None:
        if kind not in self._misuse_seen:
            self._misuse_seen.add(kind)
            log.warning("tracehook: %s %s (logged once per kind)", kind, detail)


class _SpanContext:
    """``with span:`` finishes the span; an exception records EXCEPTION and propagates unchanged."""

    __slots__ = ()

    def finish(self, status: int | None = None, error: Any = "") -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None:
            self.finish(_EXCEPTION, exc)
        else:
            self.finish()
        # returning None: the app's exception propagates unchanged


class ConsumeSpan(_SpanContext):
    """One consume attempt: SUB_BEFORE was recorded; :meth:`finish` records SUB_AFTER once.

    Set ``span.status`` (a :class:`~tracehook.wire.Status`) and ``span.error`` in
    the handler to record e.g. RETRY_LATER without raising.
    """

    __slots__ = ("_tracer", "_head", "_tail", "_started_ns", "status", "error", "finished")

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer
        self._head: tuple | None = None  # None: nothing was recorded (misuse), finish() does nothing
        self._tail: tuple = ()
        self._started_ns = 0
        self.status: int = _OK
        self.error: str = ""
        self.finished = False

    @property
    def request_id(self) -> str:
        """The id pairing this attempt's SUB_BEFORE and SUB_AFTER ("" if nothing was recorded)."""
        return self._tail[3] if self._head is not None else ""

    def finish(self, status: int | None = None, error: Any = "") -> None:
        """Record SUB_AFTER with the elapsed cost; later calls do nothing."""
        if self.finished:
            return
        self.finished = True
        if self._head is None:
            return
        try:
            cost_us = (_perf_ns() - self._started_ns) // 1000
            status = self.status if status is None else status
            error = _error_text(error or self.error)
            self._tracer._put(
                (_AFTER, _time_ns() // 1_000_000) + self._head + (cost_us, int(status), error) + self._tail
            )
        except Exception as exc:
            self._tracer._misuse("finish", repr(exc))


class BatchConsumeSpan(_SpanContext):
    """A batch consume: one request id; at finish each message gets SUB_AFTER with cost / count."""

    __slots__ = ("_tracer", "_parts", "_started_ns", "status", "error", "finished")

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer
        self._parts: list[tuple[tuple, tuple]] = []
        self._started_ns = 0
        self.status: int = _OK
        self.error: str = ""
        self.finished = False

    def finish(self, status: int | None = None, error: Any = "") -> None:
        """Record SUB_AFTER for every message of the batch; later calls do nothing."""
        if self.finished:
            return
        self.finished = True
        if not self._parts:
            return
        try:
            # RocketMQ divides the batch's cost evenly among its messages.
            cost_us = (_perf_ns() - self._started_ns) // 1000 // len(self._parts)
            status = int(self.status if status is None else status)
            error = _error_text(error or self.error)
            now_ms = _time_ns() // 1_000_000
            for head, tail in self._parts:
                self._tracer._put((_AFTER, now_ms) + head + (cost_us, status, error) + tail)
        except Exception as exc:
            self._tracer._misuse("finish", repr(exc))


def default_msg_id(message: Any) -> str | None:
    """The message id of a str, a mapping or an object (``msg_id``, else its headers)."""
    if isinstance(message, str):
        return message
    if isinstance(message, Mapping):
        return message.get("msg_id") or extract_headers(message.get("headers")).msg_id
    return getattr(message, "msg_id", None) or extract_headers(getattr(message, "headers", None)).msg_id


def traced_handler(
    tracer_of: Callable[[], Tracer], topic: str, group: str, get_msg_id: Callable[[Any], str | None] | None = None,
) -> Callable[[F], F]:
    """The decorator behind :meth:`Tracer.consumer`; ``tracer_of`` is called per message, so the
    module-level ``tracehook.consumer`` can decorate at import time, before ``configure()``."""
    id_of = get_msg_id or default_msg_id

    def decorate(handler: F) -> F:
        if inspect.iscoroutinefunction(handler):
            @functools.wraps(handler)
            async def async_wrapper(message: Any, *args: Any, **kwargs: Any) -> Any:
                with tracer_of().start_consume(topic, _safe_call(id_of, message), group):
                    return await handler(message, *args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(handler)
        def wrapper(message: Any, *args: Any, **kwargs: Any) -> Any:
            with tracer_of().start_consume(topic, _safe_call(id_of, message), group):
                return handler(message, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def _safe_call(fn: Callable[[Any], str | None], message: Any) -> str | None:
    try:
        return fn(message)
    except Exception:
        return None
