"""Moves by reason (member/moves.py): what each round begins, why and how."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.member.test_member_machine import CODEC, make, only, sent
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import JoinedMember, JoinGroupResult
from workgroup.member.actions import RunAssignor
from workgroup.member.moves import Move, MoveCounter, classify_moves, count_moves
from workgroup.member.round_plan import DRAINING_TAG, LEAVING_TAG, RoundPlan, plan_round
from workgroup.member.warmup import WARMUP_VERSION, stage_warmups
from workgroup.protocol import MemberMetadata
from workgroup.testing import capture_logs
from workgroup.types import Resource


def shards(*keys: int) -> tuple[Resource, ...]:
    return tuple(("shard", k) for k in keys)


def meta(
    owned: Sequence[int] = (),
    *,
    warms_up: bool = False,
    warming: Sequence[int] = (),
    ready: Sequence[int] = (),
    tag: str | None = None,
) -> MemberMetadata:
    return MemberMetadata(
        owned=shards(*owned),
        warms_up=warms_up,
        warming=shards(*warming),
        ready=shards(*ready),
        tags=((tag, "1"),) if tag else (),
    )


def round_plan(
    target: Mapping[str, Sequence[int]],
    metadata: Mapping[str, MemberMetadata],
    *,
    max_warmups: int = 4,
    eager: bool = False,
) -> RoundPlan:
    """The leader's plan for ``target``: withholding, then warm-up staging."""
    claims = {} if eager else {mid: m.owned for mid, m in metadata.items()}
    plan = plan_round(list(target), {m: list(shards(*ks)) for m, ks in target.items()}, claims)
    staged, _ = stage_warmups(
        plan, metadata, max_warmups=max_warmups, common_version=WARMUP_VERSION
    )
    return staged


def reasons(moves: Sequence[Move]) -> list[tuple[int, str | None, str, str, str]]:
    """The moves in resource order."""
    return sorted((int(m.resource[1]), m.giver, m.taker, m.reason, m.how) for m in moves)


def test_a_joining_member_takes_plain_moves_counted_once_over_two_rounds() -> None:
    counter = MoveCounter()
    counter.observe(round_plan({"a": [0, 1, 2, 3]}, {"a": meta()}), {"a": meta()})
    target = {"a": [0, 1], "b": [2, 3]}
    first = {"a": meta([0, 1, 2, 3]), "b": meta()}
    moves = counter.observe(round_plan(target, first), first)
    assert reasons(moves) == [(2, "a", "b", "join", "plain"), (3, "a", "b", "join", "plain")]
    # The follow-up round hands them out: the same moves, not counted again.
    follow = {"a": meta([0, 1]), "b": meta()}
    plan = round_plan(target, follow)
    assert plan.assigned["b"] == shards(2, 3)
    assert counter.observe(plan, follow) == ()
    assert counter.totals == {("catalog", "plain"): 4, ("join", "plain"): 2}


def test_a_warm_up_is_one_move_from_its_start_to_its_hand_out() -> None:
    counter = MoveCounter()
    counter.observe(round_plan({"a": [0, 1, 2, 3]}, {"a": meta()}), {"a": meta()})
    target = {"a": [0, 1], "b": [2, 3]}
    rounds = [
        {"a": meta([0, 1, 2, 3]), "b": meta(warms_up=True)},  # staged: warm-ups start
        {"a": meta([0, 1, 2, 3]), "b": meta(warms_up=True, warming=[2, 3])},  # warming
        {"a": meta([0, 1, 2, 3]), "b": meta(warms_up=True, warming=[2, 3], ready=[2, 3])},
        {"a": meta([0, 1]), "b": meta(warms_up=True, warming=[2, 3], ready=[2, 3])},
    ]
    seen = []
    for metadata in rounds:
        plan = round_plan(target, metadata)
        seen.append(reasons(counter.observe(plan, metadata)))
    assert seen[0] == [(2, "a", "b", "join", "warmup"), (3, "a", "b", "join", "warmup")]
    assert seen[1:] == [[], [], []]  # continuing, cut over, handed out
    assert plan.assigned["b"] == shards(2, 3)
    assert counter.totals[("join", "warmup")] == 2


