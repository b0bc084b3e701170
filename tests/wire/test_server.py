"""The asyncio driver: ordering, timers, persistence before replies, shutdown."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest

from workgroup.coordinator import wire
from workgroup.coordinator.actions import StoredGroup, StoredOffset
from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.server import CoordinatorServer
from workgroup.coordinator.store import Store
from workgroup.errors import ErrorCode, StoreError
from workgroup.testing import FakeClock

from .core_double import CoreDouble, serving_double
from .raw_client import (
    ApiVersionsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    RawClient,
)


def join_request(member_id: str = "m-1") -> object:
    proto = JoinGroupRequest.JoinGroupRequestProtocol
    return JoinGroupRequest[5](
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocols=[proto(name="range", metadata=b"md")],
    )


def commit_request(offset: int) -> object:
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    part = topic.OffsetCommitRequestPartition
    return OffsetCommitRequest[8](
        group_id="g",
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            topic(
                name="t",
                partitions=[
                    part(
                        partition_index=0,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata="m",
                    )
                ],
            )
        ],
    )


@pytest.fixture
async def double_server() -> AsyncIterator[tuple[CoordinatorServer, CoreDouble]]:
    async with serving_double(join_delay_ms=300) as running:
        yield running


async def test_pipelined_responses_keep_request_order(
    double_server: tuple[CoordinatorServer, CoreDouble],
) -> None:
    server, _ = double_server
    client = await RawClient.connect(*server.address)
    try:
        # The JoinGroup is held 300 ms; the requests behind it are answered at
        # once by the core but must not overtake it on the wire.
        await client.send(join_request(), 5)
        await client.send(HeartbeatRequest[4](group_id="g", generation_id=1, member_id="m"), 4)
        await client.send(
            ApiVersionsRequest[3](client_software_name="raw-client", client_software_version="1.0"),
            3,
        )
        await client.send(HeartbeatRequest[0](group_id="g", generation_id=1, member_id="m"), 0)
        join = await client.receive()  # receive() checks correlation ids in order
        assert (join.error_code, join.generation_id) == (0, 1)
        assert (await client.receive()).error_code == 0
        assert (await client.receive()).error_code == 0
        assert (await client.receive()).error_code == 0
    finally:
        await client.close()


async def test_timer_answers_held_requests_without_other_traffic(
    double_server: tuple[CoordinatorServer, CoreDouble],
) -> None:
    server, core = double_server
    client = await RawClient.connect(*server.address)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        join = await client.call(join_request(), 5)
        elapsed = loop.time() - started
        assert join.error_code == 0
        assert 0.25 <= elapsed < 2.0
        assert core.next_deadline_ms() is None
    finally:
        await client.close()


async def test_metadata_and_find_coordinator_name_the_bound_address(
    double_server: tuple[CoordinatorServer, CoreDouble],
) -> None:
    server, _ = double_server
    host, port = server.address
    client = await RawClient.connect(host, port)
    try:
        md = await client.call(MetadataRequest[12](topics=None), 12)
        assert [(b.node_id, b.host, b.port) for b in md.brokers] == [(0, host, port)]
        assert md.topics == []
        fc = await client.call(FindCoordinatorRequest[4](key_type=0, coordinator_keys=["g"]), 4)
        assert [(c.host, c.port, c.error_code) for c in fc.coordinators] == [(host, port, 0)]
    finally:
        await client.close()


async def test_wildcard_listener_advertises_the_address_the_client_used() -> None:
    server = CoordinatorServer(CoordinatorConfig(), host="0.0.0.0", port=0, core=CoreDouble())
    await server.start()
    client = await RawClient.connect("127.0.0.1", server.address[1])
    try:
        md = await client.call(MetadataRequest[1](topics=None), 1)
        assert md.brokers[0].host == "127.0.0.1"
    finally:
        await client.close()
        await server.stop()


async def test_clean_stop_answers_parked_requests(
    double_server: tuple[CoordinatorServer, CoreDouble],
) -> None:
    server, core = double_server
    core.join_delay_ms = 60_000
    client = await RawClient.connect(*server.address)
    try:
        await client.send(join_request(), 5)
        await asyncio.sleep(0.05)
        await server.stop()
        response = await client.receive()
        assert response.error_code == ErrorCode.NOT_COORDINATOR
        assert await client.closed_by_peer()
    finally:
        await client.close()


class GatedStore(Store):
    """A store whose writes wait until the test opens the gate."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir)
        self.gate = threading.Event()
        self.writes = 0

    def write(self, groups: Iterable[StoredGroup], offsets: Iterable[StoredOffset]) -> None:
        self.gate.wait(10)
        super().write(groups, offsets)
        self.writes += 1


async def test_reply_waits_for_its_persist_and_writes_are_batched(tmp_path: Path) -> None:
    store = GatedStore(tmp_path)
    server = CoordinatorServer(CoordinatorConfig(), core=CoreDouble(), store=store)
    await server.start()
    client = await RawClient.connect(*server.address)
    other = await RawClient.connect(*server.address)
    try:
        await client.send(commit_request(1), 8)
        await client.send(commit_request(2), 8)
        await other.send(commit_request(3), 8)
        with pytest.raises(TimeoutError):
            await client.receive(within=0.3)
        client._sent.insert(0, (1, 8, 8))  # receive() popped it; it is still owed
        # Heartbeats do not persist, but they wait behind the unfinished write.
        await other.send(HeartbeatRequest[4](group_id="g", generation_id=1, member_id="m"), 4)
        store.gate.set()
        for _ in range(2):
            assert (await client.receive()).topics[0].partitions[0].error_code == 0
        assert (await other.receive()).topics[0].partitions[0].error_code == 0
        assert (await other.receive()).error_code == 0
        _, offsets = store.load()
        assert offsets[0].offset in (2, 3)
        assert store.writes <= 2  # the commits queued behind the first write went together
    finally:
        await client.close()
        await other.close()
        await server.stop()


