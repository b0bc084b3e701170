"""Durability: a coordinator killed with SIGKILL comes back with its offsets and groups.

The coordinator runs as ``python -m workgroup coordinator --data-dir`` in a
subprocess; members speak the Kafka protocol through kafka-python's classes over
plain sockets.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conftest import CoordinatorProcess, start_coordinator
from wire.raw_client import (
    DescribeGroupsRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    RawClient,
    SyncGroupRequest,
)

GROUP = "durable"
SESSION_MS = 30_000
TOPICS = {"orders": 4, "audit": 2}
#: Long enough for both members of a test to make the first generation.
INITIAL_DELAY = ("--initial-rebalance-delay-ms", "1000")


@dataclass
class Member:
    client: RawClient
    instance_id: str | None
    member_id: str = ""
    generation: int = -1
    leader: str = ""
    members: tuple[str, ...] = ()
    assignment: bytes = b""

    async def join(self) -> None:
        proto = JoinGroupRequest.JoinGroupRequestProtocol
        while True:
            response = await self.client.call(
                JoinGroupRequest[9](
                    group_id=GROUP,
                    session_timeout_ms=SESSION_MS,
                    rebalance_timeout_ms=SESSION_MS,
                    member_id=self.member_id,
                    group_instance_id=self.instance_id,
                    protocol_type="workgroup",
                    protocols=[proto(name="spread", metadata=b"v1")],
                    reason=None,
                ),
                9,
            )
            if response.error_code == 79:  # MEMBER_ID_REQUIRED
                self.member_id = response.member_id
                continue
            assert response.error_code == 0, response
            self.member_id = response.member_id
            self.generation = response.generation_id
            self.leader = response.leader
            self.members = tuple(sorted(m.member_id for m in response.members))
            return

    async def sync(self) -> None:
        assignment = SyncGroupRequest.SyncGroupRequestAssignment
        assignments = (
            [assignment(member_id=m, assignment=f"work-for-{m}".encode()) for m in self.members]
            if self.member_id == self.leader
            else []
        )
        response = await self.client.call(
            SyncGroupRequest[5](
                group_id=GROUP,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.instance_id,
                protocol_type="workgroup",
                protocol_name="spread",
                assignments=assignments,
            ),
            5,
        )
        assert response.error_code == 0, response
        self.assignment = response.assignment

    async def heartbeat(self) -> int:
        response = await self.client.call(
            HeartbeatRequest[4](
                group_id=GROUP,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.instance_id,
            ),
            4,
        )
        return int(response.error_code)

    async def commit(self, offsets: dict[tuple[str, int], int]) -> list[int]:
        topic_cls = OffsetCommitRequest.OffsetCommitRequestTopic
        part_cls = topic_cls.OffsetCommitRequestPartition
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(
                part_cls(
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=-1,
                    committed_metadata=f"{topic}/{partition}@{offset}",
                )
            )
        response = await self.client.call(
            OffsetCommitRequest[8](
                group_id=GROUP,
                generation_id_or_member_epoch=self.generation,
                member_id=self.member_id,
                group_instance_id=self.instance_id,
                topics=[topic_cls(name=t, partitions=ps) for t, ps in by_topic.items()],
            ),
            8,
        )
        return [p.error_code for t in response.topics for p in t.partitions]


async def connect(coordinator: CoordinatorProcess) -> RawClient:
    return await RawClient.connect(coordinator.host, coordinator.port)


async def fetch_offsets(client: RawClient) -> dict[tuple[str, int], tuple[int, str]]:
    group = OffsetFetchRequest.OffsetFetchRequestGroup
    topic = group.OffsetFetchRequestTopics
    response = await client.call(
        OffsetFetchRequest[8](
            groups=[
                group(
                    group_id=GROUP,
                    topics=[
                        topic(name=name, partition_indexes=list(range(count)))
                        for name, count in TOPICS.items()
                    ],
                )
            ],
            require_stable=False,
        ),
        8,
    )
    (g,) = response.groups
    assert g.error_code == 0
    return {
        (t.name, p.partition_index): (p.committed_offset, p.metadata)
        for t in g.topics
        for p in t.partitions
        if p.committed_offset >= 0
    }


async def describe(client: RawClient) -> Any:
    response = await client.call(
        DescribeGroupsRequest[5](groups=[GROUP], include_authorized_operations=False), 5
    )
    (group,) = response.groups
    assert group.error_code == 0
    return group


async def form_group(coordinator: CoordinatorProcess) -> list[Member]:
    members = [
        Member(await connect(coordinator), "static-a"),
        Member(await connect(coordinator), None),
    ]
    try:
        # Both join within the initial rebalance delay: one generation, both members.
        await asyncio.gather(*(m.join() for m in members))
        assert len({m.generation for m in members}) == 1
        leader = next(m for m in members if m.member_id == m.leader)
        assert leader.members == tuple(sorted(m.member_id for m in members))
        await asyncio.gather(*(m.sync() for m in members))
    except BaseException:
        await close_all(members)
        raise
    return members


async def close_all(members: list[Member]) -> None:
    for m in members:
        await m.client.close()


ALL_OFFSETS = {
    (topic, partition): 100 * (partition + 1) + len(topic)
    for topic, count in TOPICS.items()
    for partition in range(count)
}


async def test_offsets_and_group_survive_sigkill(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    args = INITIAL_DELAY
    with start_coordinator(*args, data_dir=data_dir) as coordinator:
        members = await form_group(coordinator)
        try:
            generation = members[0].generation
            assert {m.assignment for m in members} == {
                f"work-for-{m.member_id}".encode() for m in members
            }
            # Each member commits its share; every commit acknowledged is durable.
            keys = sorted(ALL_OFFSETS)
            shares = [dict((k, ALL_OFFSETS[k]) for k in keys[i::2]) for i in range(2)]
            for member, share in zip(members, shares, strict=True):
                assert set(await member.commit(share)) == {0}
            before = await describe(members[0].client)
            assert before.group_state == "Stable"
        finally:
            await close_all(members)
        coordinator.kill()

    with start_coordinator(*args, data_dir=data_dir) as coordinator:
        client = await connect(coordinator)
        try:
            offsets = await fetch_offsets(client)
            assert offsets == {
                key: (value, f"{key[0]}/{key[1]}@{value}") for key, value in ALL_OFFSETS.items()
            }
            after = await describe(client)
            assert after.group_state == "Stable"
            assert after.protocol_type == "workgroup"
            assert after.protocol_data == "spread"
            assert sorted(
                (m.member_id, m.group_instance_id, m.member_assignment) for m in after.members
            ) == sorted(
                (m.member_id, m.instance_id, f"work-for-{m.member_id}".encode()) for m in members
            )
        finally:
            await client.close()

        # The members reconnect: their sessions were restored, so heartbeats
        # in the old generation succeed, and they can rejoin and commit again.
        for m in members:
            m.client = await connect(coordinator)
        try:
            for m in members:
                assert await m.heartbeat() == 0
                assert m.generation == generation
            # The leader's rejoin starts a rebalance; a follower rejoining a
            # Stable group with unchanged metadata would just be told the
            # current generation, so it rejoins once the rebalance has begun.
            leader = next(m for m in members if m.member_id == m.leader)
            follower = next(m for m in members if m is not leader)
            leader_join = asyncio.ensure_future(leader.join())
            observer = await connect(coordinator)
            try:
                for _ in range(500):
                    if (await describe(observer)).group_state == "PreparingRebalance":
                        break
                    await asyncio.sleep(0.01)
                else:
                    raise AssertionError("the leader's rejoin started no rebalance")
            finally:
                await observer.close()
            await asyncio.gather(leader_join, follower.join())
            await asyncio.gather(*(m.sync() for m in members))
            assert len({m.generation for m in members}) == 1
            assert members[0].generation > generation
            assert set(await members[0].commit({("orders", 0): 999})) == {0}
            # The old generation is fenced.
            stale = Member(members[1].client, None, members[1].member_id, generation)
            assert set(await stale.commit({("orders", 1): 5})) == {22}  # ILLEGAL_GENERATION
        finally:
            await close_all(members)
        assert coordinator.terminate() == 0

    # A clean stop keeps everything too.
    with start_coordinator(*args, data_dir=data_dir) as coordinator:
        client = await connect(coordinator)
        try:
            offsets = await fetch_offsets(client)
            assert offsets[("orders", 0)] == (999, "orders/0@999")
            assert offsets[("orders", 1)][0] == ALL_OFFSETS[("orders", 1)]
            assert (await describe(client)).group_state in ("Stable", "PreparingRebalance")
        finally:
            await client.close()


async def test_without_data_dir_nothing_survives(tmp_path: Path) -> None:
    with start_coordinator(*INITIAL_DELAY) as coordinator:
        members = await form_group(coordinator)
        try:
            assert set(await members[0].commit({("orders", 0): 1})) == {0}
        finally:
            await close_all(members)
        coordinator.kill()
    with start_coordinator(*INITIAL_DELAY) as coordinator:
        client = await connect(coordinator)
        try:
            assert await fetch_offsets(client) == {}
        finally:
            await client.close()


async def test_no_acknowledged_commit_is_lost_to_sigkill(tmp_path: Path) -> None:
    """Writers commit as fast as they can; SIGKILL lands mid-stream; every ack held."""
    data_dir = tmp_path / "data"
    writers = 3
    acked = [-1] * writers
    sent = [-1] * writers
    all_writing = asyncio.Event()

    async def commit_forever(index: int, client: RawClient) -> None:
        committer = Member(client, None, "", -1)  # a commit from outside any group
        offset = 0
        try:
            while True:
                sent[index] = offset
                errors = await committer.commit({("stream", index): offset})
                assert errors == [0]
                acked[index] = offset
                if min(acked) >= 20:
                    all_writing.set()
                offset += 1
        except (ConnectionError, asyncio.IncompleteReadError):
            return  # the coordinator died under us

    with start_coordinator(data_dir=data_dir) as coordinator:
        clients = [await connect(coordinator) for _ in range(writers)]
        tasks = [asyncio.create_task(commit_forever(i, c)) for i, c in enumerate(clients)]
        try:
            async with asyncio.timeout(30):
                await all_writing.wait()
            coordinator.kill()
            async with asyncio.timeout(10):
                await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            for client in clients:
                await client.close()

    with start_coordinator(data_dir=data_dir) as coordinator:
        client = await connect(coordinator)
        try:
            group = OffsetFetchRequest.OffsetFetchRequestGroup
            topic = group.OffsetFetchRequestTopics
            response = await client.call(
                OffsetFetchRequest[8](
                    groups=[
                        group(
                            group_id=GROUP,
                            topics=[topic(name="stream", partition_indexes=list(range(writers)))],
                        )
                    ],
                    require_stable=False,
                ),
                8,
            )
            stored = {
                p.partition_index: p.committed_offset
                for p in response.groups[0].topics[0].partitions
            }
        finally:
            await client.close()
    for index in range(writers):
        # Everything acknowledged survived; nothing beyond what was sent appeared.
        assert acked[index] <= stored[index] <= sent[index], (index, acked, stored, sent)
