"""Fenced writes to a SQL table: an upsert that a stale holder cannot win.

Every row carries the fencing token of the holder that wrote it last.  An upsert
applies only when the stored token is not greater than the writer's::

    INSERT INTO t (id, value, fence_token) VALUES (...)
    ON CONFLICT (id) DO UPDATE SET value = excluded.value, fence_token = excluded.fence_token
    WHERE t.fence_token <= excluded.fence_token

so a paused holder that wakes up after its successor wrote a row (a higher
token) changes nothing there, however late its write arrives.  PostgreSQL
(psycopg 3) and SQLite (``sqlite3``, 3.24+) speak this upsert.

Table layout (the names are yours; these are the defaults of the examples)::

    CREATE TABLE totals (
        id          TEXT PRIMARY KEY,      -- FencedTable(key=("id",)): a unique key
        value       TEXT,                  -- FencedTable(columns=("value",))
        fence_token BIGINT NOT NULL        -- token_column: the last writer's token
    )

Rules:

1. ``key`` must be the primary key or a unique constraint (``ON CONFLICT``
   needs one); ``token_column`` an integer column (BIGINT: tokens are Kafka
   offsets).  :meth:`FencedTable.check` says which is missing, in one line,
   before the first write (:class:`SinkTableError`).
2. The comparison is per row: a stale holder still writes rows its successor
   has not written yet.  To fence a transaction as a whole, take the resource
   first with :func:`claim` (a row in ``workgroup_fences``,
   compared the same way, locked until the transaction ends): once a newer
   holder claimed it, the stale claim raises :class:`StaleTokenError` and
   nothing in that transaction is written.
3. Equal tokens apply (``<=``): a holder may rewrite its own rows, and a
   replayed write of the same holder is idempotent.
4. Identifiers are checked (letters, digits, ``_``; ``schema.table``) and
   quoted; values are always parameters.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from workgroup.errors import ConfigError, WorkgroupError

Dialect = Literal["postgresql", "sqlite"]

#: The table :meth:`FencedTable.claim` keeps each resource's highest token in.
FENCES_TABLE = "workgroup_fences"

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SinkTableError(ConfigError):
    """The table cannot take fenced writes: missing, no token column, no unique key."""


class StaleTokenError(WorkgroupError):
    """A newer holder already claimed the resource (rule 2): stop writing."""


class _Token(Protocol):
    @property
    def token(self) -> int: ...


Token = int | _Token


def _quote(name: str, what: str) -> str:
    parts = name.split(".")
    if len(parts) > 2 or not all(_IDENTIFIER.fullmatch(p) for p in parts):
        raise ConfigError(
            f"{what} {name!r} is not a plain SQL name (letters, digits and '_', "
            "optionally schema.table)"
        )
    return ".".join(f'"{p}"' for p in parts)


def dialect_of(conn: Any) -> Dialect:
    """``"sqlite"`` for a ``sqlite3`` connection, ``"postgresql"`` for psycopg's."""
    if isinstance(conn, sqlite3.Connection):
        return "sqlite"
    if type(conn).__module__.startswith("psycopg"):
        return "postgresql"
    raise ConfigError(
        f"unsupported connection {type(conn).__module__}.{type(conn).__name__}: "
        "use psycopg 3 (PostgreSQL) or sqlite3"
    )


def token_of(token: Token) -> int:
    value = token if isinstance(token, int) else getattr(token, "token", token)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"a fencing token is an int >= 1 (a lease's token), got {value!r}")
    return value


