"""How the embedded store keeps one logical table in SQLite: its cells' columns, and the SQL on them.

Every table is a ``WITHOUT ROWID`` table keyed by ``(row, column)``, one SQLite row per cell, with
the cell's write time for its TTL.  What a stored cell keeps depends on the table (its shape, told
apart by its SQLite column names, :func:`found`):

========================= =========================================== ====================================
shape                     SQLite columns                              tables (as this release creates them)
========================= =========================================== ====================================
:data:`KEY_ONLY`          ``row``, ``ts_s``                           the index tables (``schema.Table.key_only``:
                                                                      one empty ``i:`` cell a row)
:data:`QUALIFIER`         ``row``, ``qualifier``, ``ts_s``, ``value`` the other tables of one family: the
                                                                      column without its family and ``:``
:data:`FAMILY_QUALIFIER`  ``row``, ``family_qualifier``, ``ts_s``,    ``messages``: the column without its ``:``
                          ``value``
:data:`WHOLE`             ``row``, ``col``, ``ts``, ``value``         layout 2's tables, kept by a store upgraded
                                                                      in place (and ``meta``)
========================= =========================================== ====================================

``ts_s`` is the write time in whole seconds (4 bytes in SQLite's record; ``ts``, layout 2's
milliseconds, takes 6).  Together 2-6 bytes less per cell than layout 2's shape.  The SQL takes
the family off on the way in and puts it back on the way out (``CAST(x'733a' || qualifier AS
BLOB)``; a key-only row answers the constant cell), so callers and ``_sqlput`` see whole columns.
A cell a table's shape cannot keep (a column of another family, a key-only table's cell other
than ``i:`` = empty) is refused as HBase refuses a put to an unknown family: SQLite's ``NOT NULL
constraint failed``, nothing of the put written.

TTL in seconds: a cell written at ``t`` ms keeps ``t // 1000`` and is live while that second is
not before the oldest live time, rounded up (:meth:`SqlTable.oldest`): it expires at most 999 ms
before its TTL is over, never after (a migrated copy never outlives its original).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from collector.store import schema

KEY_ONLY, QUALIFIER, FAMILY_QUALIFIER, WHOLE = "", "qualifier", "family_qualifier", "col"
"""The shapes, by the SQLite column that keeps a cell's column name (none: the row is the cell)."""
SECONDS_TS, MS_TS = "ts_s", "ts"
"""The column of a cell's write time: seconds (this release's tables) or milliseconds (layout 2's)."""


