"""Real Kafka clients form, rebalance and leave groups on every back-end.

aiokafka's ``AIOKafkaConsumer`` and confluent-kafka's (librdkafka) ``Consumer``
with the range and cooperative-sticky strategies, including static members. The
embedded coordinator has no topics, so there the assignments are empty; Tansu
gets a real topic so the partitions are handed out. Membership is checked through
DescribeGroups, generations through the clients themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from confluent_kafka import Consumer

from .conftest import Backend, Connect, tansu_deviates
from .wire import FENCED_INSTANCE_ID, Described, GroupWire

pytestmark = pytest.mark.timeout(90)

PARTITIONS = 6
SETTLE_TIMEOUT_S = 15.0


async def wait_for(
    condition: Callable[[], Any], what: str, timeout_s: float = SETTLE_TIMEOUT_S
) -> Any:
    """Polls an async or sync ``condition`` until it returns something truthy."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last: Any = None
    while loop.time() < deadline:
        last = condition()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last observation: {last!r}")


def partitions_of(topic: str) -> set[tuple[str, int]]:
    return {(topic, p) for p in range(PARTITIONS)}


def check_partitioning(
    backend: Backend, topic: str, assignments: Iterable[set[tuple[str, int]]]
) -> bool:
    """Tansu has the topic: every partition owned exactly once. Embedded: nothing to own."""
    owned = list(assignments)
    if backend.name == "embedded":
        return all(not a for a in owned)
    flat = [tp for a in owned for tp in a]
    return len(flat) == len(set(flat)) and set(flat) == partitions_of(topic)


# ---------------------------------------------------------------------------- aiokafka


@dataclass
class AiokafkaMember:
    consumer: AIOKafkaConsumer
    poller: asyncio.Task[None]
    stopped: bool = False

    @property
    def member_id(self) -> str:
        # aiokafka exposes no public accessor for the group identity it holds.
        return str(self.consumer._coordinator.member_id)

    @property
    def generation(self) -> int:
        return int(self.consumer._coordinator.generation)

    def assignment(self) -> set[tuple[str, int]]:
        return {(tp.topic, tp.partition) for tp in self.consumer.assignment()}

    async def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self.poller.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.poller
        await self.consumer.stop()


async def poll_forever(consumer: AIOKafkaConsumer) -> None:
    while True:
        await consumer.getmany(timeout_ms=100)


@contextlib.asynccontextmanager
async def aiokafka_members(backend: Backend) -> AsyncIterator[Callable[..., Any]]:
    started: list[AiokafkaMember] = []

    async def start(group: str, topic: str, **config: Any) -> AiokafkaMember:
        settings: dict[str, Any] = {
            "bootstrap_servers": backend.bootstrap,
            "group_id": group,
            "client_id": f"interop-aiokafka-{len(started)}",
            "session_timeout_ms": backend.session_timeout_ms,
            "heartbeat_interval_ms": 200,
            "rebalance_timeout_ms": 5000,
            "max_poll_interval_ms": 60_000,
            "retry_backoff_ms": 50,
            "enable_auto_commit": False,
        }
        consumer = AIOKafkaConsumer(**{**settings, **config})
        await consumer.start()
        consumer.subscribe(topics=[topic])
        member = AiokafkaMember(consumer, asyncio.create_task(poll_forever(consumer)))
        started.append(member)
        return member

    try:
        yield start
    finally:
        for member in started:
            await member.stop()


async def settled(
    wire: GroupWire, group: str, members: list[AiokafkaMember], backend: Backend, topic: str
) -> tuple[int, Described] | None:
    generations = {m.generation for m in members}
    if len(generations) != 1 or -1 in generations:
        return None
    described = await wire.describe(group)
    if described.state != "Stable":
        return None
    if described.member_ids() != {m.member_id for m in members}:
        return None
    if not check_partitioning(backend, topic, (m.assignment() for m in members)):
        return None
    return generations.pop(), described