def test_moves_waiting_for_a_free_warm_up_count_when_their_warm_up_starts() -> None:
    counter = MoveCounter()
    counter.observe(round_plan({"a": [0, 1, 2]}, {"a": meta()}), {"a": meta()})
    target = {"a": [], "b": [0, 1, 2]}
    metadata = {"a": meta([0, 1, 2], tag=DRAINING_TAG), "b": meta([], warms_up=True)}
    moves = counter.observe(round_plan(target, metadata, max_warmups=2), metadata)
    assert reasons(moves) == [(0, "a", "b", "drain", "warmup"), (1, "a", "b", "drain", "warmup")]
    # 0 and 1 cut over and are handed out: 2's warm-up starts.
    metadata = {
        "a": meta([2], tag=DRAINING_TAG),
        "b": meta([], warms_up=True, warming=[0, 1], ready=[0, 1]),
    }
    moves = counter.observe(round_plan(target, metadata, max_warmups=2), metadata)
    assert reasons(moves) == [(2, "a", "b", "drain", "warmup")]
    assert counter.totals == {("catalog", "plain"): 3, ("drain", "warmup"): 3}


def test_the_owners_state_and_the_balancing_stage_name_the_reason() -> None:
    target = {"a": [], "b": [0], "c": [1, 2]}
    metadata = {"a": meta([0], tag=LEAVING_TAG), "b": meta([1]), "c": meta([2])}
    moves = classify_moves(round_plan(target, metadata), metadata, assigned_before=shards(0, 1, 2))
    assert reasons(moves) == [(0, "a", "b", "leave", "plain"), (1, "b", "c", "rebalance", "plain")]
    moves = classify_moves(
        round_plan(target, metadata), metadata, balanced=shards(1), newcomers={"c"}
    )
    # The balancing stage's move is "balance" even to a newcomer; leaving wins over all.
    assert reasons(moves) == [(0, "a", "b", "leave", "plain"), (1, "b", "c", "balance", "plain")]
    moves = classify_moves(round_plan(target, metadata), metadata, newcomers={"c"})
    assert reasons(moves)[1] == (1, "b", "c", "join", "plain")


def test_a_resource_nobody_owns_is_a_failover_if_it_was_assigned_else_new() -> None:
    counter = MoveCounter()
    both = {"a": meta(), "b": meta()}
    counter.observe(round_plan({"a": [0, 1], "b": [2, 3]}, both), both)
    # b is gone (its session expired); shard 4 is new in the catalog.
    alone = {"a": meta([0, 1])}
    moves = counter.observe(round_plan({"a": [0, 1, 2, 3, 4]}, alone), alone)
    assert reasons(moves) == [
        (2, None, "a", "failover", "plain"),
        (3, None, "a", "failover", "plain"),
        (4, None, "a", "catalog", "plain"),
    ]


def test_a_new_leader_without_memory_calls_unowned_resources_failovers_in_a_running_group() -> None:
    running = {"a": meta([0, 1])}
    moves = MoveCounter().observe(round_plan({"a": [0, 1, 2]}, running), running)
    assert reasons(moves) == [(2, None, "a", "failover", "plain")]
    starting = {"a": meta(), "b": meta()}
    moves = MoveCounter().observe(round_plan({"a": [0], "b": [1]}, starting), starting)
    assert [m.reason for m in moves] == ["catalog", "catalog"]


def test_eager_moves_count_at_the_hand_out_against_what_members_revoked() -> None:
    counter = MoveCounter()
    counter.observe(round_plan({"a": [0, 1]}, {"a": meta()}, eager=True), {"a": meta()})
    metadata = {"a": meta([0, 1]), "b": meta()}  # eager members report what they revoked
    plan = round_plan({"a": [0], "b": [1]}, metadata, eager=True)
    assert not plan.pending
    assert reasons(counter.observe(plan, metadata)) == [(1, "a", "b", "join", "plain")]


def test_a_new_replica_beside_an_owner_that_keeps_its_own_is_not_a_move() -> None:
    metadata = {"a": meta([0]), "b": meta()}
    plan = round_plan({"a": [0], "b": [0]}, metadata)
    assert plan.assigned["b"] == shards(0)
    assert classify_moves(plan, metadata, assigned_before=shards(0)) == ()