@dataclass
class FencedTable:
    """Token-compared upserts into ``table`` (see the module's rules)."""

    table: str
    key: Sequence[str]
    columns: Sequence[str]
    token_column: str = "fence_token"
    #: The connection last checked (rule 1 is checked once per connection).
    _checked: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.key:
            raise ConfigError("a fenced table needs at least one key column")
        names = [*self.key, *self.columns, self.token_column]
        if len(set(names)) != len(names):
            raise ConfigError(f"columns named twice in {names}")
        for name in names:
            _quote(name, "column")
        _quote(self.table, "table")

    # --- writing --------------------------------------------------------------------

    def upsert(self, conn: Any, row: Mapping[str, Any], token: Token) -> bool:
        """Insert or update ``row`` unless the stored token is greater than
        ``token`` (an int, or a lease or fence).  True if it was applied.
        Runs in the connection's current transaction (commit it yourself, or
        use autocommit)."""
        return self.upsert_many(conn, [row], token) == 1

    def upsert_many(self, conn: Any, rows: Iterable[Mapping[str, Any]], token: Token) -> int:
        """:meth:`upsert` for each row; how many were applied."""
        value = token_of(token)
        dialect = dialect_of(conn)
        self.check(conn)
        sql = self.upsert_sql(dialect)
        names = [*self.key, *self.columns]
        applied = 0
        cursor = conn.cursor()
        try:
            for row in rows:
                missing = [n for n in names if n not in row]
                if missing:
                    raise ConfigError(f"row for {self.table} has no {', '.join(missing)}")
                cursor.execute(sql, [*(row[n] for n in names), value])
                applied += max(cursor.rowcount, 0)
        finally:
            cursor.close()
        return applied

    def upsert_sql(self, dialect: Dialect) -> str:
        """The statement :meth:`upsert` runs (rule 1's comparison in its WHERE)."""
        table = _quote(self.table, "table")
        names = [*self.key, *self.columns, self.token_column]
        quoted = [_quote(n, "column") for n in names]
        mark = "?" if dialect == "sqlite" else "%s"
        updates = ", ".join(
            f"{q} = excluded.{q}" for q in quoted[len(self.key) :]
        )  # the value columns and the token
        token = _quote(self.token_column, "column")
        return (
            f"INSERT INTO {table} AS stored ({', '.join(quoted)}) "
            f"VALUES ({', '.join([mark] * len(quoted))}) "
            f"ON CONFLICT ({', '.join(quoted[: len(self.key)])}) DO UPDATE SET {updates} "
            f"WHERE stored.{token} <= excluded.{token}"
        )

    def create_sql(self, column_types: Mapping[str, str] | None = None) -> str:
        """A ``CREATE TABLE IF NOT EXISTS`` for the documented layout (TEXT columns
        unless ``column_types`` says otherwise)."""
        types = dict(column_types or {})
        columns = [
            f"{_quote(n, 'column')} {types.get(n, 'TEXT')}" for n in [*self.key, *self.columns]
        ]
        columns.append(f"{_quote(self.token_column, 'column')} BIGINT NOT NULL")
        key = ", ".join(_quote(n, "column") for n in self.key)
        return (
            f"CREATE TABLE IF NOT EXISTS {_quote(self.table, 'table')} "
            f"({', '.join(columns)}, PRIMARY KEY ({key}))"
        )

    # --- checking -------------------------------------------------------------------

    def check(self, conn: Any) -> None:
        """Rule 1: :class:`SinkTableError` unless the table has every column,
        an integer token column and a unique key over ``key`` (once per connection)."""
        if conn is self._checked:
            return
        dialect = dialect_of(conn)
        found = _columns(conn, dialect, self.table)
        if not found:
            raise SinkTableError(
                f"table {self.table!r} does not exist (see FencedTable.create_sql)"
            )
        token = found.get(self.token_column.lower())
        if token is None:
            raise SinkTableError(
                f"table {self.table!r} has no token column {self.token_column!r}: add it with "
                f"ALTER TABLE {self.table} ADD COLUMN {self.token_column} BIGINT NOT NULL DEFAULT 0"
            )
        if not any(word in token.lower() for word in ("int", "numeric")):
            raise SinkTableError(
                f"table {self.table!r}: token column {self.token_column!r} is {token}, "
                "not an integer type (use BIGINT)"
            )
        missing = [n for n in [*self.key, *self.columns] if n.lower() not in found]
        if missing:
            raise SinkTableError(f"table {self.table!r} has no column {', '.join(missing)}")
        if not _has_unique_key(conn, dialect, self.table, [k.lower() for k in self.key]):
            raise SinkTableError(
                f"table {self.table!r}: no primary key or unique constraint on exactly "
                f"({', '.join(self.key)}), which the upsert's ON CONFLICT needs"
            )
        self._checked = conn


