"""The order of the leader's stages (:mod:`workgroup.member.round_stages`):
balancing runs after the reassignment delay and refusals, so that no later
stage undoes its plan."""

from __future__ import annotations

import pickle
from collections.abc import Mapping, Sequence

from leader_round import play_leader_round

from workgroup.assignors.sticky import CooperativeStickyAssignor
from workgroup.kafka.messages import JoinedMember
from workgroup.member.load_balancing import BalanceSettings
from workgroup.member.pipeline import LeaderPipeline, simulate_rebalance
from workgroup.member.round_plan import REFUSES_TAG, RoundPlan, encode_refusals
from workgroup.member.round_stages import RoundStages, run_round_stages
from workgroup.protocol import BinaryCodec, MemberMetadata
from workgroup.protocol.catalog import freeze_catalog
from workgroup.types import Resource

CODEC = BinaryCodec()
TOLERANCE = 0.10


def shard(key: int) -> Resource:
    return ("shard", key)


def load_of(resources: Sequence[Resource], loads: Mapping[Resource, float]) -> float:
    return sum(loads[r] for r in resources)


def within_tolerance(
    target: Mapping[str, Sequence[Resource]], loads: Mapping[Resource, float]
) -> bool:
    totals = [load_of(rs, loads) for rs in target.values()]
    mean = sum(totals) / len(totals)
    return max(totals) <= mean * (1 + TOLERANCE) + 1e-9


def test_balancing_gives_nothing_to_a_member_that_refuses_it() -> None:
    # "a" runs six heavy shards, "b" and "c" six light ones each; "c" refuses
    # every heavy shard.  Balancing must move the heavy load to "b" only, and
    # the light load on to "c", rather than give "c" a heavy shard that the
    # refusals would then take back (leaving the group over the tolerance).
    heavy = [shard(k) for k in range(6)]
    loads = {r: 10.0 for r in heavy} | {shard(k): 2.0 for k in range(6, 18)}
    owners = {"a": range(0, 6), "b": range(6, 12), "c": range(12, 18)}
    metadata = {
        mid: MemberMetadata(
            owned=tuple(shard(k) for k in keys),
            owned_generation=4,
            loads=tuple(loads[shard(k)] for k in keys),
            tags=((REFUSES_TAG, encode_refusals(heavy)),) if mid == "c" else (),
        )
        for mid, keys in owners.items()
    }
    joined = tuple(JoinedMember(mid, None, CODEC.encode_metadata(m)) for mid, m in metadata.items())
    rebalance = simulate_rebalance(
        CooperativeStickyAssignor(),
        joined,
        metadata,
        freeze_catalog({"shard": list(range(18))}),
        "cooperative",
        balance=BalanceSettings(imbalance_tolerance=TOLERANCE, max_moves=16),
    )
    assert rebalance.converged
    first = rebalance.balanced[0]
    assert first is not None
    assert first.moves  # the group was over the tolerance: balancing moved
    assert not {m.resource for m in first.moves if m.taker == "c"} & set(heavy)
    target = rebalance.target
    assert not set(target["c"]) & set(heavy)
    assert within_tolerance(target, loads)


def lead(
    pipeline: LeaderPipeline,
    now: int,
    run_id: int,
    members: Mapping[str, MemberMetadata],
    catalog: Mapping[str, list[int]],
) -> tuple[RoundStages, RoundPlan]:
    """One round of ``pipeline`` as the live leader plays it: its stages and plan."""
    stages, outcome = play_leader_round(pipeline, members, catalog, run_id=run_id, now=now)
    return stages, outcome.plan


def test_a_departed_members_delayed_resources_are_not_counted_by_balancing() -> None:
    # "a", "b" and "c" carry the same load, "c" most of it on shard 12.  When
    # "c" leaves, its shards wait (the reassignment delay): the group of "a"
    # and "b" is balanced, so balancing moves nothing.  Counted where the
    # assignor put them, shard 12 would make balancing move shards between "a"
    # and "b" that the delay then leaves uneven.
    catalog = {"shard": list(range(18))}
    loads = {shard(k): 10.0 for k in range(12)} | {shard(12): 55.0}
    loads |= {shard(k): 1.0 for k in range(13, 18)}
    owners = {"a": range(0, 6), "b": range(6, 12), "c": range(12, 18)}

    def metadata(mid: str, keys: Sequence[int]) -> MemberMetadata:
        owned = tuple(shard(k) for k in keys)
        return MemberMetadata(owned=owned, owned_generation=1, loads=tuple(loads[r] for r in owned))

    pipeline = LeaderPipeline(
        "order",
        reassign_delay_ms=60_000,
        balance=BalanceSettings(imbalance_tolerance=TOLERANCE, max_moves=16),
        max_warmups=0,
    )
    everyone = {mid: metadata(mid, list(keys)) for mid, keys in owners.items()}
    _, first = lead(pipeline, 0, 0, everyone, catalog)
    assert {mid: set(rs) for mid, rs in first.target.items()} == {
        mid: {shard(k) for k in keys} for mid, keys in owners.items()
    }
    stayed = {mid: everyone[mid] for mid in ("a", "b")}
    stages, second = lead(pipeline, 1_000, 1, stayed, catalog)
    departed = {shard(k) for k in owners["c"]}
    assert set(stages.delay.handed["c"]) == departed  # "c" ran them in the last round
    assert not departed & {r for rs in second.target.values() for r in rs}
    assert second.balanced is not None
    assert second.balanced.moves == ()
    assert second.target == {"a": everyone["a"].owned, "b": everyone["b"].owned}
    assert pipeline.next_deadline() == 1_000 + 60_000  # the delay's end


def test_the_round_stages_are_frozen_and_picklable() -> None:
    # What the driver runs off the event loop is a value: the leader's memory
    # is read when the round begins, never shared with the running stages.
    members = {
        mid: MemberMetadata(owned=(shard(i),), owned_generation=1, loads=(1.0 + i,))
        for i, mid in enumerate(("a", "b"))
    }
    pipeline = LeaderPipeline(
        "order", reassign_delay_ms=5_000, balance=BalanceSettings(), max_warmups=0
    )
    stages, _ = lead(pipeline, 0, 0, members, {"shard": [0, 1]})
    copy = pickle.loads(pickle.dumps(stages))
    assert copy.input == stages.input
    assert copy.delay == stages.delay
    assert copy.balance == stages.balance
    assert run_round_stages(copy).target == run_round_stages(stages).target
