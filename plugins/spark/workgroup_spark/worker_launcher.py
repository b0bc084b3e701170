"""The Python a Spark Connect server starts for a query's ``foreachBatch``: a warm fork.

A Spark Connect server starts one new Python process per streaming query
(``python -m pyspark.sql.connect.streaming.worker.foreach_batch_worker``, not
through Spark's worker daemon); importing pyspark's Connect client and the
batch function's modules there costs seconds of CPU, paid by every shard that
moves.  Pointed at this launcher (``PYSPARK_PYTHON``, see
:mod:`workgroup_spark.worker_pool`), the server's worker becomes a fork of the
warm pool process instead, which imported all of that once.

Rules:

1. ``-m <module>`` is offered to the pool whose socket
   ``WORKGROUP_SPARK_WORKER_POOL`` names; it runs the modules it was started
   for (the per-query workers) and declines the rest.  Anything it declines,
   anything else (a version check) and everything when no pool accepts runs
   as ``python`` would run it: this file ``exec``\\ s the interpreter.
2. The pool's fork gets this process's standard streams (passed over the
   socket), environment and working directory, so Spark's log redirection and
   connect-back work unchanged.
3. This process stays as the worker's stand-in for Spark: SIGTERM, SIGINT and
   SIGHUP (Spark stopping the query's worker) are passed on to the fork, and
   the fork's exit status is this process's.  Killed outright, this process's
   end of the socket closes and the fork exits on its own.

Standard library only, and run with ``python -I -S``: it starts in milliseconds.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import signal
import socket
import struct
import sys

#: Names the pool's Unix socket (set in the server's environment).
POOL_SOCKET_ENV = "WORKGROUP_SPARK_WORKER_POOL"
#: What the pool answers, instead of a pid, for a module it does not run.
DECLINED = 0
#: Exit status when the fork ended without saying how (killed by a signal).
KILLED_STATUS = 143

_HEADER = struct.Struct("!I")
_STATUS = struct.Struct("!i")


def module_to_offer(argv: list[str]) -> str | None:
    """The module ``argv`` (the arguments after ``python``) runs, if that is all it does."""
    if len(argv) == 2 and argv[0] == "-m":
        return argv[1]
    return None


def connect(path: str) -> socket.socket | None:
    """A connection to the pool, or ``None`` if it is not there (yet, or any more)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        return None
    return conn


def request(module: str) -> bytes:
    """What the pool needs to run ``module`` as this process would."""
    payload = {"module": module, "env": dict(os.environ), "cwd": os.getcwd()}
    return json.dumps(payload).encode()


def read_exactly(conn: socket.socket, size: int) -> bytes | None:
    """``size`` bytes, or ``None`` if the peer closed first."""
    chunks = b""
    while len(chunks) < size:
        chunk = conn.recv(size - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return chunks


def delegate(conn: socket.socket, module: str) -> int | None:
    """Have the pool run ``module`` (rule 2) and stand in for it (rule 3): its exit
    status, or ``None`` if the pool declined or did not start it (run it here)."""
    body = request(module)
    streams = array.array("i", [0, 1, 2])
    try:
        conn.sendmsg([_HEADER.pack(len(body))], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, streams)])
        conn.sendall(body)
        started = read_exactly(conn, _STATUS.size)
    except OSError:
        return None
    if started is None:
        return None
    (pid,) = _STATUS.unpack(started)
    if pid == DECLINED:
        return None

    def pass_on(signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, pass_on)
    try:
        ended = read_exactly(conn, _STATUS.size)
    except OSError:
        ended = None
    return KILLED_STATUS if ended is None else _STATUS.unpack(ended)[0]


def main(argv: list[str]) -> int:
    module = module_to_offer(argv)
    path = os.environ.get(POOL_SOCKET_ENV)
    if module is not None and path:
        conn = connect(path)
        if conn is not None:
            with conn:
                status = delegate(conn, module)
            if status is not None:
                return status
    # Not for the pool, or no pool: what `python ARGS` does (rule 1).
    os.execv(sys.executable, [sys.executable, *argv])
    return 127  # not reached: execv replaces this process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
