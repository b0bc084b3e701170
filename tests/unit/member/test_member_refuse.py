"""Refusals (the member machine's rule 10): a member that gave a resource up
after its handler kept failing names it in its metadata for a while, and the
leader hands it to another member that takes its kind."""

from __future__ import annotations

from tests.unit.member.test_member_machine import CODEC, make, only, sent, to_stable
from workgroup.assignors.base import MemberInfo
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import JoinedMember, JoinGroup, JoinGroupResult
from workgroup.member.actions import RunAssignor
from workgroup.member.round_plan import (
    REFUSES_TAG,
    apply_refusals,
    decode_refusals,
    encode_refusals,
)
from workgroup.protocol import MemberMetadata


def info(member_id: str, kinds: frozenset[str] = frozenset({"shard"})) -> MemberInfo:
    return MemberInfo(member_id=member_id, kinds=kinds)


def test_a_refused_resource_goes_to_the_least_loaded_member_that_takes_its_kind() -> None:
    members = {
        "a": info("a"),
        "b": info("b"),
        "c": info("c"),
        "d": info("d", frozenset({"other"})),  # does not take shards
    }
    target = {
        "a": [("shard", "beta"), ("shard", "x")],
        "b": [("shard", "y"), ("shard", "z")],
        "c": [("shard", "w")],
        "d": [],
    }
    moved = apply_refusals(target, members, {"a": frozenset({("shard", "beta")})})
    assert moved == {
        "a": [("shard", "x")],
        "b": [("shard", "y"), ("shard", "z")],
        "c": [("shard", "w"), ("shard", "beta")],
        "d": [],
    }
    assert target["a"] == [("shard", "beta"), ("shard", "x")]  # the input is not changed


def test_a_resource_nobody_else_can_take_stays_where_it_is() -> None:
    members = {"a": info("a"), "b": info("b")}
    target = {"a": [("shard", 1)], "b": [("shard", 2)]}
    both = {"a": frozenset({("shard", 1)}), "b": frozenset({("shard", 1)})}
    assert apply_refusals(target, members, both) == target
    alone = {"a": info("a")}
    assert apply_refusals({"a": [("shard", 1)]}, alone, {"a": frozenset({("shard", 1)})}) == {
        "a": [("shard", 1)]
    }


def test_the_tag_round_trips_str_and_int_keys_and_a_bad_tag_refuses_nothing() -> None:
    tag = encode_refusals([("shard", 3), ("shard", "beta")])
    assert decode_refusals([(REFUSES_TAG, tag)]) == {("shard", 3), ("shard", "beta")}
    assert decode_refusals([(REFUSES_TAG, "not json")]) == frozenset()
    assert decode_refusals([]) == frozenset()


def test_refuse_gives_the_resource_up_rejoins_and_names_it_until_the_refusal_ends() -> None:
    m = make()
    now = to_stable(m)
    actions = m.refuse(now + 1, [("shard", 1)], 60_000, "its handler kept failing")
    assert m.owned == {("shard", 0)}
    assert m.refused == {("shard", 1)}
    join = sent(actions)
    assert isinstance(join.request, JoinGroup)
    meta = CODEC.decode_metadata(join.request.protocols[0][1]).value
    assert decode_refusals(meta.tags) == {("shard", 1)}
    assert ("shard", 1) not in meta.owned
    m.tick(now + 60_002)
    assert m.refused == frozenset()


def test_the_leader_moves_what_a_member_refuses() -> None:
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    other = CODEC.encode_metadata(
        MemberMetadata(tags=((REFUSES_TAG, encode_refusals([("shard", 0), ("shard", 1)])),))
    )
    members = (
        JoinedMember("me", None, join.request.protocols[0][1]),
        JoinedMember("other", None, other),
    )
    actions = m.response(
        2,
        join.request_id,
        JoinGroupResult(ErrorCode.NONE, 5, "workgroup", "sticky.v1", "me", "me", members),
    )
    run = only(actions, RunAssignor)[0]
    target = {"me": [("shard", 2), ("shard", 3)], "other": [("shard", 0), ("shard", 1)]}
    sync = sent(m.assignment_done(3, run.run_id, target))
    given = {k: CODEC.decode_assignment(v).value for k, v in sync.request.assignments}
    assert set(given["me"].assigned) == {("shard", 0), ("shard", 1), ("shard", 2), ("shard", 3)}
    assert given["other"].assigned == ()
