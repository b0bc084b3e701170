"""A minimal group member on top of ``GroupWire``, for checks that need a settled group.

It does what every classic-protocol client does: join (retrying once with the
member id handed back by MEMBER_ID_REQUIRED), sync (the leader assigns each member
``b"to:" + member id``), heartbeat, and rejoin when told REBALANCE_IN_PROGRESS.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from .wire import (
    MEMBER_ID_REQUIRED,
    NONE,
    REBALANCE_IN_PROGRESS,
    GroupWire,
    Joined,
    Protocols,
    Synced,
)

HEARTBEAT_INTERVAL_S = 0.1


class GroupError(AssertionError):
    pass


def assignment_for(member_id: str) -> bytes:
    return b"to:" + member_id.encode()


@dataclass
class Member:
    wire: GroupWire
    group: str
    protocols: Protocols = (("range", b"meta"),)
    instance_id: str | None = None
    protocol_type: str = "consumer"
    session_timeout_ms: int = 3000
    rebalance_timeout_ms: int = 3000
    member_id: str = ""
    joined: Joined | None = None
    assignment: bytes | None = None
    #: Generation of the last completed SyncGroup, -1 before.
    generation: int = -1
    history: list[int] = field(default_factory=list)

    async def join(self) -> Joined:
        joined = await self._join_once()
        if joined.error == MEMBER_ID_REQUIRED:
            self.member_id = joined.member_id
            joined = await self._join_once()
        if joined.error == NONE:
            self.member_id = joined.member_id
            self.joined = joined
        return joined

    async def _join_once(self) -> Joined:
        return await self.wire.join(
            self.group,
            member_id=self.member_id,
            instance_id=self.instance_id,
            protocol_type=self.protocol_type,
            protocols=self.protocols,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
        )

    async def sync(self, assignments: dict[str, bytes] | None = None) -> Synced:
        assert self.joined is not None
        assert self.joined.error == NONE
        if assignments is None and self.joined.is_leader:
            assignments = {m: assignment_for(m) for m in self.joined.members}
        synced = await self.wire.sync(
            self.group,
            self.joined.generation,
            self.member_id,
            instance_id=self.instance_id,
            assignments=assignments,
        )
        if synced.error == NONE:
            self.assignment = synced.assignment
            self.generation = self.joined.generation
            self.history.append(self.generation)
        return synced

    async def heartbeat(self) -> int:
        return await self.wire.heartbeat(
            self.group, self.generation, self.member_id, instance_id=self.instance_id
        )

    async def leave(self) -> int:
        return (await self.wire.leave(self.group, self.member_id)).error

    async def run(self, stop: asyncio.Event, beats: dict[int, int]) -> None:
        """Join, sync and heartbeat until ``stop``; rejoin whenever a rebalance is announced."""
        while not stop.is_set():
            joined = await self.join()
            if joined.error != NONE:
                raise GroupError(f"{self.member_id or 'new member'} join failed: {joined}")
            synced = await self.sync()
            if synced.error == REBALANCE_IN_PROGRESS:
                continue
            if synced.error != NONE:
                raise GroupError(f"{self.member_id} sync failed: {synced}")
            beats[id(self)] = 0
            while not stop.is_set():
                await asyncio.sleep(HEARTBEAT_INTERVAL_S)
                if stop.is_set():
                    return
                error = await self.heartbeat()
                if error == REBALANCE_IN_PROGRESS:
                    break
                if error != NONE:
                    raise GroupError(f"{self.member_id} heartbeat failed with {error}")
                beats[id(self)] = beats.get(id(self), 0) + 1


async def settle(members: Sequence[Member], timeout_s: float = 20.0) -> int:
    """Runs ``members`` until they all completed one generation and heartbeat in it.

    Returns that generation. The members stay in the group afterwards (their
    sessions keep running until they time out or leave).
    """
    stop = asyncio.Event()
    beats: dict[int, int] = {}
    tasks = [asyncio.create_task(m.run(stop, beats)) for m in members]
    deadline = time.monotonic() + timeout_s
    settled = False
    try:
        while True:
            for task in tasks:
                if task.done():
                    task.result()  # a member failed: raise its error
            generations = {m.generation for m in members}
            if (
                len(generations) == 1
                and -1 not in generations
                and all(beats.get(id(m), 0) >= 2 for m in members)
            ):
                settled = True
                return generations.pop()
            if time.monotonic() > deadline:
                raise GroupError(
                    f"group did not settle: generations {[m.history for m in members]}"
                )
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        if not settled:
            # A member may be parked in a JoinGroup the broker holds; the test
            # has failed already, so do not wait for it.
            for task in tasks:
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