@pytest.mark.slow_on_tansu
async def test_aiokafka_consumers_form_rebalance_and_leave(
    backend: Backend, connect: Connect, group_id: str
) -> None:
    topic = "interop-aiokafka"
    await backend.ensure_topic(topic, PARTITIONS)
    observer = await connect()
    async with aiokafka_members(backend) as start:
        first = [await start(group_id, topic), await start(group_id, topic)]
        gen1, described = await wait_for(
            lambda: settled(observer, group_id, first, backend, topic), "two aiokafka members"
        )
        assert described.protocol_type == "consumer"
        if backend.name == "embedded":
            # Tansu leaves these empty (see test_describe_groups).
            assert described.protocol in ("range", "roundrobin")
            assert all(m.client_id.startswith("interop-aiokafka-") for m in described.members)

        third = await start(group_id, topic)
        everyone = [*first, third]
        gen2, described = await wait_for(
            lambda: settled(observer, group_id, everyone, backend, topic),
            "the third member to join",
        )
        assert gen2 > gen1
        assert len(described.members) == 3

        await third.stop()  # sends LeaveGroup
        gen3, described = await wait_for(
            lambda: settled(observer, group_id, first, backend, topic),
            "the group to rebalance after a member left",
        )
        assert gen3 > gen2
        assert described.member_ids() == {m.member_id for m in first}
        for member in first:
            await member.stop()
    await wait_for(lambda: _empty(observer, group_id), "the group to be empty after everyone left")


@pytest.mark.slow_on_tansu
async def test_aiokafka_static_member_restart_keeps_generation(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, group_id: str
) -> None:
    tansu_deviates(
        request,
        backend,
        "a restarted static aiokafka member starts a rebalance (new generation)",
    )
    topic = "interop-aiokafka-static"
    await backend.ensure_topic(topic, PARTITIONS)
    observer = await connect()
    # Long enough that the restart happens well within the session.
    session_ms = 6000 if backend.name == "embedded" else backend.session_timeout_ms
    async with aiokafka_members(backend) as start:
        a = await start(
            group_id, topic, group_instance_id="static-a", session_timeout_ms=session_ms
        )
        b = await start(
            group_id, topic, group_instance_id="static-b", session_timeout_ms=session_ms
        )
        generation, described = await wait_for(
            lambda: settled(observer, group_id, [a, b], backend, topic), "two static members"
        )
        if backend.name == "embedded":  # Tansu describes no member details
            assert {m.instance_id for m in described.members} == {"static-a", "static-b"}
        old_member_id, old_assignment = a.member_id, a.assignment()

        await a.stop()  # a static member sends no LeaveGroup
        restarted = await start(
            group_id, topic, group_instance_id="static-a", session_timeout_ms=session_ms
        )
        new_generation, described = await wait_for(
            lambda: settled(observer, group_id, [restarted, b], backend, topic),
            "the restarted static member",
        )
        assert new_generation == generation, "a static restart must not start a rebalance"
        await asyncio.sleep(1.0)
        assert (b.generation, restarted.generation) == (generation, generation)
        assert restarted.member_id != old_member_id
        assert restarted.assignment() == old_assignment
        if backend.name == "embedded":
            assert {m.instance_id for m in described.members} == {"static-a", "static-b"}
        fenced = await observer.heartbeat(
            group_id, generation, old_member_id, instance_id="static-a"
        )
        assert fenced == FENCED_INSTANCE_ID


async def _empty(wire: GroupWire, group: str) -> Described | None:
    described = await wire.describe(group)
    return described if described.state == "Empty" and not described.members else None


# ---------------------------------------------------------------------------- confluent-kafka


