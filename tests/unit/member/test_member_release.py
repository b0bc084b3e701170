"""Per-resource release (the member machine's rule 9), with a fake clock.

A revoked resource stays claimed until the application says its work stopped;
a closing member heartbeats meanwhile and leaves only after the last release.
"""

from __future__ import annotations

from machine_steps import ack_callbacks, only, sent
from member_sim import StickyTestAssignor

from workgroup.errors import ErrorCode
from workgroup.kafka.messages import (
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    SyncGroup,
    SyncGroupResult,
)
from workgroup.member.actions import Action, Closed, InvokeCallback, SendRequest
from workgroup.member.config import MemberConfig
from workgroup.member.holdings import GATHER_MS, RELEASE_WINDOW_MS
from workgroup.member.round_plan import LEAVING_TAG, plan_round, withholding_claims
from workgroup.member.state import MemberMachine
from workgroup.member.transitions import State
from workgroup.protocol import AssignmentData, BinaryCodec, MemberMetadata, Protocol

COOPERATIVE = Protocol("sticky", StickyTestAssignor())
EAGER = Protocol("sticky", StickyTestAssignor(), rebalance="eager")
CODEC = BinaryCodec()
CATALOG = {"shard": list(range(6))}
S0, S1, S2 = ("shard", 0), ("shard", 1), ("shard", 2)
SESSION_MS = 6_000
HEARTBEAT_MS = 1_000


def make(protocol: Protocol = COOPERATIVE, **kwargs: object) -> MemberMachine:
    options: dict[str, object] = {
        "group_id": "g",
        "protocols": [protocol],
        "session_timeout_ms": SESSION_MS,
        "rebalance_timeout_ms": 30_000,
        "heartbeat_interval_ms": HEARTBEAT_MS,
    }
    options.update(kwargs)
    config = MemberConfig(**options)  # type: ignore[arg-type]
    return MemberMachine(config, CATALOG, confirm_release=True)


def join_and_sync(
    m: MemberMachine, join: SendRequest, now: int, generation: int, assigned: tuple, **data: object
) -> list[Action]:
    actions = m.response(
        now,
        join.request_id,
        JoinGroupResult(ErrorCode.NONE, generation, "workgroup", "sticky.v1", "leader-1", "me-1"),
    )
    sync = sent(actions)
    assert isinstance(sync.request, SyncGroup)
    blob = CODEC.encode_assignment(
        AssignmentData(assigned=assigned, generation=generation, **data)  # type: ignore[arg-type]
    )
    return m.response(now, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob))


def to_stable(m: MemberMachine, owned: tuple = (S0, S1)) -> int:
    join = sent(m.start(0) + m.coordinator_found(1))
    ack_callbacks(m, join_and_sync(m, join, 2, 5, owned), 3)
    assert m.state is State.STABLE
    return 3


def metadata(join: SendRequest) -> MemberMetadata:
    assert isinstance(join.request, JoinGroup)
    return CODEC.decode_metadata(join.request.protocols[0][1]).value


def heartbeat_until(m: MemberMachine, now: int, until: int) -> tuple[int, list[Action]]:
    """Answer every heartbeat (NONE) up to ``until``; returns the time and the
    other actions."""
    other: list[Action] = []
    while (next_at := m.next_deadline()) is not None and next_at <= until:
        now = next_at
        for action in m.tick(now):
            if isinstance(action, SendRequest) and isinstance(action.request, Heartbeat):
                other += m.response(now, action.request_id, HeartbeatResult(ErrorCode.NONE))
            else:
                other.append(action)
    return now, other


def test_a_static_member_closing_heartbeats_until_released_then_stops_without_leave() -> None:
    m = make(instance_id="w-1")
    now = to_stable(m)
    actions = m.close(now + 1)
    (revoked,) = only(actions, InvokeCallback)
    assert revoked.kind == "on_revoked"
    assert ack_callbacks(m, actions, now + 2) == []  # the callback returned: still releasing
    assert m.state is State.LEAVING
    assert m.releasing == {S0, S1}
    # The grace period (10 s) is longer than the session (6 s): heartbeats keep it.
    now, other = heartbeat_until(m, now + 2, now + 10_000)
    assert other == []
    assert m.state is State.LEAVING
    assert only(m.released(now + 1, [S0]), Closed) == []  # one at a time
    done = m.released(now + 2, [S1])
    assert only(done, Closed)
    assert not only(done, SendRequest)  # a static member keeps its place


