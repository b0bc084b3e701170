"""A daemon in its own process for the fence and sink tests: one leader lease.

``python -m tests.wire.runtime.fence_holder BOOTSTRAP GROUP OUT_DIR [DSN TABLE]``
writes its lease's pickled fence to ``OUT_DIR/fence-<pid>.pickle`` once it holds
the lease.  With a PostgreSQL DSN and a table it also writes rows through the
fenced sink every 50 ms (from a thread, so a SIGSTOP catches it mid-loop),
recording each write as a JSON line in ``OUT_DIR/writes-<pid>.jsonl``.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import sys
import time
from pathlib import Path

from workgroup.runtime.app import App, Settings
from workgroup.runtime.lease import Lease
from workgroup.runtime.runner import AppRunner

ROWS = ("a", "b", "c")


def main() -> None:
    bootstrap, group, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    dsn, table = (sys.argv[4], sys.argv[5]) if len(sys.argv) > 5 else (None, None)
    app = App(group, grace_ms=200)

    def write_rows(lease: Lease) -> None:
        import psycopg

        from workgroup.sinks.sql import FencedTable

        sink = FencedTable(table or "", key=("id",), columns=("value",))
        n = 0
        with psycopg.connect(dsn or "", autocommit=True) as conn:
            while True:
                n += 1
                for row in ROWS:
                    value = f"{os.getpid()}:{n}"
                    # A freeze can fall between the write and its record: the
                    # record names when the write began, so a write made before
                    # the freeze is never mistaken for one made after it.
                    started = time.time()
                    applied = sink.upsert(conn, {"id": row, "value": value}, lease.token)
                    with open(out / f"writes-{os.getpid()}.jsonl", "a", encoding="utf-8") as log:
                        log.write(
                            json.dumps(
                                {
                                    "time": started,
                                    "row": row,
                                    "value": value,
                                    "token": lease.token,
                                    "applied": applied,
                                }
                            )
                            + "\n"
                        )
                time.sleep(0.05)

    @app.leader("writer")
    async def writer(lease: Lease) -> None:
        path = out / f"fence-{os.getpid()}.pickle"
        path.with_suffix(".tmp").write_bytes(pickle.dumps(lease.fence()))
        path.with_suffix(".tmp").rename(path)
        if dsn is not None:
            # Daemon thread: a zombie keeps writing until the process ends.
            await asyncio.get_running_loop().run_in_executor(None, write_rows, lease)
        await lease.wait_revoked()

    settings = Settings(
        bootstrap=bootstrap,
        session_timeout_ms=int(os.environ.get("FENCE_HOLDER_SESSION_MS", "3000")),
        heartbeat_interval_ms=300,
        grace_ms=200,
    )
    asyncio.run(AppRunner(app, settings).run(asyncio.Event()))


if __name__ == "__main__":
    main()
