"""The writer: a separate process that increments one account's counter, fenced.

It gets its lease's fence pickled on stdin (``app.py`` starts it), and has no
event loop and no daemon of its own.  Each step is one database transaction:

1. ``claim`` the account with the fence's token (``workgroup_fences``): once a
   newer holder claimed it, the transaction is refused as a whole;
2. read the counter, write it plus one with a token-compared upsert;
3. commit the transaction, then ``fence.commit`` the step number as the
   lease's checkpoint (the coordinator refuses it once the lease ended).

Every applied step is logged to ``$FENCED_SQL_LOG`` (JSON lines), so that
``check.py`` can count them: each account's counter must equal its applied steps.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import sys
import time

from examples.fenced_sql.db import COUNTERS, LOG, begin, connect, read_counter
from workgroup.fence import Fence
from workgroup.runtime.errors import LeaseLostError
from workgroup.sinks.sql import StaleTokenError, claim

STEP_S = float(os.environ.get("FENCED_SQL_STEP_S", "0.05"))


def log(**fields: object) -> None:
    LOG.parent.mkdir(parents=True, exist_ok=True)
    with LOG.open("a", encoding="utf-8") as out:
        entry = {"pid": os.getpid(), "daemon": os.getppid(), "time": time.time(), **fields}
        out.write(json.dumps(entry) + "\n")


stopping = False


def stop(_signal: int, _frame: object) -> None:
    # SIGTERM (the lease ended): finish the step under way, so that every
    # committed step is logged, then stop.
    global stopping
    stopping = True


def main() -> None:
    fence = pickle.loads(sys.stdin.buffer.read())
    assert isinstance(fence, Fence)
    account = str(fence.key)
    conn = connect()
    print(f"writer {os.getpid()}: {account} with token {fence.token}", flush=True)
    signal.signal(signal.SIGTERM, stop)
    try:
        while not stopping:
            begin(conn)
            try:
                claim(conn, account, fence.token)
                value = read_counter(conn, account) + 1
                applied = COUNTERS.upsert(conn, {"id": account, "value": value}, fence.token)
                conn.execute("COMMIT")
            except StaleTokenError as exc:
                conn.execute("ROLLBACK")
                log(event="refused", account=account, token=fence.token, why=str(exc))
                print(f"writer {os.getpid()}: stopped: {exc}", flush=True)
                return
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            log(event="step", account=account, token=fence.token, value=value, applied=applied)
            try:
                fence.commit(str(value))
            except LeaseLostError as exc:
                log(event="lost", account=account, token=fence.token, why=str(exc))
                print(f"writer {os.getpid()}: stopped: {exc}", flush=True)
                return
            time.sleep(STEP_S)
    finally:
        conn.close()


if __name__ == "__main__":
    main()
