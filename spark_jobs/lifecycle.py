"""The index job as a long-running process: stopping on a signal, and waiting for its trace log.

A stop is a request, not an exception: SIGTERM (systemd's stop) and SIGINT (Ctrl-C) set
:attr:`Stop.event`; the streaming run polls it between ``awaitTermination`` calls, stops the
query and returns, so no ``KeyboardInterrupt`` lands inside a Py4J call (where it printed
tracebacks) and the batch that was running is simply run again next time.  A second signal
raises ``KeyboardInterrupt`` for a job that does not stop.  SIGTERM exits 0, SIGINT 130::

    stop = Stop.install()
    try:
        wait_for_log(log_dir, stop, say=print)   # follow mode, before the collector created the log
        ...
        return stop.exit_code()
    finally:
        stop.restore()
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from collector.log.errors import NotATraceLogError

LOG_POLL_S = 1.0
"""How often a follower started before its collector looks for the trace log."""
EXIT_INTERRUPTED = 130


class Stop:
    """A stop requested by SIGTERM or SIGINT (see the module docstring)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @classmethod
    def install(cls) -> Stop:
        """A :class:`Stop` set by SIGTERM and SIGINT until :meth:`restore` (main thread only)."""
        stop = cls()
        stop.rearm()
        return stop

    def rearm(self) -> None:
        """Take SIGTERM and SIGINT back: PySpark's SparkContext installs a SIGINT handler of its own
        (it cancels all jobs through Py4J from inside the handler, then raises ``KeyboardInterrupt``)."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous = signal.signal(signum, self._handle)
            self._previous.setdefault(signum, previous)

    def restore(self) -> None:
        """Put back the signal handlers :meth:`install` replaced."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        if self.event.is_set():  # asked twice: stop waiting for a clean stop
            raise KeyboardInterrupt
        self.signum = signum
        self.event.set()

    @property
    def requested(self) -> bool:
        return self.event.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; True as soon as a stop is requested."""
        return self.event.wait(seconds)

    def describe(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else "request"

    def exit_code(self) -> int:
        """0 for SIGTERM (a service stop is a success), 130 for SIGINT (Ctrl-C, as a shell reports it)."""
        return EXIT_INTERRUPTED if self.signum == signal.SIGINT else 0


def log_present(log_dir: str) -> bool:
    """True once the collector has created the trace log (its ``log-id``); False while there is
    no directory, or an empty one.  :class:`NotATraceLogError` for a directory holding segments
    or a manifest without a valid id (waiting would not help)."""
    from collector.log.state import read_log_id

    try:
        read_log_id(log_dir)
    except NotATraceLogError:
        if not os.path.isdir(log_dir) or not os.listdir(log_dir):
            return False
        from collector.log.format import MANIFEST, SEGMENT_SUFFIX

        names = os.listdir(log_dir)
        if MANIFEST in names or any(n.endswith(SEGMENT_SUFFIX) for n in names):
            raise
        return False  # only the id's temporary file, a moment before the id itself
    return True


def wait_for_log(log_dir: str, stop: Stop, say: Callable[[str], None]) -> bool:
    """Wait, as ``tail -F`` does, until ``log_dir`` holds a trace log (saying so once);
    False when a stop was requested first."""
    if log_present(log_dir):
        return True
    say(f"index: waiting for the trace log at {log_dir} (the collector creates it when it starts)")
    while not log_present(log_dir):
        if stop.wait(LOG_POLL_S):
            return False
    return True
