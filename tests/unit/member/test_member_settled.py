"""``MemberMachine.settled`` means settled for the group: no follow-up round is due."""

from __future__ import annotations

import pytest
from member_coordinator_double import CoordinatorDouble
from member_sim import (
    EmbeddedCoordinator,
    RoundRobinTestAssignor,
    Simulation,
    StickyTestAssignor,
)

from workgroup.errors import ErrorCode
from workgroup.kafka.messages import JoinGroup, JoinGroupResult, SyncGroup, SyncGroupResult
from workgroup.member.actions import InvokeCallback, SendRequest
from workgroup.member.config import MemberConfig
from workgroup.member.state import MemberMachine
from workgroup.member.transitions import State
from workgroup.protocol import AssignmentData, BinaryCodec, Protocol

CATALOG = {"shard": list(range(12))}
CODEC = BinaryCodec()


def config(protocol: Protocol) -> MemberConfig:
    return MemberConfig(
        group_id="g",
        protocols=[protocol],
        session_timeout_ms=10_000,
        rebalance_timeout_ms=20_000,
        heartbeat_interval_ms=1_000,
    )


@pytest.fixture(params=["embedded", "double"])
def sim(request: pytest.FixtureRequest) -> Simulation:
    if request.param == "embedded":
        return Simulation(EmbeddedCoordinator())
    return Simulation(CoordinatorDouble())


@pytest.mark.parametrize(
    "protocol",
    [lambda: Protocol("sticky", StickyTestAssignor()), lambda: Protocol.of("cooperative-sticky")],
    ids=["sticky-test", "cooperative-sticky"],
)
def test_a_newcomer_is_settled_only_after_the_follow_up_round(sim: Simulation, protocol) -> None:  # type: ignore[no-untyped-def]
    for name in "ab":
        sim.add(name, config(protocol()), CATALOG)
    assert sim.run_until(sim.stable)
    before = sim.generation()
    newcomer = sim.add("c", config(protocol()), CATALOG).machine

    # Round 1: everything c is to own is still owned by a or b, so it is withheld.
    assert sim.run_until(lambda: newcomer.state is State.STABLE)
    sim.run_for(5)  # its (empty) on_assigned callback completes
    assert newcomer.generation == before + 1
    assert newcomer.state is State.STABLE
    assert newcomer.owned == frozenset()
    assert not newcomer.settled
    assert not sim.stable()

    # The follow-up round, after a and b revoked, hands c its share.
    assert sim.run_until(sim.stable)
    assert newcomer.generation == before + 2
    assert len(newcomer.owned) == 4
    assert newcomer.settled
    assert all(m.machine.settled for m in sim.members.values())
    sim.check_exclusive()


def test_an_eager_join_is_settled_in_one_round(sim: Simulation) -> None:
    for name in "ab":
        sim.add(name, config(Protocol("round-robin", RoundRobinTestAssignor())), CATALOG)
    assert sim.run_until(sim.stable)
    before = sim.generation()
    sim.add("c", config(Protocol("round-robin", RoundRobinTestAssignor())), CATALOG)
    assert sim.run_until(sim.stable)
    assert sim.generation() == before + 1


def _follower_with(m: MemberMachine, *assignments: AssignmentData) -> list[bool]:
    """Feed ``assignments`` one rebalance after another; ``settled`` after each."""
    actions = m.start(0) + m.coordinator_found(1)
    now = 2
    settled: list[bool] = []
    for generation, data in enumerate(assignments, start=5):
        if settled:
            actions = m.request_rejoin(now, "next round")
        join = [a for a in actions if isinstance(a, SendRequest)][-1]
        assert isinstance(join.request, JoinGroup)
        result = JoinGroupResult(ErrorCode.NONE, generation, "workgroup", "sticky.v1", "l", "me")
        answered = m.response(now, join.request_id, result)
        (sync,) = [a for a in answered if isinstance(a, SendRequest)]
        assert isinstance(sync.request, SyncGroup)
        blob = CODEC.encode_assignment(data)
        actions = m.response(now + 1, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob))
        for callback in [a for a in actions if isinstance(a, InvokeCallback)]:
            actions += m.callback_done(now + 1, callback.callback_id)
        settled.append(m.settled)
        now += 10
    return settled


def test_the_pending_flag_keeps_a_member_unsettled_until_an_assignment_without_it() -> None:
    m = MemberMachine(config(Protocol("sticky", StickyTestAssignor())), CATALOG)
    settled = _follower_with(
        m,
        AssignmentData(generation=5, pending=True),
        AssignmentData(assigned=(("shard", 0),), generation=6),
    )
    assert settled == [False, True]
    assert m.state is State.STABLE
