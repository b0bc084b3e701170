"""Kafka's classic group protocol rules, checked on the wire against every back-end.

Each check runs through two third-party encoders (kafka-python 3.x at the newest
common versions, flexible ones included; aiokafka 0.14 at the versions it ships)
against the embedded coordinator and Tansu. Where Tansu does not follow Kafka the
Tansu parametrization is a strict expected failure whose reason says what Tansu
does instead; docs/compatibility.md lists the same table.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import Backend, Connect, start_backend, tansu_deviates
from .members import Member, assignment_for, settle
from .wire import (
    API_KEYS,
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    GROUP_MAX_SIZE_REACHED,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NON_EMPTY_GROUP,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
    GroupWire,
    Joined,
    KafkaPythonWire,
)

ENCODERS = ["kafka-python", "aiokafka"]

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=ENCODERS)
def encoder(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def member(wire: GroupWire, group_id: str, backend: Backend, **kwargs: Any) -> Member:
    kwargs.setdefault("session_timeout_ms", backend.session_timeout_ms)
    kwargs.setdefault("rebalance_timeout_ms", backend.session_timeout_ms)
    return Member(wire, group_id, **kwargs)


async def heartbeat_until(m: Member, expected: int, within_s: float = 3.0) -> int:
    """Heartbeats until the coordinator answers ``expected`` (or returns the last answer)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        error = await m.heartbeat()
        if error == expected or loop.time() > deadline:
            return error
        await asyncio.sleep(0.1)


# ---------------------------------------------------------------------------- discovery


async def test_api_versions_lists_group_apis(
    backend: Backend, connect: Connect, encoder: str
) -> None:
    wire = await connect(encoder)
    versions = await wire.api_versions()
    for name, key in API_KEYS.items():
        assert key in versions, f"{name} not advertised"
        low, high = versions[key]
        assert 0 <= low <= high, (name, low, high)
    # The versions the classic clients pick must be in range (librdkafka/Java/aiokafka).
    assert versions[API_KEYS["JoinGroup"]][1] >= 5
    assert versions[API_KEYS["SyncGroup"]][1] >= 3
    assert versions[API_KEYS["Heartbeat"]][1] >= 3
    assert versions[API_KEYS["LeaveGroup"]][1] >= 3


