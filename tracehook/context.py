"""Message identity: generated ids, request ids and the headers that carry them.

A producer that has no broker-assigned id gets one from :func:`new_msg_id`;
:func:`inject_headers` writes it and a W3C ``traceparent`` into the message's
headers so the consumer side can read both back with :func:`extract_headers`::

    headers = {}
    msg_id = tracehook.inject_headers(headers, tracehook.new_msg_id())
    ctx = tracehook.extract_headers(headers)   # ctx.msg_id == msg_id
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import MutableMapping
from typing import Any, NamedTuple

HEADER_MSG_ID = "tracehook-msg-id"
HEADER_TRACEPARENT = "traceparent"
_TRACEPARENT_VERSION = "00"
_SAMPLED = "01"


class HeaderContext(NamedTuple):
    """What :func:`extract_headers` found; a field is None when its header is absent."""

    msg_id: str | None
    traceparent: str | None

    @property
    def trace_id(self) -> str | None:
        """The 32-hex trace id of the traceparent, if there is a valid one."""
        parts = self.traceparent.split("-") if self.traceparent else []
        return parts[1] if len(parts) == 4 and len(parts[1]) == 32 else None


class _IdSource:
    """A random 64-bit per-process prefix plus a counter: unique and ~10x cheaper than uuid4.

    The ids are 32 lowercase hex characters, so a generated message id doubles
    as a W3C trace id.  The prefix is renewed in a forked child (see reseed()).
    """

    def __init__(self) -> None:
        self.reseed()

    def reseed(self) -> None:
        self._prefix = os.urandom(8).hex()
        self._counter = itertools.count(1)

    def next(self) -> str:
        return f"{self._prefix}{next(self._counter):016x}"


_ids = _IdSource()
os.register_at_fork(after_in_child=_ids.reseed)


def new_msg_id() -> str:
    """A new unique message id (32 hex characters)."""
    return f"{_ids._prefix}{next(_ids._counter):016x}"


def new_request_id() -> str:
    """A new unique id pairing a SUB_BEFORE with its SUB_AFTER."""
    return f"{_ids._prefix}{next(_ids._counter):016x}"


def trace_id_for(msg_id: str) -> str:
    """The W3C trace id for a message: the id itself when it is 32 hex digits, else a hash of it."""
    if len(msg_id) == 32 and _is_hex(msg_id) and msg_id != "0" * 32:
        return msg_id.lower()
    return hashlib.blake2b(msg_id.encode("utf-8", "replace"), digest_size=16).hexdigest()


def make_traceparent(msg_id: str) -> str:
    """A sampled W3C ``traceparent`` whose trace id is derived from ``msg_id``."""
    return f"{_TRACEPARENT_VERSION}-{trace_id_for(msg_id)}-{os.urandom(8).hex()}-{_SAMPLED}"


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def _as_str(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


def get_header(headers: Any, name: str) -> str | None:
    """A header's value as str from a mapping or a list of (name, value) pairs; names match case-insensitively."""
    if headers is None:
        return None
    if isinstance(headers, MutableMapping) or hasattr(headers, "items"):
        value = headers.get(name)
        if value is not None:
            return _as_str(value)
        pairs = headers.items()
    else:
        pairs = headers
    lowered = name.lower()
    for key, value in pairs:
        key_text = _as_str(key)
        if key_text is not None and key_text.lower() == lowered:
            return _as_str(value)
    return None


def set_header(headers: Any, name: str, value: str) -> None:
    """Set a header unless present: mappings get a str, lists of pairs get (name, utf-8 bytes) as Kafka wants."""
    if get_header(headers, name) is not None:
        return
    if isinstance(headers, list):
        headers.append((name, value.encode("utf-8")))
    else:
        headers[name] = value


def inject_headers(headers: Any, msg_id: str) -> str:
    """Write the message id and a ``traceparent`` into ``headers`` where absent; returns the message id in effect.

    An id already in the headers wins (a re-send of the same message keeps its
    identity), and an existing traceparent (e.g. from OpenTelemetry) is kept.
    """
    existing = get_header(headers, HEADER_MSG_ID)
    if existing:
        msg_id = existing
    else:
        set_header(headers, HEADER_MSG_ID, msg_id)
    set_header(headers, HEADER_TRACEPARENT, make_traceparent(msg_id))
    return msg_id


def extract_headers(headers: Any) -> HeaderContext:
    """Read the message id and traceparent from a mapping or list of pairs (str or bytes values)."""
    return HeaderContext(get_header(headers, HEADER_MSG_ID) or None, get_header(headers, HEADER_TRACEPARENT) or None)
