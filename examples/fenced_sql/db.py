"""The example's database: SQLite (a file, the default) or PostgreSQL (a DSN).

    FENCED_SQL_DSN=postgresql://user@127.0.0.1:5432/postgres   # PostgreSQL (psycopg 3)
    FENCED_SQL_DB=/tmp/fenced.db                               # SQLite (default path below)

Table layout (``COUNTERS``; ``workgroup.sinks.sql`` documents the rule)::

    CREATE TABLE counters (
        id          TEXT PRIMARY KEY,   -- the account
        value       BIGINT,             -- its counter
        fence_token BIGINT NOT NULL     -- the token of the holder that wrote it last
    )

plus ``workgroup_fences`` (one row per account: the highest token that claimed it).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from workgroup.sinks.sql import FencedTable, create_fences_table

COUNTERS = FencedTable("counters", key=("id",), columns=("value",))
DB = Path(os.environ.get("FENCED_SQL_DB", "demo-output/fenced-sql.db")).resolve()
#: Every step a writer applied, as JSON lines (``check.py`` counts them).
LOG = Path(os.environ.get("FENCED_SQL_LOG", "demo-output/fenced-sql.jsonl")).resolve()


def connect() -> Any:
    """A connection outside any transaction (each write opens its own)."""
    dsn = os.environ.get("FENCED_SQL_DSN")
    if dsn:
        import psycopg

        return psycopg.connect(dsn, autocommit=True)
    DB.parent.mkdir(parents=True, exist_ok=True)
    # Several processes write one file: wait for the lock rather than fail.
    return sqlite3.connect(DB, timeout=60, isolation_level=None)


def create_tables(conn: Any) -> None:
    conn.execute(COUNTERS.create_sql({"value": "BIGINT"}))
    create_fences_table(conn)


def read_counter(conn: Any, account: str) -> int:
    mark = "?" if isinstance(conn, sqlite3.Connection) else "%s"
    row = conn.execute(f"SELECT value FROM counters WHERE id = {mark}", [account]).fetchone()
    return int(row[0]) if row else 0


def begin(conn: Any) -> None:
    """Start a write transaction (SQLite: take the write lock now, not at the
    first write, so that two writers never deadlock upgrading their locks)."""
    conn.execute("BEGIN IMMEDIATE" if isinstance(conn, sqlite3.Connection) else "BEGIN")
