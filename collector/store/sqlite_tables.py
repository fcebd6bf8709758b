"""How the embedded store keeps one logical table in SQLite: its cells' columns, and the SQL on them.

Every table is a ``WITHOUT ROWID`` table keyed by ``(row, column)``, one SQLite row per cell, with
the cell's write time for its TTL.  A table keeps no more of a cell than can differ between its
cells (:class:`collector.store.schema.Table`'s ``qualifiers`` and ``values``), told apart by its
SQLite column names (:func:`found`):

============================================ ===============================================================
SQLite columns                               tables (as this release creates them)
============================================ ===============================================================
``row``, ``ts_s``                            the index tables: one empty ``i:`` cell a row, kept as the key alone
``row``, ``qualifier``, ``ts_s``             ``records``: values always empty
``row``, ``qualifier``, ``ts_s``, ``value``  ``rollups``, ``pending``, ``bodies``: one family, left out
``row``, ``col``, ``ts_s``, ``value``        ``messages`` (two families): the whole column name
``row``, ``col``, ``ts``, ``value``          layout 2's tables, kept by a store upgraded in place, and ``meta``
============================================ ===============================================================

``ts_s`` is the write time in whole seconds (4 bytes in SQLite's record; ``ts``, layout 2's
milliseconds, takes 6).  The SQL takes the family off on the way in (``substr``) and puts it back on
the way out (``CAST(x'633a' || qualifier AS BLOB)``; a key-only row answers its constant cell), so
callers and ``_sqlput`` see whole cells.  A cell a table cannot keep (a column of another family, a
value where values are empty, an index cell other than the empty ``i:``) is refused as HBase
refuses a put to a family a table lacks: SQLite's ``NOT NULL constraint failed``, nothing of the put
written.  ``messages`` keeps its column names whole: leaving out the ``:`` saved 1 byte per event
and cost about 1 µs per event in SQL (a concatenation per cell written and read).

TTL in seconds: a cell written at ``t`` ms keeps ``t // 1000`` and is live while that second is
not before the oldest live time, rounded up (:meth:`SqlTable.oldest`): it expires at most 999 ms
before its TTL is over, never after (a migrated copy never outlives its original).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from collector.store import schema

SECONDS_TS, MS_TS = "ts_s", "ts"
"""The column of a cell's write time: seconds (this release's tables) or milliseconds (layout 2's)."""
QUALIFIER, WHOLE = "qualifier", "col"
"""The column of a cell's column name: without the table's one family, or whole."""


@dataclass(frozen=True)
class SqlTable:
    """One table as SQLite holds it.  ``family`` (``b"i:"``) is what every stored column name leaves out,
    ``b""`` for a table that keeps them whole; ``qualifiers`` whether it keeps a qualifier (False: the
    only cell is ``family`` itself), ``values`` whether it keeps values (False: all empty);
    ``unit_ms`` its write times' unit (1000 or 1)."""

    name: str
    family: bytes
    qualifiers: bool
    values: bool
    unit_ms: int

    @property
    def ts_column(self) -> str:
        return SECONDS_TS if self.unit_ms == 1000 else MS_TS

    @property
    def column(self) -> str:
        """The SQLite column of the stored column name; "" when there is none (key-only)."""
        return (QUALIFIER if self.family else WHOLE) if self.qualifiers else ""

    @property
    def stored_column_sql(self) -> str:
        """The stored column name: what the primary key orders a row's cells by."""
        return self.column or "x''"

    @property
    def column_sql(self) -> str:
        """The whole column name, as a BLOB (``||`` answers TEXT)."""
        if not self.qualifiers:
            return f"x'{self.family.hex()}'"
        return f"CAST(x'{self.family.hex()}' || {QUALIFIER} AS BLOB)" if self.family else WHOLE

    @property
    def value_sql(self) -> str:
        return "value" if self.values else "x''"

    def create(self) -> str:
        columns = ["row BLOB NOT NULL", *([f"{self.column} BLOB NOT NULL"] if self.column else []),
                   f"{self.ts_column} INTEGER NOT NULL", *(["value BLOB NOT NULL"] if self.values else [])]
        key = f"row, {self.column}" if self.column else "row"
        return f'CREATE TABLE IF NOT EXISTS "{self.name}" ({", ".join(columns)}, PRIMARY KEY ({key})) WITHOUT ROWID'

    def stored_ts(self, ts_ms: int) -> int:
        """The write time a cell written at ``ts_ms`` keeps."""
        return ts_ms // self.unit_ms

    def oldest(self, oldest_ms: int) -> int:
        """The first stored write time still live when cells written before ``oldest_ms`` have expired."""
        return -(-oldest_ms // self.unit_ms)

    def stored_column(self, column: bytes) -> bytes | None:
        """``column`` as this table stores it; None for a column it cannot hold (never stored)."""
        if not column.startswith(self.family) or (not self.qualifiers and column != self.family):
            return None
        return column[len(self.family):]

    @functools.cached_property
    def upsert(self) -> str:
        """Parameters: row, column, stored write time, value (``_sqlput``'s order)."""
        name, ts, fam = self.name, self.ts_column, self.family
        # What the cell must be for this table to keep it (else a NULL, refused): plain comparisons,
        # cheaper than taking the family out of ?2 to compare it (measured).
        must = [f"?2 >= x'{fam.hex()}' AND ?2 < x'{_after(fam).hex()}'" if self.qualifiers else f"?2 = x'{fam.hex()}'"
                ] if fam else []
        must += [] if self.values else ["?4 = x''"]
        cols, given = ["row"], ["?1"]
        if self.column:
            cols.append(self.column)
            given.append(f"substr(?2, {len(fam) + 1})" if fam else "?2")
        cols.append(ts)
        given.append("?3")
        if self.values:
            cols.append("value")
            given.append("?4")
        if must:  # NULL, refused, unless the cell is one this table keeps: the stored column, or the write time
            given[1] = f"CASE WHEN {' AND '.join(must)} THEN {given[1]} END"
        update = f"{ts} = excluded.{ts}" + (", value = excluded.value" if self.values else "")
        return (f'INSERT INTO "{name}" ({", ".join(cols)}) VALUES ({", ".join(given)}) '
                f"ON CONFLICT ({', '.join(cols[:2] if self.column else cols[:1])}) DO UPDATE SET {update}")

    @functools.cached_property
    def select_row(self) -> str:
        """Parameters: row, oldest; answers (column, value)."""
        return f'SELECT {self.column_sql}, {self.value_sql} FROM "{self.name}" WHERE row = ? AND {self.ts_column} >= ?'

    def select_rows_in(self, n: int) -> str:
        """Parameters: ``n`` rows, oldest; answers (row, column, value)."""
        return (f'SELECT row, {self.column_sql}, {self.value_sql} FROM "{self.name}" '
                f'WHERE row IN ({",".join("?" * n)}) AND {self.ts_column} >= ?')

    def select_cells(self, n: int) -> str:
        """Parameters: row, ``n`` stored columns (:meth:`stored_column`), oldest; answers (column, value)."""
        return (f'SELECT {self.column_sql}, {self.value_sql} FROM "{self.name}" WHERE row = ? AND '
                f'{self.stored_column_sql} IN ({",".join("?" * n)}) AND {self.ts_column} >= ?')

    def scan(self, reverse: bool) -> str:
        """Parameters: start, stop, oldest, limit; answers (row, column, value) in key order (rows reversed)."""
        order = f"row {'DESC' if reverse else 'ASC'}" + (f", {self.column} ASC" if self.column else "")
        return (f'SELECT row, {self.column_sql}, {self.value_sql} FROM "{self.name}" '
                f"WHERE row >= ? AND row < ? AND {self.ts_column} >= ? ORDER BY {order} LIMIT ?")

    @functools.cached_property
    def delete_row(self) -> str:
        return f'DELETE FROM "{self.name}" WHERE row = ?'

    @functools.cached_property
    def purge(self) -> str:
        """Parameter: oldest."""
        return f'DELETE FROM "{self.name}" WHERE {self.ts_column} < ?'


def _after(prefix: bytes) -> bytes:
    """The least bytes above every bytes that start with ``prefix`` (a family: its last byte is ``:``)."""
    return prefix[:-1] + bytes((prefix[-1] + 1,))


def _family(table: schema.Table) -> bytes:
    return f"{table.families[0]}:".encode("ascii")


def lean(table: schema.Table) -> SqlTable:
    """How this release creates ``table``."""
    family = _family(table) if len(table.families) == 1 else b""
    return SqlTable(table.name, family, table.qualifiers or not family, table.values, 1000)


def found(table: schema.Table, columns: list[str]) -> SqlTable:
    """How an existing ``table`` with SQLite columns ``columns`` (``PRAGMA table_info``'s names) keeps its cells;
    a table not there yet (no columns) as :func:`lean` would create it."""
    if not columns:
        return lean(table)
    unit_ms = 1000 if SECONDS_TS in columns else 1
    family = b"" if WHOLE in columns else _family(table)
    return SqlTable(table.name, family, QUALIFIER in columns or WHOLE in columns, "value" in columns, unit_ms)


def table_columns(rows: list[tuple[object, ...]]) -> list[str]:
    """The column names in ``PRAGMA table_info``'s answer."""
    return [str(r[1]) for r in rows]


def whole_table(name: str) -> SqlTable:
    """Layout 2's shape (the ``meta`` table keeps it: one row, read by older releases too)."""
    return SqlTable(name, b"", True, True, 1)
