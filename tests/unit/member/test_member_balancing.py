"""Load balancing in the member: the meter, the leader's memory and probing rebalances."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest
from machine_steps import ack_callbacks, sent

from workgroup.assignors.base import Assignment, AssignmentInput, MemberInfo
from workgroup.assignors.sticky import CooperativeStickyAssignor
from workgroup.errors import ConfigError, ErrorCode
from workgroup.kafka.messages import (
    Heartbeat,
    HeartbeatResult,
    JoinedMember,
    JoinGroup,
    JoinGroupResult,
    SyncGroupResult,
)
from workgroup.member.actions import Action, RunAssignor, SendRequest
from workgroup.member.config import MemberConfig
from workgroup.member.load_balancing import (
    BalanceSettings,
    LeaderBalancing,
    LoadMeter,
    balance_stage,
    check_load,
)
from workgroup.member.pipeline import simulate_rebalance
from workgroup.member.round_plan import read_members
from workgroup.member.round_stages import run_round_stages
from workgroup.member.state import MemberMachine
from workgroup.member.transitions import State
from workgroup.protocol import BinaryCodec, MemberMetadata, Protocol
from workgroup.protocol.catalog import catalog_hash, freeze_catalog
from workgroup.testing import capture_logs
from workgroup.types import Resource

CODEC = BinaryCodec()
CATALOG = {"shard": list(range(6))}
INTERVAL = 10_000


class AllToOther:
    """Gives every resource to member "other": a count-blind assignor that the
    stage must correct."""

    name = "all-to-other"
    supports_cooperative = False

    def assign(self, data: AssignmentInput) -> Assignment:
        out: Assignment = {mid: [] for mid in data.members}
        out["other"] = [("shard", k) for k in data.resources["shard"]]
        return out


def leader(max_moves: int) -> MemberMachine:
    config = MemberConfig(
        group_id="g",
        protocols=[Protocol("all", AllToOther())],
        session_timeout_ms=10_000,
        rebalance_timeout_ms=30_000,
        heartbeat_interval_ms=3_000,
        max_moves=max_moves,
        balance_interval_ms=INTERVAL,
    )
    return MemberMachine(config, CATALOG)


def lead_one_round(m: MemberMachine, loads: tuple[float, ...]) -> tuple[int, RunAssignor]:
    """Drive ``m`` as leader through one round where "other" owns every shard
    with ``loads``; returns the time it reached STABLE and the assignor run."""
    join = sent(m.start(0) + m.coordinator_found(1))
    mine = join.request.protocols[0][1]
    other = CODEC.encode_metadata(
        MemberMetadata(
            kinds=("shard",),
            owned=tuple(("shard", k) for k in range(6)),
            owned_generation=4,
            loads=loads,
        )
    )
    members = (JoinedMember("me", None, mine), JoinedMember("other", None, other))
    actions = m.response(
        2,
        join.request_id,
        JoinGroupResult(ErrorCode.NONE, 5, "workgroup", "all.v1", "me", "me", members),
    )
    run = next(a for a in actions if isinstance(a, RunAssignor))
    sync = sent(m.assignment_done(3, run.run_id, run_round_stages(run.stages)))
    blob = dict(sync.request.assignments)["me"]
    ack_callbacks(m, m.response(4, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob)), 4)
    assert m.state is State.STABLE
    return 4, run


def advance(m: MemberMachine, until: int) -> list[Action]:
    """Tick at every deadline up to ``until`` (a driver that is never late)."""
    out: list[Action] = []
    while (next_at := m.next_deadline()) is not None and next_at <= until:
        out += m.tick(next_at)
    return out


def joins(m: MemberMachine, actions: list[Action], now: int) -> list[JoinGroup]:
    """The JoinGroups among ``actions`` and what follows once the (eager)
    revocation they start is done."""
    actions = actions + ack_callbacks(m, actions, now) + advance(m, now + 1_000)
    return [
        a.request
        for a in actions
        if isinstance(a, SendRequest) and isinstance(a.request, JoinGroup)
    ]


def test_the_leader_balances_after_its_assignor_and_probes_while_over() -> None:
    m = leader(max_moves=1)
    with capture_logs() as logs:
        now, run = lead_one_round(m, (10.0,) * 6)
    assert run.stages.balance is not None
    assert run.input.resource_loads == {("shard", k): pytest.approx(10.0) for k in range(6)}
    # One move (the cap) leaves "other" at 50 of a mean of 30: over the tolerance.
    event = next(e for e in logs if e["event"] == "member.load_balanced")
    assert event["moves"] == 1
    assert event["probe_in_ms"] == INTERVAL
    due = 3 + INTERVAL  # an interval after the round (the assignor finished at 3)
    assert m._pipeline.probe_at == due
    # Nothing before the interval (heartbeats answered); at the interval the leader rejoins.
    before: list[Action] = []
    while (next_at := m.next_deadline()) is not None and next_at < due:
        actions = m.tick(next_at)
        before += actions
        for action in actions:
            if isinstance(action, SendRequest) and isinstance(action.request, Heartbeat):
                m.response(next_at, action.request_id, HeartbeatResult(ErrorCode.NONE))
    assert not joins(m, before, now)
    with capture_logs() as logs:
        assert joins(m, advance(m, due), due)
    assert any(e["event"] == "member.rejoin_requested" and "probing" in e["reason"] for e in logs)


def test_a_round_within_the_tolerance_schedules_no_probe() -> None:
    m = leader(max_moves=16)
    now, _ = lead_one_round(m, (10.0,) * 6)
    last = m._pipeline.balancing.last
    assert last is not None
    assert not last.over(0.10)
    assert m._pipeline.probe_at is None
    deadline = m.next_deadline()
    assert deadline is not None
    assert deadline <= now + 3_000  # the heartbeat, nothing else


def test_balancing_off_runs_the_assignor_alone() -> None:
    m = leader(max_moves=0)
    _, run = lead_one_round(m, (10.0,) * 6)
    assert run.stages.balance is None
    assert isinstance(run.assignor, AllToOther)


def test_members_publish_their_smoothed_loads_when_they_join() -> None:
    m = leader(max_moves=16)
    lead_one_round(m, (1.0,) * 6)
    owned = sorted(m.owned)
    assert owned  # the stage gave "me" some shards
    m.loads.record(owned[0], 8.0, 100)
    join = joins(m, m.request_rejoin(200, "test"), 200)[0]
    meta = CODEC.decode_metadata(join.protocols[0][1]).value
    loads = dict(zip(meta.owned, meta.loads, strict=True))
    assert loads[owned[0]] == pytest.approx(8.0, rel=1e-4)
    assert all(math.isnan(x) for r, x in loads.items() if r != owned[0])


def test_meter_smooths_with_the_time_constant_and_forgets_what_is_gone() -> None:
    meter = LoadMeter(smoothing_ms=1_000)
    meter.record(("s", 0), 100, 0)
    meter.record(("s", 0), 0, 1_000)  # one time constant later: 1/e of the way left
    assert meter.load(("s", 0)) == pytest.approx(100 / math.e)
    meter.record(("s", 0), 1_000, 1_000)  # same instant: no weight
    assert meter.load(("s", 0)) == pytest.approx(100 / math.e)
    meter.record(("s", 1), 5, 0)
    assert meter.report([("s", 1), ("s", 2)])[0] == 5
    assert math.isnan(meter.report([("s", 1), ("s", 2)])[1])
    assert meter.load(("s", 0)) is None  # not owned any more: forgotten
    assert meter.report([("s", 3)]) == ()


def test_a_fresh_member_rejoins_with_its_first_loads_unless_the_leader_has_them() -> None:
    settings = BalanceSettings(max_moves=16, balance_interval_ms=1_000)
    shard = ("s", 0)

    def fresh_meter(loads_known: bool) -> LoadMeter:
        meter = LoadMeter(settings.smoothing_ms)
        assert meter.report([]) == ()  # joins owning nothing, measuring nothing
        meter.assigned(loads_known=loads_known)
        meter.record(shard, 10, 0)
        assert not meter.changed([shard], 0, settings)  # the first look
        return meter

    # No load reached the leader (a group started together): the first is news.
    assert fresh_meter(loads_known=False).changed([shard], 1_000, settings)
    # The leader has the load (its former owner's): no rejoin for it, but what
    # is measured then is what a change is measured against.
    meter = fresh_meter(loads_known=True)
    assert not meter.changed([shard], 1_000, settings)
    meter.record(shard, 10.5, 1_000)
    assert not meter.changed([shard], 2_000, settings)  # within the tolerance
    meter.record(shard, 30, 2_000)
    assert meter.changed([shard], 2_000, settings)


def test_the_leader_needs_no_first_loads_of_what_it_has_seen() -> None:
    memory = LeaderBalancing(BalanceSettings(max_moves=16, balance_interval_ms=1_000))
    assigned = {"new": [("shard", 0)], "newer": [("shard", 1)], "old": [("shard", 2)]}
    # No load at all yet: every fresh member's first loads are news.
    assert memory.loads_known(assigned, published=set()) == frozenset()
    memory.loads = {("shard", 0): 4.0, ("shard", 2): 6.0}
    # "old" published its loads (it needs no flag); "newer" got a shard never seen.
    assert memory.loads_known(assigned, published={"old"}) == {"new"}
    # A probe follows the round anyway: it brings them.
    memory.probe_at = 1_000
    assert memory.loads_known(assigned, published={"old"}) == {"new", "newer"}


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, "3", True, None])
def test_bad_loads_are_refused_with_a_clear_error(bad: object) -> None:
    with pytest.raises(ConfigError, match="load"):
        check_load(bad)
    with pytest.raises(ConfigError, match="load"):
        LoadMeter().record(("s", 0), bad, 0)


def test_moved_resources_stay_pinned_for_the_pinned_intervals() -> None:
    settings = BalanceSettings(max_moves=1, balance_interval_ms=1_000, pinned_intervals=3)
    memory = LeaderBalancing(settings)
    stage = memory.stage(0)
    assert stage is not None
    members = {m: MemberInfo(m, frozenset({"shard"})) for m in ("me", "other")}
    data = AssignmentInput(
        resources={"shard": range(6)},
        members=members,
        resource_loads={("shard", k): 10.0 for k in range(6)},
    )
    target = AllToOther().assign(data)
    result = balance_stage(stage, target, data, refused={}, carried=False, exclusive=True)
    balanced = memory.finished(0, result, carried=False).balanced
    assert balanced is not None
    moved = balanced.moves[0].resource
    assert memory.pinned(2_999) == {moved}
    assert memory.pinned(3_000) == frozenset()
    assert memory.probe_at == 1_000
    assert memory.loads == {("shard", k): 10.0 for k in range(6)}


def test_the_leader_remembers_where_the_stage_placed_resources_while_the_members_stay() -> None:
    settings = BalanceSettings(max_moves=1, balance_interval_ms=1_000, pinned_intervals=1)
    memory = LeaderBalancing(settings)

    def round_(now: int, names: tuple[str, ...]) -> Resource:
        stage = memory.stage(now)
        assert stage is not None
        data = AssignmentInput(
            resources={"shard": range(6)},
            members={m: MemberInfo(m, frozenset({"shard"})) for m in names},
            resource_loads={("shard", k): 10.0 for k in range(6)},
        )
        target = AllToOther().assign(data)
        result = balance_stage(stage, target, data, refused={}, carried=False, exclusive=True)
        balanced = memory.finished(now, result, carried=False).balanced
        assert balanced is not None
        return balanced.moves[0].resource

    first = round_(0, ("me", "other"))
    assert memory.placed == {first: "me"}
    # The pin expires; where the stage put the resource is still known.
    stage = memory.stage(5_000)
    assert stage is not None
    assert stage.pinned == frozenset()
    assert stage.placed == {first: "me"}
    assert stage.placed_for == {"me", "other"}
    second = round_(5_000, ("me", "other"))
    assert memory.placed == {first: "me", second: "me"}
    # A member joins: the earlier decisions were made for other members.
    third = round_(10_000, ("me", "new", "other"))
    assert memory.placed == {third: memory.placed[third]}
    assert memory.placed_for == {"me", "new", "other"}


def test_a_member_that_takes_nothing_is_no_premise_of_where_the_stage_placed_resources() -> None:
    # "leaving" takes nothing (it is closing, or draining): the stage decided
    # for "me" and "other" alone, and its departure changes none of that.
    settings = BalanceSettings(max_moves=1, balance_interval_ms=1_000, pinned_intervals=3)
    memory = LeaderBalancing(settings)

    def round_(now: int, members: Mapping[str, frozenset[str]]) -> None:
        stage = memory.stage(now)
        assert stage is not None
        data = AssignmentInput(
            resources={"shard": range(6)},
            members={m: MemberInfo(m, kinds) for m, kinds in members.items()},
            resource_loads={("shard", k): 10.0 for k in range(6)},
        )
        target = AllToOther().assign(data)
        result = balance_stage(stage, target, data, refused={}, carried=False, exclusive=True)
        memory.finished(now, result, carried=False)

    shard = frozenset({"shard"})
    round_(0, {"leaving": frozenset(), "me": shard, "other": shard})
    first = dict(memory.placed)
    assert len(first) == 1
    assert memory.placed_for == {"me", "other"}
    # It left; the next round (the first shard still pinned) moves another.
    round_(1_000, {"me": shard, "other": shard})
    assert memory.placed.items() > first.items()
    assert len(memory.placed) == 2
    assert memory.placed_for == {"me", "other"}


def test_a_round_that_hands_out_unmeasured_resources_probes_once() -> None:
    # A new leader: "other" publishes the loads of shards 0-2; shards 3-5 were
    # the departed leader's, never seen.  The round looks even on the average,
    # but their new owner measures them: the leader looks again an interval later.
    memory = LeaderBalancing(BalanceSettings(max_moves=16, balance_interval_ms=1_000))
    given = {"me": [("shard", k) for k in (3, 4, 5)], "other": [("shard", k) for k in (0, 1, 2)]}

    def round_(now: int, owned: Mapping[str, list[Resource]]) -> int | None:
        stage = memory.stage(now)
        assert stage is not None
        data = AssignmentInput(
            resources={"shard": range(6)},
            members={
                m: MemberInfo(
                    m,
                    frozenset({"shard"}),
                    owned=tuple(owned.get(m, ())),
                    owned_load=30.0 if m == "other" else None,  # what it published
                )
                for m in given
            },
            resource_loads={("shard", k): 10.0 for k in range(3)},
        )
        result = balance_stage(stage, given, data, refused={}, carried=False, exclusive=True)
        assert result.balanced is not None
        assert not result.balanced.over(0.10)
        memory.finished(now, result, carried=False)
        return memory.probe_at

    assert round_(0, {"other": given["other"]}) == 1_000
    # Shards 3-5 never report (their handler measures nothing): once "me" owns
    # them, nothing is news and no probe follows.
    assert round_(1_000, given) is None


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="balance_interval_ms"):
        BalanceSettings(balance_interval_ms=0)
    with pytest.raises(ConfigError, match="max_moves"):
        BalanceSettings(max_moves=-1)
    with pytest.raises(ConfigError, match="imbalance_tolerance"):
        BalanceSettings(imbalance_tolerance=-0.5)


def test_the_follow_up_round_of_a_cooperative_rebalance_keeps_the_plan() -> None:
    catalog = {"shard": list(range(8))}
    loads = {("shard", k): 1000.0 / (k + 1) for k in range(8)}
    owners = {"a": [0, 1, 2], "b": [3, 4, 5], "c": [6, 7]}
    digest = catalog_hash(freeze_catalog(catalog))
    metadata = {
        mid: MemberMetadata(
            owned=tuple(("shard", k) for k in keys),
            owned_generation=4,
            catalog_hash=digest,
            loads=tuple(loads[("shard", k)] for k in keys),
        )
        for mid, keys in owners.items()
    }
    joined = tuple(JoinedMember(mid, None, CODEC.encode_metadata(m)) for mid, m in metadata.items())
    read = read_members(CODEC, joined, digest)
    rebalance = simulate_rebalance(
        CooperativeStickyAssignor(),
        joined,
        read.metadata,
        freeze_catalog(catalog),
        "cooperative",
        balance=BalanceSettings(max_moves=8),
    )
    assert rebalance.converged
    assert len(rebalance.rounds) == 2  # the moves are withheld, then handed out
    first, second = rebalance.balanced
    assert first is not None
    assert first.moves
    assert second is not None
    assert second.moves == ()  # the follow-up round only carries out the plan
    assert rebalance.rounds[1].target == rebalance.rounds[0].target


def test_no_probe_when_no_move_can_help() -> None:
    # Shard 0 alone is far above the mean: after the best moves the group is
    # still over the tolerance, but probing again could not change that.
    m = leader(max_moves=16)
    lead_one_round(m, (100.0, 1.0, 1.0, 1.0, 1.0, 1.0))
    last = m._pipeline.balancing.last
    assert last is not None
    assert last.over(0.10)
    assert not last.unfinished(0.10)
    assert m._pipeline.probe_at is None
