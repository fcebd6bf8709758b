"""A real local HTTP collector stub (aiohttp in a thread) whose answers the tests script."""

from __future__ import annotations

import asyncio
import collections
import ssl
import threading

import msgpack
from aiohttp import web
from fixtures.ports import free_port

from tracehook import wire


class StubCollector:
    """``POST /v1/batches`` on 127.0.0.1: decodes with tracehook.wire, answers 200 unless told otherwise.

    * ``answers``: a queue of (status, headers) used for the next requests, then 200.
    * ``max_body``: bodies larger than this get 413.
    * events whose msg_id starts with ``bad`` make the whole batch a 400 (as the
      collector does for an invalid event).
    * ``hold()``/``release()``: keep requests waiting (to fill the client's queue).
    * ``stop()``/``start()``: the same port goes away and comes back.
    * ``ssl_context``: serve HTTPS with it (``url`` is then https).
    * ``wire``: the ``X-Tracehook-Wire`` every answer carries (this checkout's format); None answers
      as a collector older than the header does (no header: only the legacy event fields).
    """

    def __init__(self, token: str | None = None, ssl_context: ssl.SSLContext | None = None) -> None:
        self.port = free_port()
        self.ssl_context = ssl_context
        self.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{self.port}"
        self.token = token
        self.answers: collections.deque[tuple[int, dict[str, str]]] = collections.deque()
        self.max_body: int | None = None
        self.batches: list[wire.Batch] = []
        self.requests = 0
        self.auth_headers: list[str | None] = []
        self.content_types: list[str] = []
        self.wire: str | None = wire.advertised()
        self._gate = threading.Event()
        self._gate.set()
        self.waiting = threading.Event()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # -- control --------------------------------------------------------------------------

    def start(self) -> None:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        assert ready.wait(10), "stub collector did not start"

    def stop(self) -> None:
        if self._loop is None:
            return
        self._gate.set()
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(10)
        self._loop = None

    def hold(self) -> None:
        self.waiting.clear()
        self._gate.clear()

    def release(self) -> None:
        self._gate.set()

    def events(self) -> list[wire.Event]:
        """Every event received, each (client_id, seq) batch counted once (as the collector dedupes)."""
        seen: set[tuple[str, int]] = set()
        out: list[wire.Event] = []
        with self._lock:
            for batch in self.batches:
                key = (batch.header.client_id, batch.header.seq)
                if key not in seen:
                    seen.add(key)
                    out.extend(batch.events)
        return out

    # -- the server -----------------------------------------------------------------------

    def _serve(self, ready: threading.Event) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/batches", self._handle)
        app.on_response_prepare.append(self._advertise)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True, ssl_context=self.ssl_context)
        self._loop.run_until_complete(site.start())
        ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _shutdown(self) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    async def _advertise(self, request: web.Request, response: web.StreamResponse) -> None:
        if self.wire is not None:
            response.headers[wire.WIRE_HEADER] = self.wire

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        with self._lock:
            self.requests += 1
            self.auth_headers.append(request.headers.get("Authorization"))
            self.content_types.append(request.content_type)
        if not self._gate.is_set():
            self.waiting.set()
            await asyncio.get_running_loop().run_in_executor(None, self._gate.wait)
        if self.token is not None and request.headers.get("Authorization") != f"Bearer {self.token}":
            return web.json_response({"error": "unauthorized"}, status=401)
        with self._lock:
            answer = self.answers.popleft() if self.answers else None
        if answer is not None:
            return web.json_response({"error": "scripted"}, status=answer[0], headers=answer[1])
        if self.max_body is not None and len(body) > self.max_body:
            return web.json_response({"error": "too_large"}, status=413)
        try:
            batch = wire.decode_batch(body)
        except wire.WireError as exc:
            return web.json_response({"error": exc.reason}, status=400)
        if self.wire is None and any(len(e) > wire.LEGACY_FIELD_COUNT for e in msgpack.unpackb(body)[7]):
            return web.json_response({"error": "bad_event"}, status=400)  # as a collector before the header
        if any(e.msg_id.startswith("bad") for e in batch.events):
            return web.json_response({"error": "bad_field"}, status=400)
        with self._lock:
            self.batches.append(batch)
        return web.json_response({"offset": 0, "events": len(batch.events), "duplicate": False})