def test_a_dynamic_eager_member_leaves_after_the_last_release() -> None:
    m = make(EAGER)
    now = to_stable(m)
    actions = m.close(now + 1)
    ack_callbacks(m, actions, now + 2)
    now, other = heartbeat_until(m, now + 2, now + 8_000)
    assert other == []
    assert not only(m.released(now, [S1]), SendRequest)
    leave = sent(m.released(now + 1, [S0]))
    assert isinstance(leave.request, LeaveGroup)
    assert only(m.response(now + 2, leave.request_id, LeaveGroupResult(ErrorCode.NONE)), Closed)


def test_a_session_that_ends_while_closing_loses_what_is_still_releasing() -> None:
    m = make(instance_id="w-1")
    now = to_stable(m)
    ack_callbacks(m, m.close(now + 1), now + 2)
    lost: list[InvokeCallback] = []
    while not lost:  # no heartbeat is ever answered
        next_at = m.next_deadline()
        assert next_at is not None
        now = next_at
        lost = [c for c in only(m.tick(now), InvokeCallback) if c.kind == "on_lost"]
    assert set(lost[0].resources) == {S0, S1}
    assert now <= 3 + SESSION_MS
    assert only(ack_callbacks(m, lost, now), Closed)


def test_an_eager_member_sends_no_join_while_anything_is_releasing() -> None:
    m = make(EAGER)
    now = to_stable(m)
    hb = sent(m.tick(now + HEARTBEAT_MS))
    actions = m.response(
        now + HEARTBEAT_MS, hb.request_id, HeartbeatResult(ErrorCode.REBALANCE_IN_PROGRESS)
    )
    now += HEARTBEAT_MS
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_revoked"]
    assert ack_callbacks(m, actions, now) == []
    now, other = heartbeat_until(m, now, now + 5_000)
    assert not [a for a in other if isinstance(a, SendRequest)]  # no JoinGroup
    join = sent(m.released(now, [S0, S1]))
    assert isinstance(join.request, JoinGroup)
    assert metadata(join).owned == (S0, S1)  # eager: what it revoked, for stickiness


def other_members_round(m: MemberMachine, now: int) -> tuple[int, SendRequest]:
    """The next heartbeat is answered REBALANCE_IN_PROGRESS (another member's
    round); returns its time and this member's JoinGroup."""
    at = m.next_deadline()
    assert at is not None
    assert at > now
    hb = sent(m.tick(at))
    assert isinstance(hb.request, Heartbeat)
    join = sent(m.response(at, hb.request_id, HeartbeatResult(ErrorCode.REBALANCE_IN_PROGRESS)))
    assert isinstance(join.request, JoinGroup)
    return at, join


def test_a_cooperative_member_reports_what_it_releases_and_the_leader_withholds_it() -> None:
    m = make()
    now = to_stable(m, (S0, S1, S2))
    # Scale-up: the new assignment takes S2 away (another member joined).
    now, join = other_members_round(m, now)
    actions = join_and_sync(m, join, now + 1, 6, (S0, S1))
    (revoked,) = only(actions, InvokeCallback)
    assert revoked.kind == "on_revoked"
    assert revoked.resources == (S2,)
    # S2's handler is slow: no round is asked for while it is releasing (the
    # leader would only withhold it again); heartbeats go on.
    assert not only(ack_callbacks(m, actions, now + 2), SendRequest)
    now, other = heartbeat_until(m, now + 2, now + 3 * HEARTBEAT_MS)
    assert not [a for a in other if isinstance(a, SendRequest)]
    # Another member's round: this member's JoinGroup still claims S2.
    now, join = other_members_round(m, now)
    claims = metadata(join)
    assert claims.owned == (S0, S1, S2)
    # The leader withholds S2 from the newcomer while this member claims it.
    plan = plan_round(
        ["me-1", "new-1"],
        {"me-1": [S0, S1], "new-1": [S2]},
        withholding_claims("cooperative", {"me-1": claims, "new-1": MemberMetadata()}),
    )
    assert plan.withheld["new-1"] == (S2,)
    assert plan.assigned["new-1"] == ()
    # Withheld on this member's account, still releasing: no round for it yet.
    actions = join_and_sync(m, join, now + 1, 7, (S0, S1), revoked=(S2,), pending=True)
    assert not only(actions, SendRequest)
    assert not m.settled
    # The handler stops: its release asks for the round that hands S2 out.
    (again,) = [
        a
        for a in only(m.released(now + 500, [S2]), SendRequest)
        if isinstance(a.request, JoinGroup)
    ]
    assert metadata(again).owned == (S0, S1)


