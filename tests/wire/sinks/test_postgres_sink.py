"""The token-comparing SQL sink against a real PostgreSQL server: the upsert's
rule, concurrent writers, whole-transaction claims, tables it cannot write, and a
zombie holder (frozen past its session with SIGSTOP) whose late, lower-token
writes change nothing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.wire.member.backends import Backend, run_backend
from workgroup.sinks.sql import (
    FencedTable,
    SinkTableError,
    StaleTokenError,
    claim,
    create_fences_table,
)
from workgroup.testing.servers import PostgresServer

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (it is in .[dev])")

ROOT = Path(__file__).resolve().parents[3]
TIMEOUT_S = 40


def new_table(postgres: PostgresServer, ddl: str | None = None) -> tuple[str, FencedTable]:
    name = f"totals_{uuid.uuid4().hex[:8]}"
    table = FencedTable(name, key=("id",), columns=("value",))
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute(ddl.format(name=name) if ddl else table.create_sql())
    return name, table


def rows(postgres: PostgresServer, name: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(postgres.dsn) as conn:
        return list(conn.execute(f"SELECT id, value, fence_token FROM {name} ORDER BY id"))


def test_a_lower_token_changes_nothing(postgres: PostgresServer) -> None:
    name, table = new_table(postgres)
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        assert table.upsert(conn, {"id": "a", "value": "holder 2"}, 2)
        assert not table.upsert(conn, {"id": "a", "value": "zombie 1"}, 1)
        assert table.upsert(conn, {"id": "a", "value": "holder 2 again"}, 2)
        assert (
            table.upsert_many(conn, [{"id": "a", "value": "z"}, {"id": "b", "value": "z"}], 1) == 1
        )
    assert rows(postgres, name) == [("a", "holder 2 again", 2), ("b", "z", 1)]


def test_concurrent_writers_end_with_the_higher_tokens_rows(postgres: PostgresServer) -> None:
    name, table = new_table(postgres)
    stop = time.monotonic() + 2.0
    applied: dict[int, int] = {}

    def write(token: int) -> None:
        with psycopg.connect(postgres.dsn, autocommit=True) as conn:
            n = 0
            while time.monotonic() < stop:
                n += 1
                rows_ = [{"id": key, "value": f"{token}:{n}"} for key in "abc"]
                applied[token] = applied.get(token, 0) + table.upsert_many(conn, rows_, token)

    writers = [threading.Thread(target=write, args=(token,)) for token in (1, 2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    final = rows(postgres, name)
    assert [row[2] for row in final] == [2, 2, 2]
    assert all(str(row[1]).startswith("2:") for row in final)
    assert applied[2] > 0


def test_a_claim_fences_a_transaction_and_waits_for_the_holder(postgres: PostgresServer) -> None:
    name, table = new_table(postgres)
    with psycopg.connect(postgres.dsn, autocommit=True) as setup:
        create_fences_table(setup)
    resource = f"orders-{uuid.uuid4().hex[:6]}"
    with psycopg.connect(postgres.dsn) as old, psycopg.connect(postgres.dsn) as new:
        claim(old, resource, 2)  # the old holder's transaction is open
        table.upsert(old, {"id": "a", "value": "old holder"}, 2)
        claimed = threading.Event()

        def newer() -> None:
            claim(new, resource, 3)  # waits for the old transaction's row lock
            claimed.set()
            table.upsert(new, {"id": "a", "value": "new holder"}, 3)
            new.commit()

        thread = threading.Thread(target=newer)
        thread.start()
        assert not claimed.wait(0.5)  # blocked behind the old holder's claim
        old.commit()
        thread.join(TIMEOUT_S)
        assert claimed.is_set()
        # The old holder's next transaction is refused as a whole.
        with pytest.raises(StaleTokenError, match="greater than 2"):
            claim(old, resource, 2)
        old.rollback()
    assert rows(postgres, name) == [("a", "new holder", 3)]


@pytest.mark.parametrize(
    ("ddl", "expected"),
    [
        ("CREATE TABLE {name} (id TEXT PRIMARY KEY, value TEXT)", "no token column"),
        ("CREATE TABLE {name} (id TEXT, value TEXT, fence_token BIGINT)", "no primary key"),
        ("CREATE TABLE {name} (id TEXT PRIMARY KEY, value TEXT, fence_token TEXT)", "not an int"),
    ],
)
def test_a_table_it_cannot_write_is_a_one_line_error(
    postgres: PostgresServer, ddl: str, expected: str
) -> None:
    name, table = new_table(postgres, ddl)
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        with pytest.raises(SinkTableError, match=expected) as caught:
            table.upsert(conn, {"id": "a", "value": "x"}, 1)
        assert "\n" not in str(caught.value)
        missing = FencedTable("no_such_table", key=("id",), columns=("value",))
        with pytest.raises(SinkTableError, match="does not exist"):
            missing.upsert(conn, {"id": "a", "value": "x"}, 1)
        assert conn.execute(f"SELECT count(*) FROM {name}").fetchone() == (0,)


def test_a_schema_qualified_table(postgres: PostgresServer) -> None:
    schema = f"s_{uuid.uuid4().hex[:6]}"
    table = FencedTable(f"{schema}.totals", key=("id",), columns=("value",))
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(table.create_sql())
        assert table.upsert(conn, {"id": "a", "value": "x"}, 4)
        assert not table.upsert(conn, {"id": "a", "value": "y"}, 3)


# --- a zombie holder ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def coordinator() -> Iterator[Backend]:
    with run_backend("embedded") as backend:
        yield backend


class Holder:
    """A daemon process (tests/wire/runtime/fence_holder.py) writing rows with its token."""

    def __init__(self, backend: Backend, group: str, out: Path, dsn: str, table: str) -> None:
        self.out = out
        out.mkdir()
        self.log = (out / "holder.log").open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.wire.runtime.fence_holder",
                backend.bootstrap,
                group,
                str(out),
                dsn,
                table,
            ],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=self.log,
            stderr=self.log,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def writes(self) -> list[dict[str, Any]]:
        path = self.out / f"writes-{self.pid}.jsonl"
        if not path.exists():
            return []
        lines = path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.endswith("}")]

    def wait_writes(self, at_least: int, *, since: float = 0.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            recent = [w for w in self.writes() if w["time"] > since]
            if len(recent) >= at_least:
                return recent
            assert self.process.poll() is None, (self.out / "holder.log").read_text()[-3000:]
            assert time.monotonic() < deadline, f"{len(recent)} writes after {TIMEOUT_S} s"
            time.sleep(0.05)

    def close(self) -> None:
        if self.process.poll() is None:
            os.kill(self.pid, signal.SIGCONT)
            self.process.kill()
        self.process.wait()
        self.log.close()


def test_a_frozen_holders_late_lower_token_writes_change_nothing(
    postgres: PostgresServer, coordinator: Backend, tmp_path: Path
) -> None:
    name, table = new_table(postgres)
    group = f"zombie-{uuid.uuid4().hex[:8]}"
    first = Holder(coordinator, group, tmp_path / "first", postgres.dsn, name)
    second: Holder | None = None
    try:
        first_writes = first.wait_writes(6)
        old_token = first_writes[0]["token"]
        assert all(w["applied"] for w in first_writes)
        os.kill(first.pid, signal.SIGSTOP)  # frozen mid-loop, past its session
        second = Holder(coordinator, group, tmp_path / "second", postgres.dsn, name)
        second_writes = second.wait_writes(6)
        new_token = second_writes[0]["token"]
        assert new_token == old_token + 1
        assert all(w["applied"] for w in second_writes)

        # The zombie wakes up and goes on writing with its old token.
        resumed_at = time.time()
        os.kill(first.pid, signal.SIGCONT)
        late = first.wait_writes(3, since=resumed_at)
        assert {w["token"] for w in late} == {old_token}
        assert not any(w["applied"] for w in late), late
        # The same holds for a write made here with the old token.
        with psycopg.connect(postgres.dsn, autocommit=True) as conn:
            assert not table.upsert(conn, {"id": "a", "value": "stale"}, old_token)
        final = rows(postgres, name)
        assert [row[2] for row in final] == [new_token] * 3
        assert all(str(row[1]).startswith(f"{second.pid}:") for row in final)
    finally:
        first.close()
        if second is not None:
            second.close()
