"""The local coordinator: started on demand when an app has no bootstrap address.

``bootstrap=None`` means ``127.0.0.1:9092``.  If nothing answers there, the
daemon starts ``workgroup coordinator`` as a detached process (its own session:
killing or stopping any daemon leaves it running) with a durable data directory,
``$WORKGROUP_STATE_DIR`` or ``~/.local/state/workgroup``.  A lock file in that
directory serialises daemons starting at the same time, so that they end up with
one coordinator: each checks again for one under the lock.

Rules:

* it runs ``workgroup coordinator`` with :data:`LOCAL_SETTINGS` (sessions down to
  one second, where Kafka's minimum is six, so that tests and demos fail over
  fast); its log is ``<state dir>/coordinator.log``;
* ``<state dir>/coordinator.json`` says what was started (pid, address, data
  directory, log, settings); ``coordinator.pid`` holds the pid alone;
* ``workgroup coordinator --status`` prints what is known of it and
  ``workgroup coordinator --stop`` stops it (SIGTERM, only a process whose
  command line is a workgroup coordinator: a pid may have been reused).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workgroup.clock import SYSTEM_CLOCK
from workgroup.log import get_logger
from workgroup.member.errors import CoordinatorUnavailableError, connect_failure_reason

log = get_logger(__name__)

LOCAL_HOST = "127.0.0.1"
LOCAL_PORT = 9092
STARTUP_TIMEOUT_S = 15.0
LOCK_TIMEOUT_S = 30.0
#: The local coordinator accepts sessions down to one second (Kafka: six).
MIN_SESSION_TIMEOUT_MS = 1000
#: The flags the local coordinator runs with, besides its address and directory.
LOCAL_SETTINGS = ("--min-session-timeout-ms", str(MIN_SESSION_TIMEOUT_MS), "--log-level", "info")
#: How long ``stop_local_coordinator`` waits for the process to exit.
STOP_TIMEOUT_S = 15.0


def state_dir() -> Path:
    configured = os.environ.get("WORKGROUP_STATE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "workgroup"


def answers(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """Whether something accepts TCP connections at ``host:port``."""
    return connect_failure(host, port, timeout_s) is None


def connect_failure(host: str, port: int, timeout_s: float = 0.5) -> str | None:
    """Why nothing accepts TCP connections at ``host:port`` (``None``: something does)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return connect_failure_reason(exc)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a+") as lock:
        deadline = SYSTEM_CLOCK.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if SYSTEM_CLOCK.monotonic() > deadline:
                    raise CoordinatorUnavailableError(
                        f"another process holds {path} (starting the local coordinator?)"
                    ) from None
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure_local_coordinator(
    host: str = LOCAL_HOST, port: int = LOCAL_PORT, directory: Path | None = None
) -> int | None:
    """Start the local coordinator unless one answers; its pid if this call started it."""
    if answers(host, port):
        return None
    directory = directory or state_dir()
    data = directory / "coordinator"
    data.mkdir(parents=True, exist_ok=True)
    with _locked(directory / "coordinator.lock"):
        if answers(host, port):  # another daemon started it meanwhile
            return None
        log_path = directory / "coordinator.log"
        with log_path.open("ab") as sink:
            argv = [sys.executable, "-m", "workgroup", "coordinator", "--listen", f"{host}:{port}"]
            argv += ["--data-dir", str(data), *LOCAL_SETTINGS]
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=sink,
                start_new_session=True,  # not in the daemon's process group
                close_fds=True,
            )
        deadline = SYSTEM_CLOCK.monotonic() + STARTUP_TIMEOUT_S
        while not answers(host, port):
            if process.poll() is not None or SYSTEM_CLOCK.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-1000:]
                raise CoordinatorUnavailableError(
                    f"the local coordinator did not start on {host}:{port} "
                    f"(exit status {process.poll()}); its log {log_path}:\n{tail}"
                )
            time.sleep(0.05)
        (directory / "coordinator.pid").write_text(f"{process.pid}\n")
        record = {
            "pid": process.pid,
            "address": f"{host}:{port}",
            "data_dir": str(data),
            "log": str(log_path),
            "argv": argv,
            "started": SYSTEM_CLOCK.wall(),
        }
        (directory / "coordinator.json").write_text(json.dumps(record) + "\n")
    log.info(
        "app.coordinator_started",
        address=f"{host}:{port}",
        pid=process.pid,
        data_dir=str(data),
        log=str(log_path),
    )
    return process.pid


