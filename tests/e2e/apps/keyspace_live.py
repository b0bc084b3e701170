"""A test app: the keyspace ``users`` served over HTTP, every write fenced per key.

Run as ``workgroup run tests.e2e.apps.keyspace_live:app`` with:

* ``$KSLIVE_DB``: a SQLite file (created by the test, WAL mode);
* ``$KSLIVE_HOT``: a JSON file, ``{"key": KEY, "reported": BOOL, "cold": LOAD}``
  (empty: no hot key), re-read as it changes: the hot key, whether its load is
  reported, and the load every other slice reports;
* ``$KSLIVE_PORT``: the HTTP port (``--advertise 127.0.0.1:PORT``);
* ``$KSLIVE_NAME``: the daemon's name (its instance id), in every answer;
* ``$KSLIVE_SESSION_MS``: the session timeout.

``GET /users/{key}``: the process answers a key one of its slices ``owns``,
writing it with ``token_for(key)`` through the fenced table; 421 for a key it
does not own, 409 if the fence refused the write (a newer owner wrote the key).

Each slice's handler reports its load; the hot key's owner reports it as most
of its slice's load (while ``reported``), so the leader cuts it into a slice of
its own, and writes it in a loop: it takes the key's token, works ``WORK_S``, then writes with the
token it took.  A holder frozen during the work writes with its old token when
it resumes: the fence must refuse it.

Tables: ``keys`` (a row per key: its counter and the token that last wrote it,
a :class:`FencedTable`) and ``writes`` (every attempt, applied or not: key,
token, pid, time, source), written in one transaction.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import time
from typing import Any

from aiohttp import web

import workgroup
from workgroup.keyspaces import KeyMovedError, PlannerSettings
from workgroup.runtime.keyspaces import SliceLease
from workgroup.sinks.sql import FencedTable

ROWS = FencedTable("keys", key=("id",), columns=("count",))
WRITES_SQL = (
    "CREATE TABLE IF NOT EXISTS writes (seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, "
    "token BIGINT NOT NULL, pid INTEGER NOT NULL, time REAL NOT NULL, source TEXT NOT NULL, "
    "applied INTEGER NOT NULL)"
)
#: The hot key's share of its slice's load.
HOT_LOAD = 100.0
#: The hot key's work between taking its token and writing.
WORK_S = 0.1

app = workgroup.App(
    "kslive",
    session_timeout_ms=int(os.environ.get("KSLIVE_SESSION_MS", "2000")),
    heartbeat_interval_ms=200,
    grace_ms=200,
)
leases: dict[int, SliceLease] = {}
_db: sqlite3.Connection | None = None
_hot: tuple[int, str | None, bool, float] = (-1, None, False, 1.0)


def create_tables(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(ROWS.create_sql({"count": "BIGINT"}))
    conn.execute(WRITES_SQL)


def hot_key() -> tuple[str | None, bool, float]:
    """The key the test made hot, whether its load is reported, and the load of
    the other slices (read again only when the file changed)."""
    global _hot
    path = os.environ["KSLIVE_HOT"]
    changed = os.stat(path).st_mtime_ns
    if changed != _hot[0]:
        with open(path, encoding="utf-8") as source:
            text = source.read().strip()
        hot: dict[str, Any] = json.loads(text) if text else {}
        key = hot.get("key")
        _hot = (
            changed,
            None if key is None else str(key),
            bool(hot.get("reported", False)),
            float(hot.get("cold", 1.0)),
        )
    return _hot[1], _hot[2], _hot[3]


def write(key: str, token: int, source: str) -> bool:
    """Count one write of ``key`` with ``token``; True if the fence applied it."""
    conn = _db
    assert conn is not None
    conn.execute("BEGIN IMMEDIATE")  # the write lock first: two writers never deadlock
    try:
        row = conn.execute("SELECT count FROM keys WHERE id = ?", [key]).fetchone()
        applied = ROWS.upsert(conn, {"id": key, "count": (row[0] if row else 0) + 1}, token)
        conn.execute(
            "INSERT INTO writes (key, token, pid, time, source, applied) VALUES (?, ?, ?, ?, ?, ?)",
            [key, token, os.getpid(), time.time(), source, int(applied)],
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return applied


@app.keyspace(
    "users",
    settings=PlannerSettings(
        imbalance_tolerance=0.5, min_slices_per_member=2, max_slices_per_member=8
    ),
)
async def users(lease: SliceLease) -> None:
    leases[lease.slice.id] = lease
    reported: str | None = None
    try:
        while lease.held:
            hot, loaded, cold = hot_key()
            if reported is not None and (reported != hot or not loaded) and lease.owns(reported):
                lease.report_key_load(reported, 0.0)  # no longer hot: the leader forgets it
                reported = None
            if hot is None or not lease.owns(hot):
                lease.report_load(cold)
                await asyncio.sleep(WORK_S)
                continue
            if loaded:
                lease.report_load(HOT_LOAD)
                lease.report_key_load(hot, HOT_LOAD - cold)
                reported = hot
            else:
                lease.report_load(cold)
            token = lease.token_for(hot)
            await asyncio.sleep(WORK_S)
            write(hot, token, "worker")
    finally:
        if leases.get(lease.slice.id) is lease:
            del leases[lease.slice.id]


def owning_lease(key: str) -> SliceLease | None:
    for lease in list(leases.values()):
        if lease.owns(key):
            return lease
    return None


async def answer(request: web.Request) -> web.Response:
    key = request.match_info["key"]
    lease = owning_lease(key)
    if lease is None:
        return web.json_response({"error": f"{key!r} is not owned here"}, status=421)
    try:
        token = lease.token_for(key)
    except KeyMovedError as exc:
        return web.json_response({"error": str(exc)}, status=421)
    applied = write(key, token, "request")
    body: dict[str, Any] = {
        "name": os.environ["KSLIVE_NAME"],
        "pid": os.getpid(),
        "slice": lease.slice.id,
        "start": lease.slice.start,
        "end": lease.slice.end,
        "token": token,
        "applied": applied,
    }
    return web.json_response(body, status=200 if applied else 409)


_http: web.AppRunner | None = None


async def start() -> None:
    global _db, _http
    _db = sqlite3.connect(os.environ["KSLIVE_DB"], timeout=30, isolation_level=None)
    http = web.Application()
    http.router.add_get("/users/{key}", answer)
    _http = web.AppRunner(http, access_log=None)
    await _http.setup()
    await web.TCPSite(_http, "127.0.0.1", int(os.environ["KSLIVE_PORT"])).start()


async def stop() -> None:
    if _http is not None:
        await _http.cleanup()
    if _db is not None:
        _db.close()


app.add_startup(start)
app.add_cleanup(stop)