def test_a_prompt_release_goes_out_in_the_follow_up_round_itself() -> None:
    m = make()
    now = to_stable(m, (S0, S1, S2))
    hb = sent(m.tick(now + HEARTBEAT_MS))
    now += HEARTBEAT_MS
    join = sent(m.response(now, hb.request_id, HeartbeatResult(ErrorCode.REBALANCE_IN_PROGRESS)))
    actions = join_and_sync(m, join, now + 1, 6, (S0, S1))
    assert not only(ack_callbacks(m, actions, now + 2), SendRequest)
    # The handler stops within the window: the JoinGroup goes at once, without S2,
    # so the leader hands S2 out in this round, not in one more.
    follow_up = sent(m.released(now + 40, [S2]))
    assert isinstance(follow_up.request, JoinGroup)
    assert metadata(follow_up).owned == (S0, S1)
    actions = join_and_sync(m, follow_up, now + 41, 7, (S0, S1))
    assert not only(actions, SendRequest)
    assert m.settled


def test_a_closing_cooperative_member_hands_each_resource_over_once_released() -> None:
    m = make()
    now = to_stable(m, (S0, S1, S2))
    actions = m.close(now + 1)
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_revoked"]
    assert not only(ack_callbacks(m, actions, now + 2), SendRequest)
    # S0's handler stops at once; the JoinGroup waits a moment for such releases.
    assert m.released(now + 3, [S0]) == []
    assert m.next_deadline() == now + 1 + RELEASE_WINDOW_MS
    join = sent(m.tick(now + 1 + RELEASE_WINDOW_MS))
    meta = metadata(join)
    assert dict(meta.tags).get(LEAVING_TAG) == "1"
    assert meta.owned == (S1, S2)  # S0 goes to another member in this round
    # S1's handler stops during the round: the next one hands it out, once S2's
    # release had GATHER_MS to join it (S2 is still releasing).
    m.released(now + 200, [S1])
    assert not only(join_and_sync(m, join, now + 201, 6, ()), SendRequest)
    assert m.next_deadline() == now + 200 + GATHER_MS
    again = sent(m.tick(now + 200 + GATHER_MS))
    assert metadata(again).owned == (S2,)
    now += 200 + GATHER_MS
    actions = join_and_sync(m, again, now + 1, 7, ())
    assert m.state is State.STABLE
    assert m.releasing == {S2}
    assert not only(actions, SendRequest)
    # S2's handler takes its grace period: heartbeats go on, beyond the session.
    now, other = heartbeat_until(m, now + 1, now + 12_000)
    assert not [a for a in other if isinstance(a, SendRequest)]
    leave = sent(m.released(now + 1, [S2]))
    assert isinstance(leave.request, LeaveGroup)


def test_a_closing_member_whose_handlers_all_stop_at_once_just_leaves() -> None:
    m = make()
    now = to_stable(m)
    actions = m.close(now + 1)
    assert not only(ack_callbacks(m, actions, now + 2), SendRequest)
    assert not only(m.released(now + 3, [S0]), SendRequest)
    leave = sent(m.released(now + 4, [S1]))  # nothing to withhold: no round needed
    assert isinstance(leave.request, LeaveGroup)


def test_a_closing_member_takes_nothing_it_is_handed() -> None:
    m = make()
    now = to_stable(m)
    ack_callbacks(m, m.close(now + 1), now + 2)
    join = sent(m.tick(now + 1 + RELEASE_WINDOW_MS))
    actions = join_and_sync(m, join, now + 200, 6, (S0, S2))  # a leader that ignored the tag
    assert not [c for c in only(actions, InvokeCallback) if c.kind == "on_assigned"]
    assert m.owned == frozenset()
    assert m.releasing == {S0, S1}


def test_a_closing_member_handed_its_own_resources_again_waits_for_its_releases() -> None:
    m = make()
    now = to_stable(m)
    ack_callbacks(m, m.close(now + 1), now + 2)
    join = sent(m.tick(now + 1 + RELEASE_WINDOW_MS))
    # The leader keeps them with this member while their next owner warms up: a
    # JoinGroup now would get the same generation and assignment back, again and again.
    actions = join_and_sync(m, join, now + 200, 6, (S0, S1))
    assert not only(actions, SendRequest)
    assert m.releasing == {S0, S1}
    # Nothing until a release asks for the round that hands it over.
    now, other = heartbeat_until(m, now + 200, now + 3_000)
    assert not [a for a in other if isinstance(a, SendRequest)]
    # S0's release asks for it, after GATHER_MS for S1's (still releasing).
    assert not only(m.released(now + 1, [S0]), SendRequest)
    follow_up = sent(m.tick(now + 1 + GATHER_MS))
    assert isinstance(follow_up.request, JoinGroup)
    assert metadata(follow_up).owned == (S1,)