@dataclass(frozen=True)
class LocalStatus:
    """What is known of the auto-started coordinator."""

    directory: Path
    #: The pid it was started with (``None``: never started from this directory).
    pid: int | None
    #: That pid is a running workgroup coordinator.
    running: bool
    address: str
    #: Something accepts connections at ``address`` (perhaps another process).
    answering: bool
    record: dict[str, Any]

    def lines(self) -> list[str]:
        """The status as ``workgroup coordinator --status`` prints it."""
        state = "running" if self.running else "not running"
        out = [f"local coordinator: {state}" + (f" (pid {self.pid})" if self.pid else "")]
        out.append(
            f"address: {self.address} ({'answers' if self.answering else 'nothing answers'})"
        )
        if self.answering and not self.running:
            out.append("  (something else answers there: not started by a workgroup daemon)")
        out.append(f"state directory: {self.directory}")
        for key in ("data_dir", "log"):
            if key in self.record:
                out.append(f"{key.replace('_', ' ')}: {self.record[key]}")
        out.append(f"settings: {' '.join(LOCAL_SETTINGS)}")
        if self.running:
            out.append("stop it: workgroup coordinator --stop")
        return out


def _is_local_coordinator(pid: int) -> bool:
    """Whether ``pid`` runs ``workgroup coordinator`` (a stale pid may be anything)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True  # no /proc: trust the pid file
    return b"workgroup" in argv and b"coordinator" in argv


def local_status(directory: Path | None = None) -> LocalStatus:
    """The auto-started coordinator's status (reads its files, probes its address)."""
    directory = directory or state_dir()
    record: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        record = json.loads((directory / "coordinator.json").read_text())
    pid: int | None = record.get("pid")
    if pid is None:
        with contextlib.suppress(OSError, ValueError):
            pid = int((directory / "coordinator.pid").read_text().strip())
    address = str(record.get("address", f"{LOCAL_HOST}:{LOCAL_PORT}"))
    host, _, port = address.rpartition(":")
    return LocalStatus(
        directory=directory,
        pid=pid,
        running=pid is not None and _is_local_coordinator(pid),
        address=address,
        answering=answers(host, int(port)),
        record=record,
    )


def stop_local_coordinator(directory: Path | None = None, timeout_s: float = STOP_TIMEOUT_S) -> str:
    """Stop the auto-started coordinator (SIGTERM, then wait); what happened, in words."""
    status = local_status(directory)
    if status.pid is None or not status.running:
        return f"local coordinator: not running (state directory {status.directory})"
    os.kill(status.pid, signal.SIGTERM)
    deadline = SYSTEM_CLOCK.monotonic() + timeout_s
    while _is_local_coordinator(status.pid):
        if SYSTEM_CLOCK.monotonic() > deadline:
            return (
                f"local coordinator (pid {status.pid}): still running {timeout_s:g} s after SIGTERM"
            )
        time.sleep(0.05)
    for name in ("coordinator.pid", "coordinator.json"):
        with contextlib.suppress(OSError):
            (status.directory / name).unlink()
    return f"local coordinator (pid {status.pid}): stopped"


__all__ = [
    "LOCAL_SETTINGS",
    "LocalStatus",
    "answers",
    "connect_failure",
    "ensure_local_coordinator",
    "local_status",
    "state_dir",
    "stop_local_coordinator",
]
