"""Members and a coordinator simulated on a fake clock: whole rebalances, no sleeps."""

from __future__ import annotations

import pytest
from member_coordinator_double import CoordinatorDouble
from member_sim import (
    EmbeddedCoordinator,
    RoundRobinTestAssignor,
    Simulation,
    StickyTestAssignor,
)

from workgroup.kafka.messages import Heartbeat, JoinGroup, LeaveGroup
from workgroup.member.config import MemberConfig
from workgroup.member.transitions import State
from workgroup.protocol import LATEST_VERSION, BinaryCodec, Protocol
from workgroup.testing import capture_logs

CATALOG = {"shard": list(range(12))}
SESSION = 10_000


def cooperative(**kwargs: object) -> Protocol:
    return Protocol("sticky", StickyTestAssignor(), **kwargs)  # type: ignore[arg-type]


def eager() -> Protocol:
    return Protocol("round-robin", RoundRobinTestAssignor())


def registered_cooperative() -> Protocol:
    return Protocol.of("cooperative-sticky")


def registered_eager() -> Protocol:
    return Protocol.of("range")


def config(protocol: Protocol | None = None, **kwargs: object) -> MemberConfig:
    options: dict[str, object] = {
        "group_id": "g",
        "protocols": [protocol or cooperative()],
        "session_timeout_ms": SESSION,
        "rebalance_timeout_ms": 20_000,
        "heartbeat_interval_ms": 1_000,
    }
    options.update(kwargs)
    return MemberConfig(**options)  # type: ignore[arg-type]


@pytest.fixture(params=["embedded", "double"])
def sim(request: pytest.FixtureRequest) -> Simulation:
    """Every scenario runs against the embedded coordinator's core and the small double."""
    if request.param == "embedded":
        return Simulation(EmbeddedCoordinator())
    return Simulation(CoordinatorDouble())


def start_three(sim: Simulation, protocol_factory=cooperative, **kwargs: object) -> None:  # type: ignore[no-untyped-def]
    for name in "abc":
        sim.add(name, config(protocol_factory(), **kwargs), CATALOG)
    assert sim.run_until(sim.stable)


def assert_balanced(sim: Simulation, total: int = 12) -> None:
    owned = sim.assignment()
    union = set().union(*owned.values())
    assert sum(len(v) for v in owned.values()) == total == len(union)
    sizes = [len(v) for v in owned.values()]
    assert max(sizes) - min(sizes) <= 1, owned


@pytest.mark.parametrize(
    "factory",
    [cooperative, eager, registered_cooperative, registered_eager],
    ids=["cooperative", "eager", "cooperative-sticky", "range"],
)
def test_three_members_share_twelve_resources(sim: Simulation, factory) -> None:  # type: ignore[no-untyped-def]
    start_three(sim, factory)
    assert_balanced(sim)
    assert {len(v) for v in sim.assignment().values()} == {4}
    machines = [m.machine for m in sim.members.values()]
    assert len({m.generation for m in machines}) == 1
    assert sum(m.is_leader for m in machines) == 1
    assert {m.protocol.wire_name for m in machines if m.protocol} == {factory().wire_name}
    sim.check_exclusive()


def test_cooperative_member_leaves_only_its_resources_move(sim: Simulation) -> None:
    start_three(sim)
    before = sim.assignment()
    sim.close("c")
    assert sim.run_until(lambda: sim.members["c"].closed)
    assert any(isinstance(r.request, LeaveGroup) for r in sim.members["c"].requests)
    sim.members.pop("c")
    generation = sim.members["a"].machine.generation
    assert sim.run_until(lambda: sim.stable() and sim.generation() > generation)
    after = sim.assignment()
    assert_balanced(sim)
    # a and b kept everything they had and were never asked to revoke.
    assert before["a"] <= after["a"]
    assert before["b"] <= after["b"]
    for name in "ab":
        assert not [c for c in sim.members[name].callbacks if c.kind == "on_revoked"]
    sim.check_exclusive()


