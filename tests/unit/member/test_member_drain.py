"""Drain (the member machine's rule 15) when it is asked before the first join or
in the middle of a round: the JoinGroup that carries the change is never skipped."""

from __future__ import annotations

from tests.unit.member.machine_steps import ack_callbacks, sent
from tests.unit.member.test_member_machine import CODEC, make, to_stable
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import JoinGroup, JoinGroupResult, SyncGroup, SyncGroupResult
from workgroup.member.round_plan import DRAINING_TAG
from workgroup.member.state import MemberMachine
from workgroup.member.transitions import State
from workgroup.protocol import AssignmentData


def tags_of(join: JoinGroup) -> dict[str, str]:
    return dict(CODEC.decode_metadata(join.protocols[0][1]).value.tags)


def test_drained_before_the_start_the_first_join_is_tagged() -> None:
    m = make()
    assert m.drain(0, True) == []
    assert m.draining
    join = sent(m.start(0) + m.coordinator_found(1))
    assert isinstance(join.request, JoinGroup)
    assert tags_of(join.request) == {DRAINING_TAG: "1"}


def _join_then_sync(m: MemberMachine, now: int) -> tuple[JoinGroup, int]:
    join = sent(m.start(now) + m.coordinator_found(now + 1))
    assert isinstance(join.request, JoinGroup)
    sync = sent(
        m.response(
            now + 2,
            join.request_id,
            JoinGroupResult(ErrorCode.NONE, 5, "workgroup", "sticky.v1", "leader-1", "me-1"),
        )
    )
    assert isinstance(sync.request, SyncGroup)
    return join.request, sync.request_id


def test_a_drain_asked_during_a_round_rejoins_once_the_round_is_over() -> None:
    m = make()
    join, sync_id = _join_then_sync(m, 0)
    assert DRAINING_TAG not in tags_of(join)
    m.drain(3, True)  # the JoinGroup went without the tag
    blob = CODEC.encode_assignment(AssignmentData(assigned=(("shard", 0),), generation=5))
    actions = m.response(4, sync_id, SyncGroupResult(ErrorCode.NONE, blob))
    rejoin = sent(ack_callbacks(m, actions, 5) + m.tick(5))
    assert isinstance(rejoin.request, JoinGroup)
    assert tags_of(rejoin.request) == {DRAINING_TAG: "1"}


def test_undrain_rejoins_untagged() -> None:
    m = make()
    now = to_stable(m)
    join = sent(m.drain(now + 1, True))
    assert isinstance(join.request, JoinGroup)
    assert tags_of(join.request) == {DRAINING_TAG: "1"}
    m.drain(now + 2, False)
    assert not m.draining
    assert m.state is State.JOINING
