"""workgroup.testing.FaultProxy between members and the embedded coordinator (which
advertises the proxy): delays, dropped requests, cut connections, and a partition of
one member while the other still reaches the coordinator."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workgroup import Resource
from workgroup.member import GroupMember
from workgroup.protocol import Protocol
from workgroup.testing.proxy import FaultProxy, random_schedule, request_client_id
from workgroup.testing.servers import free_port, run_coordinator

SESSION_MS = 6_000
SHARDS = {"shard": range(6)}


def request(client_id: str | None) -> bytes:
    header = struct.pack(">hhi", 12, 4, 7)
    if client_id is None:
        return header + struct.pack(">h", -1)
    raw = client_id.encode()
    return header + struct.pack(">h", len(raw)) + raw + b"payload"


def test_the_client_id_is_read_from_the_request_header() -> None:
    assert request_client_id(request("member-a")) == "member-a"
    assert request_client_id(request(None)) is None
    assert request_client_id(b"\x00\x01") is None


@given(st.binary(max_size=64))
def test_any_bytes_give_a_client_id_or_none(frame: bytes) -> None:
    found = request_client_id(frame)
    assert found is None or isinstance(found, str)


def test_random_schedules_replay_from_their_seed() -> None:
    first = random_schedule(42, duration_s=30, client_ids=["a", "b"])
    again = random_schedule(42, duration_s=30, client_ids=["a", "b"])
    assert [at for at, _ in first] == [at for at, _ in again]
    assert len(first) >= 20  # a fault and its healing, about every 2 s


@pytest.fixture
async def proxy() -> AsyncIterator[FaultProxy]:
    port = free_port()
    with run_coordinator("--advertised-listener", f"127.0.0.1:{port}") as coordinator:
        async with FaultProxy(coordinator.bootstrap, listen_port=port, seed=7) as running:
            yield running


class Recorder:
    def __init__(self) -> None:
        self.lost_at: float | None = None

    async def lost(self, resources: tuple[Resource, ...], generation: int) -> None:
        self.lost_at = time.monotonic()


def member(
    proxy: FaultProxy, group: str, name: str, recorder: Recorder | None = None
) -> GroupMember:
    return GroupMember(
        proxy.bootstrap,
        group,
        [Protocol.of("cooperative-sticky")],
        resources=SHARDS,
        client_id=f"{group}-{name}",
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=500,
        rebalance_timeout_ms=10_000,
        on_lost=recorder.lost if recorder else None,
    )


async def settled(
    *members: GroupMember, owned: dict[GroupMember, int], timeout_s: float = 30
) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(m.stable and len(m.assignment) == owned[m] for m in members):
        assert time.monotonic() < deadline, [len(m.assignment) for m in members]
        await asyncio.sleep(0.05)


async def test_every_connection_goes_through_the_proxy(proxy: FaultProxy) -> None:
    a = member(proxy, "p-through", "a")
    async with a:
        await a.wait_stable()
    # FindCoordinator, JoinGroup (twice: the first answer assigns the member id),
    # SyncGroup, LeaveGroup: every request, including those to the coordinator the
    # member found through FindCoordinator, went through the proxy.
    assert proxy.stats.connections >= 1
    assert proxy.stats.frames >= 5


@pytest.mark.slow
async def test_a_partitioned_member_loses_its_work_and_the_other_takes_it(
    proxy: FaultProxy,
) -> None:
    recorder = Recorder()
    a, b = member(proxy, "p-split", "a", recorder), member(proxy, "p-split", "b")
    async with a, b:
        await settled(a, b, owned={a: 3, b: 3})
        cut_at = time.monotonic()
        proxy.partition("p-split-a")
        await settled(b, owned={b: 6}, timeout_s=SESSION_MS / 1000 + 15)
        moved_s = time.monotonic() - cut_at
        deadline = time.monotonic() + SESSION_MS / 1000 + 5
        while recorder.lost_at is None:
            assert time.monotonic() < deadline, "the partitioned member never reported on_lost"
            await asyncio.sleep(0.05)
        lost_s = recorder.lost_at - cut_at
        # The member gives its work up on its own within the session timeout; the
        # coordinator moves it once the session expired there.
        assert lost_s <= SESSION_MS / 1000 + 1.0
        assert moved_s <= SESSION_MS / 1000 + 5.0
        proxy.unpartition("p-split-a")
        await settled(a, b, owned={a: 3, b: 3})


@pytest.mark.slow
async def test_members_ride_out_delays_drops_and_cuts(proxy: FaultProxy) -> None:
    a, b = member(proxy, "p-faults", "a"), member(proxy, "p-faults", "b")
    async with a, b:
        await settled(a, b, owned={a: 3, b: 3})
        proxy.delay(150, jitter_ms=50)
        await asyncio.sleep(2)
        proxy.heal()
        proxy.drop(1.0)  # every request lost for 1.5 s: well inside the session
        await asyncio.sleep(1.5)
        proxy.heal()
        assert proxy.cut() >= 2
        await asyncio.sleep(2)
        await settled(a, b, owned={a: 3, b: 3})
        assert proxy.stats.frames_dropped > 0


SILENT_SESSION_MS = 3_000


async def silenced_then_healed(fault: str = "drop", request_timeout_ms: int | None = None) -> float:
    """Silence the network for three sessions, then heal; returns how long after
    the heal the member owned its shards again.  ``fault``: ``"drop"`` (every
    request frame is lost) or ``"blackhole"`` (every byte is held until the heal);
    either way the connections stay open and nothing answers."""
    port = free_port()
    with run_coordinator(
        "--advertised-listener",
        f"127.0.0.1:{port}",
        "--initial-rebalance-delay-ms",
        "0",
        "--min-session-timeout-ms",
        str(SILENT_SESSION_MS),
    ) as coordinator:
        async with FaultProxy(coordinator.bootstrap, listen_port=port, seed=11) as proxy:
            recorder = Recorder()
            a = GroupMember(
                proxy.bootstrap,
                "p-silent",
                [Protocol.of("cooperative-sticky")],
                resources=SHARDS,
                client_id="p-silent-a",
                session_timeout_ms=SILENT_SESSION_MS,
                heartbeat_interval_ms=500,
                rebalance_timeout_ms=10_000,
                request_timeout_ms=request_timeout_ms,
                on_lost=recorder.lost,
            )
            async with a:
                await settled(a, owned={a: 6})
                silenced_at = time.monotonic()
                if fault == "drop":
                    proxy.drop(1.0)
                else:
                    proxy.blackhole()
                while recorder.lost_at is None:
                    assert time.monotonic() - silenced_at < SILENT_SESSION_MS / 1000 + 2
                    await asyncio.sleep(0.02)
                # The member gave its shards up before its session could end.
                assert recorder.lost_at - silenced_at < SILENT_SESSION_MS / 1000
                await asyncio.sleep(3 * SILENT_SESSION_MS / 1000)
                assert not a.assignment
                assert (proxy.stats.frames_dropped > 0) == (fault == "drop")
                healed_at = time.monotonic()
                proxy.heal()
                await settled(a, owned={a: 6}, timeout_s=60)
                return time.monotonic() - healed_at


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["drop", "blackhole"])
async def test_a_silenced_member_resumes_within_a_session_of_the_heal(fault: str) -> None:
    """Each lookup times out after the request timeout (by default the session) and
    gives its connection up, so the member is back about a session after the
    network heals, not after a fixed 30 s."""
    resumed_s = await silenced_then_healed(fault)
    # At most: the lookup in flight times out (a session), the back-off (at most
    # 1 s), a new connection, JoinGroup and SyncGroup.
    assert resumed_s < SILENT_SESSION_MS / 1000 + 4.0, resumed_s