def test_a_resource_handed_back_while_releasing_is_owned_again() -> None:
    m = make()
    now = to_stable(m, (S0, S1, S2))
    now, join = other_members_round(m, now)
    actions = join_and_sync(m, join, now + 1, 6, (S0, S1))
    assert not only(ack_callbacks(m, actions, now + 2), SendRequest)
    # S2's handler is slow; another member's round hands S2 back to this member.
    now, join = other_members_round(m, now + 2)
    assert metadata(join).owned == (S0, S1, S2)
    actions = join_and_sync(m, join, now + 1, 7, (S0, S1, S2))
    (assigned,) = only(actions, InvokeCallback)
    assert assigned.kind == "on_assigned"
    assert assigned.resources == (S2,)
    assert m.releasing == frozenset()
    assert m.released(now + 4, [S2]) == []  # the old handler's release changes nothing
    assert m.owned == {S0, S1, S2}


def test_without_confirmed_releases_the_callback_return_releases() -> None:
    config = MemberConfig(
        group_id="g",
        protocols=(EAGER,),
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=30_000,
        heartbeat_interval_ms=HEARTBEAT_MS,
    )
    m = MemberMachine(config, CATALOG)
    now = to_stable(m)
    actions = m.close(now + 1)
    now, other = heartbeat_until(m, now + 1, now + 8_000)  # the callback runs long
    assert not [a for a in other if isinstance(a, SendRequest)]
    assert m.state is State.LEAVING
    leave = sent(ack_callbacks(m, actions, now))
    assert isinstance(leave.request, LeaveGroup)


def test_releases_that_come_together_go_out_in_one_round() -> None:
    m = make()
    now = to_stable(m, (S0, S1, S2))
    now, join = other_members_round(m, now)
    actions = join_and_sync(m, join, now + 1, 6, (S0,))
    assert not only(ack_callbacks(m, actions, now + 2), SendRequest)
    # Both handlers run long past the revocation's window, then stop 10 ms apart
    # (queries ending their batches on one trigger).
    now, other = heartbeat_until(m, now + 2, now + 2_000)
    assert not [a for a in other if isinstance(a, SendRequest)]
    assert not only(m.released(now + 1, [S1]), SendRequest)
    assert m.next_deadline() == now + 1 + GATHER_MS  # S2 may still join this round
    (join,) = only(m.released(now + 11, [S2]), SendRequest)
    assert isinstance(join.request, JoinGroup)  # at once: nothing is left releasing
    assert metadata(join).owned == (S0,)  # both go to others in this one round


def test_warm_ups_ready_together_are_cut_over_in_one_round() -> None:
    m = make(warm_up=True)
    now = to_stable(m, (S0,))
    now, join = other_members_round(m, now)
    actions = join_and_sync(m, join, now + 1, 6, (S0,), warming=(S1, S2))
    (warming,) = only(actions, InvokeCallback)
    assert warming.kind == "on_warming"
    assert warming.resources == (S1, S2)
    assert not only(ack_callbacks(m, actions, now + 2), SendRequest)
    # S1 is ready first: the JoinGroup waits up to GATHER_MS for S2.
    assert not only(m.ready(now + 500, [S1]), SendRequest)
    assert m.next_deadline() == now + 500 + GATHER_MS
    (join,) = only(m.ready(now + 503, [S2]), SendRequest)
    assert isinstance(join.request, JoinGroup)
    assert metadata(join).ready == (S1, S2)
    # That JoinGroup told the leader of both: its round (the cut-over) asks for
    # no other.  The follow-up it announces is started by the revoking owner.
    actions = join_and_sync(m, join, now + 504, 7, (S0,), warming=(S1, S2), pending=True)
    assert not [a for a in only(actions, SendRequest) if isinstance(a.request, JoinGroup)]
    now, later = heartbeat_until(m, now + 505, now + 2_000)
    assert not [a for a in only(later, SendRequest) if isinstance(a.request, JoinGroup)]


def test_a_warm_up_ready_alone_waits_no_longer_than_the_window() -> None:
    m = make(warm_up=True)
    now = to_stable(m, (S0,))
    now, join = other_members_round(m, now)
    actions = join_and_sync(m, join, now + 1, 6, (S0,), warming=(S1, S2))
    ack_callbacks(m, actions, now + 2)
    assert not only(m.ready(now + 500, [S1]), SendRequest)
    join = sent(m.tick(now + 500 + GATHER_MS))
    assert isinstance(join.request, JoinGroup)
    assert metadata(join).ready == (S1,)
    # S2's ready, after that JoinGroup went, asks for the next round.
    assert not only(m.ready(now + 600, [S2]), SendRequest)
    again = sent(join_and_sync(m, join, now + 601, 7, (S0,), warming=(S1, S2)))
    assert metadata(again).ready == (S1, S2)
