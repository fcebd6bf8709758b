"""The collector's link to its index store: opened in the background, reopened after outages.

Ingest never touches the index store; only queries do.  So a collector whose store (HBase)
is down at start still starts and ingests, and one whose store goes away later keeps
ingesting.  :class:`StoreLink` is the :class:`~collector.store.Store` the query API reads:

- while the store does not answer, every call raises ``StoreUnavailableError`` at once
  (the query API answers ``503 store_unavailable`` with ``Retry-After``) instead of
  waiting for a Thrift timeout per query;
- :func:`keep_connected` (an app background task) reopens it every ``retry_s`` seconds
  while it is down, so queries work again by themselves once it answers;
- a store in another layout (:class:`~collector.store.OldLayoutError`) is never answered from:
  every call raises that error again (``503 old_layout`` with the line naming the upgrade or
  migration command), and :func:`keep_connected` tries it again every ``retry_s`` seconds, so a
  store upgraded in place (``tracehook upgrade-store``) is answered from without a restart.

::

    link = StoreLink("hbase://127.0.0.1:9090?namespace=trace")
    link.reconnect()              # one attempt; False (and link.error says why) when HBase is down
    TraceQuery(link).get_trace("m-1")
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from collector.store import LayoutVersionError, Store, StoreOptions, StoreUnavailableError, open_store
from collector.store.base import DEFAULT_OPTIONS, Columns, Row

log = logging.getLogger(__name__)

CONNECTING, OK, UNAVAILABLE = "connecting", "ok", "unavailable"
"""Values of :attr:`StoreLink.state` (and of ``store`` in ``/healthz``)."""


class StoreLink:
    """A :class:`~collector.store.Store` that survives its backend going away; thread-safe.

    Calls go to the store last opened.  A call that finds the backend unavailable marks the
    link down; from then on calls fail fast until :meth:`reconnect` opens the store again.
    """

    def __init__(self, url: str, *, opener: Callable[[str], Store] = open_store) -> None:
        self.url = url
        self._opener = opener
        self._lock = threading.Lock()
        self._store: Store | None = None
        self._down = False
        self._error: str | None = None
        self._refused: LayoutVersionError | None = None  # the store is in another layout
        self._attempted = threading.Event()  # set once the first open attempt has finished
        self._retired: list[Store] = []  # replaced stores: in-flight calls may still use them
        self._closed = False

    # -- state --------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """``connecting`` before the first attempt finished, then ``ok`` or ``unavailable``."""
        if not self._attempted.is_set():
            return CONNECTING
        return OK if self.available else UNAVAILABLE

    @property
    def available(self) -> bool:
        """True when the store is open and its last call found the backend answering."""
        return self._store is not None and not self._down

    @property
    def error(self) -> str | None:
        """Why the store is unavailable (one line), or None."""
        return None if self.available else self._error

    def reconnect(self) -> bool:
        """One attempt to (re)open the store (blocks); True when it answers."""
        try:
            store = self._opener(self.url)
        except Exception as exc:  # noqa: BLE001 - whatever it is, ingest goes on and queries answer 503
            self._refused = exc if isinstance(exc, LayoutVersionError) else None
            self._mark_down(None, exc)
            self._attempted.set()
            return False
        with self._lock:
            if self._closed:
                store.close()
                return False
            was_down = self._down
            if self._store is not None:
                self._retired.append(self._store)
            self._store, self._down, self._error, self._refused = store, False, None, None
        self._attempted.set()
        if was_down:
            log.warning("index store %s answers again; queries are served", self.url)
        return True

    def _mark_down(self, store: Store | None, exc: BaseException) -> None:
        plain = isinstance(exc, (StoreUnavailableError, LayoutVersionError))
        detail = f"{exc}" if plain else f"{type(exc).__name__}: {exc}"
        detail = detail.splitlines()[0] if detail else type(exc).__name__
        with self._lock:
            if store is not None and store is not self._store:
                return  # an older store failed a call in flight; the current one may be fine
            first = not self._down
            self._down, self._error = True, detail
        if first:
            log.warning("index store unavailable, queries answer 503 until it answers again: %s", detail)

    def _current(self) -> Store:
        self._attempted.wait()  # a query arriving during start-up waits for the first attempt
        store, refused = self._store, self._refused
        if refused is not None:
            raise type(refused)(str(refused))
        if store is None or self._down:
            raise StoreUnavailableError(self._error or "the index store is not open")
        return store

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        store = self._current()
        try:
            return getattr(store, method)(*args, **kwargs)
        except StoreUnavailableError as exc:
            self._mark_down(store, exc)
            raise

    # -- the Store protocol ---------------------------------------------------------------

    @property
    def options(self) -> StoreOptions:  # type: ignore[override]
        store = self._store
        return store.options if store is not None else DEFAULT_OPTIONS

    @property
    def concurrent_reads(self) -> bool:  # type: ignore[override]
        store = self._store
        return bool(store is not None and store.concurrent_reads)

    @property
    def layout_version(self) -> int:  # type: ignore[override]
        """The open store's layout (only this release's is ever opened)."""
        return self._current().layout_version

    @property
    def salt_buckets(self) -> int:  # type: ignore[override]
        """The open store's recorded count; ``StoreUnavailableError`` while it is down."""
        return self._current().salt_buckets

    @property
    def max_writers(self) -> int:  # type: ignore[override]
        return self._current().max_writers

    @property
    def preferred_put_rows(self) -> int:  # type: ignore[override]
        return self._current().preferred_put_rows

    def put_rows(self, table: str, rows: Sequence[Row], *, ts: int | None = None) -> None:
        self._call("put_rows", table, rows, ts=ts)

    def get_row(self, table: str, row: bytes) -> Columns:
        return self._call("get_row", table, row)  # type: ignore[no-any-return]

    def get_rows(self, table: str, rows: Sequence[bytes]) -> list[Columns]:
        return self._call("get_rows", table, rows)  # type: ignore[no-any-return]

    def scan(
        self, table: str, start: bytes, stop: bytes, *, limit: int | None = None, reverse: bool = False
    ) -> Iterator[Row]:
        store = self._current()
        try:
            yield from store.scan(table, start, stop, limit=limit, reverse=reverse)
        except StoreUnavailableError as exc:
            self._mark_down(store, exc)
            raise

    def delete_rows(self, table: str, rows: Iterable[bytes]) -> None:
        self._call("delete_rows", table, rows)

    def purge_expired(self) -> int:
        return self._call("purge_expired")  # type: ignore[no-any-return]

    def get_meta(self, column: bytes) -> bytes | None:
        return self._call("get_meta", column)  # type: ignore[no-any-return]

    def put_meta(self, column: bytes, value: bytes) -> None:
        self._call("put_meta", column, value)

    def end_batch(self) -> bool:
        return self._call("end_batch")  # type: ignore[no-any-return]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            stores = [s for s in (self._store, *self._retired) if s is not None]
            self._store, self._retired = None, []
            self._down, self._error = True, "the collector is stopping"
        self._attempted.set()
        for store in stores:
            store.close()


async def keep_connected(link: StoreLink, retry_s: float, first_attempt: asyncio.Event | None = None) -> None:
    """Open ``link`` now, then reopen it every ``retry_s`` seconds while it is down (runs until cancelled)."""
    while True:
        if not link.available:
            await asyncio.to_thread(link.reconnect)
        if first_attempt is not None:
            first_attempt.set()
        await asyncio.sleep(retry_s)
