"""Planned moves with warm-ups: the leader's staging (pure) and whole groups of member
machines on a fake clock (the machine's rules 14 and 15)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from leader_round import play_leader_round
from member_coordinator_double import CoordinatorDouble
from member_sim import EmbeddedCoordinator, Simulation

from workgroup.member.config import MemberConfig
from workgroup.member.load_balancing import BalanceSettings
from workgroup.member.pipeline import LeaderPipeline
from workgroup.member.round_plan import RoundPlan, plan_round
from workgroup.member.warmup import WARMUP_VERSION, Staged, stage_warmups
from workgroup.protocol import MemberMetadata, Protocol
from workgroup.protocol.catalog import catalog_hash, freeze_catalog
from workgroup.types import Resource

CATALOG = {"shard": list(range(12))}
PREPARE_MS = 1_000


def r(key: int) -> Resource:
    return ("shard", key)


def meta(
    owned: tuple[int, ...] = (),
    *,
    warms_up: bool = True,
    warming: tuple[int, ...] = (),
    ready: tuple[int, ...] = (),
) -> MemberMetadata:
    return MemberMetadata(
        kinds=("shard",),
        owned=tuple(map(r, owned)),
        owned_generation=1 if owned else -1,
        warms_up=warms_up,
        warming=tuple(map(r, warming)),
        ready=tuple(map(r, ready)),
    )


def plan_for(metadata: dict[str, MemberMetadata], target: dict[str, tuple[int, ...]]) -> RoundPlan:
    return plan_round(
        list(metadata),
        {mid: [r(k) for k in keys] for mid, keys in target.items()},
        {mid: m.owned for mid, m in metadata.items()},
    )


# --- the leader's staging -------------------------------------------------------------


def test_a_planned_move_warms_up_while_its_owner_keeps_it() -> None:
    metadata = {"a": meta((0, 1, 2, 3)), "b": meta()}
    plan = plan_for(metadata, {"a": (0, 1), "b": (2, 3)})
    assert plan.withheld["b"] == (r(2), r(3))  # a plain cooperative move
    staged, what = stage_warmups(plan, metadata, max_warmups=4, common_version=WARMUP_VERSION)
    assert sorted(staged.assigned["a"]) == [r(0), r(1), r(2), r(3)]
    assert staged.revoked["a"] == ()
    assert staged.withheld["b"] == ()
    assert staged.assigned["b"] == ()
    assert staged.warming == {"b": (r(2), r(3))}
    assert not staged.pending  # nothing is withheld: no follow-up round is forced
    assert (what.started, what.continuing, what.cut_over, what.waiting) == (2, 0, 0, 0)


def test_a_ready_warm_up_is_cut_over_and_keeps_warming_until_handed_out() -> None:
    metadata = {"a": meta((0, 1, 2, 3)), "b": meta(warming=(2, 3), ready=(2,))}
    plan = plan_for(metadata, {"a": (0, 1), "b": (2, 3)})
    staged, what = stage_warmups(plan, metadata, max_warmups=4, common_version=WARMUP_VERSION)
    assert staged.revoked["a"] == (r(2),)  # the ready one is revoked now
    assert r(3) in staged.assigned["a"]  # the other keeps warming
    assert staged.withheld["b"] == (r(2),)  # handed out in the follow-up round
    assert staged.warming["b"] == (r(2), r(3))
    assert staged.pending
    assert (what.cut_over, what.continuing) == (1, 1)


def test_warm_ups_under_way_count_first_and_the_rest_wait_with_their_owner() -> None:
    metadata = {"a": meta((0, 1, 2, 3, 4, 5)), "b": meta(warming=(5,))}
    plan = plan_for(metadata, {"a": (0, 1, 2), "b": (3, 4, 5)})
    staged, what = stage_warmups(plan, metadata, max_warmups=2, common_version=WARMUP_VERSION)
    assert staged.warming == {"b": (r(3), r(5))}
    assert sorted(staged.assigned["a"]) == [r(k) for k in range(6)]
    assert staged.revoked["a"] == ()
    assert (what.started, what.continuing, what.waiting) == (1, 1, 1)
    assert not staged.pending


@pytest.mark.parametrize(
    ("b", "common"),
    [(meta(warms_up=False), WARMUP_VERSION), (meta(), WARMUP_VERSION - 1)],
    ids=["member-without-warm-ups", "older-member-in-the-group"],
)
def test_plain_moves_without_warm_ups_or_in_a_rolling_upgrade(
    b: MemberMetadata, common: int
) -> None:
    metadata = {"a": meta((0, 1, 2, 3)), "b": b}
    plan = plan_for(metadata, {"a": (0, 1), "b": (2, 3)})
    staged, what = stage_warmups(plan, metadata, max_warmups=4, common_version=common)
    assert staged == plan
    assert what.warming == 0


def test_a_resource_nobody_owns_is_handed_out_at_once() -> None:
    metadata = {"b": meta()}  # its owner crashed: not a planned move
    plan = plan_for(metadata, {"b": (0, 1)})
    staged, _ = stage_warmups(plan, metadata, max_warmups=4, common_version=WARMUP_VERSION)
    assert staged.assigned["b"] == (r(0), r(1))
    assert staged.warming == {}


def test_max_warmups_zero_means_plain_moves() -> None:
    metadata = {"a": meta((0, 1)), "b": meta()}
    plan = plan_for(metadata, {"a": (0,), "b": (1,)})
    assert stage_warmups(plan, metadata, max_warmups=0, common_version=WARMUP_VERSION)[0] == plan


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_staging_never_gives_a_resource_two_active_owners(data: st.DataObject) -> None:
    members = ["a", "b", "c"]
    keys = list(range(8))
    owner = {k: data.draw(st.sampled_from([*members, None]), label=f"owner {k}") for k in keys}
    target_of = {k: data.draw(st.sampled_from(members), label=f"target {k}") for k in keys}
    metadata = {}
    for mid in members:
        owned = tuple(k for k in keys if owner[k] == mid)
        incoming = [k for k in keys if target_of[k] == mid and owner[k] not in (mid, None)]
        warming = (
            tuple(data.draw(st.lists(st.sampled_from(incoming), unique=True))) if incoming else ()
        )
        ready = tuple(k for k in warming if data.draw(st.booleans()))
        metadata[mid] = meta(owned, warms_up=data.draw(st.booleans()), warming=warming, ready=ready)
    plan = plan_for(metadata, {m: tuple(k for k in keys if target_of[k] == m) for m in members})
    budget = data.draw(st.integers(0, 4))
    staged, what = stage_warmups(plan, metadata, max_warmups=budget, common_version=WARMUP_VERSION)
    holders: dict[Resource, str] = {}
    for mid, given_now in staged.assigned.items():
        for resource in given_now:
            assert resource not in holders, (resource, holders[resource], mid)
            holders[resource] = mid
    for mid, warming in staged.warming.items():
        assert not set(warming) & set(staged.assigned[mid])  # a warming member does not own it
    for mid, keep in staged.assigned.items():
        # what a member gets is something it owns already, or nobody else claims
        for resource in keep:
            claimant = owner[resource[1]]
            assert claimant in (None, mid), (resource, claimant, mid)
    assert sum(len(w) for w in staged.warming.values()) == what.warming
    if budget:
        assert what.started <= max(budget - what.cut_over - what.continuing, 0)
    else:
        assert staged == plan


# --- whole groups on a fake clock -------------------------------------------------------------


def config(**kwargs: object) -> MemberConfig:
    options: dict[str, object] = {
        "group_id": "g",
        "protocols": [Protocol.of("cooperative-sticky")],
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 20_000,
        "heartbeat_interval_ms": 500,
        "warm_up": True,
    }
    options.update(kwargs)
    return MemberConfig(**options)  # type: ignore[arg-type]


@pytest.fixture(params=["embedded", "double"])
def sim(request: pytest.FixtureRequest) -> Simulation:
    return Simulation(EmbeddedCoordinator() if request.param == "embedded" else CoordinatorDouble())


class Warmer:
    """Answers every member's on_warming with ready() after PREPARE_MS; records spans."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.seen: dict[str, int] = {}
        self.warmed: list[tuple[str, Resource, int]] = []
        self.ended: list[tuple[str, Resource]] = []

    def step(self) -> None:
        for name, member in self.sim.members.items():
            new = member.callbacks[self.seen.get(name, 0) :]
            self.seen[name] = len(member.callbacks)
            for callback in new:
                if callback.kind == "on_warming":
                    for resource in callback.resources:
                        self.warmed.append((name, resource, self.sim.now))
                    self.sim.at(
                        self.sim.now + PREPARE_MS,
                        lambda m=member, rs=callback.resources: self.sim._apply(
                            m, m.machine.ready(self.sim.now, rs)
                        ),
                    )
                elif callback.kind == "on_warming_ended":
                    self.ended.extend((name, res) for res in callback.resources)

    def run_until(self, done, limit_ms: int = 60_000) -> bool:  # type: ignore[no-untyped-def]
        end = self.sim.now + limit_ms
        while self.sim.now < end:
            self.sim.run_for(50)
            self.step()
            if done():
                return True
        return False


