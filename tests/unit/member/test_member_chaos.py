"""Kill, pause past the session, restart and add members in random order; no resource
may ever be owned by two members at once, and the group must settle afterwards."""

from __future__ import annotations

import random

import pytest
from member_coordinator_double import CoordinatorDouble
from member_sim import EmbeddedCoordinator, Simulation, StickyTestAssignor, random_faults

from workgroup.member.config import MemberConfig
from workgroup.protocol import Protocol

CATALOG = {"shard": list(range(12))}
SESSION = 6_000


def config(name: str, static: bool, assignor: str = "sticky-test") -> MemberConfig:
    protocol = (
        Protocol("sticky", StickyTestAssignor())
        if assignor == "sticky-test"
        else Protocol.of(assignor)
    )
    return MemberConfig(
        group_id="chaos",
        protocols=[protocol],
        instance_id=f"worker-{name}" if static else None,
        session_timeout_ms=SESSION,
        rebalance_timeout_ms=15_000,
        heartbeat_interval_ms=1_000,
    )


@pytest.mark.parametrize("assignor", ["sticky-test", "cooperative-sticky"])
@pytest.mark.parametrize("coordinator", ["embedded", "double"])
@pytest.mark.parametrize("seed", range(40))
def test_random_failures_never_double_own(seed: int, coordinator: str, assignor: str) -> None:
    run(seed, coordinator, assignor)


def run(seed: int, coordinator: str, assignor: str) -> Simulation:
    """One seed's faults, then the checks (the trace guard replays it too)."""
    rng = random.Random(seed)
    sim = Simulation(EmbeddedCoordinator() if coordinator == "embedded" else CoordinatorDouble())
    static = {name: rng.random() < 0.5 for name in "abcde"}
    for name in "abcd":
        sim.add(
            name, config(name, static[name], assignor), CATALOG, callback_ms=rng.randrange(0, 2_000)
        )
    sim.run_until(sim.stable)
    random_faults(
        sim,
        rng,
        ops=["kill", "pause", "restart", "close", "wait"],
        rounds=15,
        restart=lambda name: sim.add(
            name,
            config(name, static[name], assignor),
            CATALOG,
            callback_ms=rng.randrange(0, 2_000),
        ),
        dead=["e"],
        min_wait_ms=500,
        max_wait_ms=2 * SESSION,
    )

    def settled() -> bool:
        # Killed members count until the coordinator expires their sessions.
        owned = sim.assignment().values()
        return sim.stable() and sum(len(v) for v in owned) == 12

    assert sim.run_until(settled, limit_ms=300_000), {
        n: (m.machine.state, m.machine.generation, len(m.machine.owned))
        for n, m in sim.members.items()
    }
    owned = sim.assignment()
    assert sum(len(v) for v in owned.values()) == 12
    assert len(set().union(*owned.values())) == 12
    sizes = [len(v) for v in owned.values()]
    assert max(sizes) - min(sizes) <= 1
    sim.check_exclusive()
    return sim