@dataclass
class LibrdkafkaMember:
    """A confluent-kafka consumer polled by its own thread (librdkafka serves
    rebalance callbacks only from ``poll``)."""

    config: dict[str, Any]
    topic: str
    cooperative: bool
    assignment: set[tuple[str, int]] = field(default_factory=set)
    rebalances: int = 0
    revocations: int = 0
    member_id: str = ""
    errors: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="interop-librdkafka", daemon=True)
        self._thread.start()

    def _on_stats(self, payload: str) -> None:
        self.stats = json.loads(payload).get("cgrp", {})

    def _on_assign(self, consumer: Consumer, partitions: list[Any]) -> None:
        with self._lock:
            added = {(p.topic, p.partition) for p in partitions}
            self.assignment = (self.assignment | added) if self.cooperative else added
            self.rebalances += 1

    def _on_revoke(self, consumer: Consumer, partitions: list[Any]) -> None:
        with self._lock:
            lost = {(p.topic, p.partition) for p in partitions}
            self.assignment = (self.assignment - lost) if self.cooperative else set()
            self.revocations += 1

    def _run(self) -> None:
        consumer = Consumer(
            {
                **self.config,
                "stats_cb": self._on_stats,
                "error_cb": lambda error: self.errors.append(str(error)),
            }
        )
        try:
            consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
            while not self._stop.is_set():
                message = consumer.poll(0.05)
                if message is not None and message.error():
                    self.errors.append(str(message.error()))
                self.member_id = consumer.memberid() or ""
        finally:
            consumer.close()

    def snapshot(self) -> tuple[set[tuple[str, int]], int, str]:
        with self._lock:
            return set(self.assignment), self.rebalances, self.member_id

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.to_thread(self._thread.join, 30)
        assert not self._thread.is_alive(), "the librdkafka consumer did not close"


@contextlib.asynccontextmanager
async def librdkafka_members(backend: Backend) -> AsyncIterator[Callable[..., LibrdkafkaMember]]:
    started: list[LibrdkafkaMember] = []

    def start(
        group: str,
        topic: str,
        strategy: str,
        instance_id: str | None = None,
        session_timeout_ms: int | None = None,
    ) -> LibrdkafkaMember:
        config: dict[str, Any] = {
            "bootstrap.servers": backend.bootstrap,
            "group.id": group,
            "client.id": f"interop-librdkafka-{len(started)}",
            "session.timeout.ms": session_timeout_ms or backend.session_timeout_ms,
            "heartbeat.interval.ms": 200,
            "max.poll.interval.ms": 60_000,
            "partition.assignment.strategy": strategy,
            "enable.auto.commit": False,
            "statistics.interval.ms": 200,
            "topic.metadata.refresh.interval.ms": 1000,
            "reconnect.backoff.ms": 50,
            "log_level": 0,  # librdkafka logs to stderr otherwise
        }
        if instance_id is not None:
            config["group.instance.id"] = instance_id
        member = LibrdkafkaMember(config, topic, cooperative=strategy == "cooperative-sticky")
        started.append(member)
        return member

    try:
        yield start
    finally:
        for member in started:
            await member.stop()


async def librdkafka_settled(
    wire: GroupWire,
    group: str,
    members: list[LibrdkafkaMember],
    backend: Backend,
    topic: str,
) -> Described | None:
    snapshots = [m.snapshot() for m in members]
    if any(not member_id for _, _, member_id in snapshots):
        return None
    if any(m.stats.get("join_state") != "steady" for m in members):
        return None
    described = await wire.describe(group)
    if described.state != "Stable":
        return None
    if described.member_ids() != {member_id for _, _, member_id in snapshots}:
        return None
    if not check_partitioning(backend, topic, (a for a, _, _ in snapshots)):
        return None
    return described


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
async def test_librdkafka_consumers_form_rebalance_and_leave(
    backend: Backend, connect: Connect, group_id: str, strategy: str
) -> None:
    topic = f"interop-librdkafka-{strategy}"
    await backend.ensure_topic(topic, PARTITIONS)
    observer = await connect()
    async with librdkafka_members(backend) as start:
        first = [start(group_id, topic, strategy), start(group_id, topic, strategy)]
        described = await wait_for(
            lambda: librdkafka_settled(observer, group_id, first, backend, topic),
            f"two librdkafka members ({strategy})",
        )
        assert described.protocol_type == "consumer"
        if backend.name == "embedded":
            # Tansu leaves these empty (see test_describe_groups).
            assert described.protocol == strategy
            assert all(m.client_id.startswith("interop-librdkafka-") for m in described.members)
        counts = [m.rebalances for m in first]

        third = start(group_id, topic, strategy)
        everyone = [*first, third]
        described = await wait_for(
            lambda: librdkafka_settled(observer, group_id, everyone, backend, topic),
            "the third member to join",
        )
        assert len(described.members) == 3
        assert all(m.rebalances > c for m, c in zip(first, counts, strict=True)), (
            "every existing member takes part in the new generation"
        )

        # Counted before the stop: on the embedded coordinator the survivors can be
        # reassigned before close() returns.
        counts = [m.rebalances for m in first]
        await third.stop()  # close() sends LeaveGroup for a dynamic member
        described = await wait_for(
            lambda: librdkafka_settled(observer, group_id, first, backend, topic),
            "the group to rebalance after a member left",
        )
        await wait_for(
            lambda: all(m.rebalances > c for m, c in zip(first, counts, strict=True)),
            "the remaining members to be reassigned",
            timeout_s=10,
        )
        assert len(described.members) == 2


