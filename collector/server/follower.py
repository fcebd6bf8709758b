"""``tracehook collector --index``: run the index job in follow mode next to the collector.

For the embedded deployment (one machine, the local store): the collector starts
``tracehook index --follow`` as a child process once its trace log is open, and stops it
(SIGTERM, then SIGKILL after :data:`STOP_TIMEOUT_S`) before it closes the log.  A follower
that fails (exit 1: the store was unavailable) is started again after
:data:`RESTART_DELAY_S`; one refused for bad input (exit 2 or 3) or an old store (exit 5) is not.

::

    app = create_app(config)
    app.cleanup_ctx.append(index_follower(config))
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from collector.server.appkeys import FOLLOWER_KEY, METRICS_KEY
from collector.server.config import CollectorConfig

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 60.0
RESTART_DELAY_S = 5.0
_RETRYABLE = 1


def follower_command(config: CollectorConfig) -> list[str]:
    """The ``tracehook index --follow`` command line for this collector's log (file or Kafka topic) and store."""
    from collector.log.url import is_kafka_log

    source = ["--source", config.log_url] if is_kafka_log(config.log_url) else ["--log-dir", config.log_dir]
    # This interpreter, not `python3` from PATH (a venv that is not activated, systemd's PATH); the job
    # hands it on to Spark's Python workers (spark_jobs.session.use_own_python).
    return [sys.executable, "-m", "collector.cli.main", "index", "--follow", *source, "--store", config.store_url]


@dataclass
class FollowerState:
    """What ``/healthz`` and ``/metrics`` say of the follower: ``running``, ``restarting`` (it exited
    with 1 and is started again) or ``stopped`` (refused: bad input, an old store; not restarted)."""

    state: str = "starting"
    restarts: int = 0
    last_exit: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "restarts": self.restarts, "last_exit": self.last_exit}


def index_follower(config: CollectorConfig) -> Callable[[web.Application], Any]:
    """A ``cleanup_ctx`` that runs the follower while the app runs (append it after the log's)."""

    async def ctx(app: web.Application) -> AsyncIterator[None]:
        stopping = asyncio.Event()
        holder: dict[str, asyncio.subprocess.Process] = {}
        state = app[FOLLOWER_KEY] = FollowerState()
        app[METRICS_KEY].add_gauge("tracehook_collector_index_follower_up",
                                   "Whether the --index follower runs (0: restarting after a failure, or stopped).",
                                   lambda: int(state.state == "running"))
        task = asyncio.create_task(_supervise(config, holder, stopping, state), name="index-follower")
        try:
            yield
        finally:
            stopping.set()
            proc = holder.get("proc")
            if proc is not None and proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_S)
                except TimeoutError:
                    log.warning("index follower did not stop in %.0fs; killing it", STOP_TIMEOUT_S)
                    proc.kill()
                    await proc.wait()
            if proc is not None:
                # Its Spark JVM is a child of its own: end whatever of the group outlived it.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    return ctx


async def _supervise(config: CollectorConfig, holder: dict[str, asyncio.subprocess.Process],
                     stopping: asyncio.Event, state: FollowerState) -> None:
    while not stopping.is_set():
        # A process group of its own, so the collector can end the follower's JVM with it.
        proc = await asyncio.create_subprocess_exec(*follower_command(config), start_new_session=True)
        holder["proc"] = proc
        state.state = "running"
        log.info("index follower started (pid %d): %s -> %s", proc.pid, config.log_dir, config.store_url)
        code = await proc.wait()
        if stopping.is_set():
            return
        state.last_exit = code
        if code != _RETRYABLE:
            state.state = "stopped"
            log.error("index follower exited with %d; not restarting it (see its message above)", code)
            return
        state.state = "restarting"
        state.restarts += 1
        log.warning("index follower exited with %d; restarting in %.0fs", code, RESTART_DELAY_S)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), RESTART_DELAY_S)
