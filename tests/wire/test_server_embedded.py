"""Embedding the coordinator in a test: ``async with CoordinatorServer(...)``, public names only."""

from __future__ import annotations

import asyncio
import socket

import pytest

from workgroup import ConfigError
from workgroup.coordinator import CoordinatorConfig, CoordinatorServer
from workgroup.member import GroupMember
from workgroup.protocol import Protocol


async def test_a_member_forms_a_group_on_an_embedded_coordinator() -> None:
    async with CoordinatorServer(CoordinatorConfig(initial_rebalance_delay_ms=0)) as server:
        host, port = server.address
        assert server.bootstrap == f"{host}:{port}"
        assert port != 0
        async with GroupMember(
            server.bootstrap,
            "embedded",
            [Protocol.of("range")],
            resources={"shard": range(4)},
            heartbeat_interval_ms=300,
        ) as member:
            async with asyncio.timeout(20):
                await member.wait_stable()
            assert member.generation == 1
            assert sorted(member.assignment) == [("shard", key) for key in range(4)]
    with pytest.raises(RuntimeError, match="not listening"):
        _ = server.address


async def test_a_failed_start_leaves_nothing_running() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = CoordinatorServer(port=port)
        with pytest.raises(OSError, match="in use"):
            async with server:
                pass
    # stop() ran: waiting for the stop returns at once.
    async with asyncio.timeout(1):
        await server.wait_stopped()


def test_a_bad_config_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="session timeouts"):
        CoordinatorConfig(min_session_timeout_ms=10, max_session_timeout_ms=5)
