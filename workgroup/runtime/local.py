"""The local coordinator: started on demand when an app has no bootstrap address.

``bootstrap=None`` means ``127.0.0.1:9092``.  If nothing answers there, the
daemon starts ``workgroup coordinator`` as a detached process (its own session:
killing or stopping any daemon leaves it running) with a durable data directory,
``$WORKGROUP_STATE_DIR`` or ``~/.local/state/workgroup``.  A lock file in that
directory serialises daemons starting at the same time, so that they end up with
one coordinator: each checks again for one under the lock.  Stop it with
``kill $(cat <state dir>/coordinator.pid)``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from workgroup.log import get_logger
from workgroup.member.errors import CoordinatorUnavailableError

log = get_logger(__name__)

LOCAL_HOST = "127.0.0.1"
LOCAL_PORT = 9092
STARTUP_TIMEOUT_S = 15.0
LOCK_TIMEOUT_S = 30.0
#: The local coordinator accepts sessions down to one second (Kafka: six).
MIN_SESSION_TIMEOUT_MS = 1000


def state_dir() -> Path:
    configured = os.environ.get("WORKGROUP_STATE_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "workgroup"


def answers(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """Whether something accepts TCP connections at ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a+") as lock:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
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
            argv += ["--data-dir", str(data), "--log-level", "info"]
            argv += ["--min-session-timeout-ms", str(MIN_SESSION_TIMEOUT_MS)]
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=sink,
                start_new_session=True,  # not in the daemon's process group
                close_fds=True,
            )
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not answers(host, port):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-1000:]
                raise CoordinatorUnavailableError(
                    f"the local coordinator did not start on {host}:{port} "
                    f"(exit status {process.poll()}); its log {log_path}:\n{tail}"
                )
            time.sleep(0.05)
        (directory / "coordinator.pid").write_text(f"{process.pid}\n")
    log.info(
        "app.coordinator_started",
        address=f"{host}:{port}",
        pid=process.pid,
        data_dir=str(data),
        log=str(log_path),
    )
    return process.pid


__all__ = ["answers", "ensure_local_coordinator", "state_dir"]
