"""What the keyspace wire tests share: a process of an app run by an
:class:`~workgroup.runtime.runner.AppRunner` in this one, its member and the map
it holds, and the waits on them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

import workgroup
from workgroup.keyspaces import SliceMap
from workgroup.member.driver import GroupMember, member_keyspace
from workgroup.member.keyspace import KnownMap, same_map
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

    def map(self) -> KnownMap | None:
        """The map this process's member holds: whole if it carries it, else its part."""
        keyspace = member_keyspace(self.member())
        return keyspace.map if keyspace is not None else None


def group_map(processes: Iterable[RunnerProcess]) -> SliceMap | None:
    """The map every one of ``processes`` holds, whole or in part, once they
    hold the same one and one of them carries it whole (``None`` until then)."""
    held = [p.map() for p in processes]
    whole = [m for m in held if isinstance(m, SliceMap)]
    if not whole or any(m is None or not same_map(m, whole[0]) for m in held):
        return None
    smap = whole[0]
    by_id = smap.by_id()
    for m in held:
        assert m is not None
        if m != smap and any(by_id.get(piece.id) != piece for piece in m.slices):
            return None  # a whole map and a part that disagree: not yet settled
    return smap


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
