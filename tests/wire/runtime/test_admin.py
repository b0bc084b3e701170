"""workgroup describe / list / top against a real coordinator (embedded and Tansu)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaConsumer
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.wire.member.backends import Backend, run_backend
from workgroup.admin import GroupNotFoundError, decode_assignment, describe_group, list_groups
from workgroup.cli import main
from workgroup.member.driver import GroupMember
from workgroup.protocol import Protocol
from workgroup.protocol.metadata import AssignmentData, BinaryCodec
from workgroup.testing import capture_logs

TIMEOUT_S = 30
SHARDS = {"shard": [0, 1, 2, 3]}


@pytest.fixture(scope="module", params=["embedded", pytest.param("tansu", marks=pytest.mark.tansu)])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    with run_backend(request.param) as running:
        yield running


async def cli(args: list[str]) -> Result:
    """The CLI in a thread: it runs its own event loop."""
    return await asyncio.to_thread(CliRunner().invoke, main, args)


def member(backend: Backend, group: str, instance: str) -> GroupMember:
    return GroupMember(
        backend.bootstrap,
        group,
        [Protocol.of("cooperative-sticky")],
        instance_id=instance,
        resources=SHARDS,
        session_timeout_ms=backend.session_timeout_ms,
        heartbeat_interval_ms=300,
        client_id=f"admin-test-{instance}",
    )


async def test_describe_a_workgroup_group(backend: Backend, request: pytest.FixtureRequest) -> None:
    if backend.name == "tansu":
        request.applymarker(
            pytest.mark.xfail(
                strict=True,
                reason="Tansu: DescribeGroups answers an empty protocol and no member details",
            )
        )
    group = f"admin-{uuid.uuid4().hex[:8]}"
    a, b = member(backend, group, "a"), member(backend, group, "b")
    async with a, b, asyncio.timeout(TIMEOUT_S):
        await a.wait_for(lambda _: a.stable and b.stable and len(a.assignment) == 2)
        await b.wait_for(lambda _: b.stable and len(b.assignment) == 2)
        described = await describe_group(backend.bootstrap, group)
        assert (described.state, described.protocol_type) == ("Stable", "workgroup")
        assert described.protocol == "cooperative-sticky.v1"
        assert described.generation == a.generation
        by_instance = {m.instance_id: m for m in described.members}
        assert set(by_instance) == {"a", "b"}
        for name, m in (("a", a), ("b", b)):
            assert by_instance[name].member_id == m.member_id
            assert by_instance[name].client_id == f"admin-test-{name}"
            assert by_instance[name].client_host
            keys = sorted(key for _, key in m.assignment)
            assert by_instance[name].assignment == {"shard": keys}
        # The CLI prints the documented JSON shape.
        result = await cli(["describe", group, "--bootstrap", backend.bootstrap, "--json"])
        assert result.exit_code == 0, result.output
        shape = json.loads(result.output)
        assert list(shape) == [
            "group", "state", "protocol_type", "protocol", "generation", "leader", "members",
            "resources", "keyspaces", "slots_error",
        ]  # fmt: skip
        assert shape["keyspaces"] == {}  # a group of listed resources has none
        assert list(shape["members"][0]) == [
            "member_id", "instance_id", "client_id", "client_host", "process", "assignment",
            "warming", "ready", "draining", "leaving", "load",
        ]  # fmt: skip
        table = await cli(["describe", group, "--bootstrap", backend.bootstrap])
        assert table.exit_code == 0
        assert group in table.output
        assert "shard:" in table.output
        # Piped: one row per member, its id whole (not wrapped at 80 columns).
        for m in (a, b):
            assert len(m.member_id) > 30
            assert sum(m.member_id in line for line in table.output.splitlines()) == 1
        top = await cli(["top", group, "--bootstrap", backend.bootstrap, "--once"])
        assert top.exit_code == 0, top.output
        # One poll sees no rebalance: no empty "recent rebalances" table.
        assert "recent rebalances" not in top.output
        assert a.member_id in top.output


async def test_describe_shows_warm_ups_ready_ones_and_a_draining_member() -> None:
    """b warms two shards up (a keeps them until b is ready), then a drains."""
    with run_backend("embedded") as backend, capture_logs() as logs:
        group = f"admin-warm-{uuid.uuid4().hex[:8]}"
        a = member(backend, group, "a")
        b = GroupMember(
            backend.bootstrap,
            group,
            [Protocol.of("cooperative-sticky")],
            instance_id="b",
            resources=SHARDS,
            session_timeout_ms=backend.session_timeout_ms,
            heartbeat_interval_ms=300,
            warm_up=True,
            on_warming=lambda resources, generation: None,  # ready() comes later
        )
        async with a, asyncio.timeout(TIMEOUT_S):
            await a.wait_for(lambda _: a.stable and len(a.assignment) == 4)
            async with b:
                await b.wait_for(lambda _: len(b.warming) == 2)
                described = await describe_group(backend.bootstrap, group)
                by_instance = {m.instance_id: m for m in described.members}
                warming = sorted(key for _, key in b.warming)
                assert by_instance["b"].warming == {"shard": warming}
                assert by_instance["b"].status == "warming"
                assert by_instance["b"].ready == {}
                assert by_instance["a"].assignment == {"shard": [0, 1, 2, 3]}  # a keeps them
                assert by_instance["a"].status == "member"
                # a drains; b reports its warm-ups ready as they come: every shard cuts over.
                a.drain()

                async def ready_all() -> None:
                    while True:
                        b.ready(b.warming)
                        await asyncio.sleep(0.1)

                readying = asyncio.create_task(ready_all())
                try:
                    await a.wait_for(lambda _: a.draining and not a.assignment and a.stable)
                    await b.wait_for(lambda _: len(b.assignment) == 4 and b.stable)
                finally:
                    readying.cancel()
                result = await cli(["describe", group, "--bootstrap", backend.bootstrap, "--json"])
                assert result.exit_code == 0, result.output
                shape = {m["instance_id"]: m for m in json.loads(result.output)["members"]}
                assert (shape["a"]["draining"], shape["a"]["leaving"]) == (True, False)
                assert shape["a"]["assignment"] == {}
                assert shape["b"]["draining"] is False
                table = await cli(["describe", group, "--bootstrap", backend.bootstrap])
                assert "draining" in table.output
                assert "status" in table.output
        # The leader (a) counted b's join and a's drain, each move once, all warmed up.
        moves = [e for e in logs if e["event"] == "member.moves"]
        assert sum(e.get("join", 0) for e in moves) == 2, moves
        assert sum(e.get("drain", 0) for e in moves) == 2, moves
        assert sum(e["warmup"] for e in moves) == 4, moves


async def test_describe_a_kafka_consumer_group(
    backend: Backend, request: pytest.FixtureRequest
) -> None:
    if backend.name == "tansu":
        request.applymarker(
            pytest.mark.xfail(
                strict=True,
                reason="Tansu: DescribeGroups answers an empty protocol and no member details",
            )
        )
    group = f"admin-consumer-{uuid.uuid4().hex[:8]}"
    topic = f"admin-{uuid.uuid4().hex[:6]}"
    await backend_topic(backend, topic)
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=backend.bootstrap,
        group_id=group,
        session_timeout_ms=backend.session_timeout_ms,
        heartbeat_interval_ms=300,
    )
    await consumer.start()
    try:
        async with asyncio.timeout(TIMEOUT_S):
            while True:
                described = await describe_group(backend.bootstrap, group)
                if described.state == "Stable":
                    break
                await asyncio.sleep(0.1)
        assert described.protocol_type == "consumer"
        assert described.protocol in ("range", "roundrobin")  # aiokafka's two defaults
        [m] = described.members
        assert m.assignment is not None
        assert m.assignment_error is None
    finally:
        await consumer.stop()


async def backend_topic(backend: Backend, topic: str) -> None:
    if backend.name == "tansu":
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        admin = AIOKafkaAdminClient(bootstrap_servers=backend.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 2, 1)])
        finally:
            await admin.close()


async def test_list_and_unknown_groups(backend: Backend) -> None:
    group = f"admin-list-{uuid.uuid4().hex[:8]}"
    m = member(backend, group, "solo")
    async with m, asyncio.timeout(TIMEOUT_S):
        await m.wait_stable()
        if backend.name == "embedded":  # Tansu lists only groups with committed offsets
            listed = {g.group: g for g in await list_groups(backend.bootstrap)}
            assert listed[group].protocol_type == "workgroup"
            result = await cli(["list", "--bootstrap", backend.bootstrap, "--json"])
            assert result.exit_code == 0
            # One JSON document, as describe --json prints.
            assert any(entry["group"] == group for entry in json.loads(result.output))
    if backend.name == "embedded":
        with pytest.raises(GroupNotFoundError):
            await describe_group(backend.bootstrap, "no-such-group-here")
        result = await cli(["describe", "no-such-group-here", "--bootstrap", backend.bootstrap])
        assert result.exit_code == 1
        assert "no group 'no-such-group-here'" in result.output


def test_top_once_exits_1_when_nothing_answers() -> None:
    result = CliRunner().invoke(main, ["top", "g", "--once", "--bootstrap", "127.0.0.1:1"])
    assert result.exit_code == 1
    assert "error: nothing answers at 127.0.0.1:1: Connection refused\nhint: " in result.output


def test_bad_addresses_exit_2() -> None:
    for command in (["describe", "g"], ["list"], ["top", "g", "--once"]):
        result = CliRunner().invoke(main, [*command, "--bootstrap", "host:1:2"])
        assert result.exit_code == 2, (command, result.output)


@settings(max_examples=200, deadline=None)
@given(blob=st.binary(max_size=200), protocol_type=st.sampled_from(["workgroup", "consumer", "x"]))
def test_assignment_bytes_never_break_describe(blob: bytes, protocol_type: str) -> None:
    assignment, _, error = decode_assignment(protocol_type, blob)
    assert (assignment is None) == (error is not None) or blob == b""


def test_a_workgroup_assignment_decodes_by_kind() -> None:
    blob = BinaryCodec().encode_assignment(
        AssignmentData(assigned=(("b", 1), ("a", "x"), ("b", 0)), generation=7)
    )
    assert decode_assignment("workgroup", blob) == ({"a": ["x"], "b": [0, 1]}, 7, None)