async def test_find_coordinator_returns_the_broker_itself(
    backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    wire = await connect(encoder)
    found = await wire.find_coordinator(group_id)
    assert found.error == NONE
    assert (found.host, found.port) == (backend.host, backend.port)
    assert found.node_id >= 0


async def test_find_coordinator_batched_v4(
    backend: Backend, connect: Connect, group_id: str
) -> None:
    """FindCoordinator v4+ (KIP-699) looks up several keys at once; the Java client
    3.x uses it."""
    wire = await connect("kafka-python")
    assert isinstance(wire, KafkaPythonWire)
    from kafka.protocol.metadata import FindCoordinatorRequest  # loaded by .wire already

    keys = [group_id, group_id + "-other"]
    response = await wire.request(
        FindCoordinatorRequest(key_type=0, coordinator_keys=keys, version=4)
    )
    found = {c.key: (c.error_code, c.host, c.port) for c in response.coordinators}
    assert found == {key: (NONE, backend.host, backend.port) for key in keys}


# ---------------------------------------------------------------------------- joining


async def test_first_join_creates_generation_one(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(request, backend, "generations start at 0")
    m = member(await connect(encoder), group_id, backend)
    joined = await m.join()
    assert joined.error == NONE
    assert joined.generation == 1
    assert joined.is_leader
    assert joined.protocol_name == "range"
    synced = await m.sync()
    assert synced.error == NONE
    assert synced.assignment == assignment_for(m.member_id)
    assert await m.leave() == NONE


async def test_member_id_required_on_join_v4_and_later(
    backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    wire = await connect(encoder)
    first = await wire.join(group_id, session_timeout_ms=backend.session_timeout_ms)
    assert first.error == MEMBER_ID_REQUIRED
    assert first.member_id, "the coordinator must hand out the member id to use"
    assert first.generation == -1
    second = await wire.join(
        group_id, member_id=first.member_id, session_timeout_ms=backend.session_timeout_ms
    )
    assert second.error == NONE
    assert second.member_id == first.member_id
    assert second.leader == first.member_id
    assert (await wire.leave(group_id, first.member_id)).error == NONE


async def test_join_before_v4_gets_member_id_at_once(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, group_id: str
) -> None:
    tansu_deviates(request, backend, "JoinGroup v0-v3 also gets MEMBER_ID_REQUIRED")
    wire = await connect("kafka-python")
    joined = await wire.join(group_id, session_timeout_ms=backend.session_timeout_ms, version=3)
    assert joined.error == NONE
    assert joined.member_id
    assert joined.leader == joined.member_id
    assert (await wire.leave(group_id, joined.member_id)).error == NONE


async def test_session_timeout_out_of_bounds_rejected(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(request, backend, "session timeouts outside the broker's bounds are accepted")
    wire = await connect(encoder)
    too_short = await wire.join(group_id, session_timeout_ms=100)
    too_long = await wire.join(group_id, session_timeout_ms=1_800_001)
    assert (too_short.error, too_long.error) == (INVALID_SESSION_TIMEOUT, INVALID_SESSION_TIMEOUT)
    assert (await wire.describe(group_id)).state == "Dead", "a rejected join creates no group"


async def test_empty_group_id_rejected(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str
) -> None:
    tansu_deviates(request, backend, "a JoinGroup with an empty group id is not rejected")
    wire = await connect(encoder)
    joined = await wire.join("", session_timeout_ms=backend.session_timeout_ms)
    assert joined.error == INVALID_GROUP_ID


async def test_leader_gets_all_metadata_follower_none(
    backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    a = member(await connect(encoder), group_id, backend, protocols=[("range", b"meta-a")])
    b = member(await connect(encoder), group_id, backend, protocols=[("range", b"meta-b")])
    ja, jb = await asyncio.gather(a.join(), b.join())
    assert ja.error == jb.error == NONE
    assert ja.generation == jb.generation
    assert ja.leader == jb.leader
    leader, follower = (ja, jb) if ja.is_leader else (jb, ja)
    assert leader.members == {a.member_id: b"meta-a", b.member_id: b"meta-b"}
    assert follower.members == {}
    await asyncio.gather(a.sync(), b.sync())
    await asyncio.gather(a.leave(), b.leave())


async def test_follower_sync_waits_for_leader_assignment(
    backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    a = member(await connect(encoder), group_id, backend)
    b = member(await connect(encoder), group_id, backend)
    await asyncio.gather(a.join(), b.join())
    assert a.joined is not None
    assert b.joined is not None
    leader, follower = (a, b) if a.joined.is_leader else (b, a)
    follower_sync = asyncio.create_task(follower.sync())
    await asyncio.sleep(0.3)
    assert not follower_sync.done(), "the follower's SyncGroup must wait for the leader's"
    leader_synced = await leader.sync(
        {leader.member_id: b"leader-share", follower.member_id: b"follower-share"}
    )
    follower_synced = await asyncio.wait_for(follower_sync, 5)
    assert leader_synced.error == follower_synced.error == NONE
    assert leader_synced.assignment == b"leader-share"
    assert follower_synced.assignment == b"follower-share"
    await asyncio.gather(a.leave(), b.leave())


# ---------------------------------------------------------------------------- protocols


async def test_preference_vote_picks_protocol_all_support(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(
        request,
        backend,
        "no preference vote: the first joiner's first protocol is the group's, "
        "members without it get INCONSISTENT_GROUP_PROTOCOL",
    )
    # Candidates supported by all: range, roundrobin. Votes: a -> range, b and c -> roundrobin.
    a = member(
        await connect(encoder),
        group_id,
        backend,
        protocols=[("sticky", b"s"), ("range", b"r"), ("roundrobin", b"rr")],
    )
    b = member(
        await connect(encoder),
        group_id,
        backend,
        protocols=[("roundrobin", b"rr"), ("range", b"r")],
    )
    c = member(
        await connect(encoder),
        group_id,
        backend,
        protocols=[("roundrobin", b"rr"), ("sticky", b"s"), ("range", b"r")],
    )
    # a joins first, so a broker that takes the first joiner's favourite would pick sticky.
    assert (await a.join()).error == NONE
    await settle([a, b, c])
    for m in (a, b, c):
        assert m.joined is not None
        assert m.joined.protocol_name == "roundrobin"
    leader = next(m for m in (a, b, c) if m.joined and m.joined.is_leader)
    assert leader.joined is not None
    # The leader receives each member's metadata for the chosen protocol.
    assert set(leader.joined.members.values()) == {b"rr"}
    await asyncio.gather(a.leave(), b.leave(), c.leave())


async def test_member_without_common_protocol_rejected_alone(
    backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    a = member(await connect(encoder), group_id, backend)
    b = member(await connect(encoder), group_id, backend)
    generation = await settle([a, b])
    outsider = await connect(encoder)
    rejected = await outsider.join_new(
        group_id, protocols=[("sticky", b"s")], session_timeout_ms=backend.session_timeout_ms
    )
    assert rejected.error == INCONSISTENT_GROUP_PROTOCOL
    # The group keeps going: no rebalance, same generation.
    assert await a.heartbeat() == NONE
    assert await b.heartbeat() == NONE
    assert a.generation == generation
    await asyncio.gather(a.leave(), b.leave())


async def test_protocol_type_mismatch_rejected(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(request, backend, "a member of another protocol type is admitted")
    a = member(await connect(encoder), group_id, backend)
    await settle([a])
    other = await connect(encoder)
    rejected = await other.join_new(
        group_id, protocol_type="connect", session_timeout_ms=backend.session_timeout_ms
    )
    assert rejected.error == INCONSISTENT_GROUP_PROTOCOL
    assert await a.heartbeat() == NONE
    await a.leave()


async def test_empty_protocol_list_rejected(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(request, backend, "an empty protocol list closes the connection")
    wire = await connect(encoder)
    rejected = await wire.join_new(
        group_id, protocols=[], session_timeout_ms=backend.session_timeout_ms
    )
    assert rejected.error == INCONSISTENT_GROUP_PROTOCOL
    # The connection stays usable.
    assert (await wire.find_coordinator(group_id)).error == NONE


async def test_group_states_through_a_rebalance(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(
        request, backend, "DescribeGroups says 'Unknown' between JoinGroup and SyncGroup"
    )
    a = member(await connect(encoder), group_id, backend)
    observer = await connect(encoder)
    assert (await a.join()).error == NONE
    # Joined, the leader's assignment not yet in.
    assert (await observer.describe(group_id)).state == "CompletingRebalance"
    await a.sync()
    assert (await observer.describe(group_id)).state == "Stable"
    b = member(await connect(encoder), group_id, backend)
    b_join = asyncio.create_task(b.join())
    assert await heartbeat_until(a, REBALANCE_IN_PROGRESS) == REBALANCE_IN_PROGRESS
    assert (await observer.describe(group_id)).state == "PreparingRebalance"
    await asyncio.gather(a.join(), b_join)
    await asyncio.gather(a.sync(), b.sync())
    assert (await observer.describe(group_id)).state == "Stable"
    await asyncio.gather(a.leave(), b.leave())
    assert (await observer.describe(group_id)).state == "Empty"


async def test_member_missing_the_rebalance_is_removed(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(
        request,
        backend,
        "a member that does not rejoin within the rebalance timeout stays in the new generation",
    )
    # Rebalance timeouts are short so that the join completes quickly without b.
    a = member(await connect(encoder), group_id, backend, rebalance_timeout_ms=1000)
    b = member(await connect(encoder), group_id, backend, rebalance_timeout_ms=1000)
    generation = await settle([a, b])
    # b heartbeats on, so that only the rebalance timeout can remove it: silent, its
    # session (3 s) could expire first on a slow machine, and remove it on Tansu too.
    b_alive = asyncio.create_task(heartbeat_until(b, UNKNOWN_MEMBER_ID, within_s=60))
    try:
        c = member(await connect(encoder), group_id, backend, rebalance_timeout_ms=1000)
        c_join = asyncio.create_task(c.join())
        assert await heartbeat_until(a, REBALANCE_IN_PROGRESS) == REBALANCE_IN_PROGRESS
        # b never rejoins: once the rebalance timeout passes the group goes on without it.
        ja, jc = await asyncio.gather(a.join(), c_join)
        assert ja.error == jc.error == NONE
        assert ja.generation == jc.generation == generation + 1
        leader = ja if ja.is_leader else jc
        assert set(leader.members) == {a.member_id, c.member_id}
        await asyncio.gather(a.sync(), c.sync())
        assert await asyncio.wait_for(b_alive, 10) == UNKNOWN_MEMBER_ID
    finally:
        b_alive.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError):
            await b_alive
    await asyncio.gather(a.leave(), c.leave())


async def test_leader_leaving_with_its_join_held_is_not_the_next_leader(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(
        request,
        backend,
        "a leader that leaves while its JoinGroup is held still leads the round; the others "
        "wait for its SyncGroup, and every later JoinGroup answers that same round again",
    )
    a = member(await connect(encoder), group_id, backend)
    await settle([a])  # a leads
    c = member(await connect(encoder), group_id, backend)
    generation = await settle([a, c])
    assert a.joined is not None
    assert a.joined.is_leader
    b = member(await connect(encoder), group_id, backend)
    b_join = asyncio.create_task(b.join())
    assert await heartbeat_until(a, REBALANCE_IN_PROGRESS) == REBALANCE_IN_PROGRESS
    a_join = asyncio.create_task(a.join())
    await asyncio.sleep(0.2)  # a's JoinGroup is held: the round waits for c
    leaver = await connect(encoder)
    assert (await leaver.leave(group_id, a.member_id)).error == NONE
    jc = await c.join()
    jb = await asyncio.wait_for(b_join, 10)
    assert jb.error == jc.error == NONE
    assert jb.generation == jc.generation > generation
    assert jb.leader == jc.leader != a.member_id  # not a, who is gone
    leader = b if jb.is_leader else c
    assert leader.joined is not None
    assert set(leader.joined.members) == {b.member_id, c.member_id}
    synced = await asyncio.gather(b.sync(), c.sync())
    assert [s.error for s in synced] == [NONE, NONE]
    with contextlib.suppress(Exception):
        await asyncio.wait_for(a_join, 5)  # whatever a is told, it is not in the group
    await asyncio.gather(b.leave(), c.leave())


#: Sessions of the one-request-at-a-time check. Tansu holds every JoinGroup for
#: half the session, so the members heartbeat between the others' JoinGroups:
#: none goes longer than one hold, half its session, without contact.
IN_TURN_SESSION_MS = 4_000
#: Longer than the test may run: the embedded coordinator ends no round by timeout,
#: so a JoinGroup it holds is answered only once the others rejoin.
IN_TURN_REBALANCE_MS = 120_000


async def join_in_turn(m: Member, observer: GroupWire) -> asyncio.Task[Joined]:
    """Sends ``m``'s JoinGroup and returns once the coordinator has taken it.

    Kafka (and the embedded coordinator) holds the JoinGroup of a new member until
    the others rejoin, saying PreparingRebalance meanwhile; Tansu answers each
    JoinGroup by itself and never says PreparingRebalance, so there this waits for
    the answer. Tansu's DescribeGroups reads its store, not the group it holds in
    memory, so polling it does not overlap the JoinGroup.
    """
    joining = asyncio.create_task(m.join())
    async with asyncio.timeout(3 * IN_TURN_SESSION_MS / 1000):
        while not joining.done():
            if (await observer.describe(m.group)).state == "PreparingRebalance":
                break
            await asyncio.sleep(0.02)
    return joining


@pytest.mark.slow_on_tansu
async def test_leader_leaving_during_a_rebalance_is_not_the_next_leader(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    """A stable group (a leads, b follows); c joins; a leaves during that rebalance
    (LeaveGroup, no JoinGroup of its own in flight); b and c rejoin. Each request
    goes once the one before is answered (or held for the round): on Tansu no two
    requests overlap, so Tansu never reloads the group from its store."""
    tansu_deviates(
        request,
        backend,
        "a leader that leaves while the group rebalances stays the leader named in every "
        "later JoinGroup answer, so no SyncGroup completes (only a reload of the group from "
        "its store, which overlapping requests cause, forgets it)",
    )
    observer = await connect(encoder)
    a, b, c = [
        member(
            await connect(encoder),
            group_id,
            backend,
            session_timeout_ms=IN_TURN_SESSION_MS,
            rebalance_timeout_ms=IN_TURN_REBALANCE_MS,
        )
        for _ in range(3)
    ]

    # a and b form a stable group that a leads.
    assert (await a.join()).error == NONE
    assert (await a.sync()).error == NONE
    b_join = await join_in_turn(b, observer)
    assert await a.heartbeat() == REBALANCE_IN_PROGRESS
    ja = await a.join()
    jb = await b_join
    assert ja.error == jb.error == NONE
    assert ja.generation == jb.generation
    assert ja.is_leader
    assert set(ja.members) == {a.member_id, b.member_id}
    assert (await a.sync()).error == NONE
    assert (await b.sync()).error == NONE
    stable = await observer.describe(group_id)
    assert (stable.state, stable.member_ids()) == ("Stable", {a.member_id, b.member_id})

    # c joins; b is told to rejoin; the leader leaves instead.
    c_join = await join_in_turn(c, observer)
    assert await b.heartbeat() == REBALANCE_IN_PROGRESS
    assert await a.leave() == NONE
    rebalancing = await observer.describe(group_id)
    assert rebalancing.state != "Stable"
    assert rebalancing.member_ids() == {b.member_id, c.member_id}

    # b and c rejoin. Kafka holds c's JoinGroup until b rejoins; Tansu answered it
    # before a left, so c rejoins first there.
    if c_join.done():
        assert c_join.result().error == NONE
        c_join = asyncio.create_task(c.join())
        await c_join
        assert await b.heartbeat() == REBALANCE_IN_PROGRESS
    jb = await b.join()
    jc = await c_join
    assert jb.error == jc.error == NONE
    assert jb.generation == jc.generation
    assert jb.leader == jc.leader
    assert jb.leader in {b.member_id, c.member_id}, (
        f"{jb.leader} leads; a, who left, is {a.member_id}"
    )
    leader, follower = (b, c) if jb.is_leader else (c, b)
    assert leader.joined is not None
    assert set(leader.joined.members) == {b.member_id, c.member_id}
    assert (await leader.sync()).error == NONE
    synced = await follower.sync()
    assert synced.error == NONE
    assert synced.assignment == assignment_for(follower.member_id)
    formed = await observer.describe(group_id)
    assert (formed.state, formed.member_ids()) == ("Stable", {b.member_id, c.member_id})
    assert await b.leave() == NONE
    assert await c.leave() == NONE


# ---------------------------------------------------------------------------- heartbeats


async def test_heartbeat_rebalance_in_progress_when_member_joins(
    backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    a = member(await connect(encoder), group_id, backend)
    generation = await settle([a])
    b = member(await connect(encoder), group_id, backend)
    b_join = asyncio.create_task(b.join())
    assert await heartbeat_until(a, REBALANCE_IN_PROGRESS) == REBALANCE_IN_PROGRESS
    ja, jb = await asyncio.gather(a.join(), b_join)
    assert ja.error == jb.error == NONE
    assert ja.generation == jb.generation == generation + 1
    await asyncio.gather(a.sync(), b.sync())
    assert await a.heartbeat() == NONE
    await asyncio.gather(a.leave(), b.leave())


async def test_heartbeat_stale_generation_is_illegal(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(request, backend, "Heartbeat with a wrong generation gets REBALANCE_IN_PROGRESS")
    a = member(await connect(encoder), group_id, backend)
    generation = await settle([a])
    older = await a.wire.heartbeat(group_id, generation - 1, a.member_id)
    newer = await a.wire.heartbeat(group_id, generation + 1, a.member_id)
    assert (older, newer) == (ILLEGAL_GENERATION, ILLEGAL_GENERATION)
    assert await a.heartbeat() == NONE
    await a.leave()


async def test_sync_stale_generation_is_illegal(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(request, backend, "SyncGroup with a wrong generation gets REBALANCE_IN_PROGRESS")
    a = member(await connect(encoder), group_id, backend)
    generation = await settle([a])
    synced = await a.wire.sync(group_id, generation + 1, a.member_id)
    assert synced.error == ILLEGAL_GENERATION
    assert await a.heartbeat() == NONE
    await a.leave()


async def test_heartbeat_unknown_member_id(
    backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    a = member(await connect(encoder), group_id, backend)
    generation = await settle([a])
    assert await a.wire.heartbeat(group_id, generation, "no-such-member") == UNKNOWN_MEMBER_ID
    assert await a.heartbeat() == NONE
    await a.leave()


async def test_sync_unknown_member_id(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(request, backend, "SyncGroup from an unknown member gets REBALANCE_IN_PROGRESS")
    a = member(await connect(encoder), group_id, backend)
    generation = await settle([a])
    synced = await a.wire.sync(group_id, generation, "no-such-member")
    assert synced.error == UNKNOWN_MEMBER_ID
    assert await a.heartbeat() == NONE
    await a.leave()


async def test_join_unknown_member_id(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(
        request, backend, "JoinGroup with a made-up member id admits a member with that id"
    )
    a = member(await connect(encoder), group_id, backend)
    generation = await settle([a])
    intruder = await connect(encoder)
    joined = await intruder.join(
        group_id, member_id="no-such-member", session_timeout_ms=backend.session_timeout_ms
    )
    assert joined.error == UNKNOWN_MEMBER_ID
    assert await a.heartbeat() == NONE
    assert a.generation == generation
    await a.leave()


@pytest.mark.slow_on_tansu
async def test_session_expiry_removes_silent_member(
    backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    session_ms = 1000 if backend.name == "embedded" else backend.session_timeout_ms
    a = member(await connect(encoder), group_id, backend, session_timeout_ms=session_ms)
    b = member(await connect(encoder), group_id, backend, session_timeout_ms=session_ms)
    generation = await settle([a, b])
    # b goes silent; a keeps heartbeating and is told to rejoin once b's session expires.
    error = await heartbeat_until(a, REBALANCE_IN_PROGRESS, within_s=3 * session_ms / 1000)
    assert error == REBALANCE_IN_PROGRESS
    joined = await a.join()
    assert joined.error == NONE
    assert joined.generation == generation + 1
    assert joined.members == {a.member_id: b"meta"}
    await a.sync()
    assert await b.heartbeat() == UNKNOWN_MEMBER_ID
    await a.leave()


# ---------------------------------------------------------------------------- leaving


async def test_leave_group_v0(
    backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    a = member(await connect(encoder), group_id, backend)
    b = member(await connect(encoder), group_id, backend)
    generation = await settle([a, b])
    assert (await b.wire.leave(group_id, b.member_id)).error == NONE
    assert await heartbeat_until(a, REBALANCE_IN_PROGRESS) == REBALANCE_IN_PROGRESS
    joined = await a.join()
    assert joined.generation == generation + 1
    assert joined.members == {a.member_id: b"meta"}
    await a.sync()
    assert (await a.wire.leave(group_id, a.member_id)).error == NONE
    described = await a.wire.describe(group_id)
    assert described.state == "Empty"
    assert described.members == []


async def test_batch_leave_by_member_id(
    backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    a = member(await connect(encoder), group_id, backend)
    b = member(await connect(encoder), group_id, backend)
    await settle([a, b])
    admin = await connect(encoder)
    left = await admin.leave_batch(
        group_id, [(a.member_id, None), (b.member_id, None), ("no-such-member", None)]
    )
    assert left.error == NONE
    assert {m.member_id: m.error for m in left.members} == {
        a.member_id: NONE,
        b.member_id: NONE,
        "no-such-member": UNKNOWN_MEMBER_ID,
    }
    described = await admin.describe(group_id)
    assert described.state == "Empty"
    assert described.members == []


@pytest.mark.slow_on_tansu
async def test_batch_leave_by_instance_id(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(
        request,
        backend,
        "of two static members only one stays (the other's heartbeat gets UNKNOWN_MEMBER_ID); "
        "leaving by instance id answers UNKNOWN_MEMBER_ID",
    )
    a = member(await connect(encoder), group_id, backend, instance_id="instance-a")
    b = member(await connect(encoder), group_id, backend, instance_id="instance-b")
    await settle([a, b])
    admin = await connect(encoder)
    left = await admin.leave_batch(
        group_id, [("", "instance-a"), ("", "instance-b"), ("", "instance-unknown")]
    )
    assert left.error == NONE
    outcome = {m.instance_id: m.error for m in left.members}
    assert outcome == {
        "instance-a": NONE,
        "instance-b": NONE,
        "instance-unknown": UNKNOWN_MEMBER_ID,
    }
    described = await admin.describe(group_id)
    assert described.state == "Empty"
    assert described.members == []


# ---------------------------------------------------------------------------- static members


@pytest.mark.slow_on_tansu
async def test_static_member_restart_fences_old_id_without_rebalance(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(
        request,
        backend,
        "of two static members only one stays; a restarted static member keeps its "
        "member id and nothing is fenced",
    )
    a = member(await connect(encoder), group_id, backend, instance_id="instance-a")
    b = member(await connect(encoder), group_id, backend, instance_id="instance-b")
    generation = await settle([a, b])
    old_member_id, old_assignment = a.member_id, a.assignment
    # a restarts: a new connection, no member id, the same instance id.
    restarted = member(await connect(encoder), group_id, backend, instance_id="instance-a")
    joined = await restarted.join()
    assert joined.error == NONE
    assert joined.member_id != old_member_id
    assert joined.generation == generation, "a static restart must not start a rebalance"
    synced = await restarted.sync()
    assert synced.error == NONE
    assert synced.assignment == old_assignment
    # The old incarnation is fenced; the rest of the group never noticed.
    fenced = await a.wire.heartbeat(group_id, generation, old_member_id, instance_id="instance-a")
    assert fenced == FENCED_INSTANCE_ID
    assert await b.heartbeat() == NONE
    assert await restarted.heartbeat() == NONE
    described = await b.wire.describe(group_id)
    assert described.state == "Stable"
    assert described.member_ids() == {restarted.member_id, b.member_id}
    await asyncio.gather(restarted.leave(), b.leave())


@contextlib.contextmanager
def small_group_backend(backend: Backend) -> Iterator[Backend]:
    if backend.name == "embedded":
        with start_backend("embedded", "--group-max-size", "2") as limited:
            yield limited
    else:
        yield backend  # Tansu has no group size limit to set


async def test_group_max_size(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(request, backend, "no group size limit (group.max.size not supported)")
    with small_group_backend(backend) as limited:
        a = member(await connect(encoder, on=limited), group_id, limited)
        b = member(await connect(encoder, on=limited), group_id, limited)
        generation = await settle([a, b])
        third = await connect(encoder, on=limited)
        rejected = await third.join_new(group_id, session_timeout_ms=limited.session_timeout_ms)
        assert rejected.error == GROUP_MAX_SIZE_REACHED
        assert await a.heartbeat() == NONE
        assert a.generation == generation
        await asyncio.gather(a.leave(), b.leave())


# ---------------------------------------------------------------------------- offsets


async def test_offset_commit_validates_generation(
    backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    topic = "interop-commits"
    await backend.ensure_topic(topic)
    a = member(await connect(encoder), group_id, backend)
    generation = await settle([a])
    wire = a.wire
    key = (topic, 0)
    assert await wire.commit(group_id, generation, a.member_id, {key: (5, None)}) == {key: NONE}
    stale = await wire.commit(group_id, generation - 1, a.member_id, {key: (6, None)})
    assert stale == {key: ILLEGAL_GENERATION}
    unknown = await wire.commit(group_id, generation, "no-such-member", {key: (7, None)})
    assert unknown == {key: UNKNOWN_MEMBER_ID}
    fetched = await wire.fetch(group_id, {topic: [0]})
    assert fetched[key].offset == 5, "rejected commits must not change the offset"
    await a.leave()


async def test_offset_commit_outside_group_management(
    backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    """Generation -1 and no member id (admin tools, manual assignment) may commit
    only while the group has no members."""
    topic = "interop-commits"
    await backend.ensure_topic(topic)
    key = (topic, 0)
    admin = await connect(encoder)
    assert await admin.commit(group_id, -1, "", {key: (11, None)}) == {key: NONE}
    assert (await admin.fetch(group_id, {topic: [0]}))[key].offset == 11
    a = member(await connect(encoder), group_id, backend)
    await settle([a])
    assert await admin.commit(group_id, -1, "", {key: (12, None)}) == {key: UNKNOWN_MEMBER_ID}
    assert (await admin.fetch(group_id, {topic: [0]}))[key].offset == 11
    await a.leave()
    assert await admin.commit(group_id, -1, "", {key: (13, None)}) == {key: NONE}


async def test_offset_commit_while_completing_rebalance(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(request, backend, "OffsetCommit between JoinGroup and SyncGroup is accepted")
    topic = "interop-commits"
    await backend.ensure_topic(topic)
    key = (topic, 0)
    a = member(await connect(encoder), group_id, backend)
    joined = await a.join()
    assert joined.error == NONE
    # Joined but not synced: the commit must wait for the assignment.
    result = await a.wire.commit(group_id, joined.generation, a.member_id, {key: (1, None)})
    assert result == {key: REBALANCE_IN_PROGRESS}
    await a.sync()
    result = await a.wire.commit(group_id, joined.generation, a.member_id, {key: (1, None)})
    assert result == {key: NONE}
    await a.leave()


async def test_commit_metadata_kept(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(request, backend, "the commit metadata string is dropped (fetched as '')")
    topic = "interop-metadata"
    await backend.ensure_topic(topic, partitions=2)
    a = member(await connect(encoder), group_id, backend)
    generation = await settle([a])
    offsets = {(topic, 0): (42, "checkpoint-42 ✓"), (topic, 1): (7, "")}
    result = await a.wire.commit(group_id, generation, a.member_id, offsets)
    assert result == {(topic, 0): NONE, (topic, 1): NONE}
    reader = await connect(encoder)
    fetched = await reader.fetch(group_id, {topic: [0, 1]})
    assert (fetched[(topic, 0)].offset, fetched[(topic, 0)].metadata) == (42, "checkpoint-42 ✓")
    assert (fetched[(topic, 1)].offset, fetched[(topic, 1)].metadata) == (7, "")
    assert fetched[(topic, 0)].error == fetched[(topic, 1)].error == NONE
    await a.leave()


# ---------------------------------------------------------------------------- admin


async def test_describe_groups(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(
        request, backend, "DescribeGroups returns an empty protocol and no member details"
    )
    a = member(await connect(encoder), group_id, backend, protocols=[("range", b"meta-a")])
    b = member(await connect(encoder), group_id, backend, protocols=[("range", b"meta-b")])
    await settle([a, b])
    admin = await connect(encoder)
    described = await admin.describe(group_id)
    assert described.error == NONE
    assert described.state == "Stable"
    assert described.protocol_type == "consumer"
    assert described.protocol == "range"
    by_id = {m.member_id: m for m in described.members}
    assert set(by_id) == {a.member_id, b.member_id}
    assert by_id[a.member_id].metadata == b"meta-a"
    assert by_id[a.member_id].assignment == assignment_for(a.member_id)
    assert by_id[b.member_id].assignment == assignment_for(b.member_id)
    assert all(m.client_id for m in described.members)
    unknown = await admin.describe(group_id + "-unknown")
    assert (unknown.error, unknown.state, unknown.members) == (NONE, "Dead", [])
    await asyncio.gather(a.leave(), b.leave())


async def test_list_groups(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(request, backend, "ListGroups lists only groups with committed offsets")
    a = member(await connect(encoder), group_id, backend, protocol_type="workgroup")
    await settle([a])
    error, groups = await a.wire.list_groups()
    assert error == NONE
    assert groups.get(group_id) == "workgroup"
    await a.leave()


async def test_delete_groups(
    request: pytest.FixtureRequest, backend: Backend, connect: Connect, encoder: str, group_id: str
) -> None:
    tansu_deviates(request, backend, "a group with members is deleted (no NON_EMPTY_GROUP)")
    a = member(await connect(encoder), group_id, backend)
    await settle([a])
    admin = await connect(encoder)
    assert await admin.delete_groups([group_id]) == {group_id: NON_EMPTY_GROUP}
    assert await a.leave() == NONE
    assert await admin.delete_groups([group_id]) == {group_id: NONE}
    assert (await admin.describe(group_id)).state == "Dead"
    assert await admin.delete_groups([group_id]) == {group_id: GROUP_ID_NOT_FOUND}
