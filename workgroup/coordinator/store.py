"""Durable state of the embedded coordinator: groups and committed offsets in SQLite.

The core emits :class:`~workgroup.coordinator.actions.Persist` actions; the
server writes each batch of them here in one transaction *before* it sends the
replies that follow them, so an acknowledged commit or generation is on disk.

* SQLite in WAL mode with ``synchronous=FULL``: a committed transaction
  survives a SIGKILL of the process and a power loss.
* One row per group (the last stable state; members as a JSON document with
  base64 for the opaque bytes) and one row per committed offset.
* A deleted group removes its row and all its offsets.  An offset record with
  ``deleted=True`` removes that offset.
* A lock file keeps a second coordinator off the same directory.
* Every sqlite3 error is raised as :class:`~workgroup.errors.StoreError`.

Methods are blocking; the server calls them from one worker thread at a time.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from workgroup.coordinator.actions import StoredGroup, StoredMember, StoredOffset
from workgroup.errors import StoreError

DATABASE_NAME = "coordinator.sqlite3"
LOCK_NAME = "coordinator.lock"
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS groups (
    group_id TEXT PRIMARY KEY,
    generation_id INTEGER NOT NULL,
    protocol_type TEXT,
    protocol_name TEXT,
    leader TEXT,
    members TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS offsets (
    group_id TEXT NOT NULL,
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    committed_offset INTEGER NOT NULL,
    metadata TEXT,
    leader_epoch INTEGER NOT NULL,
    commit_timestamp_ms INTEGER NOT NULL,
    PRIMARY KEY (group_id, topic, partition)
);
"""


@contextmanager
def _sqlite_errors(action: str) -> Iterator[None]:
    try:
        yield
    except (sqlite3.Error, OverflowError) as exc:  # OverflowError: an int beyond 64 bits
        raise StoreError(f"cannot {action}: {exc}") from exc


class Store:
    """The coordinator's SQLite database in ``data_dir``."""

    def __init__(self, data_dir: Path | str) -> None:
        self.data_dir = Path(data_dir)
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._lock_file = open(self.data_dir / LOCK_NAME, "a+")  # noqa: SIM115
        except OSError as exc:
            raise StoreError(f"cannot use data dir {self.data_dir}: {exc}") from exc
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            self._lock_file.close()
            raise StoreError(f"data dir {self.data_dir} is in use by another coordinator") from exc
        try:
            with _sqlite_errors(f"open the database in {self.data_dir}"):
                self._db = sqlite3.connect(
                    self.data_dir / DATABASE_NAME,
                    isolation_level=None,  # transactions are explicit
                    check_same_thread=False,  # used by one worker thread at a time
                )
                try:
                    self._db.execute("PRAGMA journal_mode=WAL")
                    self._db.execute("PRAGMA synchronous=FULL")
                    self._db.executescript(_SCHEMA)
                    self._check_schema_version()
                except BaseException:
                    self._db.close()
                    raise
        except BaseException:
            self._unlock()
            raise

    def _check_schema_version(self) -> None:
        row = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is None:
            self._db.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
        elif row[0] != str(SCHEMA_VERSION):
            raise StoreError(
                f"data dir {self.data_dir} holds schema version {row[0]}, "
                f"this coordinator reads version {SCHEMA_VERSION}"
            )

    def _unlock(self) -> None:
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
        finally:
            self._lock_file.close()

    def load(self) -> tuple[list[StoredGroup], list[StoredOffset]]:
        """Read every stored group and offset."""
        with _sqlite_errors("read the coordinator database"):
            groups = [
                _group_from_row(row)
                for row in self._db.execute(
                    "SELECT group_id, generation_id, protocol_type, protocol_name, leader, members "
                    "FROM groups ORDER BY group_id"
                )
            ]
            offsets = [
                StoredOffset(*row)
                for row in self._db.execute(
                    "SELECT group_id, topic, partition, committed_offset, metadata, leader_epoch, "
                    "commit_timestamp_ms FROM offsets ORDER BY group_id, topic, partition"
                )
            ]
        return groups, offsets

    def write(self, groups: Iterable[StoredGroup], offsets: Iterable[StoredOffset]) -> None:
        """Write groups, then offsets, in one durable transaction."""
        with _sqlite_errors("write the coordinator database"):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for group in groups:
                    self._write_group(group)
                for offset in offsets:
                    self._write_offset(offset)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _write_group(self, group: StoredGroup) -> None:
        if group.deleted:
            self._db.execute("DELETE FROM groups WHERE group_id = ?", (group.group_id,))
            self._db.execute("DELETE FROM offsets WHERE group_id = ?", (group.group_id,))
            return
        self._db.execute(
            "INSERT OR REPLACE INTO groups "
            "(group_id, generation_id, protocol_type, protocol_name, leader, members) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                group.group_id,
                group.generation_id,
                group.protocol_type,
                group.protocol_name,
                group.leader,
                json.dumps([_member_to_json(x) for x in group.members]),
            ),
        )

    def _write_offset(self, offset: StoredOffset) -> None:
        if offset.deleted:
            self._db.execute(
                "DELETE FROM offsets WHERE group_id = ? AND topic = ? AND partition = ?",
                (offset.group_id, offset.topic, offset.partition),
            )
            return
        self._db.execute(
            "INSERT OR REPLACE INTO offsets (group_id, topic, partition, committed_offset, "
            "metadata, leader_epoch, commit_timestamp_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                offset.group_id,
                offset.topic,
                offset.partition,
                offset.offset,
                offset.metadata,
                offset.leader_epoch,
                offset.commit_timestamp_ms,
            ),
        )

    def close(self) -> None:
        """Checkpoint the WAL into the database file and release the directory."""
        try:
            with _sqlite_errors("close the coordinator database"):
                try:
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                finally:
                    self._db.close()
        finally:
            self._unlock()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _member_to_json(member: StoredMember) -> dict[str, Any]:
    return {
        "member_id": member.member_id,
        "group_instance_id": member.group_instance_id,
        "client_id": member.client_id,
        "client_host": member.client_host,
        "session_timeout_ms": member.session_timeout_ms,
        "rebalance_timeout_ms": member.rebalance_timeout_ms,
        "protocols": [[name, _b64(metadata)] for name, metadata in member.protocols],
        "assignment": _b64(member.assignment),
    }


def _member_from_json(doc: dict[str, Any]) -> StoredMember:
    return StoredMember(
        member_id=doc["member_id"],
        group_instance_id=doc["group_instance_id"],
        client_id=doc["client_id"],
        client_host=doc["client_host"],
        session_timeout_ms=doc["session_timeout_ms"],
        rebalance_timeout_ms=doc["rebalance_timeout_ms"],
        protocols=tuple((name, base64.b64decode(data)) for name, data in doc["protocols"]),
        assignment=base64.b64decode(doc["assignment"]),
    )


def _group_from_row(row: tuple[Any, ...]) -> StoredGroup:
    group_id, generation_id, protocol_type, protocol_name, leader, members = row
    try:
        parsed = tuple(_member_from_json(doc) for doc in json.loads(members))
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"stored group {group_id!r} is corrupt: {exc}") from exc
    return StoredGroup(group_id, generation_id, protocol_type, protocol_name, leader, parsed)


def data_dir_problem(path: Path) -> str | None:
    """Why ``path`` cannot hold a coordinator's data, or ``None`` if it can."""
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is None:
        return f"{path} cannot be created"
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    if existing == path and not os.access(path, os.R_OK):
        return f"{path} is not readable"
    return None
