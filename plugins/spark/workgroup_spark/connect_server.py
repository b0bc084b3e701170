"""A Spark Connect server from the pyspark package, on this machine (tests, demo, benchmark).

pyspark's pip package ships ``sbin/start-connect-server.sh`` and the Connect
server jar: one JVM that runs every daemon's queries, while each daemon is a thin
client (``remote="sc://127.0.0.1:<port>"``) with no JVM of its own.

Rules:

1. The server runs in the foreground (``spark-submit`` running
   :mod:`workgroup_spark.connect_main`, Spark's own server main but for rule 6),
   in a process group of its own, bound to loopback; stopping it sends SIGTERM
   to the group, then SIGKILL.
2. Its Python workers (``foreachBatch`` functions run beside the server) use
   ``python`` (``PYSPARK_PYTHON``), which must have pyspark and the functions'
   modules (``PYTHONPATH`` is passed on); without it they fail with
   "Python worker failed to connect back".
3. Its ``SPARK_HOME`` is a directory of links to the pyspark package without
   ``python/lib/pyspark.zip``: Spark puts that zip first on every Python worker's
   path, and modules imported from a zip are compiled on every start (twice the
   CPU of the installed, compiled pyspark).  Spark waits a fixed 10 s for a
   ``foreachBatch`` worker to connect back; on a loaded machine the zip alone
   made every worker miss it.
4. It is ready once its gRPC port accepts connections; a server that exits or
   stays closed past the timeout raises :class:`ConnectServerError` with the
   tail of its log.
5. With ``warm_workers`` (the default), a pool of warm Python workers runs
   beside it (:mod:`workgroup_spark.worker_pool`, its log ``worker-pool.log``
   next to the server's): each query's ``foreachBatch`` worker is a fork of a
   process that imported pyspark's Connect client and the fence path once
   (plus ``preload``: e.g. the module of the batch function), instead of a
   new interpreter importing them, so a moved shard's first batch does not
   wait for them.  A pool that is not ready yet, or gone, only makes workers
   cold again.
6. Its sessions share one class loader (artifact isolation off,
   :data:`DEFAULT_SERVER_CONF`), so a query's generated code is compiled once
   on the server, not again by every run of it (each run is a new session),
   such as each move of a shard; ``conf=`` may turn isolation back on.
7. Once it listens, its JIT compiler threads run at a lower priority than its
   work (:mod:`workgroup_spark.jit`): a young server compiles for minutes, in
   the CPU its batches leave rather than ahead of them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from workgroup.errors import WorkgroupError
from workgroup.testing.signals import interrupts_deferred
from workgroup_spark import connect_main, jit, worker_pool
from workgroup_spark.worker_launcher import POOL_SOCKET_ENV

#: Settings for a small server shared by a few thin daemons on one machine.
DEFAULT_SERVER_CONF: Mapping[str, str] = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
    # As the daemons' own JVMs (session.DEFAULT_CONF).  At INFO the server logs
    # each job's plan: 3 MB in 35 s of two thin daemons' four shards, against
    # 49 KB at WARN, and 5 % more of the server's CPU (0.96 cores, not 0.91).
    "spark.log.level": "WARN",
    # A new owner's query with the same checkpoint stops a dead owner's run still
    # on the server (Spark's default; set here because exactly-once relies on it).
    "spark.sql.streaming.stopActiveRunOnRestart": "true",
    # Rule 6 (why: workgroup_spark.connect_main).
    "spark.sql.artifact.isolation.enabled": "false",
    "spark.sql.artifact.isolation.alwaysApplyClassloader": "false",
}


class ConnectServerError(WorkgroupError):
    """The Spark Connect server did not start."""

    retriable = False


@dataclass(frozen=True, slots=True)
class ConnectServer:
    """A running server: ``remote`` is the URL for ``remote=`` / ``WORKGROUP_SPARK_REMOTE``."""

    port: int
    pid: int
    log: Path

    @property
    def remote(self) -> str:
        return f"sc://127.0.0.1:{self.port}"


def spark_home() -> Path:
    """The pyspark package directory: it is a SPARK_HOME (bin/, sbin/, jars/)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def worker_spark_home(package: Path, directory: Path) -> Path:
    """A SPARK_HOME of links to ``package`` whose ``python/lib`` holds py4j only
    (rule 3): Python workers then import the installed, compiled pyspark."""
    lib = directory / "python" / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    for entry in package.iterdir():
        if entry.name != "python" and not (directory / entry.name).exists():
            (directory / entry.name).symlink_to(entry)
    for py4j in (package / "python" / "lib").glob("py4j-*.zip"):
        if not (lib / py4j.name).exists():
            (lib / py4j.name).symlink_to(py4j)
    return directory


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def run_connect_server(
    log: Path,
    *,
    port: int | None = None,
    python: str = sys.executable,
    conf: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    start_timeout_s: float = 180.0,
    warm_workers: bool = True,
    preload: Sequence[str] = (),
) -> Iterator[ConnectServer]:
    """Start a Connect server on ``127.0.0.1:port`` (a free one by default), yield it
    once it accepts connections, stop it on the way out.  ``warm_workers``: its
    Python workers fork from a warm pool that imported ``preload`` too (rule 5)."""
    package = spark_home()
    port = port or free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    home = worker_spark_home(package, log.parent / "spark-home")
    settings = {
        **DEFAULT_SERVER_CONF,
        **(conf or {}),
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
    }
    argv = ["bash", str(home / "bin" / "spark-submit"), "--name", "Spark Connect server"]
    for key, value in settings.items():
        argv += ["--conf", f"{key}={value}"]
    argv.append(str(Path(connect_main.__file__).resolve()))
    server_env = {
        # A process that made a Connect session carries pyspark's mark: the
        # server's driver would then make one too instead of the server's session.
        **{k: v for k, v in os.environ.items() if k not in _CONNECT_CLIENT_ENV},
        "SPARK_CONNECT_MODE": "0",
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
        # Where Spark's scripts would put logs and pid files: not under site-packages.
        "SPARK_LOG_DIR": str(log.parent),
        "SPARK_PID_DIR": str(log.parent),
        **(env or {}),
    }
    with contextlib.ExitStack() as stack:
        if warm_workers:
            socket_path = stack.enter_context(_worker_pool(log.parent, python, server_env, preload))
            server_env[POOL_SOCKET_ENV] = str(socket_path)
            server_env["PYSPARK_PYTHON"] = str(
                worker_pool.launcher_script(log.parent / "worker-python", python)
            )
        # An interrupt while the server starts waits until its stop is in place.
        with log.open("ab") as sink, interrupts_deferred():
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=server_env,
                start_new_session=True,
            )
            stack.callback(_stop, process)
        _wait_listening(process, port, log, start_timeout_s)
        jit.lower_compiler_priority(process.pid)  # rule 7
        if warm_workers:
            # Started first, the pool imports while the JVM starts; a pool not ready
            # by now costs nothing but cold workers until it is.
            worker_pool.wait_ready(socket_path, POOL_READY_TIMEOUT_S)
        yield ConnectServer(port, process.pid, log)


