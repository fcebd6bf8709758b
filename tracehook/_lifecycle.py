"""Process lifecycle for every live tracer: a fresh dispatcher in a forked child, a flush at exit."""

from __future__ import annotations

import atexit
import os
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .hooks import Tracer

_tracers: weakref.WeakSet[Tracer] = weakref.WeakSet()


def track(tracer: Tracer) -> None:
    """Include ``tracer`` in fork and exit handling (held weakly)."""
    _tracers.add(tracer)


def _after_fork_in_child() -> None:
    for tracer in list(_tracers):
        tracer._after_fork_in_child()


def _at_exit() -> None:
    for tracer in list(_tracers):
        if tracer.config.flush_at_exit:
            tracer.close(tracer.config.exit_timeout_s)


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_at_exit)
