"""``workgroup describe``, the console, ``workgroup whois`` and :class:`Directory`
show the same owner and token for every resource of one group, through a
hand-over (two assignments name one resource), a drain and a failover.

The members are raw protocol clients, so each state is exact: the test writes
the leader's assignments and the holders' token commits itself.  Describe and
whois read once; the console and the directory keep reading, and so remember
who held a resource before: right after a move they show the new owner's token
as pending (``None``) while the slot still holds the old holder's, never the
two paired.  Once the new owner committed its token, all four agree exactly.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Collection
from typing import Any

import pytest
from click.testing import CliRunner

from workgroup.cli import main
from workgroup.console.server import ConsoleServer
from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.server import CoordinatorServer
from workgroup.directory import Directory
from workgroup.kafka.adapter import KafkaRequest, to_result
from workgroup.kafka.messages import (
    CommitPartition,
    CommitTopic,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    LeavingMember,
    OffsetCommit,
    OffsetCommitResult,
    SyncGroup,
    SyncGroupResult,
)
from workgroup.member.round_plan import DRAINING_TAG
from workgroup.member.transport import CoordinatorConnection
from workgroup.protocol.endpoint import ENDPOINT_TAG
from workgroup.protocol.metadata import AssignmentData, BinaryCodec, MemberMetadata
from workgroup.runtime.slots import slot_header, slot_of

KIND = "shard"
KEYS = (0, 1, 2, 3)
PROTOCOL = "cooperative-sticky.v1"
CODEC = BinaryCodec()
TIMEOUT_S = 30
#: (owner's member id, token) by key, as one reader shows the group.
View = dict[int, tuple[str | None, int | None]]


class RawMember:
    """A static member whose every request the test writes."""

    def __init__(self, bootstrap: str, group: str, name: str) -> None:
        self.group, self.name = group, name
        self.connection = CoordinatorConnection(
            bootstrap, client_id=f"agree-{name}", request_timeout_ms=10_000
        )
        self.member_id = ""
        self.generation = -1
        self.tags: tuple[tuple[str, str], ...] = ((ENDPOINT_TAG, f"10.0.0.{len(name)}:80"),)

    async def ask(self, record: Any) -> Any:
        if self.connection.coordinator is None:
            await self.connection.find(self.group)
        return to_result(record, await self.connection.send(KafkaRequest(record), 10))

    async def join(self) -> JoinGroupResult:
        meta = MemberMetadata(kinds=(KIND,), instance_id=self.name, tags=self.tags)
        result = await self.ask(
            JoinGroup(self.group, 10_000, 10_000, self.member_id, "workgroup",
                      ((PROTOCOL, CODEC.encode_metadata(meta)),), group_instance_id=self.name)
        )  # fmt: skip
        assert isinstance(result, JoinGroupResult), result
        self.member_id, self.generation = result.member_id, result.generation_id
        return result

    async def sync(self, assignments: tuple[tuple[str, bytes], ...] = ()) -> None:
        result = await self.ask(
            SyncGroup(self.group, self.generation, self.member_id, assignments,
                      group_instance_id=self.name, protocol_type="workgroup",
                      protocol_name=PROTOCOL)
        )  # fmt: skip
        assert isinstance(result, SyncGroupResult), result

    async def take(self, key: int, token: int) -> None:
        """Commit ``token`` to ``key``'s slot, as its holder does when it takes it."""
        slot = slot_of(self.group, key)
        result = await self.ask(
            OffsetCommit(self.group, self.generation, self.member_id,
                         (CommitTopic(slot.topic, (CommitPartition(0, token, slot_header(key)),)),),
                         group_instance_id=self.name)
        )  # fmt: skip
        assert isinstance(result, OffsetCommitResult)
        assert {p.error.name for t in result.topics for p in t.partitions} == {"NONE"}

    async def leave(self) -> None:
        result = await self.ask(LeaveGroup(self.group, (LeavingMember(self.member_id, self.name),)))
        assert isinstance(result, LeaveGroupResult)
        await self.connection.close()


def assignment(keys: tuple[int, ...], generation: int) -> bytes:
    return CODEC.encode_assignment(
        AssignmentData(assigned=tuple((KIND, k) for k in keys), generation=generation)
    )


async def rebalance(
    members: list[RawMember], deal: dict[str, tuple[tuple[int, ...], int | None]]
) -> None:
    """One round: every member joins, the leader hands out ``deal``
    (name -> keys and the generation its assignment says; ``None``: this one)."""
    joined = await asyncio.gather(*(m.join() for m in members))
    leader = next(m for m, r in zip(members, joined, strict=True) if r.members)
    generation = leader.generation
    assignments = tuple(
        (m.member_id, assignment(deal[m.name][0], deal[m.name][1] or generation)) for m in members
    )
    await asyncio.gather(*(m.sync(assignments if m is leader else ()) for m in members))


async def cli(*args: str) -> Any:
    result = await asyncio.to_thread(CliRunner().invoke, main, list(args))
    assert result.exit_code in (0, 4), result.output
    return result