#: The layout of :data:`FENCES_TABLE`: one row per resource, its highest token.
FENCES_TABLE_SQL = (
    f"CREATE TABLE IF NOT EXISTS {FENCES_TABLE} (resource TEXT PRIMARY KEY, token BIGINT NOT NULL)"
)


def create_fences_table(conn: Any) -> None:
    """Create :data:`FENCES_TABLE` if it is missing (once, before writers start:
    two sessions creating it at the same moment can collide on PostgreSQL)."""
    cursor = conn.cursor()
    try:
        cursor.execute(FENCES_TABLE_SQL)
    finally:
        cursor.close()


def claim(conn: Any, resource: str, token: Token) -> None:
    """Rule 2: record ``token`` as ``resource``'s in :data:`FENCES_TABLE`, in the
    connection's current transaction, or raise :class:`StaleTokenError` if a
    greater token is there.  Call it first in a transaction: the row stays
    locked until the transaction ends, so a newer holder's claim waits for it
    and then wins."""
    value = token_of(token)
    dialect = dialect_of(conn)
    if not _columns(conn, dialect, FENCES_TABLE):
        raise SinkTableError(
            f"table {FENCES_TABLE!r} does not exist: create it first "
            "(workgroup.sinks.sql.create_fences_table)"
        )
    mark = "?" if dialect == "sqlite" else "%s"
    cursor = conn.cursor()
    try:
        cursor.execute(
            f"INSERT INTO {FENCES_TABLE} AS claimed (resource, token) VALUES ({mark}, {mark}) "
            "ON CONFLICT (resource) DO UPDATE SET token = excluded.token "
            "WHERE claimed.token <= excluded.token",
            [resource, value],
        )
        if cursor.rowcount == 0:
            cursor.execute(f"SELECT token FROM {FENCES_TABLE} WHERE resource = {mark}", [resource])
            found = cursor.fetchone()
            raise StaleTokenError(
                f"resource {resource!r} was claimed with token {found[0] if found else '?'}, "
                f"greater than {value}: a newer holder writes it now"
            )
    finally:
        cursor.close()


def _columns(conn: Any, dialect: Dialect, table: str) -> dict[str, str]:
    """Column name (lower case) -> declared type; empty if the table is missing."""
    cursor = conn.cursor()
    try:
        if dialect == "sqlite":
            cursor.execute(f"PRAGMA table_info({_quote(table, 'table')})")
            return {str(row[1]).lower(): str(row[2]) for row in cursor.fetchall()}
        schema, _, name = table.rpartition(".")
        cursor.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = %s AND table_schema = COALESCE(NULLIF(%s, ''), current_schema())",
            [name, schema],
        )
        return {str(row[0]).lower(): str(row[1]) for row in cursor.fetchall()}
    finally:
        cursor.close()


def _has_unique_key(conn: Any, dialect: Dialect, table: str, key: list[str]) -> bool:
    cursor = conn.cursor()
    try:
        wanted = sorted(key)
        if dialect == "sqlite":
            quoted = _quote(table, "table")
            cursor.execute(f"PRAGMA table_info({quoted})")
            primary = sorted(str(r[1]).lower() for r in cursor.fetchall() if r[5])
            if primary == wanted:
                return True
            cursor.execute(f"PRAGMA index_list({quoted})")
            for index in cursor.fetchall():
                if index[2]:  # unique
                    cursor.execute(f'PRAGMA index_info("{index[1]}")')
                    if sorted(str(r[2]).lower() for r in cursor.fetchall()) == wanted:
                        return True
            return False
        schema, _, name = table.rpartition(".")
        cursor.execute(
            "SELECT array_agg(lower(a.attname)::text ORDER BY a.attname) "
            "FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY(i.indkey) "
            "WHERE c.relname = %s AND n.nspname = COALESCE(NULLIF(%s, ''), current_schema()) "
            "AND i.indisunique GROUP BY i.indexrelid",
            [name, schema],
        )
        return any(sorted(row[0]) == wanted for row in cursor.fetchall())
    finally:
        cursor.close()


__all__ = [
    "FENCES_TABLE",
    "FENCES_TABLE_SQL",
    "Dialect",
    "FencedTable",
    "SinkTableError",
    "StaleTokenError",
    "claim",
    "create_fences_table",
    "dialect_of",
    "token_of",
]
