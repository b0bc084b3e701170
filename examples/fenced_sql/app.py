"""Fenced writes to a SQL database from another process, with a portable fence.

Each account is a resource.  Its handler hands the lease's fence
(``lease.fence()``) to a separate writer process (``writer.py``), which
increments the account's counter in SQLite or PostgreSQL: every transaction
claims the account with the fence's token, and every row carries it, so a
writer whose lease moved on (its daemon frozen past the session, a network
partition) changes nothing once the next holder wrote.  When the lease ends the
handler stops its writer; a writer that outlives its daemon stops by itself at
its next refused step.

    FENCED_SQL_DB=/tmp/fenced.db workgroup run examples.fenced_sql.app:app --instance-id a &
    FENCED_SQL_DB=/tmp/fenced.db workgroup run examples.fenced_sql.app:app --instance-id b &
    python -m examples.fenced_sql.check   # each counter equals its applied steps
"""

from __future__ import annotations

import asyncio
import os
import pickle
import sys

import workgroup
from examples.fenced_sql.db import connect, create_tables

ACCOUNTS = int(os.environ.get("FENCED_SQL_ACCOUNTS", "4"))

app = workgroup.App("fenced-sql", session_timeout_ms=6_000, grace_ms=2_000)


@app.resources("account")
def accounts() -> list[str]:
    return [f"account-{i}" for i in range(ACCOUNTS)]


@app.worker("account")
async def account(lease: workgroup.Lease) -> None:
    conn = connect()
    try:
        create_tables(conn)
    finally:
        conn.close()
    writer = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "examples.fenced_sql.writer", stdin=asyncio.subprocess.PIPE
    )
    assert writer.stdin is not None
    writer.stdin.write(pickle.dumps(lease.fence()))
    writer.stdin.close()
    ended = asyncio.ensure_future(lease.wait_revoked())
    exited = asyncio.ensure_future(writer.wait())
    await asyncio.wait([ended, exited], return_when=asyncio.FIRST_COMPLETED)
    if writer.returncode is None:
        writer.terminate()
        await writer.wait()
    ended.cancel()
    if not lease.revoked:
        raise RuntimeError(f"the writer of {lease.key} exited with code {writer.returncode}")