def test_a_member_that_joins_warms_up_before_it_takes_anything(sim: Simulation) -> None:
    warmer = Warmer(sim)
    for name in "ab":
        sim.add(name, config(max_warmups=2), CATALOG)
    assert warmer.run_until(sim.stable)
    before = sim.assignment()
    sim.add("c", config(max_warmups=2), CATALOG)
    assert warmer.run_until(lambda: sim.stable() and len(sim.assignment()["c"]) == 4)
    sim.check_exclusive()
    got = sim.assignment()["c"]
    warmed = {res for name, res, _ in warmer.warmed if name == "c"}
    assert got <= warmed  # every resource c took, it warmed up first
    assert not warmer.ended
    # c was given each one only after it was ready, and a and b gave up only what c took
    for name in "ab":
        assert before[name] - sim.assignment()[name] <= got
    starts = [e for e in sim.log if e.member == "c" and e.kind == "start"]
    first_warm = min(at for name, _, at in warmer.warmed if name == "c")
    assert min(e.at for e in starts) >= first_warm + PREPARE_MS
    # at most max_warmups warm-ups ran at once
    assert len({at for name, _, at in warmer.warmed if name == "c"}) >= 2


def test_a_warm_up_is_called_off_when_the_warming_member_drains(sim: Simulation) -> None:
    warmer = Warmer(sim)
    sim.add("a", config(), CATALOG)
    assert warmer.run_until(sim.stable)
    c = sim.add("c", config(), CATALOG)
    assert warmer.run_until(lambda: bool(c.machine.warming))
    sim._apply(c, c.machine.drain(sim.now))
    assert warmer.run_until(lambda: sim.stable() and not c.machine.warming)
    assert sim.assignment() == {"a": {r(k) for k in range(12)}, "c": set()}
    assert {res for name, res in warmer.ended if name == "c"}
    sim.check_exclusive()


