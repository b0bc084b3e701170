"""GroupMember times its machine's deadlines on the clock it is given: a test's
FakeClock moves them without real waiting."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from workgroup.member.driver import GroupMember
from workgroup.member.errors import CoordinatorUnavailableError
from workgroup.protocol import Protocol
from workgroup.testing import FakeClock


async def test_the_connect_timeout_runs_on_the_members_clock() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    clock = FakeClock(autojump_threshold_s=0)
    member = GroupMember(
        f"127.0.0.1:{closed_port}",
        "g",
        [Protocol.of("range")],
        clock=clock,
        connect_timeout_ms=600_000,  # ten minutes of the fake clock
    )
    started = time.monotonic()
    await member.start()
    try:
        with pytest.raises(CoordinatorUnavailableError):
            async with asyncio.timeout(20):
                await member.wait_stable()
    finally:
        await member.close()
    assert clock.monotonic() >= 600
    assert time.monotonic() - started < 20