@pytest.mark.parametrize(
    "factory", [cooperative, registered_cooperative], ids=["sticky-test", "cooperative-sticky"]
)
def test_cooperative_member_joins_in_two_rounds_without_double_ownership(
    sim: Simulation, factory
) -> None:  # type: ignore[no-untyped-def]
    start_three(sim, factory)
    generation = sim.members["a"].machine.generation
    sim.add("d", config(factory()), CATALOG)
    assert sim.run_until(sim.stable)
    assert_balanced(sim)
    assert {len(v) for v in sim.assignment().values()} == {3}
    # The join round and the follow-up round after the revocations.
    assert sim.members["a"].machine.generation == generation + 2
    revoked = [c for n in "abc" for c in sim.members[n].callbacks if c.kind == "on_revoked"]
    assert sum(len(c.resources) for c in revoked) == 3  # exactly what moved to d
    sim.check_exclusive()


def test_eager_member_joins_revoking_everything_first(sim: Simulation) -> None:
    start_three(sim, eager)
    sim.add("d", config(eager()), CATALOG)
    assert sim.run_until(sim.stable)
    assert_balanced(sim)
    for name in "abc":
        revoked = [c for c in sim.members[name].callbacks if c.kind == "on_revoked"]
        assert len(revoked) == 1
        assert len(revoked[0].resources) == 4
        # Revocation completed before the second JoinGroup was sent.
        joins = [r for r in sim.members[name].requests if isinstance(r.request, JoinGroup)]
        assert len(joins) >= 2
    sim.check_exclusive()


def test_static_member_restart_moves_nothing(sim: Simulation) -> None:
    for name in "abc":
        sim.add(name, config(instance_id=f"worker-{name}"), CATALOG)
    assert sim.run_until(sim.stable)
    before = sim.assignment()
    generation = sim.members["a"].machine.generation
    sim.close("b")
    assert sim.run_until(lambda: sim.members["b"].closed)
    # Static members do not leave: the coordinator keeps their place.
    assert not any(isinstance(r.request, LeaveGroup) for r in sim.members["b"].requests)
    sim.members.pop("b")
    sim.run_for(2_000)
    sim.add("b", config(instance_id="worker-b"), CATALOG)
    assert sim.run_until(sim.stable)
    after = sim.assignment()
    assert after == before
    assert all(m.machine.generation == generation for m in sim.members.values())
    for name in "ac":
        assert [c.kind for c in sim.members[name].callbacks] == ["on_assigned"]
    sim.check_exclusive()


def test_static_leader_restart_moves_nothing(sim: Simulation) -> None:
    for name in "abc":
        sim.add(name, config(instance_id=f"worker-{name}"), CATALOG)
    assert sim.run_until(sim.stable)
    leader = next(n for n, m in sim.members.items() if m.machine.is_leader)
    before = sim.assignment()
    sim.kill(leader)
    sim.run_for(1_000)
    sim.add(leader, config(instance_id=f"worker-{leader}"), CATALOG)
    assert sim.run_until(sim.stable)
    assert sim.assignment() == before
    assert sim.members[leader].machine.is_leader


def test_killed_member_is_replaced_after_its_session(sim: Simulation) -> None:
    start_three(sim)
    generation = sim.generation()
    sim.kill("b")
    assert sim.run_until(lambda: sim.stable() and sim.generation() > generation)
    assert sim.now >= SESSION
    assert_balanced(sim)
    sim.check_exclusive()


def test_heartbeats_continue_while_a_long_callback_runs(sim: Simulation) -> None:
    for name in "ab":
        sim.add(name, config(), CATALOG, callback_ms=3 * SESSION if name == "a" else 0)
    sim.run_for(4 * SESSION)
    a = sim.members["a"].machine
    assert a.state is State.STABLE
    heartbeats = [r for r in sim.members["a"].requests if isinstance(r.request, Heartbeat)]
    assert len(heartbeats) > 2 * SESSION // 1_000
    assert not [c for c in sim.members["a"].callbacks if c.kind == "on_lost"]


def test_partitioned_member_reports_loss_before_the_coordinator_reassigns(sim: Simulation) -> None:
    start_three(sim)
    sim.members["c"].partitioned = True
    sim.run_until(lambda: any(c.kind == "on_lost" for c in sim.members["c"].callbacks))
    lost_at = sim.now

    def others_stable() -> bool:
        live = [sim.members[n].machine for n in "ab"]
        return (
            all(m.state is State.STABLE for m in live)
            and len(set().union(*(m.owned for m in live))) == 12
        )

    survivors_stable = sim.run_until(others_stable)
    assert survivors_stable
    assert sim.members["c"].machine.owned == frozenset()
    assert sim.now > lost_at
    sim.check_exclusive()


