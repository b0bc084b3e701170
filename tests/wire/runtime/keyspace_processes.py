"""What the keyspace wire tests share: a process of an app run by an
:class:`~workgroup.runtime.runner.AppRunner` in this one, its member and the map
it holds, and the waits on them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import workgroup
from workgroup.keyspaces import SliceMap
from workgroup.member.driver import GroupMember, member_keyspace
from workgroup.runtime.app import Settings
from workgroup.runtime.runner import AppRunner

TIMEOUT_S = 40
#: How long a map must stay the same to count as settled.
QUIET_S = 0.6


class RunnerProcess:
    """One process: ``app`` (set by the subclass, with its keyspace handler) and its runner."""

    app: workgroup.App
    runner: AppRunner | None = None

    def start(
        self, bootstrap: str, instance_id: str | None = None, advertise: str | None = None
    ) -> tuple[asyncio.Event, asyncio.Task[None]]:
        settings = Settings(
            bootstrap=bootstrap,
            instance_id=instance_id,
            advertise=advertise,
            session_timeout_ms=3_000,
            heartbeat_interval_ms=200,
            grace_ms=100,
            balance_interval_ms=500,
        )
        stop = asyncio.Event()
        self.runner = AppRunner(self.app, settings)
        return stop, asyncio.create_task(self.runner.run(stop))

    def member(self) -> GroupMember:
        assert self.runner is not None
        return next(g.member for g in self.runner.groups)

    def map(self) -> SliceMap | None:
        keyspace = member_keyspace(self.member())
        return keyspace.map if keyspace is not None else None


async def settled_map(
    settled: Callable[[], SliceMap | None], timeout_s: float = TIMEOUT_S
) -> SliceMap:
    """The map ``settled`` returns once it stays the same for :data:`QUIET_S`."""
    async with asyncio.timeout(timeout_s):
        while True:
            smap = settled()
            if smap is not None:
                await asyncio.sleep(QUIET_S)
                if settled() == smap:
                    return smap
            await asyncio.sleep(0.05)


async def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Wait until ``condition`` holds (``what``: named when it never does)."""
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while not condition():  # noqa: ASYNC110 (polls the processes' state)
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"not within {TIMEOUT_S} s: {what}") from None