def test_a_drained_member_keeps_its_place_and_owns_nothing_until_undrained(
    sim: Simulation,
) -> None:
    warmer = Warmer(sim)
    for name in "ab":
        sim.add(name, config(), CATALOG)
    assert warmer.run_until(sim.stable)
    b = sim.members["b"]
    sim._apply(b, b.machine.drain(sim.now))
    assert warmer.run_until(lambda: sim.stable() and not sim.assignment()["b"])
    assert sim.assignment()["a"] == {r(k) for k in range(12)}
    assert b.machine.draining
    moved = {res for name, res, _ in warmer.warmed if name == "a"}
    assert len(moved) == 6  # a warmed up every one of b's before taking it
    sim._apply(b, b.machine.drain(sim.now, False))
    assert warmer.run_until(lambda: sim.stable() and len(sim.assignment()["b"]) == 6)
    sim.check_exclusive()


def test_an_older_member_in_the_group_gets_plain_moves(sim: Simulation) -> None:
    """A rolling upgrade: the group's common version is 3, so a new member that warms
    up still gets plain moves (the old leader could not stage them, a new one must not)."""
    from workgroup.protocol import BinaryCodec

    old = Protocol.of("cooperative-sticky", codec=BinaryCodec(latest_version=3))
    warmer = Warmer(sim)
    sim.add("old", config(protocols=[old], warm_up=False), CATALOG)
    assert warmer.run_until(sim.stable)
    sim.add("new", config(), CATALOG)
    assert warmer.run_until(lambda: sim.stable() and len(sim.assignment()["new"]) == 6)
    assert not warmer.warmed
    sim.check_exclusive()


def test_a_static_member_restarted_after_draining_to_stop_takes_work_again() -> None:
    """The embedded coordinator, as Kafka's, answers a known static member's restart
    with its last assignment and no rebalance: empty, after draining to stop.  The
    restarted member asks for a round (rule 15) and takes work again."""
    sim = Simulation(EmbeddedCoordinator())
    warmer = Warmer(sim)
    sim.add("a", config(instance_id="a"), CATALOG)
    sim.add("b", config(instance_id="b"), CATALOG)
    assert warmer.run_until(sim.stable)
    b = sim.members["b"]
    sim._apply(b, b.machine.drain(sim.now))
    assert warmer.run_until(lambda: sim.stable() and not sim.assignment()["b"])
    sim.kill("b")  # the process exits (a static member sends no LeaveGroup)
    generation = sim.generation()
    sim.add("b", config(instance_id="b"), CATALOG)
    assert warmer.run_until(
        lambda: sim.stable() and len(sim.assignment().get("b", ())) == 6, limit_ms=30_000
    ), sim.assignment()
    assert sim.generation() > generation
    sim.check_exclusive()


# --- a balancing plan whose moves warm up, across its follow-up rounds ----------------


BALANCED_CATALOG = {"shard": [0, 1, 2, 3]}


