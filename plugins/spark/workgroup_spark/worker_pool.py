"""Warm Python workers for a Spark Connect server: one process imports, each worker forks.

A Spark Connect server starts a new Python process for each streaming query's
``foreachBatch`` function.  That process imports pyspark's Connect client
(over 1 s of CPU) and the function's modules before the query's first batch,
so a shard that moves to another daemon waits for it on every move.  The pool
imports those modules once and forks a worker per query instead:

* :func:`serve` (``python -m workgroup_spark.worker_pool SOCKET [MODULE...]``)
  imports ``WARM_MODULES`` and the given modules, then listens on the Unix
  socket ``SOCKET``; each connection asks for one worker: for a module in
  ``POOLED_MODULES``, a fork that takes the caller's standard streams,
  environment and working directory and runs the module as ``__main__``; any
  other module is declined (the caller runs it itself).
* :func:`launcher_script` writes the executable the server runs as
  ``PYSPARK_PYTHON``: it hands the per-query workers to the pool and runs
  everything else with the real interpreter (:mod:`workgroup_spark.worker_launcher`).

:func:`workgroup_spark.connect_server.run_connect_server` starts both beside
its server.  Rules:

1. A module that fails to import is reported on stderr and skipped: the
   workers import it themselves, as without the pool.
2. The pool holds no threads, sockets of Spark or gRPC channels when it forks:
   it only imports (gRPC is safe to fork before its first channel).
3. A fork reseeds :mod:`random`, sees the caller's ``PYTHONPATH`` entries first
   on ``sys.path``, reports its pid to the launcher, and exits when the
   launcher's end of the socket closes (the launcher was killed): it never
   outlives the process Spark knows as its worker.
4. The pool reaps its forks (``SIGCHLD`` ignored); it stops on SIGTERM, and
   stopping its process group stops its forks too.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import importlib
import json
import os
import random
import runpy
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from workgroup_spark import worker_launcher
from workgroup_spark.worker_launcher import POOL_SOCKET_ENV

#: Imported by the pool before it forks any worker: pyspark's Connect worker
#: (its client, gRPC, pandas and pyarrow) and the fence path of a fenced
#: ``foreachBatch`` (workgroup_spark.sinks, workgroup.fence), with the wire path
#: the fence loads on its first commit (its blocking connection, the slots'
#: records, the codec of a host name): without it, a moved query's first batch
#: paid 0.14 s for the fence's first commit, against 0.015 s.
WARM_MODULES: tuple[str, ...] = (
    "pyspark.sql.connect.streaming.worker.foreach_batch_worker",
    "pyarrow.parquet",
    "workgroup.fence",
    "workgroup.client.blocking",
    "workgroup.client.slots",
    "encodings.idna",
    "workgroup_spark.sinks",
)

#: The workers Spark Connect starts per streaming query (``foreachBatch`` and
#: query listeners): each is a new process, so each gains from a warm fork.
POOLED_MODULES: frozenset[str] = frozenset(
    {
        "pyspark.sql.connect.streaming.worker.foreach_batch_worker",
        "pyspark.sql.connect.streaming.worker.listener_worker",
    }
)

_STREAMS = 3


def preload(modules: Iterable[str]) -> list[str]:
    """Import ``modules``; those that fail are reported on stderr (rule 1).
    Returns the ones imported."""
    loaded = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            print(
                f"workgroup_spark.worker_pool: {name} not preloaded ({type(exc).__name__}: "
                f"{exc}); its workers import it themselves",
                file=sys.stderr,
                flush=True,
            )
        else:
            loaded.append(name)
    return loaded


def serve(path: str, modules: Sequence[str] = (), *, runs: frozenset[str] = POOLED_MODULES) -> None:
    """Import the modules, then fork a worker for each connection on ``path`` that
    asks for a module in ``runs``, until SIGTERM."""
    preload([*WARM_MODULES, *modules])
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forks are reaped by the kernel
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Listen on a temporary name and rename: a launcher that connects finds a pool
    # that is ready, or none (and runs its worker itself).
    temporary = f"{path}.{os.getpid()}"
    listener.bind(temporary)
    listener.listen(64)
    os.replace(temporary, path)
    print(f"workgroup_spark.worker_pool: ready on {path}", file=sys.stderr, flush=True)

    def stop(_signum: int, _frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        while True:
            conn, _ = listener.accept()
            try:
                _fork_worker(listener, conn, runs)
            except OSError as exc:  # a launcher that went away mid-request
                print(f"workgroup_spark.worker_pool: {exc}", file=sys.stderr, flush=True)
            finally:
                conn.close()
    finally:
        listener.close()
        with contextlib.suppress(OSError):
            os.unlink(path)


def _receive(conn: socket.socket) -> tuple[list[int], dict[str, Any]]:
    """The launcher's standard streams and request (module, env, cwd)."""
    fds = array.array("i")
    header, ancillary, _, _ = conn.recvmsg(
        worker_launcher._HEADER.size, socket.CMSG_SPACE(_STREAMS * fds.itemsize)
    )
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    if len(header) != worker_launcher._HEADER.size or len(fds) != _STREAMS:
        for fd in fds:
            os.close(fd)
        raise OSError("a launcher sent no request or not its three standard streams")
    (size,) = worker_launcher._HEADER.unpack(header)
    body = worker_launcher.read_exactly(conn, size)
    if body is None:
        for fd in fds:
            os.close(fd)
        raise OSError("a launcher closed before its request was read")
    return list(fds), json.loads(body)


