"""tracehook: message tracing for Python services that use message queues.

Configure once, then call the hooks where messages are sent and consumed::

    import tracehook

    tracehook.configure(app="shop", collectors=["http://127.0.0.1:7070"])   # or TRACEHOOK_* env vars
    headers: dict[str, str] = {}
    msg_id = tracehook.record_send("orders", keys="order-1", headers=headers)   # id + traceparent into headers
    ...
    with tracehook.consume("orders", msg_id, "billing") as span:             # SUB_BEFORE ... SUB_AFTER
        handle(message)
    tracehook.flush()

Hooks never block and never raise; ``tracehook.stats()`` counts every event
emitted, sent and dropped (by reason).  See docs/library.md.
"""

from __future__ import annotations

import threading
from typing import Any

from .config import TracerConfig
from .context import (
    HEADER_MSG_ID,
    HEADER_TRACEPARENT,
    HeaderContext,
    extract_headers,
    inject_headers,
    new_msg_id,
)
from .errors import ConfigError, DeliveryError, TracehookError
from .hooks import BatchConsumeSpan, ConsumeSpan, Tracer, traced_handler
from .wire import EventType, Status, TxState

__all__ = [
    "HEADER_MSG_ID", "HEADER_TRACEPARENT", "BatchConsumeSpan", "ConfigError", "ConsumeSpan", "DeliveryError",
    "EventType", "HeaderContext", "Status", "Tracer", "TracerConfig", "TracehookError", "TxState",
    "close", "configure", "consume", "consume_batch", "consumer", "extract_headers", "flush", "get_tracer",
    "inject_headers", "new_msg_id", "record_dead", "record_end_tx", "record_send", "start_consume", "stats",
]

_global: Tracer | None = None
_global_lock = threading.Lock()


def configure(app: str | None = None, collectors: Any = None, token: str | None = None, **options: Any) -> Tracer:
    """Create the global tracer (replacing and closing any earlier one); unset arguments come from the environment.

    ``options`` are :class:`TracerConfig` fields (queue_size, batch_events,
    linger_s, max_retries, ...); an unknown or invalid one raises :class:`ConfigError`.
    """
    global _global
    config = TracerConfig.from_env(app=app, collectors=collectors, token=token, **options)
    tracer = Tracer(config)
    with _global_lock:
        previous, _global = _global, tracer
    if previous is not None:
        previous.close()
    return tracer


def get_tracer() -> Tracer:
    """The global tracer; if :func:`configure` was never called, one built from the environment
    (without ``TRACEHOOK_COLLECTORS`` it records nothing and counts events as ``dropped.disabled``)."""
    global _global
    tracer = _global
    if tracer is None:
        with _global_lock:
            if _global is None:
                _global = Tracer(TracerConfig.from_env())
            tracer = _global
    return tracer


def record_send(topic: str, msg_id: str | None = None, **fields: Any) -> str:
    """:meth:`Tracer.record_send` on the global tracer."""
    return get_tracer().record_send(topic, msg_id, **fields)


def start_consume(topic: str, msg_id: str | None, group: str, **fields: Any) -> ConsumeSpan:
    """:meth:`Tracer.start_consume` on the global tracer."""
    return get_tracer().start_consume(topic, msg_id, group, **fields)


consume = start_consume


def consume_batch(topic: str, group: str, messages: Any, **fields: Any) -> BatchConsumeSpan:
    """:meth:`Tracer.consume_batch` on the global tracer."""
    return get_tracer().consume_batch(topic, group, messages, **fields)


def consumer(topic: str, group: str, *, get_msg_id: Any = None) -> Any:
    """:meth:`Tracer.consumer` on the global tracer, looked up per message (decorating before configure() is fine)."""
    return traced_handler(get_tracer, topic, group, get_msg_id)


def record_end_tx(topic: str, msg_id: str, group: str, tx_id: str, tx_state: int, **fields: Any) -> None:
    """:meth:`Tracer.record_end_tx` on the global tracer."""
    get_tracer().record_end_tx(topic, msg_id, group, tx_id, tx_state, **fields)


def record_dead(topic: str, msg_id: str, group: str, **fields: Any) -> None:
    """:meth:`Tracer.record_dead` on the global tracer."""
    get_tracer().record_dead(topic, msg_id, group, **fields)


def stats() -> dict[str, Any]:
    """:meth:`Tracer.stats` of the global tracer."""
    return get_tracer().stats()


def flush(timeout: float = 5.0) -> bool:
    """:meth:`Tracer.flush` of the global tracer."""
    return get_tracer().flush(timeout)


def close(timeout: float = 5.0) -> None:
    """:meth:`Tracer.close` of the global tracer."""
    get_tracer().close(timeout)