def _leader_round(
    pipeline: LeaderPipeline,
    metadata: dict[str, MemberMetadata],
    run_id: int,
    catalog: dict[str, list[int]] = BALANCED_CATALOG,
) -> tuple[RoundPlan, Staged]:
    """One round of the live leader's pipeline: its plan and what it staged."""
    _, outcome = play_leader_round(pipeline, metadata, catalog, run_id=run_id)
    return outcome.plan, outcome.staged


def loaded(
    owned: dict[int, float],
    *,
    warming: tuple[int, ...] = (),
    ready: tuple[int, ...] = (),
    catalog: dict[str, list[int]] = BALANCED_CATALOG,
) -> MemberMetadata:
    """A member's metadata with the load of each shard it owns."""
    return replace(
        meta(tuple(owned), warming=warming, ready=ready),
        catalog_hash=catalog_hash(freeze_catalog(catalog)),
        loads=tuple(owned.values()),
    )


def test_balancing_moves_that_warm_up_are_carried_out_when_loads_shift() -> None:
    # Shard 0 is hot: the round gives b two of a's shards, staged as warm-ups
    # (a keeps them meanwhile).  When b reports them ready, the hot spot is
    # gone: deciding again would leave one with a.  The follow-up round
    # carries out the plan and cuts both warm-ups over.
    pipeline = LeaderPipeline("g", reassign_delay_ms=0, balance=BalanceSettings(), max_warmups=4)
    first, staged = _leader_round(
        pipeline, {"a": loaded({0: 6.0, 1: 1.0, 2: 1.0}), "b": loaded({3: 1.0})}, 1
    )
    assert first.balanced is not None
    assert first.balanced.moves
    assert staged.started == 2
    moving = first.warming["b"]
    assert {k for _, k in moving} == {1, 2}
    assert set(moving) <= set(first.assigned["a"])  # a keeps them while b warms up
    cooled = {0: 1.0, 1: 1.0, 2: 1.0}
    second, staged = _leader_round(
        pipeline, {"a": loaded(cooled), "b": loaded({3: 1.0}, warming=(1, 2), ready=(1, 2))}, 2
    )
    assert second.decided == first.decided  # carried out, not decided again
    assert (staged.cut_over, staged.started) == (2, 0)
    assert set(second.revoked["a"]) == set(moving)
    # a has revoked them: b is handed them, and the plan is done.
    third, _ = _leader_round(
        pipeline, {"a": loaded({0: 1.0}), "b": loaded({3: 1.0}, warming=(1, 2), ready=(1, 2))}, 3
    )
    assert set(moving) <= set(third.assigned["b"])
    assert third.decided == first.decided
    assert not third.pending


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_kept_plan_reaches_its_target_whatever_the_loads_meanwhile(data: st.DataObject) -> None:
    # Members start the rounds a kept plan needs (each warm-up ready at once),
    # and report new loads every round: the plan's target is reached, and no
    # warm-up it began is called off on the way.
    members = data.draw(st.sampled_from([("a", "b"), ("a", "b", "c")]), label="members")
    shards = data.draw(st.integers(2, 8), label="shards")
    catalog = {"shard": list(range(shards))}
    owner = [data.draw(st.sampled_from(members), label=f"owner of {k}") for k in range(shards)]
    owned = {m: [k for k in range(shards) if owner[k] == m] for m in members}
    warming: dict[str, tuple[int, ...]] = dict.fromkeys(members, ())
    pipeline = LeaderPipeline(
        "g",
        reassign_delay_ms=0,
        balance=BalanceSettings(),
        max_warmups=data.draw(st.integers(1, 4), label="max_warmups"),
    )
    loads = st.lists(st.floats(0.5, 10.0), min_size=shards, max_size=shards)
    first: RoundPlan | None = None
    for generation in range(1, 3 * shards + 3):
        load = data.draw(loads, label=f"loads {generation}")
        metadata = {
            m: loaded(
                {k: load[k] for k in owned[m]},
                warming=warming[m],
                ready=warming[m],
                catalog=catalog,
            )
            for m in members
        }
        plan, _ = _leader_round(pipeline, metadata, generation, catalog)
        if first is None:
            if plan.premises is None:
                event("no plan kept")
                return  # every round decides (not what this test is about)
            event("a plan kept")
            first = plan
        else:
            assert plan.decided == first.decided, generation
        for m in members:
            for key in warming[m]:
                assert ("shard", key) in (*plan.warming.get(m, ()), *plan.assigned[m]), (m, key)
        owned = {m: [k for _, k in plan.assigned[m]] for m in members}
        warming = {
            m: tuple(k for _, k in plan.warming.get(m, ()) if k not in owned[m]) for m in members
        }
        if not plan.pending and not any(warming.values()):
            break
    else:
        pytest.fail("the plan was not carried out")
    assert first is not None
    assert {m: sorted(owned[m]) for m in members} == {
        m: sorted(k for _, k in first.decided[m]) for m in members
    }
