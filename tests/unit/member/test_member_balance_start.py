"""Members started together balance by load once their loads are known, with no
other change to the group, and then stay quiet (simulated group, fake clock)."""

from __future__ import annotations

from member_sim import EmbeddedCoordinator, Simulation

from workgroup.member.config import MemberConfig
from workgroup.protocol import Protocol
from workgroup.types import Resource

INTERVAL = 5_000
TOLERANCE = 0.10
SHARDS = 64
#: Zipf(1.1): shard 0 is 2.6 times shard 1 and 100 times shard 63.
LOADS: dict[Resource, float] = {("shard", k): 100.0 / (k + 1) ** 1.1 for k in range(SHARDS)}


def config() -> MemberConfig:
    return MemberConfig(
        group_id="g",
        protocols=[Protocol.of("cooperative-sticky")],
        session_timeout_ms=10_000,
        rebalance_timeout_ms=20_000,
        heartbeat_interval_ms=1_000,
        balance_interval_ms=INTERVAL,
        imbalance_tolerance=TOLERANCE,
    )


def max_over_mean(sim: Simulation) -> float:
    totals = [sum(LOADS[r] for r in owned) for owned in sim.assignment().values()]
    return max(totals) / (sum(totals) / len(totals))


def report_every_second(sim: Simulation) -> None:
    """What each handler does with ``lease.report_load``: its shard's load, each second."""
    for member in sim.members.values():
        for resource in member.machine.owned:
            member.machine.loads.record(resource, LOADS[resource], sim.now)
    sim.at(sim.now + 1_000, lambda: report_every_second(sim))


def test_members_started_together_balance_once_loads_are_known_then_stay_quiet() -> None:
    sim = Simulation(EmbeddedCoordinator())
    for name in "abcd":
        sim.add(name, config(), {"shard": list(range(SHARDS))})
    assert sim.run_until(sim.stable, limit_ms=30_000)
    first_generation = sim.generation()
    assert max_over_mean(sim) > 1 + TOLERANCE  # count balance: 16 shards each, skewed
    assert all(len(owned) == 16 for owned in sim.assignment().values())

    # Loads are reported only now, after the first round; nothing else changes.
    report_every_second(sim)
    balanced = sim.run_until(
        lambda: sim.stable() and max_over_mean(sim) <= 1 + TOLERANCE, limit_ms=6 * INTERVAL
    )
    assert balanced, f"max/mean {max_over_mean(sim):.3f} after {6 * INTERVAL} ms"
    assert sim.generation() > first_generation
    assert len(set().union(*sim.assignment().values())) == SHARDS
    sim.check_exclusive()

    # Settled: loads keep coming, the same as before, and no round follows.
    settled_generation = sim.generation()
    sim.run_for(10 * INTERVAL)
    assert sim.generation() == settled_generation
    assert max_over_mean(sim) <= 1 + TOLERANCE