#: What marks a process as a Spark Connect client to pyspark (kept from the server's driver).
_CONNECT_CLIENT_ENV = frozenset({"SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_API_MODE"})

#: How long the server's start waits for its worker pool beyond its own listening.
POOL_READY_TIMEOUT_S = 60.0


@contextlib.contextmanager
def _worker_pool(
    logs: Path, python: str, env: Mapping[str, str], preload: Sequence[str]
) -> Iterator[Path]:
    """The warm worker pool (rule 5), in a process group of its own with its forks;
    yields its socket's path (under /tmp: a Unix socket's path is short)."""
    directory = Path(tempfile.mkdtemp(prefix="wg-spark-pool-"))
    socket_path = directory / "pool.sock"
    argv = [python, "-m", "workgroup_spark.worker_pool", str(socket_path), *preload]
    with contextlib.ExitStack() as stops:
        stops.callback(shutil.rmtree, directory, ignore_errors=True)
        with (logs / "worker-pool.log").open("ab") as sink, interrupts_deferred():
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env={**env, "PYTHONPATH": _pool_path(env)},
                start_new_session=True,
            )
            stops.callback(_stop, process)
        yield socket_path


def _pool_path(env: Mapping[str, str]) -> str:
    """The server's ``PYTHONPATH`` plus where this package is (the pool imports it)."""
    here = str(Path(__file__).resolve().parents[1])
    return os.pathsep.join(filter(None, [env.get("PYTHONPATH"), here]))


def _wait_listening(
    process: subprocess.Popen[bytes], port: int, log: Path, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ConnectServerError(
                f"the Spark Connect server exited ({process.returncode}):\n{_tail(log)}"
            )
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1.0):
            return
        time.sleep(0.25)
    raise ConnectServerError(
        f"the Spark Connect server did not listen on 127.0.0.1:{port} within "
        f"{timeout_s:.0f} s:\n{_tail(log)}"
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group (``spark-submit``, its JVM and the driver
    program; the worker pool and its forks), SIGKILL if it is still there after 30 s."""
    for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _group_alive(process):
            time.sleep(0.1)
        if not _group_alive(process):
            break
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(1.0)


def _group_alive(process: subprocess.Popen[bytes]) -> bool:
    process.poll()  # reap the script, or the group stays alive as a zombie
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _tail(log: Path, chars: int = 2_000) -> str:
    with contextlib.suppress(OSError):
        return log.read_text(errors="replace")[-chars:]
    return ""
