"""Brokers for the member's wire tests: the embedded coordinator and Tansu."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

from workgroup.testing import servers
from workgroup.testing.servers import free_port, tansu_binary

__all__ = ["SESSION_TIMEOUT_MS", "Backend", "free_port", "run_backend", "tansu_binary"]

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


@contextlib.contextmanager
def run_backend(name: str, port: int = 0) -> Iterator[Backend]:
    if name == "tansu":
        runner = servers.run_tansu(port=port, startup_timeout_s=STARTUP_TIMEOUT_S)
    else:
        runner = servers.run_coordinator(
            "--min-session-timeout-ms",
            "500",
            "--initial-rebalance-delay-ms",
            "200",
            listen=f"127.0.0.1:{port}",
            startup_timeout_s=STARTUP_TIMEOUT_S,
        )
    with runner as server:
        yield Backend(name, server.host, server.port)