class FailingStore(Store):
    def write(self, groups: Iterable[StoredGroup], offsets: Iterable[StoredOffset]) -> None:
        raise StoreError("disk on fire")


async def test_store_failure_stops_the_coordinator_without_acknowledging(tmp_path: Path) -> None:
    server = CoordinatorServer(CoordinatorConfig(), core=CoreDouble(), store=FailingStore(tmp_path))
    await server.start()
    client = await RawClient.connect(*server.address)
    try:
        await client.send(commit_request(1), 8)
        with pytest.raises(StoreError, match="disk on fire"):
            async with asyncio.timeout(10):
                await server.wait_stopped()
        assert await client.closed_by_peer()
    finally:
        await client.close()
        await server.stop()


async def test_restores_stored_state_on_start(tmp_path: Path) -> None:
    with Store(tmp_path) as store:
        store.write((), (StoredOffset("g", "t", 0, 42, "meta", -1, 1),))
    core = CoreDouble()
    server = CoordinatorServer(CoordinatorConfig(), core=core, store=Store(tmp_path))
    await server.start()
    client = await RawClient.connect(*server.address)
    try:
        assert core.restored is not None
        assert core.restored[1] == [StoredOffset("g", "t", 0, 42, "meta", -1, 1)]
        topic = OffsetFetchRequest.OffsetFetchRequestTopic
        r = await client.call(
            OffsetFetchRequest[5](group_id="g", topics=[topic(name="t", partition_indexes=[0])]),
            5,
        )
        assert r.topics[0].partitions[0].committed_offset == 42
    finally:
        await client.close()
        await server.stop()


async def test_in_process_fixture_serves_the_real_core(
    coordinator_server: CoordinatorServer,
) -> None:
    client = await RawClient.connect(*coordinator_server.address)
    try:
        first = await client.call(join_request(member_id=""), 5)
        assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED  # KIP-394, v4+
        join = await client.call(join_request(member_id=first.member_id), 5)
        assert join.error_code == 0
        assert join.leader == join.member_id == first.member_id
        hb = await client.call(
            HeartbeatRequest[4](
                group_id="g", generation_id=join.generation_id, member_id=join.member_id
            ),
            4,
        )
        assert hb.error_code in (0, ErrorCode.REBALANCE_IN_PROGRESS)
    finally:
        await client.close()


@pytest.mark.parametrize(("name", "version"), [("", ""), ("raw client", "1.0 beta")])
async def test_api_versions_v3_tolerates_any_software_name(
    double_server: tuple[CoordinatorServer, CoreDouble], name: str, version: str
) -> None:
    server, _ = double_server
    client = await RawClient.connect(*server.address)
    try:
        request = ApiVersionsRequest[3](client_software_name=name, client_software_version=version)
        response = await client.call(request, 3)
        assert response.error_code == 0
        assert len(response.api_keys) == len(wire.ADVERTISED_VERSIONS)
    finally:
        await client.close()


async def test_a_deep_pipeline_behind_a_held_request_is_answered_in_order(
    double_server: tuple[CoordinatorServer, CoreDouble],
) -> None:
    server, _ = double_server
    client = await RawClient.connect(*server.address)
    try:
        await client.send(join_request(), 5)
        # More than a connection may have in flight: the server stops reading
        # until the JoinGroup is answered, then serves the rest in order.
        count = 600
        for i in range(count):
            await client.send(HeartbeatRequest[4](group_id="g", generation_id=i, member_id="m"), 4)
        assert (await client.receive()).error_code == 0
        for _ in range(count):
            assert (await client.receive()).error_code == 0
    finally:
        await client.close()


async def test_describe_groups_shows_client_id_and_host_as_kafka_does(
    coordinator_server: CoordinatorServer,
) -> None:
    client = await RawClient.connect(*coordinator_server.address)
    try:
        first = await client.call(join_request(member_id=""), 5)
        await client.call(join_request(member_id=first.member_id), 5)
        described = await client.call(DescribeGroupsRequest[5](groups=["g"]), 5)
        (member,) = described.groups[0].members
        assert member.client_id == "raw"
        assert member.client_host == "/127.0.0.1"
    finally:
        await client.close()


async def _committed_at_ms(server: CoordinatorServer, core: CoreDouble) -> int:
    """Commit one offset through ``server`` and return the ``now`` its core was given."""
    await server.start()
    client = await RawClient.connect(*server.address)
    try:
        r = await client.call(commit_request(5), 8)
        assert r.topics[0].partitions[0].error_code == 0
    finally:
        await client.close()
        await server.stop()
    return core.offsets["g", "t", 0].commit_timestamp_ms


async def test_the_core_reads_now_from_the_servers_clock() -> None:
    clock = FakeClock(start_s=1234.5)
    core = CoreDouble()
    server = CoordinatorServer(CoordinatorConfig(), core=core, clock=clock)
    assert server.clock is clock
    assert await _committed_at_ms(server, core) == 1_234_500


async def test_clock_ms_still_works_with_a_deprecation_warning_naming_clock() -> None:
    core = CoreDouble()
    with pytest.warns(DeprecationWarning, match=r"clock_ms=.*deprecated.*pass clock="):
        server = CoordinatorServer(CoordinatorConfig(), core=core, clock_ms=lambda: 777)
    assert server.clock.monotonic_ms() == 777
    assert server.clock.monotonic() == 0.777
    assert await _committed_at_ms(server, core) == 777
