"""Load balancing between live members over the embedded coordinator: members
report their shards' loads after the first round, with no other change to the
group; each asks for a round to publish them, and the group ends balanced by
load and quiet."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator

import pytest

from workgroup.member.driver import GroupMember
from workgroup.protocol import Protocol
from workgroup.types import Resource

from .backends import Backend, run_backend

RESOURCES = {"shard": list(range(6))}
#: Dealt round robin to three fresh members: 80, 40 and 60 (mean 60).
LOADS = {0: 40.0, 1: 20.0, 2: 20.0, 3: 40.0, 4: 20.0, 5: 40.0}


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    with run_backend("embedded") as running:
        yield running


def max_over_mean(members: dict[str, GroupMember]) -> float:
    loads = [sum(LOADS[int(key)] for _, key in m.assignment) for m in members.values()]
    return max(loads) / (sum(loads) / len(loads))


async def settled(members: dict[str, GroupMember], limit_s: float = 30) -> int:
    """Wait until every member is stable in one generation owning all six shards."""
    async with asyncio.timeout(limit_s):
        while True:
            owned = [m.assignment for m in members.values()]
            generations = {m.generation for m in members.values()}
            if (
                all(m.stable for m in members.values())
                and len(generations) == 1
                and sum(map(len, owned)) == 6
                and len(frozenset().union(*owned)) == 6
            ):
                return generations.pop()
            await asyncio.sleep(0.05)


@pytest.mark.timeout(120)
async def test_members_end_balanced_by_load_and_quiet(backend: Backend) -> None:
    group_id = f"load-{uuid.uuid4().hex[:8]}"
    members: dict[str, GroupMember] = {}

    async def add(name: str) -> None:
        member = GroupMember(
            backend.bootstrap,
            group_id,
            [Protocol.of("cooperative-sticky")],
            session_timeout_ms=backend.session_timeout_ms,
            rebalance_timeout_ms=10_000,
            heartbeat_interval_ms=300,
            resources=RESOURCES,  # type: ignore[arg-type]
            client_id=f"{group_id}-{name}",
            max_moves=2,
            balance_interval_ms=1_000,
        )
        members[name] = member
        await member.start()

    async def report() -> None:
        # What handlers do: report each owned shard's load, again and again.
        while True:
            for member in list(members.values()):
                for resource in member.assignment:
                    member.report_load(resource, LOADS[int(resource[1])])
            await asyncio.sleep(0.05)

    for name in "abc":
        await add(name)
    reporter = asyncio.create_task(report())
    try:
        await settled(members)
        # Count-balanced, whatever the member ids: 80 / 40 / 60.
        assert max_over_mean(members) == pytest.approx(80 / 60)
        # Nothing else happens to the group: the members' own reports bring
        # the loads to the leader, which balances them.
        generation = await settled(members)
        async with asyncio.timeout(30):
            while max_over_mean(members) > 1.10:
                generation = await settled(members)
                await asyncio.sleep(0.2)
        # Quiet: no further rebalance once balanced (probes only fire over tolerance).
        await asyncio.sleep(3)
        assert await settled(members) == generation
        assert max_over_mean(members) <= 1.10
        owners: dict[Resource, str] = {}
        for name, member in members.items():
            for resource in member.assignment:
                assert resource not in owners
                owners[resource] = name
    finally:
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporter
        await asyncio.gather(*(m.close() for m in members.values()))
