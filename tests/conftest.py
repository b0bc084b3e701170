"""Fixtures shared by the whole suite.

``start_coordinator(...)`` runs ``python -m workgroup coordinator`` as a
subprocess on a free loopback port and returns once it printed its
``listening on HOST:PORT`` line; ``coordinator_process`` is that as a fixture.
``coordinator_server`` runs the coordinator in-process on the test's event
loop (faster, and the test can look at its state).

The suite leaves no process behind: each pytest process (each xdist worker)
marks the environment its subprocesses inherit, and once its last test ended
it looks for its processes still running (below it, or orphaned but marked),
gives them ``LEFTOVER_GRACE_S`` to end, kills them and fails that last test's
teardown with the list.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import settings

from tests.processes import PROC, command, is_running, left_behind
from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.server import CoordinatorServer
from workgroup.testing.servers import run_coordinator

# A run started in the background by a shell without job control has SIGINT
# ignored, and every process the tests start would inherit that: the tests of
# Ctrl-C (a demo, `workgroup top`) would see their SIGINT ignored.  With a
# handler here, what the tests start gets SIGINT's default again.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

STARTUP_TIMEOUT_S = 20.0
#: The environment variable that marks the processes a pytest process started
#: (not ``WORKGROUP_*``: some tests start daemons without those).
RUN_MARK = "PYTEST_WORKGROUP_STARTED_BY"
#: How long processes still running at the end get to end by themselves.
LEFTOVER_GRACE_S = 3.0

#: Every browser test's ``browser`` and ``page`` (a page that fails the test on
#: any error it reports).
pytest_plugins = ["tests.browser"]

# The suite shares two cores between four workers, JVMs and daemons: a per-example
# deadline measures the machine's load, not the code (examples are still bounded
# by max_examples and each test's timeout).
settings.register_profile("workgroup", deadline=None)
settings.load_profile("workgroup")


@dataclass
class CoordinatorProcess:
    """A running ``workgroup coordinator`` subprocess."""

    process: subprocess.Popen[bytes]
    host: str
    port: int
    log_path: Path
    args: tuple[str, ...] = field(default=())

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout: float = 10.0) -> int:
        """SIGTERM and wait; return the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise

    def kill(self) -> None:
        """SIGKILL: no chance to flush or close anything."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                self.terminate()
        finally:
            if self.process.stdout is not None:
                self.process.stdout.close()


def spawn_coordinator(*args: str, listen: str = "127.0.0.1:0") -> subprocess.Popen[bytes]:
    """Start the coordinator process without waiting for it (for failure tests)."""
    return subprocess.Popen(
        [sys.executable, "-m", "workgroup", "coordinator", "--listen", listen, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@contextmanager
def start_coordinator(
    *args: str, data_dir: Path | None = None, listen: str = "127.0.0.1:0"
) -> Iterator[CoordinatorProcess]:
    """Run ``python -m workgroup coordinator`` until the block ends (SIGTERM, then wait)."""
    all_args = (*args, "--data-dir", str(data_dir)) if data_dir is not None else args
    log_file = tempfile.NamedTemporaryFile(  # noqa: SIM115
        prefix="workgroup-coordinator-", suffix=".log", delete=False
    )
    log_file.close()
    log_path = Path(log_file.name)
    try:
        with run_coordinator(
            *all_args, listen=listen, log=log_path, startup_timeout_s=STARTUP_TIMEOUT_S
        ) as server:
            running = CoordinatorProcess(
                server.process, server.host, server.port, log_path, all_args
            )
            try:
                yield running
            finally:
                running.close()
    finally:
        log_path.unlink(missing_ok=True)


@pytest.fixture
def coordinator_process() -> Iterator[CoordinatorProcess]:
    """An in-memory coordinator subprocess on a free loopback port."""
    with start_coordinator("--initial-rebalance-delay-ms", "0") as running:
        yield running


@pytest.fixture
async def coordinator_server() -> AsyncIterator[CoordinatorServer]:
    """An in-memory coordinator served on the test's own event loop."""
    server = CoordinatorServer(
        CoordinatorConfig(initial_rebalance_delay_ms=0), host="127.0.0.1", port=0
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def pytest_configure(config: pytest.Config) -> None:
    # Each process its own mark (a worker replaces its controller's).
    os.environ[RUN_MARK] = f"{os.getpid()}-{secrets.token_hex(4)}"


@pytest.fixture(scope="session", autouse=True)
def _no_process_left_behind() -> Iterator[None]:
    """Set up first, torn down last: after every other fixture of this process."""
    yield
    if not PROC.is_dir():
        return
    me, mark = os.getpid(), os.environ[RUN_MARK]
    deadline = time.monotonic() + LEFTOVER_GRACE_S
    while (left := left_behind(me, RUN_MARK, mark)) and time.monotonic() < deadline:
        time.sleep(0.1)
    if not left:
        return
    found = "; ".join(f"{pid} {command(pid)[:120]}" for pid in left)
    for pid in left:
        if is_running(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    pytest.fail(f"processes left behind (killed): {found}", pytrace=False)
