"""Ingest: ``POST /v1/batches`` → token → limits → decode + validate → dedup → group commit → 200.

Group commit: handlers put valid batches on a queue and await a future; one writer task
takes everything queued, appends it to the trace log in one write and one fsync (in a
dedicated thread), then completes all those futures. While one sync runs the next group
gathers, so concurrent clients share fsyncs and a 200 means "on disk" (in the ``os``
durability mode: "written to the OS", which survives a crash of the collector but not
of the machine).

A batch is acknowledged only once: a retry with the same (client_id, seq) within the
dedup window gets the first copy's offset back without a second append.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from aiohttp import web

from collector.log.errors import DiskFull, LogUnavailable, StorageError
from collector.log.writer import TraceLogWriter
from collector.server.auth import require_ingest_token
from collector.server.bodystrip import TOPIC, strip_bodies
from collector.server.config import CollectorConfig
from collector.server.errors import (
    ANSWERED,
    Backpressure,
    BadBatch,
    ClientGone,
    PayloadTooLarge,
    ShuttingDown,
    UnsupportedMediaType,
)
from collector.server.indexlag import IndexLag
from collector.server.metrics import CollectorMetrics
from collector.server.ratelimit import RateLimiter
from collector.server.responses import error_response
from collector.wirecheck.validate import check_batch_bodies
from tracehook import wire
from tracehook.wire import BatchHeader, WireError

log = logging.getLogger(__name__)

ACCEPTED_CONTENT_TYPES = frozenset({"application/msgpack", "application/x-msgpack", "application/vnd.msgpack"})
"""The msgpack types only.  A body without a Content-Type, or a generic ``application/octet-stream``,
is refused with 415: it is usually something else sent to the wrong place (an OTLP protobuf, a file
posted with curl), and a clear 415 beats a 400 about msgpack."""
DEFAULT_MAX_GROUP_BYTES = 32 * 1024 * 1024
"""Upper bound on one group commit's write; a bigger backlog of requests spans several groups."""
INLINE_DECODE_BYTES = 16 * 1024
"""Request work on bodies up to this size (OTLP mapping) runs on the event loop; larger ones in a thread."""

WIRE_ADVERTISED = wire.advertised()
"""The value of the ``X-Tracehook-Wire`` header on every ingest answer (``fields=N``)."""

T = TypeVar("T")


class CheckResult(NamedTuple):
    """A batch's header and event count, or (header None) the wire format's reason and detail."""

    header: BatchHeader | None
    events: int = 0
    reason: str = ""
    detail: str = ""
    bodies: bool = False
    """The batch may carry captured bodies (:mod:`collector.server.bodystrip` looks)."""


def check_body(body: bytes) -> CheckResult:
    """Decode and validate a batch; a bad batch comes back as a value (reason and detail)."""
    try:
        header, events, bodies = check_batch_bodies(body)
    except WireError as exc:
        return CheckResult(None, 0, exc.reason, exc.detail)
    return CheckResult(header, events, bodies=bodies)


@dataclass
class _Pending:
    receive_ms: int
    client_id: str
    seq: int
    payload: bytes
    events: int
    future: asyncio.Future[int] = field(repr=False)


