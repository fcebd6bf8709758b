"""A graceful stop that lets the requests in progress finish before aiohttp closes their connections.

aiohttp's own stop (``web.run_app`` on SIGINT/SIGTERM) closes every connection before it waits for
in-flight requests, and a closed connection throws away the bytes still arriving: a batch whose body
was uploading when the signal came never completes, its handler waits out the shutdown timeout and
its client sees a broken connection (aiohttp 3.14, ``RequestHandler.data_received``).
:func:`drain_on_signals` takes SIGINT and SIGTERM over once the app has started: new batches get
503 at once, the requests in progress finish (up to a timeout), and then aiohttp's stop runs as
before (commit what is queued, sync the log)::

    app = create_app(config)   # counts the requests in progress (track_requests)
    app.on_startup.append(drain_on_signals(config.shutdown_timeout_s, begin_stop))
    web.run_app(app, shutdown_timeout=AFTER_DRAIN_S)

A second signal ends the wait at once; one during aiohttp's stop aborts it (exit 1).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

from aiohttp import web

from collector.server.appkeys import IN_FLIGHT_KEY

AFTER_DRAIN_S = 1.0
"""aiohttp's own shutdown timeout once the drain is over: only requests that raced with it (answered
503 at once) or a client that stalled through the whole drain are still in progress then."""

log = logging.getLogger(__name__)


class InFlight:
    """How many requests the app is handling now."""

    def __init__(self) -> None:
        self.count = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def enter(self) -> None:
        self.count += 1
        self._idle.clear()

    def leave(self) -> None:
        self.count -= 1
        if self.count == 0:
            self._idle.set()

    async def wait_idle(self, timeout_s: float) -> bool:
        """True once no request is in progress; False when some still are after ``timeout_s``."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except TimeoutError:
            return False
        return True


@web.middleware
async def track_requests(request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """Count the request as in progress until its handler returns (its body read, its answer made)."""
    in_flight = request.app[IN_FLIGHT_KEY]
    in_flight.enter()
    try:
        return await handler(request)
    finally:
        in_flight.leave()


def _graceful_exit() -> None:
    raise web.GracefulExit  # what aiohttp's own signal handler raises: run_app stops the app cleanly


def drain_on_signals(timeout_s: float, begin: Callable[[web.Application], None]
                     ) -> Callable[[web.Application], Awaitable[None]]:
    """An ``on_startup`` hook that handles SIGINT and SIGTERM (replacing run_app's handlers, installed
    before the hooks run): ``begin(app)`` (refuse new batches, tell systemd), wait up to ``timeout_s``
    for the requests in progress, then aiohttp's stop."""

    async def install(app: web.Application) -> None:
        loop = asyncio.get_running_loop()
        draining: list[asyncio.Task[None]] = []

        async def drain() -> None:
            begin(app)
            in_flight = app[IN_FLIGHT_KEY]
            if not await in_flight.wait_idle(timeout_s):
                log.warning("stopping with %d request(s) still in progress after %.0f s", in_flight.count, timeout_s)
            loop.call_soon(_graceful_exit)

        def on_signal() -> None:
            if draining:  # a second signal: stop waiting (a third, during aiohttp's stop, aborts it)
                draining[0].cancel()
                _graceful_exit()
            draining.append(loop.create_task(drain()))

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, on_signal)

    return install