def test_a_revocation_repeated_before_the_hand_out_is_counted_once() -> None:
    counter = MoveCounter()
    counter.observe(round_plan({"a": [0, 1]}, {"a": meta()}), {"a": meta()})
    metadata = {"a": meta([0, 1]), "b": meta()}
    target = {"a": [0], "b": [1]}
    assert len(counter.observe(round_plan(target, metadata), metadata)) == 1
    # Another round before a let go (it still reports 1): revoked again, not a new move.
    assert counter.observe(round_plan(target, metadata), metadata) == ()
    follow = {"a": meta([0]), "b": meta()}
    assert counter.observe(round_plan(target, follow), follow) == ()
    assert counter.totals[("join", "plain")] == 1
    assert count_moves([Move(("shard", 1), "a", "b", "join", "plain")]) == {"join": 1}


def test_the_leader_logs_its_moves_by_reason_and_counts_them() -> None:
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    draining = CODEC.encode_metadata(
        MemberMetadata(owned=shards(0, 1, 2), owned_generation=4, tags=((DRAINING_TAG, "1"),))
    )
    members = (
        JoinedMember("me", None, join.request.protocols[0][1]),
        JoinedMember("other", None, draining),
    )
    actions = m.response(
        2,
        join.request_id,
        JoinGroupResult(ErrorCode.NONE, 5, "workgroup", "sticky.v1", "me", "me", members),
    )
    run = only(actions, RunAssignor)[0]
    target = {"me": list(shards(0, 1, 2, 3, 4, 5)), "other": []}
    with capture_logs() as logs:
        sent(m.assignment_done(3, run.run_id, target))
    [event] = [e for e in logs if e["event"] == "member.moves"]
    # A first round as leader: what nobody owns in a running group lost its owner.
    assert (event["drain"], event["failover"], event["warmup"]) == (3, 3, 0)
    assert m.moves_total == {("drain", "plain"): 3, ("failover", "plain"): 3}


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    members=st.integers(min_value=1, max_value=4),
    resources=st.integers(min_value=1, max_value=10),
    warm=st.booleans(),
    max_warmups=st.integers(min_value=1, max_value=4),
)
def test_every_resource_that_changes_owner_is_counted_once_whatever_the_rounds(
    data: st.DataObject, members: int, resources: int, warm: bool, max_warmups: int
) -> None:
    """Play a cooperative rebalance to its end (warm-ups reported ready at once):
    the moves counted are the resources whose owner changed, each once."""
    ids = [f"m{i}" for i in range(members)]
    owner_of = st.sampled_from([*ids, None])
    before = {k: data.draw(owner_of) for k in range(resources)}
    after = {k: data.draw(st.sampled_from(ids)) for k in range(resources)}
    target = {m: [k for k in range(resources) if after[k] == m] for m in ids}
    owned = {m: [k for k in range(resources) if before[k] == m] for m in ids}
    warming: dict[str, tuple[Resource, ...]] = {}
    counter = MoveCounter()
    counter._assigned = frozenset(shards(*range(resources)))  # the group ran before
    counter._members = frozenset(ids)
    counted: list[Move] = []
    for _ in range(3 * resources + 4):
        metadata = {
            m: MemberMetadata(
                owned=shards(*owned[m]),
                warms_up=warm,
                warming=warming.get(m, ()),
                ready=warming.get(m, ()),
            )
            for m in ids
        }
        plan = round_plan(target, metadata, max_warmups=max_warmups)
        counted += counter.observe(plan, metadata)
        owned = {m: [int(r[1]) for r in plan.assigned[m]] for m in ids}
        warming = {m: rs for m, rs in plan.warming.items() if rs}
        if not plan.pending and not warming:
            break
    assert {k: m for m in ids for k in owned[m]} == after  # the rebalance ended
    changed = {k for k in range(resources) if before[k] != after[k]}
    assert sorted(int(m.resource[1]) for m in counted) == sorted(changed)
    assert all(m.how == ("warmup" if warm and m.giver else "plain") for m in counted)
    assert all((m.giver is None) == (before[int(m.resource[1])] is None) for m in counted)
