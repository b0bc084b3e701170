"""The token-comparing SQL sink on SQLite: the upsert's rule, whole-transaction
claims, and a clear error for every table it cannot write."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workgroup.errors import ConfigError
from workgroup.sinks.sql import (
    FencedTable,
    SinkTableError,
    StaleTokenError,
    claim,
    create_fences_table,
    dialect_of,
)

TOTALS = FencedTable("totals", key=("id",), columns=("value",))


def connect() -> sqlite3.Connection:
    return sqlite3.connect(":memory:", isolation_level=None)


@pytest.fixture
def conn() -> Iterator[sqlite3.Connection]:
    db = connect()
    db.execute(TOTALS.create_sql())
    yield db
    db.close()


def rows(db: sqlite3.Connection, table: str = "totals") -> list[tuple[object, ...]]:
    return list(db.execute(f"SELECT * FROM {table} ORDER BY 1"))


def test_a_lower_token_changes_nothing_an_equal_or_higher_one_applies(
    conn: sqlite3.Connection,
) -> None:
    assert TOTALS.upsert(conn, {"id": "a", "value": "first"}, 2)
    assert not TOTALS.upsert(conn, {"id": "a", "value": "stale"}, 1)
    assert rows(conn) == [("a", "first", 2)]
    assert TOTALS.upsert(conn, {"id": "a", "value": "same holder again"}, 2)
    assert TOTALS.upsert(conn, {"id": "a", "value": "next holder"}, 3)
    assert not TOTALS.upsert(conn, {"id": "a", "value": "old holder"}, 2)
    assert rows(conn) == [("a", "next holder", 3)]


def test_the_comparison_is_per_row(conn: sqlite3.Connection) -> None:
    TOTALS.upsert(conn, {"id": "a", "value": "new"}, 5)
    written = TOTALS.upsert_many(
        conn, [{"id": "a", "value": "old"}, {"id": "b", "value": "old"}], 4
    )
    assert written == 1  # row b had no newer writer yet
    assert rows(conn) == [("a", "new", 5), ("b", "old", 4)]


def test_a_lease_or_fence_gives_its_token(conn: sqlite3.Connection) -> None:
    @dataclass
    class Holder:
        token: int

    assert TOTALS.upsert(conn, {"id": "a", "value": "x"}, Holder(7))
    assert rows(conn) == [("a", "x", 7)]


@given(st.lists(st.tuples(st.integers(1, 5), st.integers(0, 1000)), min_size=1, max_size=30))
def test_the_row_ends_with_the_last_write_of_the_highest_token(
    writes: list[tuple[int, int]],
) -> None:
    db = connect()
    db.execute(TOTALS.create_sql({"value": "INTEGER"}))
    applied = [TOTALS.upsert(db, {"id": "k", "value": value}, token) for token, value in writes]
    top = max(token for token, _ in writes)
    last_top = [value for token, value in writes if token == top][-1]
    assert rows(db) == [("k", last_top, top)]
    # A write applies exactly when no greater token was written before it.
    for index, (token, _) in enumerate(writes):
        assert applied[index] == all(earlier <= token for earlier, _ in writes[:index])
    db.close()


def test_a_claim_fences_a_whole_transaction(conn: sqlite3.Connection) -> None:
    create_fences_table(conn)
    conn.execute("BEGIN")
    claim(conn, "orders", 3)
    TOTALS.upsert(conn, {"id": "a", "value": "holder 3"}, 3)
    conn.execute("COMMIT")
    conn.execute("BEGIN")
    with pytest.raises(StaleTokenError, match=r"claimed with token 3, greater than 2"):
        claim(conn, "orders", 2)
    conn.execute("ROLLBACK")
    claim(conn, "orders", 3)  # the same holder again
    claim(conn, "other", 1)  # resources are apart
    assert rows(conn, "workgroup_fences") == [("orders", 3), ("other", 1)]


# --- bad input -------------------------------------------------------------------------------


def one_line(exc: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_a_table_without_the_token_column_is_refused_with_the_fix() -> None:
    db = connect()
    db.execute("CREATE TABLE totals (id TEXT PRIMARY KEY, value TEXT)")
    with pytest.raises(SinkTableError) as caught:
        TOTALS.upsert(db, {"id": "a", "value": "x"}, 1)
    assert "no token column 'fence_token'" in one_line(caught)
    assert "ALTER TABLE totals ADD COLUMN fence_token BIGINT" in str(caught.value)
    assert rows(db) == []


@pytest.mark.parametrize(
    ("ddl", "expected"),
    [
        (None, "does not exist"),
        ("CREATE TABLE totals (id TEXT, value TEXT, fence_token BIGINT)", "no primary key"),
        ("CREATE TABLE totals (id TEXT PRIMARY KEY, value TEXT, fence_token TEXT)", "not an int"),
        ("CREATE TABLE totals (id TEXT PRIMARY KEY, fence_token BIGINT)", "no column value"),
    ],
)
def test_tables_the_upsert_cannot_use_are_refused(ddl: str | None, expected: str) -> None:
    db = connect()
    if ddl:
        db.execute(ddl)
    with pytest.raises(SinkTableError) as caught:
        TOTALS.upsert(db, {"id": "a", "value": "x"}, 1)
    assert expected in one_line(caught)


def test_a_unique_index_serves_as_the_key() -> None:
    db = connect()
    db.execute("CREATE TABLE totals (id TEXT, value TEXT, fence_token BIGINT NOT NULL)")
    db.execute("CREATE UNIQUE INDEX totals_id ON totals (id)")
    assert TOTALS.upsert(db, {"id": "a", "value": "x"}, 1)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: FencedTable("totals; DROP TABLE x", key=("id",), columns=()), "plain SQL name"),
        (lambda: FencedTable("totals", key=('id"',), columns=()), "plain SQL name"),
        (lambda: FencedTable("totals", key=(), columns=("v",)), "at least one key"),
        (lambda: FencedTable("totals", key=("id",), columns=("id",)), "named twice"),
    ],
)
def test_bad_declarations_are_refused(make: object, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        make()  # type: ignore[operator]


@pytest.mark.parametrize("token", [0, -1, True, "3", 1.5])
def test_a_token_is_a_positive_int(conn: sqlite3.Connection, token: object) -> None:
    with pytest.raises(ConfigError, match="fencing token"):
        TOTALS.upsert(conn, {"id": "a", "value": "x"}, token)  # type: ignore[arg-type]


def test_a_row_without_a_column_and_an_unknown_connection_are_refused(
    conn: sqlite3.Connection,
) -> None:
    with pytest.raises(ConfigError, match="has no value"):
        TOTALS.upsert(conn, {"id": "a"}, 1)
    with pytest.raises(ConfigError, match=r"psycopg 3 \(PostgreSQL\) or sqlite3"):
        dialect_of(object())


def test_a_claim_without_the_fences_table_says_how_to_make_it(conn: sqlite3.Connection) -> None:
    with pytest.raises(SinkTableError, match="create_fences_table"):
        claim(conn, "orders", 1)