@pytest.mark.slow
async def test_librdkafka_static_member_restart_keeps_generation(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, group_id: str
) -> None:
    tansu_deviates(
        request,
        backend,
        "a restarted static member gets its old member id back (nothing is fenced)",
    )
    topic = "interop-librdkafka-static"
    await backend.ensure_topic(topic, PARTITIONS)
    observer = await connect()
    # Long enough that the restart happens well within the session.
    session_ms = 6000
    async with librdkafka_members(backend) as start:
        a = start(group_id, topic, "range", instance_id="static-a", session_timeout_ms=session_ms)
        b = start(group_id, topic, "range", instance_id="static-b", session_timeout_ms=session_ms)
        described = await wait_for(
            lambda: librdkafka_settled(observer, group_id, [a, b], backend, topic),
            "two static librdkafka members",
        )
        if backend.name == "embedded":  # Tansu describes no member details
            assert {m.instance_id for m in described.members} == {"static-a", "static-b"}
        a_assignment, _, old_member_id = a.snapshot()
        b_assignment, b_rebalances, _ = b.snapshot()
        b_revocations = b.revocations

        await a.stop()  # a static member's close sends no LeaveGroup
        restarted = start(
            group_id, topic, "range", instance_id="static-a", session_timeout_ms=session_ms
        )
        described = await wait_for(
            lambda: librdkafka_settled(observer, group_id, [restarted, b], backend, topic),
            "the restarted static member",
        )
        # Leave time for a rebalance, had the restart started one, to reach b.
        await asyncio.sleep(1.0)
        new_assignment, _, new_member_id = restarted.snapshot()
        assert new_member_id != old_member_id
        assert new_assignment == a_assignment, "the restarted member gets its old assignment"
        if backend.name == "embedded":
            assert {m.instance_id for m in described.members} == {"static-a", "static-b"}
        # No new generation: the other member saw neither a revocation nor an assignment.
        assert b.snapshot()[:2] == (b_assignment, b_rebalances)
        assert b.revocations == b_revocations


async def test_aiokafka_and_librdkafka_share_a_group(
    backend: Backend, connect: Connect, group_id: str
) -> None:
    """Two client implementations in one group, agreeing on the range protocol."""
    topic = "interop-mixed"
    await backend.ensure_topic(topic, PARTITIONS)
    observer = await connect()

    async def both_settled(
        python_member: AiokafkaMember, c_member: LibrdkafkaMember
    ) -> Described | None:
        c_assignment, _, c_member_id = c_member.snapshot()
        if not c_member_id or c_member.stats.get("join_state") != "steady":
            return None
        if python_member.generation == -1:
            return None
        described = await observer.describe(group_id)
        if described.state != "Stable":
            return None
        if described.member_ids() != {python_member.member_id, c_member_id}:
            return None
        if not check_partitioning(backend, topic, [python_member.assignment(), c_assignment]):
            return None
        return described

    async with aiokafka_members(backend) as start_python, librdkafka_members(backend) as start_c:
        python_member = await start_python(
            group_id, topic, partition_assignment_strategy=(RangePartitionAssignor,)
        )
        c_member = start_c(group_id, topic, "range")
        described = await wait_for(
            lambda: both_settled(python_member, c_member), "an aiokafka and a librdkafka member"
        )
        assert described.protocol_type == "consumer"
        if backend.name == "embedded":
            assert described.protocol == "range"
