"""systemd's readiness protocol (``sd_notify``), in a few lines of the standard library.

A ``Type=notify`` unit starts the collector with ``$NOTIFY_SOCKET`` set to a Unix datagram
socket: a path, or an abstract name written with a leading ``@``.  The collector sends
``READY=1`` once its trace log is recovered and it listens, and ``STOPPING=1`` when a
SIGTERM (or SIGINT) starts its graceful drain.  Without ``$NOTIFY_SOCKET`` nothing is sent::

    notify(READY)     # True when systemd (or whoever set NOTIFY_SOCKET) got it
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

NOTIFY_SOCKET_ENV = "NOTIFY_SOCKET"
READY = "READY=1"
STOPPING = "STOPPING=1"

log = logging.getLogger(__name__)


def socket_address(name: str) -> str:
    """``$NOTIFY_SOCKET`` as an ``AF_UNIX`` address: ``@name`` is the abstract socket ``\\0name``."""
    return "\0" + name[1:] if name.startswith("@") else name


def notify(state: str, env: Mapping[str, str] | None = None) -> bool:
    """Send ``state`` (e.g. :data:`READY`) to ``$NOTIFY_SOCKET``; False when unset or not delivered.

    A failure is logged, never raised: the service works the same without a supervisor.
    """
    name = (os.environ if env is None else env).get(NOTIFY_SOCKET_ENV, "")
    if not name:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(socket_address(name))
            sock.sendall(state.encode())
    except OSError as exc:
        log.warning("could not send %s to %s=%s: %s", state, NOTIFY_SOCKET_ENV, name, exc)
        return False
    return True