def _fork_worker(listener: socket.socket, conn: socket.socket, runs: frozenset[str]) -> None:
    fds, job = _receive(conn)
    try:
        if job.get("module") not in runs:
            conn.sendall(worker_launcher._STATUS.pack(worker_launcher.DECLINED))
            return
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the pool's loop
            status = 1
            try:
                listener.close()
                status = _run_worker(conn, fds, job)
            finally:
                os._exit(status)
    finally:
        for fd in fds:
            os.close(fd)


def _run_worker(conn: socket.socket, fds: list[int], job: dict[str, Any]) -> int:
    """In the fork: become the launcher's process (rule 3) and run its module."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own streams
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    os.environ.clear()
    os.environ.update(job["env"])
    os.chdir(job["cwd"])
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = [p for p in extra if p not in sys.path]
    random.seed()
    conn.sendall(worker_launcher._STATUS.pack(os.getpid()))
    threading.Thread(target=_exit_with_launcher, args=(conn,), daemon=True).start()
    module = str(job["module"])
    sys.argv = [module]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as end:
        status = end.code if isinstance(end.code, int) else (0 if end.code is None else 1)
    except BaseException:
        traceback.print_exc()
        status = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(OSError):
        conn.sendall(worker_launcher._STATUS.pack(status))
    return status


def _exit_with_launcher(conn: socket.socket) -> None:
    """Rule 3: the launcher sends nothing more; its end closing means it is gone."""
    with contextlib.suppress(OSError):
        while conn.recv(64):
            pass
    os._exit(worker_launcher.KILLED_STATUS)


def launcher_script(directory: Path, python: str = sys.executable) -> Path:
    """Write ``<directory>/python``: the ``PYSPARK_PYTHON`` that hands per-query
    workers to the pool (:mod:`workgroup_spark.worker_launcher`)."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "python"
    launcher = Path(worker_launcher.__file__).resolve()
    script.write_text(f'#!/bin/sh\nexec "{python}" -I -S "{launcher}" "$@"\n')
    script.chmod(0o755)
    return script


def wait_ready(path: Path, timeout_s: float) -> bool:
    """True once the pool listens on ``path`` (it renames its socket there when ready)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.05)
    return path.exists()


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workgroup_spark.worker_pool",
        description=f"Warm Python workers for a Spark Connect server (then run it with "
        f"PYSPARK_PYTHON=<launcher_script()> and {POOL_SOCKET_ENV}=SOCKET).",
    )
    parser.add_argument("socket", help="the Unix socket to listen on")
    parser.add_argument("preload", nargs="*", help="modules to import besides WARM_MODULES")
    parser.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="MODULE",
        help="run this module's workers too (besides the per-query workers)",
    )
    args = parser.parse_args(argv)
    serve(args.socket, args.preload, runs=POOLED_MODULES | set(args.run))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