class Ingestor:
    """Owns the trace log while the app runs: the writer task, maintenance and dedup window."""

    def __init__(self, config: CollectorConfig, tracelog: TraceLogWriter, metrics: CollectorMetrics) -> None:
        self.config = config
        self.tracelog = tracelog
        self.metrics = metrics
        self.limiter = RateLimiter(config.rate_limit_events_s, config.rate_limit_batches_s, config.rate_limit_burst_s)
        self.body_topics = frozenset(config.body_topics)
        self.bodies_stripped = metrics.counter(
            "tracehook_collector_bodies_stripped", "Events whose captured body ingest dropped before the trace log, "
            "by reason (topic: not in body_topics).", ["reason"])
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tracelog")
        # The file log commits one group at a time (one fd, one fsync); a remote log (Kafka) may
        # have several groups waiting for their acknowledgement at once, on threads of their own.
        self._appenders = max(1, tracelog.concurrent_appends)
        self._append_executor = self._executor if self._appenders == 1 else ThreadPoolExecutor(
            max_workers=self._appenders, thread_name_prefix="tracelog-append")
        self._queue: asyncio.Queue[_Pending | None] = asyncio.Queue()
        self._recent: OrderedDict[tuple[str, int], asyncio.Future[int] | int] = OrderedDict()
        self._tasks: list[asyncio.Task[None]] = []
        self._refusing = False  # a stop has begun: new batches get 503, in-flight ones finish
        self._closing = False  # the writer is stopping: nothing more can be queued
        self.backlog_bytes = 0
        self.log_bytes = 0
        self.maintenance_rounds = 0
        """Background maintenance rounds (roll, retention, sizes) completed so far."""
        self.segments = 1
        self.disk_full = tracelog.recovery_pending
        """True from a write (or the recovery at start) that found no space until one succeeds."""
        self._recovering = asyncio.Lock()
        self._next_recovery = 0.0  # monotonic time of the next attempt while recovery is pending
        metrics.add_gauge("tracehook_collector_backlog_bytes", "Trace log bytes not yet indexed.",
                          lambda: self.backlog_bytes)
        metrics.add_gauge("tracehook_collector_log_bytes", "Trace log size on disk.", lambda: self.log_bytes)
        metrics.add_gauge("tracehook_collector_segments", "Trace log segments, the active one included.",
                          lambda: self.segments)
        metrics.add_gauge("tracehook_collector_queued_batches", "Valid batches waiting for a group commit.",
                          lambda: self._queue.qsize())
        metrics.add_gauge("tracehook_collector_disk_full",
                          "Whether the data dir is out of space (1: ingest answers 503 disk_full).",
                          lambda: int(self.disk_full))
        metrics.add_gauge("tracehook_collector_disk_free_bytes", "Free bytes on the trace log's file system.",
                          lambda: self.disk_free()[0])
        metrics.add_gauge("tracehook_collector_disk_free_inodes", "Free inodes on the trace log's file system.",
                          lambda: self.disk_free()[1])
        health = tracelog.health()
        metrics.add_gauge("tracehook_collector_log_available",
                          f"Whether the trace log ({health['kind']}) takes batches (0: ingest answers 503).",
                          lambda: int(self.tracelog.health()["state"] == "ok"))
        self.index_lag = IndexLag(tracelog.log_dir, tracelog.durable_end())
        self.index_lag.register(metrics)

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Seed the dedup window from the recovered segment and start the background tasks.

        A log whose recovery waits for space (``TraceLog.open(defer_if_full=True)``) is
        recovered later, by the first ingest or maintenance round that finds space."""
        for client_id, seq, offset in self.tracelog.recovered_batches:
            self._remember((client_id, seq), offset)
        if not self.tracelog.recovery_pending:
            await self._run(self._refresh_sizes)
        self._tasks = [
            asyncio.create_task(self._writer(), name="tracelog-writer"),
            asyncio.create_task(self._maintenance(), name="tracelog-maintenance"),
        ]

    def begin_shutdown(self) -> None:
        """Answer new batches with 503 from now on (in-flight ones, body still arriving included, complete)."""
        self._refusing = True

    async def stop(self) -> None:
        """Refuse new batches, commit everything queued, then close the log."""
        self._refusing = self._closing = True
        writer, maintenance = self._tasks or (None, None)
        if maintenance is not None:
            maintenance.cancel()
        self._queue.put_nowait(None)  # the writer finishes what is queued before this
        if writer is not None:
            await writer
        await self._run(self.tracelog.close)
        self._executor.shutdown(wait=True)
        self._append_executor.shutdown(wait=True)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        # Every trace-log call goes through the one thread, so appends, rolls and
        # retention never overlap and the event loop never waits on the disk.
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    # -- a full disk ----------------------------------------------------------------------

    def disk_free(self) -> tuple[int, int]:
        """(bytes, inodes) available to the collector on the trace log's file system (that of
        its nearest existing parent: on a full disk the log directory may not exist yet).
        Either running out is a full disk."""
        path = self.tracelog.log_dir
        while not os.path.exists(path) and os.path.dirname(path) != path:
            path = os.path.dirname(path)
        try:
            st = os.statvfs(path)
        except OSError:
            return 0, 0
        return st.f_bavail * st.f_frsize, st.f_favail

    async def ensure_recovered(self) -> None:
        """Recover a log that a full disk kept from recovering at start; raise
        :class:`DiskFull` (503 + Retry-After) while there is still no space. Attempts are
        at most one per ``retry_after_s``: a recovery scans the active segment."""
        if not self.tracelog.recovery_pending:
            return
        async with self._recovering:
            if not self.tracelog.recovery_pending:
                return
            now = time.monotonic()
            if now < self._next_recovery:
                raise DiskFull("no space to recover the trace log yet")
            self._next_recovery = now + self.config.retry_after_s
            recovered = await self._run(self.tracelog.retry_recovery)  # DiskFull while still full
            for client_id, seq, offset in recovered:
                self._remember((client_id, seq), offset)
            self.disk_full = False
            await self._run(self._refresh_sizes)

    # -- the HTTP handler -----------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        """``POST /v1/batches``: 200 with the batch's log offset once it is durable.

        Every answer, refusals included, carries :data:`tracehook.wire.WIRE_HEADER` (the event fields this
        collector accepts), so a library sends newer fields only to collectors that take them."""
        try:
            response = await self._handle(request)
        except ANSWERED as exc:  # answered here rather than by the app's middleware, to carry the header
            response = error_response(request, exc)
            if isinstance(exc, ShuttingDown):
                response.force_close()
        response.headers[wire.WIRE_HEADER] = WIRE_ADVERTISED
        return response

    async def _handle(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        try:
            require_ingest_token(request)
            # aiohttp reports a missing header as application/octet-stream: look at the header itself.
            given = request.headers.get("Content-Type")
            if given is None or request.content_type not in ACCEPTED_CONTENT_TYPES:
                raise UnsupportedMediaType(f"Content-Type must be application/msgpack, not {given or 'missing'}")
            body = await self.read_body(request)
            header, events, reason, detail, bodies = await self._check(body)
            if header is None:
                raise BadBatch(detail, reason=reason)
            if bodies:
                body = await self._strip(body)
            # After decoding: the key is the batch's client id and the cost its event count.
            self.limiter.check(header.client_id, events)
        except ANSWERED as exc:
            self.metrics.rejected.labels(reason=exc.reason).inc()
            raise
        self.metrics.client_reported(header.client_id, header.client_stats)
        if not events:  # a stats-only batch: nothing to keep
            return web.json_response({"offset": None, "events": 0, "duplicate": False})
        try:
            await self.ensure_recovered()
            offset, duplicate = await self.append(header.client_id, header.seq, body, events)
        except ANSWERED as exc:  # disk full, I/O error: counted with the other refusals
            self.metrics.rejected.labels(reason=exc.reason).inc()
            raise
        self.metrics.append_seconds.observe(time.perf_counter() - started)
        return web.json_response({"offset": offset, "events": events, "duplicate": duplicate})

    async def read_body(self, request: web.Request) -> bytes:
        """The body of a request to append, once the collector can take it: raises ShuttingDown
        (503), PayloadTooLarge (413), Backpressure (429) or ClientGone. Every ingest route reads through this."""
        if self._refusing:
            raise ShuttingDown("the collector is shutting down")
        limit = self.config.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise PayloadTooLarge(f"body of {request.content_length} bytes is over the {limit} byte limit")
        backlog_limit = self.config.backlog_limit_bytes
        if backlog_limit and self.backlog_bytes >= backlog_limit:
            raise Backpressure(
                f"{self.backlog_bytes} unindexed bytes (limit {backlog_limit})",
                retry_after_s=self.config.retry_after_s,
            )
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise PayloadTooLarge(f"body is over the {limit} byte limit") from None
        except ConnectionResetError:
            raise ClientGone("the client hung up before sending the whole body") from None

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        """Run CPU-heavy request work (OTLP mapping) in a thread, so the event loop keeps answering."""
        return await asyncio.to_thread(fn, *args)

    async def _strip(self, body: bytes) -> bytes:
        """``body`` without the captured bodies of topics outside ``body_topics``, counted (decoded in a
        thread when large: only batches that carry a body come here)."""
        if len(body) > INLINE_DECODE_BYTES:
            body, stripped = await self.offload(strip_bodies, body, self.body_topics)
        else:
            body, stripped = strip_bodies(body, self.body_topics)
        if stripped:
            self.bodies_stripped.labels(reason=TOPIC).inc(stripped)
        return body

    async def _check(self, body: bytes) -> CheckResult:
        # On the event loop: the C validator (collector.wirecheck.validate) accepts a valid 1000-event
        # batch in well under a millisecond; decode worker processes (removed) never paid for their IPC.
        return check_body(body)

    # -- appending ------------------------------------------------------------------------

    async def append(self, client_id: str, seq: int, payload: bytes, events: int) -> tuple[int, bool]:
        """Durably append one validated batch; returns (offset, was it a duplicate)."""
        key = (client_id, seq)
        known = self._recent.get(key)
        if known is not None:
            self.metrics.duplicates.inc()
            offset = await asyncio.shield(known) if isinstance(known, asyncio.Future) else known
            return offset, True
        if self._closing:  # checked right before the put: the writer's stop marker may be queued
            raise ShuttingDown("the collector is shutting down")
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._remember(key, future)
        self._queue.put_nowait(_Pending(int(time.time() * 1000), client_id, seq, payload, events, future))
        # Shielded: a client that hangs up must not cancel a write other requests may share.
        return await asyncio.shield(future), False

    def _remember(self, key: tuple[str, int], value: asyncio.Future[int] | int) -> None:
        self._recent[key] = value
        self._recent.move_to_end(key)
        while len(self._recent) > self.config.dedup_window:
            self._recent.popitem(last=False)

    async def _writer(self) -> None:
        # A slot is taken before the group is gathered: with one slot (the file log) the next group
        # is everything that queued while the previous one was being committed.
        slots = asyncio.Semaphore(self._appenders)
        running: set[asyncio.Task[None]] = set()
        stop = False
        while not stop:
            await slots.acquire()
            first = await self._queue.get()
            if first is None:
                break
            group, size = [first], len(first.payload)
            while size < DEFAULT_MAX_GROUP_BYTES and not self._queue.empty():
                item = self._queue.get_nowait()
                if item is None:
                    stop = True
                    break
                group.append(item)
                size += len(item.payload)
            task = asyncio.create_task(self._commit(group))
            running.add(task)
            task.add_done_callback(lambda t: (running.discard(t), slots.release()))
        if running:
            await asyncio.gather(*running)

    async def _commit(self, group: list[_Pending]) -> None:
        entries = [(p.receive_ms, p.client_id, p.seq, p.payload) for p in group]
        try:
            offsets, written, segments = await asyncio.get_running_loop().run_in_executor(
                self._append_executor, self._append, entries)
        except Exception as exc:  # noqa: BLE001 - every waiter must hear about it
            if isinstance(exc, (DiskFull, LogUnavailable)):  # expected while it lasts; a traceback per group is noise
                self.disk_full = self.disk_full or isinstance(exc, DiskFull)
                log.warning("group commit of %d batches failed: %s", len(group), exc)
            else:
                log.exception("group commit of %d batches failed", len(group))
            error = exc if isinstance(exc, StorageError) else StorageError(str(exc))
            for p in group:
                self._recent.pop((p.client_id, p.seq), None)  # a retry may try again
                if not p.future.done():
                    p.future.set_exception(error)
                    p.future.exception()  # mark retrieved: a waiter that hung up must not warn
            return
        self.disk_full = False
        nbytes = 0
        for p, offset in zip(group, offsets):
            if (p.client_id, p.seq) in self._recent:
                self._recent[(p.client_id, p.seq)] = offset
            p.future.set_result(offset)
            nbytes += len(p.payload)
            self.metrics.events.inc(p.events)
        self.metrics.batches.inc(len(group))
        self.index_lag.acknowledged(offsets[-1] + 1, sum(p.events for p in group))
        self.metrics.bytes.inc(nbytes)
        self.metrics.group_batches.observe(len(group))
        if self.config.durability == "fsync":
            self.metrics.fsync_seconds.observe(self.tracelog.last_sync_s)
        # Framed bytes, not payload bytes, and the segment count after any roll: the gauges match the disk.
        self.backlog_bytes += written
        self.log_bytes += written
        self.segments = segments

    def _append(self, entries: list[tuple[int, str, int, bytes]]) -> tuple[list[int], int, int]:
        """On the writer thread: append, and return the offsets, the bytes written and the segment count."""
        before = self.tracelog.total_bytes()
        offsets = self.tracelog.append(entries)
        return offsets, self.tracelog.total_bytes() - before, self.tracelog.segment_count()

    # -- maintenance ----------------------------------------------------------------------

    def _refresh_sizes(self) -> None:
        self.backlog_bytes = self.tracelog.backlog_bytes()
        self.log_bytes = self.tracelog.total_bytes()
        self.segments = self.tracelog.segment_count()

    def _maintain(self) -> None:
        self.tracelog.roll_if_due()
        self.tracelog.apply_retention(self.config.retention_s)
        self._refresh_sizes()

    async def _maintenance(self) -> None:
        while True:
            await asyncio.sleep(self.config.maintenance_interval_s)
            try:
                if self.tracelog.recovery_pending:  # so /healthz clears without ingest traffic
                    await self.ensure_recovered()
                    continue
                await self._run(self._maintain)
                self.maintenance_rounds += 1
            except DiskFull:
                pass  # counted where it matters (ingest); the next round retries
            except Exception:  # noqa: BLE001 - keep ingesting; the next round retries
                log.exception("trace log maintenance failed")

    async def roll(self) -> None:
        """Seal the active segment now (tests, the demo, an operator before indexing)."""
        await self.ensure_recovered()
        await self._run(self.tracelog.roll)
        await self._run(self._refresh_sizes)