@dataclass(frozen=True)
class SqlTable:
    """One table as SQLite holds it: ``column`` its shape (:data:`KEY_ONLY`, :data:`QUALIFIER`,
    :data:`FAMILY_QUALIFIER` or :data:`WHOLE`), ``family`` the ``b"i:"`` its stored columns leave
    out (:data:`KEY_ONLY`, :data:`QUALIFIER`), ``unit_ms`` its write times' unit (1000 or 1)."""

    name: str
    column: str
    family: bytes
    unit_ms: int

    @property
    def ts_column(self) -> str:
        return SECONDS_TS if self.unit_ms == 1000 else MS_TS

    @property
    def stored_column_sql(self) -> str:
        """The stored column name: what the primary key orders a row's cells by."""
        return self.column or "x''"

    @property
    def column_sql(self) -> str:
        """The whole column name, as a BLOB (``||`` answers TEXT)."""
        c, family = self.column, self.family.hex()
        if c == KEY_ONLY:
            return f"x'{family}'"
        if c == QUALIFIER:
            return f"CAST(x'{family}' || {c} AS BLOB)"
        if c == FAMILY_QUALIFIER:
            return f"CAST(substr({c}, 1, 1) || x'3a' || substr({c}, 2) AS BLOB)"
        return c

    @property
    def value_sql(self) -> str:
        return "x''" if self.column == KEY_ONLY else "value"

    def create(self) -> str:
        ts = f"{self.ts_column} INTEGER NOT NULL"
        if self.column == KEY_ONLY:
            return f'CREATE TABLE IF NOT EXISTS "{self.name}" (row BLOB NOT NULL PRIMARY KEY, {ts}) WITHOUT ROWID'
        return (f'CREATE TABLE IF NOT EXISTS "{self.name}" (row BLOB NOT NULL, {self.column} BLOB NOT NULL, {ts}, '
                f"value BLOB NOT NULL, PRIMARY KEY (row, {self.column})) WITHOUT ROWID")

    def stored_ts(self, ts_ms: int) -> int:
        """The write time a cell written at ``ts_ms`` keeps."""
        return ts_ms // self.unit_ms

    def oldest(self, oldest_ms: int) -> int:
        """The first stored write time still live when cells written before ``oldest_ms`` have expired."""
        return -(-oldest_ms // self.unit_ms)

    def stored_column(self, column: bytes) -> bytes | None:
        """``column`` as this table stores it; None for a column it cannot hold (never stored)."""
        c = self.column
        if c == KEY_ONLY or c == QUALIFIER:
            if not column.startswith(self.family) or (c == KEY_ONLY and column != self.family):
                return None
            return column[len(self.family):]
        if c == FAMILY_QUALIFIER:
            return column[:1] + column[2:] if column[1:2] == b":" else None
        return column

    @functools.cached_property
    def upsert(self) -> str:
        """Parameters: row, column, stored write time, value (``_sqlput``'s order)."""
        name, ts, family, n = self.name, self.ts_column, self.family.hex(), len(self.family)
        if self.column == KEY_ONLY:  # NULL, refused, for any other cell
            return (f"INSERT INTO \"{name}\" (row, {ts}) VALUES (?1, CASE WHEN ?2 = x'{family}' AND ?4 = x'' THEN ?3 END) "
                    f"ON CONFLICT (row) DO UPDATE SET {ts} = excluded.{ts}")
        if self.column == QUALIFIER:
            col = f"CASE WHEN substr(?2, 1, {n}) = x'{family}' THEN substr(?2, {n + 1}) END"
        elif self.column == FAMILY_QUALIFIER:
            col = "CASE WHEN substr(?2, 2, 1) = x'3a' THEN CAST(substr(?2, 1, 1) || substr(?2, 3) AS BLOB) END"
        else:
            col = "?2"
        return (f'INSERT INTO "{name}" (row, {self.column}, {ts}, value) VALUES (?1, {col}, ?3, ?4) '
                f"ON CONFLICT (row, {self.column}) DO UPDATE SET {ts} = excluded.{ts}, value = excluded.value")

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


def _family(table: schema.Table) -> bytes:
    return f"{table.families[0]}:".encode("ascii")


def lean(table: schema.Table) -> SqlTable:
    """How this release creates ``table``."""
    if table.key_only:
        return SqlTable(table.name, KEY_ONLY, schema.INDEX_COLUMN, 1000)
    if len(table.families) == 1:
        return SqlTable(table.name, QUALIFIER, _family(table), 1000)
    if all(len(f) == 1 for f in table.families):
        return SqlTable(table.name, FAMILY_QUALIFIER, b"", 1000)
    return SqlTable(table.name, WHOLE, b"", 1000)


def found(table: schema.Table, columns: list[str]) -> SqlTable:
    """How an existing ``table`` with SQLite columns ``columns`` (``PRAGMA table_info``'s names) keeps its cells;
    a table not there yet (no columns) as :func:`lean` would create it."""
    if not columns:
        return lean(table)
    unit_ms = 1000 if SECONDS_TS in columns else 1
    if columns == ["row", SECONDS_TS]:
        return SqlTable(table.name, KEY_ONLY, schema.INDEX_COLUMN, unit_ms)
    if QUALIFIER in columns:
        return SqlTable(table.name, QUALIFIER, _family(table), unit_ms)
    return SqlTable(table.name, FAMILY_QUALIFIER if FAMILY_QUALIFIER in columns else WHOLE, b"", unit_ms)


def table_columns(rows: list[tuple[object, ...]]) -> list[str]:
    """The column names in ``PRAGMA table_info``'s answer."""
    return [str(r[1]) for r in rows]


def whole_table(name: str) -> SqlTable:
    """Layout 2's shape (the ``meta`` table keeps it: one row, read by older releases too)."""
    return SqlTable(name, WHOLE, b"", 1)