async def views(
    bootstrap: str, group: str, console: ConsoleServer, directory: Directory
) -> dict[str, View]:
    """Each reader's view, read one after another with nothing moving meanwhile."""
    described = json.loads(
        (await cli("describe", group, "--json", "--bootstrap", bootstrap)).output
    )
    describe_view: View = {
        r["key"]: (r["owner"], r["token"]) for r in described["resources"] if r["kind"] == KIND
    }
    whois_view: View = {}
    for key in KEYS:
        shown = await cli("whois", group, KIND, str(key), "--json", "--bootstrap", bootstrap)
        owner = json.loads(shown.output)["owner"]
        whois_view[key] = (None, None) if owner is None else (owner["member_id"], owner["token"])
    await console.refresh()
    [grouped] = [g for g in console.model.view["groups"] if g["group"] == group]
    console_view: View = {
        r["key"]: (r["owner"], r["token"]) for r in grouped["resources"] if r["kind"] == KIND
    }
    await directory.refresh()
    directory_view: View = {}
    for key in KEYS:
        found = directory.owner(KIND, key)
        directory_view[key] = (None, None) if found is None else (found.member_id, found.token)
    return {
        "describe": {k: v for k, v in describe_view.items() if v[0] is not None},
        "whois": {k: v for k, v in whois_view.items() if v[0] is not None},
        "console": {k: v for k, v in console_view.items() if v[0] is not None},
        "directory": {k: v for k, v in directory_view.items() if v[0] is not None},
    }


def assert_agree(seen: dict[str, View], *, pending: Collection[int] = ()) -> None:
    """Same owner everywhere; same token everywhere, except that the readers that
    remember show ``None`` for the ``pending`` keys (moved, new token not taken)."""
    owners = {name: {k: o for k, (o, _) in view.items()} for name, view in seen.items()}
    assert len({json.dumps(o, sort_keys=True) for o in owners.values()}) == 1, seen
    for key in owners["describe"]:
        once = {seen["describe"][key][1], seen["whois"][key][1]}
        kept = {seen["console"][key][1], seen["directory"][key][1]}
        assert len(once) == 1, (key, seen)
        assert kept == ({None} if key in pending else once), (key, seen)


@pytest.fixture
async def coordinator() -> AsyncIterator[CoordinatorServer]:
    async with CoordinatorServer(CoordinatorConfig(initial_rebalance_delay_ms=300)) as server:
        yield server


async def test_describe_console_whois_and_directory_agree_resource_by_resource(
    coordinator: CoordinatorServer,
) -> None:
    bootstrap = coordinator.bootstrap
    group = f"agree-{uuid.uuid4().hex[:8]}"
    a, b = RawMember(bootstrap, group, "a"), RawMember(bootstrap, group, "b")
    console = ConsoleServer(bootstrap, port=0)
    directory = Directory(bootstrap, group)
    try:
        async with asyncio.timeout(TIMEOUT_S):
            # Settled: a holds 0 and 1, b holds 2 and 3, each at token 1.
            await rebalance([a, b], {"a": ((0, 1), None), "b": ((2, 3), None)})
            for member, keys in ((a, (0, 1)), (b, (2, 3))):
                for key in keys:
                    await member.take(key, 1)
            seen = await views(bootstrap, group, console, directory)
            assert seen["describe"] == {0: (a.member_id, 1), 1: (a.member_id, 1),
                                        2: (b.member_id, 1), 3: (b.member_id, 1)}  # fmt: skip
            assert_agree(seen)

            # Hand-over: key 2 moves to a, whose assignment is this generation's,
            # while b's still names it from the last one: a owns it, b releases it.
            await rebalance([a, b], {"a": ((0, 1, 2), None), "b": ((2, 3), a.generation)})
            seen = await views(bootstrap, group, console, directory)
            assert seen["describe"][2] == (a.member_id, 1)  # the slot: still b's token
            assert_agree(seen, pending={2})
            described = json.loads(
                (await cli("describe", group, "--json", "--bootstrap", bootstrap)).output
            )
            [row] = [r for r in described["resources"] if r["key"] == 2]
            assert row["releasing"] == [b.member_id]
            await a.take(2, 2)
            assert_agree(await views(bootstrap, group, console, directory))

            # Drain: b takes nothing; its key 3 goes to a.
            b.tags = (*b.tags, (DRAINING_TAG, "1"))
            await rebalance([a, b], {"a": ((0, 1, 2, 3), None), "b": ((), None)})
            assert_agree(await views(bootstrap, group, console, directory), pending={3})
            await a.take(3, 2)
            seen = await views(bootstrap, group, console, directory)
            assert_agree(seen)
            assert set(seen["console"]) == set(KEYS)

            # Failover: a leaves; b, undrained, is handed everything.
            b.tags = b.tags[:1]
            await a.leave()
            await rebalance([b], {"b": (KEYS, None)})
            seen = await views(bootstrap, group, console, directory)
            assert seen["describe"][0] == (b.member_id, 1)  # a's token, in the slot
            assert_agree(seen, pending=set(KEYS))
            for key in KEYS:
                await b.take(key, 3)
            seen = await views(bootstrap, group, console, directory)
            assert_agree(seen)
            assert seen["directory"] == dict.fromkeys(KEYS, (b.member_id, 3))
    finally:
        await console.close()
        await directory.close()
        await a.connection.close()
        await b.connection.close()
