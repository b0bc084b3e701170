"""The SQLite store: round trips, deletes, one owner per directory, errors as StoreError."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from workgroup.coordinator.actions import StoredGroup, StoredMember, StoredOffset
from workgroup.coordinator.store import DATABASE_NAME, Store, data_dir_problem
from workgroup.errors import StoreError


def member(member_id: str, instance: str | None = None) -> StoredMember:
    return StoredMember(
        member_id=member_id,
        group_instance_id=instance,
        client_id="client",
        client_host="/127.0.0.1",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=30_000,
        protocols=(("range", b"\x00\x01\xff"), ("roundrobin", b"")),
        assignment=b"\x00assignment\xff",
    )


GROUP = StoredGroup("g", 7, "consumer", "range", "m-1", (member("m-1", "i-1"), member("m-2")))


def offset(partition: int, value: int, group: str = "g") -> StoredOffset:
    return StoredOffset(group, "t", partition, value, f"meta-{value}", 3, 1_700_000_000_000)


def test_round_trip_survives_reopening(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        store.write([GROUP], [offset(0, 10), offset(1, 11)])
        store.write([], [offset(0, 12)])
    with Store(tmp_path) as store:
        groups, offsets = store.load()
    assert groups == [GROUP]
    assert offsets == [offset(0, 12), offset(1, 11)]


def test_empty_group_and_null_fields(tmp_path: Path) -> None:
    empty = StoredGroup("e", 3, None, None, None, ())
    with Store(tmp_path) as store:
        store.write([empty], [StoredOffset("e", "t", 0, 5, None, -1, 0)])
        assert store.load() == ([empty], [StoredOffset("e", "t", 0, 5, None, -1, 0)])


def test_deleted_group_takes_its_offsets(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        store.write(
            [GROUP, StoredGroup("h", 1, None, None, None, ())], [offset(0, 1), offset(0, 2, "h")]
        )
        store.write([StoredGroup("g", 7, None, None, None, (), deleted=True)], [])
        groups, offsets = store.load()
    assert [g.group_id for g in groups] == ["h"]
    assert offsets == [offset(0, 2, "h")]


def test_deleted_offset(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        store.write([], [offset(0, 1), offset(1, 1)])
        gone = StoredOffset("g", "t", 0, 0, None, -1, 0, deleted=True)
        store.write([], [gone])
        assert store.load()[1] == [offset(1, 1)]


def test_a_failed_batch_writes_nothing(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        store.write([], [offset(0, 1)])
        bad = StoredOffset("g", "t", 1, 2**70, None, -1, 0)  # does not fit SQLite's integer
        with pytest.raises(StoreError):
            store.write([], [offset(0, 99), bad])
        assert store.load()[1] == [offset(0, 1)]


def test_uses_wal_with_full_sync(tmp_path: Path) -> None:
    with Store(tmp_path):
        db = sqlite3.connect(tmp_path / DATABASE_NAME)
        try:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        finally:
            db.close()


def test_second_owner_is_refused(tmp_path: Path) -> None:
    with Store(tmp_path), pytest.raises(StoreError, match="in use by another coordinator"):
        Store(tmp_path)
    with Store(tmp_path):  # released on close
        pass


def test_corrupt_database_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / DATABASE_NAME).write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="cannot open the database"):
        Store(tmp_path)


def test_corrupt_member_document_is_a_store_error(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        store.write([GROUP], [])
    db = sqlite3.connect(tmp_path / DATABASE_NAME)
    with db:
        db.execute("UPDATE groups SET members = '[{\"nope\": 1}]'")
    db.close()
    with Store(tmp_path) as store, pytest.raises(StoreError, match="corrupt"):
        store.load()


def test_data_dir_problems(tmp_path: Path) -> None:
    assert data_dir_problem(tmp_path) is None
    assert data_dir_problem(tmp_path / "new" / "dir") is None
    file = tmp_path / "file"
    file.write_text("x")
    assert data_dir_problem(file) == f"{file} is not a directory"
    assert data_dir_problem(file / "below") == f"{file} is not a directory"