def test_leader_reassigns_when_resources_change(sim: Simulation) -> None:
    start_three(sim)
    generation = sim.members["a"].machine.generation
    sim.set_resources({"shard": list(range(15))})
    assert sim.run_until(lambda: sim.stable() and sim.generation() > generation)
    assert sim.members["a"].machine.generation > generation
    assert_balanced(sim, total=15)
    sim.check_exclusive()


def test_catalog_disagreement_is_logged_and_the_leader_wins(sim: Simulation) -> None:
    with capture_logs() as logs:
        sim.add("a", config(), CATALOG)
        assert sim.run_until(sim.stable)
        sim.add("b", config(), {"shard": list(range(20))})
        assert sim.run_until(sim.stable)
    leader = next(m for m in sim.members.values() if m.machine.is_leader)
    expected = 12 if leader.name == "a" else 20
    assert sum(len(v) for v in sim.assignment().values()) == expected
    assert any(entry["event"] == "member.catalog_mismatch" for entry in logs)


def test_version_probing_settles_on_the_common_version(sim: Simulation) -> None:
    old = Protocol("sticky", StickyTestAssignor(), codec=BinaryCodec(latest_version=1))
    sim.add("old", config(old), CATALOG)
    assert sim.run_until(sim.stable)
    sim.add("new", config(cooperative()), CATALOG)
    assert sim.run_until(sim.stable)
    assert sim.members["new"].machine.used_versions == {"sticky.v1": 1}
    assert_balanced(sim)
    # Upgrade the old member: the group moves to the latest version.
    sim.close("old")
    sim.run_until(lambda: sim.members["old"].closed)
    sim.members.pop("old")
    sim.add("old", config(cooperative()), CATALOG)
    assert sim.run_until(sim.stable)
    assert {v for m in sim.members.values() for v in m.machine.used_versions.values()} == {
        LATEST_VERSION
    }
    assert_balanced(sim)
    sim.check_exclusive()


def test_rolling_protocol_upgrade_moves_the_group_when_all_support_it(sim: Simulation) -> None:
    v1 = lambda: Protocol("sticky", StickyTestAssignor(), version=1)  # noqa: E731
    v2 = lambda: Protocol("sticky", StickyTestAssignor(), version=2)  # noqa: E731
    for name in "abc":
        sim.add(name, config(v1()), CATALOG)
    assert sim.run_until(sim.stable)
    for i, name in enumerate("abc"):
        sim.close(name)
        sim.run_until(lambda n=name: sim.members[n].closed)
        sim.members.pop(name)
        sim.add(name, config(v2(), protocols=[v2(), v1()]), CATALOG)
        assert sim.run_until(sim.stable)
        chosen = {m.machine.protocol.wire_name for m in sim.members.values() if m.machine.protocol}
        assert chosen == ({"sticky.v2"} if i == 2 else {"sticky.v1"})
        assert_balanced(sim)
    sim.check_exclusive()


def test_join_request_timeout_exceeds_the_rebalance_timeout(sim: Simulation) -> None:
    member = sim.add("a", config(), CATALOG)
    sim.run_until(sim.stable)
    join = next(r for r in member.requests if isinstance(r.request, JoinGroup))
    assert join.timeout_ms > 20_000


def test_coordinator_outage_keeps_a_stable_assignment_within_the_session(sim: Simulation) -> None:
    start_three(sim)
    before = sim.assignment()
    sim.coordinator_down = True
    sim.run_for(SESSION // 3)
    sim.coordinator_down = False
    assert sim.run_until(sim.stable)
    assert sim.assignment() == before
    for m in sim.members.values():
        assert not [c for c in m.callbacks if c.kind in ("on_lost", "on_revoked")]


def test_version_probing_with_a_newer_leader(sim: Simulation) -> None:
    sim.add("new", config(cooperative()), CATALOG)
    assert sim.run_until(sim.stable)
    assert sim.members["new"].machine.is_leader
    old = Protocol("sticky", StickyTestAssignor(), codec=BinaryCodec(latest_version=1))
    sim.add("old", config(old), CATALOG)
    generation = sim.generation()
    assert sim.run_until(lambda: sim.stable() and sim.generation() > generation)
    assert sim.members["new"].machine.used_versions == {"sticky.v1": 1}
    assert_balanced(sim)
    sim.check_exclusive()
