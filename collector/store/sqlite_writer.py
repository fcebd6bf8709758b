"""The write connection of the embedded store (:class:`collector.store.local.LocalStore`).

With ``collector/store/_sqlput.c`` built it is a ``_sqlput.Connection``, which opens the file itself; without
it, :class:`PyWriter` gives the same calls on Python's sqlite3.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from collector.store.base import Row


class Writer(Protocol):
    """What :class:`collector.store.local.LocalStore` writes through: ``_sqlput.Connection``, or :class:`PyWriter`."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def executemany(self, sql: str, many: Iterable[Sequence[Any]]) -> int: ...

    def upsert(self, sql: str, rows: list[Row], ts: int, sort: bool) -> bool: ...

    def close(self) -> None: ...


class PyWriter:
    """The write connection on Python's sqlite3 (``_sqlput`` not built or turned off): the calls of
    ``_sqlput.Connection``, with :meth:`upsert` always declining (``executemany`` then writes the put)."""

    def __init__(self, path: str, busy_timeout_s: float) -> None:
        self._db = sqlite3.connect(path, timeout=busy_timeout_s, check_same_thread=False, isolation_level=None)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._db.execute(sql, params).fetchall()

    def executemany(self, sql: str, many: Iterable[Sequence[Any]]) -> int:
        return self._db.executemany(sql, many).rowcount

    def upsert(self, sql: str, rows: list[Row], ts: int, sort: bool) -> bool:
        return False

    @property
    def in_transaction(self) -> bool:
        return self._db.in_transaction

    def close(self) -> None:
        self._db.close()
