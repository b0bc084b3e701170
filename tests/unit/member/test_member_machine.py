"""The member state machine, one event at a time: errors, staleness, timers, closing."""

from __future__ import annotations

import pytest
from machine_steps import ack_callbacks, only, sent
from member_sim import StickyTestAssignor

from workgroup.errors import ConfigError, ErrorCode, WorkgroupError
from workgroup.kafka.messages import (
    Heartbeat,
    HeartbeatResult,
    JoinedMember,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    SyncGroup,
    SyncGroupResult,
)
from workgroup.member.actions import (
    Action,
    Closed,
    Failed,
    FindCoordinator,
    InvokeCallback,
    RunAssignor,
    SendRequest,
)
from workgroup.member.config import MemberConfig
from workgroup.member.errors import (
    CoordinatorUnavailableError,
    FencedInstanceError,
    GroupAuthorizationError,
    GroupFullError,
    InconsistentProtocolError,
    InvalidSessionTimeoutError,
)
from workgroup.member.heartbeat import EXPEDITED_INTERVAL_MS
from workgroup.member.round_plan import LEAVING_TAG
from workgroup.member.state import MemberMachine
from workgroup.member.transitions import State
from workgroup.protocol import LATEST_VERSION, AssignmentData, BinaryCodec, MemberMetadata, Protocol
from workgroup.testing import capture_logs

PROTOCOL = Protocol("sticky", StickyTestAssignor())
CODEC = BinaryCodec()
CATALOG = {"shard": list(range(6))}
#: make()'s session margin: a tenth of its 10 s session (MemberConfig, rule 1).
MARGIN = 1_000


def make(**kwargs: object) -> MemberMachine:
    options: dict[str, object] = {
        "group_id": "g",
        "protocols": [PROTOCOL],
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 30_000,
        "heartbeat_interval_ms": 3_000,
    }
    options.update(kwargs)
    return MemberMachine(MemberConfig(**options), CATALOG)  # type: ignore[arg-type]


def advance(m: MemberMachine, until: int) -> list[Action]:
    """Tick at every deadline up to ``until`` (a driver that is never late)."""
    out: list[Action] = []
    while (next_at := m.next_deadline()) is not None and next_at <= until:
        out += m.tick(next_at)
    return out


def to_stable(
    m: MemberMachine, owned: tuple[tuple[str, int], ...] = (("shard", 0), ("shard", 1))
) -> int:
    """Drive a follower to STABLE in generation 5; returns the time."""
    join = sent(m.start(0) + m.coordinator_found(1))
    assert isinstance(join.request, JoinGroup)
    actions = m.response(
        2,
        join.request_id,
        JoinGroupResult(ErrorCode.NONE, 5, "workgroup", "sticky.v1", "leader-1", "me-1"),
    )
    sync = sent(actions)
    assert isinstance(sync.request, SyncGroup)
    assert sync.request.assignments == ()
    blob = CODEC.encode_assignment(AssignmentData(assigned=owned, generation=5))
    actions = m.response(3, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob))
    ack_callbacks(m, actions, 3)
    assert m.state is State.STABLE
    return 3


def test_first_join_then_member_id_required() -> None:
    m = make()
    assert only(m.start(0), FindCoordinator)
    join = sent(m.coordinator_found(1))
    assert join.request.member_id == ""
    assert join.timeout_ms > 30_000
    again = sent(
        m.response(
            2, join.request_id, JoinGroupResult(ErrorCode.MEMBER_ID_REQUIRED, member_id="me-1")
        )
    )
    assert isinstance(again.request, JoinGroup)
    assert again.request.member_id == "me-1"


def test_follower_reaches_stable_and_heartbeats() -> None:
    m = make()
    now = to_stable(m)
    assert m.owned == {("shard", 0), ("shard", 1)}
    assert m.generation == 5
    assert m.next_deadline() == now + 3_000
    hb = sent(m.tick(now + 3_000))
    assert isinstance(hb.request, Heartbeat)
    assert hb.request.generation_id == 5


def test_a_pending_follow_up_round_expedites_heartbeats_until_it_is_done() -> None:
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    actions = m.response(
        2,
        join.request_id,
        JoinGroupResult(ErrorCode.NONE, 5, "workgroup", "sticky.v1", "leader-1", "me-1"),
    )
    sync = sent(actions)
    blob = CODEC.encode_assignment(
        AssignmentData(assigned=(("shard", 0),), generation=5, pending=True)
    )
    ack_callbacks(m, m.response(3, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob)), 3)
    assert not m.settled
    # The others' revocations start the follow-up: notice it within EXPEDITED_INTERVAL_MS.
    assert m.next_deadline() == 3 + EXPEDITED_INTERVAL_MS
    noticed = 3 + EXPEDITED_INTERVAL_MS
    hb = sent(m.tick(noticed))
    rejoin = sent(
        m.response(noticed + 1, hb.request_id, HeartbeatResult(ErrorCode.REBALANCE_IN_PROGRESS))
    )
    assert isinstance(rejoin.request, JoinGroup)
    actions = m.response(
        noticed + 2,
        rejoin.request_id,
        JoinGroupResult(ErrorCode.NONE, 6, "workgroup", "sticky.v1", "leader-1", "me-1"),
    )
    sync = sent(actions)
    blob = CODEC.encode_assignment(AssignmentData(assigned=(("shard", 0),), generation=6))
    synced = noticed + 3
    ack_callbacks(
        m, m.response(synced, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob)), synced
    )
    assert m.settled
    assert m.next_deadline() == synced + 3_000  # settled: back to the configured interval


def _round(m: MemberMachine, now: int, join_id: int, generation: int, data: AssignmentData) -> None:
    """Answer the member's JoinGroup (at ``now``), then its SyncGroup with ``data``."""
    joined = JoinGroupResult(
        ErrorCode.NONE, generation, "workgroup", "sticky.v1", "leader-1", "me-1"
    )
    sync = sent(m.response(now, join_id, joined))
    blob = CODEC.encode_assignment(data)
    ack_callbacks(
        m, m.response(now + 1, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob)), now + 1
    )


def test_a_draining_member_with_resources_left_heartbeats_fast_until_they_are_gone() -> None:
    """Its resources warm up elsewhere; each cut-over is a round another member
    starts (the one whose warm-up is ready), which this member notices at its
    next heartbeat: within EXPEDITED_INTERVAL_MS, not a whole interval."""
    m = make()
    now = to_stable(m)
    assert m.next_deadline() == now + 3_000
    rejoin = sent(m.drain(now + 10))
    assert isinstance(rejoin.request, JoinGroup)
    # The drain's round: both shards stay here while they warm up elsewhere.
    both = (("shard", 0), ("shard", 1))
    _round(m, now + 11, rejoin.request_id, 6, AssignmentData(assigned=both, generation=6))
    assert m.next_deadline() == now + 12 + EXPEDITED_INTERVAL_MS
    noticed = now + 12 + EXPEDITED_INTERVAL_MS
    hb = sent(m.tick(noticed))
    cut_over = sent(
        m.response(noticed + 1, hb.request_id, HeartbeatResult(ErrorCode.REBALANCE_IN_PROGRESS))
    )
    assert isinstance(cut_over.request, JoinGroup)
    # Everything cut over: nothing left to hand on, the configured interval again.
    _round(m, noticed + 2, cut_over.request_id, 7, AssignmentData(revoked=both, generation=7))
    assert m.owned == set()
    assert m.next_deadline() == noticed + 3 + 3_000


def test_unknown_member_id_loses_resources_and_resets_member_id() -> None:
    m = make()
    now = to_stable(m)
    hb = sent(m.tick(now + 3_000))
    actions = m.response(now + 3_001, hb.request_id, HeartbeatResult(ErrorCode.UNKNOWN_MEMBER_ID))
    lost = only(actions, InvokeCallback)
    assert [(c.kind, c.resources, c.generation) for c in lost] == [
        ("on_lost", (("shard", 0), ("shard", 1)), 5)
    ]
    assert not only(actions, SendRequest)  # waits for the callback
    join = sent(ack_callbacks(m, actions, now + 3_002))
    assert join.request.member_id == ""
    assert m.generation == -1


def test_illegal_generation_keeps_member_id() -> None:
    m = make()
    now = to_stable(m)
    hb = sent(m.tick(now + 3_000))
    actions = m.response(now + 3_001, hb.request_id, HeartbeatResult(ErrorCode.ILLEGAL_GENERATION))
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_lost"]
    join = sent(ack_callbacks(m, actions, now + 3_002))
    assert join.request.member_id == "me-1"


def test_rebalance_in_progress_rejoins_keeping_resources_cooperatively() -> None:
    m = make()
    now = to_stable(m)
    hb = sent(m.tick(now + 3_000))
    actions = m.response(
        now + 3_001, hb.request_id, HeartbeatResult(ErrorCode.REBALANCE_IN_PROGRESS)
    )
    join = sent(actions)
    assert not only(actions, InvokeCallback)
    assert m.owned == {("shard", 0), ("shard", 1)}
    meta = CODEC.decode_metadata(join.request.protocols[0][1]).value
    assert set(meta.owned) == {("shard", 0), ("shard", 1)}
    assert meta.owned_generation == 5


def test_eager_rejoin_revokes_everything_before_joining() -> None:
    m = make(protocols=[Protocol("rr", StickyTestAssignor(), rebalance="eager")])
    join = sent(m.start(0) + m.coordinator_found(1))
    sync = sent(
        m.response(
            2,
            join.request_id,
            JoinGroupResult(ErrorCode.NONE, 5, "workgroup", "rr.v1", "leader-1", "me-1"),
        )
    )
    blob = CODEC.encode_assignment(AssignmentData(assigned=(("shard", 3),), generation=5))
    ack_callbacks(m, m.response(3, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob)), 3)
    hb = sent(m.tick(3_003))
    actions = m.response(3_004, hb.request_id, HeartbeatResult(ErrorCode.REBALANCE_IN_PROGRESS))
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_revoked"]
    assert not only(actions, SendRequest)
    join = sent(ack_callbacks(m, actions, 3_005))
    # It owns nothing now and reports what it revoked, so that a sticky
    # assignor can keep it in place (Kafka's StickyAssignor user data).
    assert m.owned == frozenset()
    meta = CODEC.decode_metadata(join.request.protocols[0][1]).value
    assert meta.owned == (("shard", 3),)
    assert meta.owned_generation == 5


@pytest.mark.parametrize(
    "code",
    [
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ],
)
def test_coordinator_errors_rediscover_and_keep_a_stable_assignment(code: ErrorCode) -> None:
    m = make()
    now = to_stable(m)
    hb = sent(m.tick(now + 3_000))
    actions = m.response(now + 3_001, hb.request_id, HeartbeatResult(code))
    assert only(actions, FindCoordinator)
    assert m.state is State.FINDING_COORDINATOR
    actions = m.coordinator_found(now + 3_002)
    assert m.state is State.STABLE
    assert isinstance(sent(actions).request, Heartbeat)
    assert m.owned == {("shard", 0), ("shard", 1)}


def test_disconnect_during_join_rediscovers_then_rejoins() -> None:
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    actions = m.request_failed(5, join.request_id, CoordinatorUnavailableError("disconnected"))
    assert only(actions, FindCoordinator)
    rejoin = sent(m.coordinator_found(6))
    assert isinstance(rejoin.request, JoinGroup)
    # The old JoinGroup's late answer is ignored.
    assert (
        m.response(
            7, join.request_id, JoinGroupResult(ErrorCode.NONE, 9, None, "sticky.v1", "x", "me-9")
        )
        == []
    )
    assert m.state is State.JOINING


def test_find_coordinator_failure_backs_off() -> None:
    m = make(retry_backoff_ms=100)
    m.start(0)
    assert m.find_coordinator_failed(1, CoordinatorUnavailableError("down")) == []
    assert m.next_deadline() == 101
    assert m.tick(50) == []
    assert only(m.tick(101), FindCoordinator)


def test_retriable_join_error_backs_off() -> None:
    m = make(retry_backoff_ms=100)
    join = sent(m.start(0) + m.coordinator_found(1))
    assert m.response(2, join.request_id, JoinGroupResult(ErrorCode.REQUEST_TIMED_OUT)) == []
    deadline = m.next_deadline()
    assert deadline is not None
    assert deadline > 2
    assert isinstance(sent(m.tick(deadline)).request, JoinGroup)


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (ErrorCode.FENCED_INSTANCE_ID, FencedInstanceError),
        (ErrorCode.INCONSISTENT_GROUP_PROTOCOL, InconsistentProtocolError),
        (ErrorCode.INVALID_SESSION_TIMEOUT, InvalidSessionTimeoutError),
        (ErrorCode.GROUP_MAX_SIZE_REACHED, GroupFullError),
        (ErrorCode.GROUP_AUTHORIZATION_FAILED, GroupAuthorizationError),
    ],
)
def test_fatal_join_errors(code: ErrorCode, error: type) -> None:
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    actions = m.response(2, join.request_id, JoinGroupResult(code))
    failed = only(actions, Failed)
    assert m.state is State.FATAL
    assert isinstance(m.error, error)
    assert failed
    assert code.name in str(m.error)
    assert not m.error.retriable
    assert m.next_deadline() is None
    assert m.tick(100_000) == []


def test_fenced_heartbeat_loses_resources_and_fails() -> None:
    m = make(instance_id="w-1")
    now = to_stable(m)
    hb = sent(m.tick(now + 3_000))
    assert hb.request.group_instance_id == "w-1"
    actions = m.response(now + 3_001, hb.request_id, HeartbeatResult(ErrorCode.FENCED_INSTANCE_ID))
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_lost"]
    assert isinstance(m.error, FencedInstanceError)


def test_stale_heartbeat_response_from_an_old_generation_is_ignored() -> None:
    m = make()
    now = to_stable(m)
    hb = sent(m.tick(now + 3_000))
    # A rebalance completes (new generation) before the old heartbeat's answer arrives.
    m.response(now + 3_001, hb.request_id, HeartbeatResult(ErrorCode.REBALANCE_IN_PROGRESS))
    assert m.state is State.JOINING
    hb2 = m.tick(now + 3_001)
    assert not only(hb2, SendRequest)  # no heartbeat while JoinGroup is in flight
    assert m.response(now + 3_002, 999, HeartbeatResult(ErrorCode.ILLEGAL_GENERATION)) == []
    assert m.generation == 5
    assert m.owned


def test_sync_for_another_protocol_is_fatal() -> None:
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    sync = sent(
        m.response(
            2,
            join.request_id,
            JoinGroupResult(ErrorCode.NONE, 1, "workgroup", "sticky.v1", "l", "me"),
        )
    )
    m.response(3, sync.request_id, SyncGroupResult(ErrorCode.NONE, b"", "consumer", "range"))
    assert isinstance(m.error, InconsistentProtocolError)


def test_unknown_protocol_type_in_join_response_is_fatal() -> None:
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    m.response(
        2, join.request_id, JoinGroupResult(ErrorCode.NONE, 1, "consumer", "range", "l", "me")
    )
    assert isinstance(m.error, InconsistentProtocolError)
    assert "consumer" in str(m.error)


def test_unreadable_assignment_rejoins_after_a_back_off() -> None:
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    sync = sent(
        m.response(
            2,
            join.request_id,
            JoinGroupResult(ErrorCode.NONE, 1, "workgroup", "sticky.v1", "l", "me"),
        )
    )
    assert m.response(3, sync.request_id, SyncGroupResult(ErrorCode.NONE, b"garbage!")) == []
    assert m.state is State.JOINING
    deadline = m.next_deadline()
    assert deadline is not None
    assert isinstance(sent(m.tick(deadline)).request, JoinGroup)


def test_leader_gives_nothing_to_a_member_with_unreadable_metadata() -> None:
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    mine = join.request.protocols[0][1]
    members = (JoinedMember("me", None, mine), JoinedMember("odd", None, b"\x00\x01junk"))
    actions = m.response(
        2,
        join.request_id,
        JoinGroupResult(ErrorCode.NONE, 1, "workgroup", "sticky.v1", "me", "me", members),
    )
    run = only(actions, RunAssignor)[0]
    assert set(run.input.members) == {"me"}
    target = run.assignor.assign(run.input)
    sync = sent(m.assignment_done(3, run.run_id, target))
    given = dict(sync.request.assignments)
    assert CODEC.decode_assignment(given["odd"]).value.assigned == ()
    assert len(CODEC.decode_assignment(given["me"]).value.assigned) == 6


def test_leader_withholds_resources_still_owned_by_another_member() -> None:
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    other = CODEC.encode_metadata(
        MemberMetadata(owned=tuple(("shard", i) for i in range(6)), owned_generation=4)
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
    target = run.assignor.assign(run.input)
    assert len(target["me"]) == 3  # the target moves three resources to me ...
    sync = sent(m.assignment_done(3, run.run_id, target))
    given = {k: CODEC.decode_assignment(v).value for k, v in sync.request.assignments}
    assert given["me"].assigned == ()  # ... but they are withheld this round
    assert len(given["other"].assigned) == 3
    assert len(given["other"].revoked) == 3


def test_assignor_failure_is_fatal_and_a_dynamic_leader_leaves() -> None:
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    members = (JoinedMember("me", None, join.request.protocols[0][1]),)
    actions = m.response(
        2,
        join.request_id,
        JoinGroupResult(ErrorCode.NONE, 1, "workgroup", "sticky.v1", "me", "me", members),
    )
    run = only(actions, RunAssignor)[0]
    actions = m.assignment_done(3, run.run_id, {"ghost": [("shard", 1)]})
    assert only(actions, Failed)
    assert m.state is State.FATAL
    assert isinstance(sent(actions).request, LeaveGroup)


def test_dynamic_close_hands_over_first_then_leaves() -> None:
    m = make()
    now = to_stable(m)
    # Cooperative: rejoin tagged as leaving, keep working until the round revokes.
    join = sent(m.close(now + 1))
    assert isinstance(join.request, JoinGroup)
    meta = CODEC.decode_metadata(join.request.protocols[0][1]).value
    assert dict(meta.tags) == {LEAVING_TAG: "1"}
    assert m.owned == {("shard", 0), ("shard", 1)}
    sync = sent(
        m.response(
            now + 2,
            join.request_id,
            JoinGroupResult(ErrorCode.NONE, 6, "workgroup", "sticky.v1", "leader-1", "me-1"),
        )
    )
    blob = CODEC.encode_assignment(AssignmentData(assigned=(), generation=6, pending=True))
    actions = m.response(now + 3, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob))
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_revoked"]
    # Revoked: leave at once (no follow-up round of its own).
    leave = sent(ack_callbacks(m, actions, now + 4))
    assert isinstance(leave.request, LeaveGroup)
    assert only(m.response(now + 5, leave.request_id, LeaveGroupResult(ErrorCode.NONE)), Closed)


def test_a_hand_over_that_takes_too_long_just_leaves() -> None:
    m = make(heartbeat_interval_ms=1_000)
    now = to_stable(m)
    join = sent(m.close(now + 1))
    give_up_at = now + 1 + 3 * 1_000 + 1_000  # three heartbeats and a second
    # Out of time between rounds (a failed SyncGroup, no request in flight): leave.
    sync = sent(
        m.response(
            now + 2,
            join.request_id,
            JoinGroupResult(ErrorCode.NONE, 6, "workgroup", "sticky.v1", "leader-1", "me-1"),
        )
    )
    assert not only(advance(m, give_up_at), InvokeCallback)  # waits for the SyncGroup
    actions = m.response(
        give_up_at, sync.request_id, SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS)
    )
    # No new round; heartbeats go on while the revocation runs (rule 9).
    assert all(isinstance(r.request, Heartbeat) for r in only(actions, SendRequest))
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_revoked"]
    leave = sent(ack_callbacks(m, actions, give_up_at + 1))
    assert isinstance(leave.request, LeaveGroup)


def test_a_hand_over_out_of_time_waits_for_its_join_and_syncs_as_leader_before_leaving() -> None:
    # Leaving with the JoinGroup unanswered would leave the group a leader that
    # never syncs (Tansu then answers every later JoinGroup with the same dead
    # round); the answer comes first, then the leave.
    m = make(heartbeat_interval_ms=1_000)
    now = to_stable(m)
    join = sent(m.close(now + 1))
    give_up_at = now + 1 + 3 * 1_000 + 1_000
    waiting = advance(m, give_up_at + 500)  # the JoinGroup's answer ends the wait
    assert waiting  # meanwhile: heartbeats beside the held JoinGroup, nothing else
    assert all(isinstance(a, SendRequest) and a.beside_held for a in waiting)
    assert all(isinstance(a.request, Heartbeat) for a in waiting)
    assert m.owned == {("shard", 0), ("shard", 1)}
    members = (
        JoinedMember("me-1", None, join.request.protocols[0][1]),
        JoinedMember("other", None, CODEC.encode_metadata(MemberMetadata(owned_generation=5))),
    )
    actions = m.response(
        give_up_at + 600,
        join.request_id,
        JoinGroupResult(ErrorCode.NONE, 6, "workgroup", "sticky.v1", "me-1", "me-1", members),
    )
    run = only(actions, RunAssignor)[0]
    assert run.input.members["me-1"].kinds == frozenset()  # tagged as leaving
    target = {"me-1": [], "other": [("shard", i) for i in range(6)]}
    sync = sent(m.assignment_done(give_up_at + 601, run.run_id, target))
    assert isinstance(sync.request, SyncGroup)
    mine = dict(sync.request.assignments)["me-1"]
    assert CODEC.decode_assignment(mine).value.assigned == ()
    actions = m.response(give_up_at + 602, sync.request_id, SyncGroupResult(ErrorCode.NONE, mine))
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_revoked"]
    leave = sent(ack_callbacks(m, actions, give_up_at + 603))
    assert isinstance(leave.request, LeaveGroup)


def test_a_hand_over_that_loses_its_coordinator_while_leading_leaves_at_once() -> None:
    # Found by the random-events property: a closing leader whose assignor still
    # ran lost its coordinator after the hand-over's deadline had passed; the
    # member then asked for a tick at that past deadline.
    m = make(heartbeat_interval_ms=1_000)
    now = to_stable(m)
    join = sent(m.close(now + 1))
    members = (
        JoinedMember("me-1", None, join.request.protocols[0][1]),
        JoinedMember("other", None, CODEC.encode_metadata(MemberMetadata(owned_generation=5))),
    )
    actions = m.response(
        now + 2,
        join.request_id,
        JoinGroupResult(ErrorCode.NONE, 6, "workgroup", "sticky.v1", "me-1", "me-1", members),
    )
    assert only(actions, RunAssignor)  # the assignor runs, and never answers
    t = now + 2
    while m.state is State.ASSIGNING:
        next_at = m.next_deadline()
        assert next_at is not None
        t = max(t, next_at)
        m.tick(t)
    assert t > now + 1 + 3 * 1_000 + 1_000  # past the hand-over's deadline
    assert m.state is State.LEAVING
    next_at = m.next_deadline()
    assert next_at is None or next_at >= t


def test_a_hand_over_whose_join_is_never_answered_loses_and_leaves() -> None:
    m = make(heartbeat_interval_ms=1_000)
    now = to_stable(m)  # the session is proven alive since t=2
    sent(m.close(now + 1))
    t, actions = now + 1, []
    while not only(actions, InvokeCallback):
        next_at = m.next_deadline()
        assert next_at is not None
        t = next_at
        actions = m.tick(t)
    # No answer for a session: what it owned is no longer safe (rule 4).
    assert t == 2 + 10_000 - MARGIN
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_lost"]
    leave = sent(ack_callbacks(m, actions, t + 1))
    assert isinstance(leave.request, LeaveGroup)


def test_a_member_that_also_offers_an_eager_protocol_rejoins_eagerly() -> None:
    """The group may choose the eager protocol, whose leader withholds nothing, so
    the member gives everything up before rejoining even though the current
    generation's protocol is cooperative (Kafka's rule; found by the chaos suite
    during a rolling change of assignor)."""
    m = make(
        protocols=[PROTOCOL, Protocol("eager-sticky", StickyTestAssignor(), rebalance="eager")]
    )
    now = to_stable(m)  # generation 5 chose sticky.v1, a cooperative protocol
    hb = sent(m.tick(now + 3_000))
    actions = m.response(
        now + 3_001, hb.request_id, HeartbeatResult(ErrorCode.REBALANCE_IN_PROGRESS)
    )
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_revoked"]
    assert not m.owned
    join = sent(ack_callbacks(m, actions, now + 3_002))
    assert isinstance(join.request, JoinGroup)
    for _, blob in join.request.protocols:  # stickiness: what it revoked, in every protocol
        assert CODEC.decode_metadata(blob).value.owned == (("shard", 0), ("shard", 1))


def test_eager_close_revokes_then_leaves() -> None:
    m = make(protocols=[Protocol("sticky", StickyTestAssignor(), rebalance="eager")])
    now = to_stable(m)
    actions = m.close(now + 1)
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_revoked"]
    assert not only(actions, SendRequest)  # leaves once the revocation completed
    leave = sent(ack_callbacks(m, actions, now + 2))
    assert isinstance(leave.request, LeaveGroup)
    assert leave.request.members[0].member_id == "me-1"
    assert only(m.response(now + 3, leave.request_id, LeaveGroupResult(ErrorCode.NONE)), Closed)
    assert m.state is State.CLOSED


def test_static_close_does_not_leave() -> None:
    m = make(instance_id="w-1")
    now = to_stable(m)
    actions = m.close(now + 1)
    done = ack_callbacks(m, actions, now + 2)
    assert only(done, Closed)
    assert not only(done, SendRequest)


def test_static_close_with_leave_revokes_then_leaves_with_its_instance_id() -> None:
    m = make(
        instance_id="w-1",
        protocols=[Protocol("sticky", StickyTestAssignor(), rebalance="eager")],
    )
    now = to_stable(m)
    actions = m.close(now + 1, leave=True)
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_revoked"]
    leave = sent(ack_callbacks(m, actions, now + 2))
    assert isinstance(leave.request, LeaveGroup)
    assert leave.request.members[0].member_id == "me-1"
    assert leave.request.members[0].group_instance_id == "w-1"
    assert only(m.response(now + 3, leave.request_id, LeaveGroupResult(ErrorCode.NONE)), Closed)


def test_session_expiry_reports_resources_lost() -> None:
    m = make()
    now = to_stable(m)
    hb = sent(m.tick(now + 3_000))
    m.request_failed(now + 4_000, hb.request_id, CoordinatorUnavailableError("timeout"))
    m.find_coordinator_failed(now + 4_001, CoordinatorUnavailableError("down"))
    deadline = m.next_deadline()
    assert deadline is not None
    actions: list[Action] = []
    t = now + 4_001
    while not only(actions, InvokeCallback):
        t = m.next_deadline() or t + 100
        actions = m.tick(t)
        for _a in only(actions, FindCoordinator):
            actions += m.find_coordinator_failed(t, CoordinatorUnavailableError("down"))
    lost = only(actions, InvokeCallback)[0]
    assert lost.kind == "on_lost"
    assert t <= 2 + 10_000
    assert m.owned == frozenset()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"group_id": ""},
        {"protocols": []},
        {"heartbeat_interval_ms": 10_000},
        {"instance_id": ""},
        {"capacity": 0},
    ],
)
def test_bad_config_is_rejected(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        make(**kwargs)


def rejoin_held(m: MemberMachine) -> tuple[int, SendRequest]:
    """Drive ``m`` to STABLE, then into a cooperative rejoin; returns the JoinGroup
    and the time it was sent."""
    now = to_stable(m)
    hb = sent(m.tick(now + 3_000))
    join = sent(
        m.response(now + 3_001, hb.request_id, HeartbeatResult(ErrorCode.REBALANCE_IN_PROGRESS))
    )
    assert isinstance(join.request, JoinGroup)
    return now + 3_001, join


def tick_until_callback(m: MemberMachine, start: int) -> tuple[int, list[Action]]:
    actions: list[Action] = []
    deadline = start
    while not only(actions, InvokeCallback):
        deadline = m.next_deadline() or deadline + 1_000
        actions = m.tick(deadline)
    return deadline, actions


def test_a_rejoin_held_longer_than_the_session_loses_then_regains() -> None:
    """A JoinGroup in flight proves nothing until it is answered: it may have been
    lost on its way (a partition) while the coordinator evicted the member and
    handed its resources on.  So after a session without an answer the member
    reports what it owns lost; a late answer still counts, and the new assignment
    hands the resources back."""
    m = make()
    sent_at, join = rejoin_held(m)  # proven alive since sent_at - 1 (the heartbeat)
    deadline, actions = tick_until_callback(m, sent_at)
    assert deadline == sent_at - 1 + 10_000 - MARGIN
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_lost"]
    assert m.state is State.JOINING  # the JoinGroup goes on
    assert not m.owned
    ack_callbacks(m, actions, deadline)
    actions = m.response(
        sent_at + 29_000,
        join.request_id,
        JoinGroupResult(ErrorCode.NONE, 6, "workgroup", "sticky.v1", "leader-1", "me-1"),
    )
    sync = sent(actions)
    assert isinstance(sync.request, SyncGroup)
    blob = CODEC.encode_assignment(AssignmentData(assigned=(("shard", 0),), generation=6))
    actions = m.response(sent_at + 29_001, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob))
    assert [(c.kind, c.resources) for c in only(actions, InvokeCallback)] == [
        ("on_assigned", (("shard", 0),))
    ]


def test_heartbeats_beside_a_held_rejoin_keep_the_session_up_to_the_rebalance_timeout() -> None:
    """The coordinator answers heartbeats sent on a second connection while it holds
    the JoinGroup (REBALANCE_IN_PROGRESS), which proves the session; but a round
    completes without a member whose JoinGroup never arrived once the rebalance
    timeout has passed since it began, so that bounds what the heartbeats prove."""
    m = make()
    sent_at, _join = rejoin_held(m)  # the SyncGroup sent at 2 was the last answered NONE
    t, beats = sent_at, 0
    while True:
        next_at = m.next_deadline()
        assert next_at is not None
        t = next_at
        actions = m.tick(t)
        if only(actions, InvokeCallback):
            break
        for request in only(actions, SendRequest):
            assert request.beside_held
            assert isinstance(request.request, Heartbeat)
            beats += 1
            m.response(t + 5, request.request_id, HeartbeatResult(ErrorCode.REBALANCE_IN_PROGRESS))
    assert beats >= 8  # one per interval, every one answered
    # The round floor + the rebalance timeout (less the margin), not the session.
    assert t == 2 + 30_000 - MARGIN
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_lost"]
    assert m.state is State.JOINING  # the JoinGroup goes on


def test_a_failed_heartbeat_beside_a_held_rejoin_does_not_abort_it() -> None:
    m = make()
    sent_at, join = rejoin_held(m)
    beat = sent(m.tick(sent_at - 1 + 3_000))
    assert beat.beside_held
    actions = m.request_failed(
        sent_at + 3_000, beat.request_id, CoordinatorUnavailableError("refused")
    )
    assert not only(actions, FindCoordinator)
    assert m.state is State.JOINING
    assert m.owned == {("shard", 0), ("shard", 1)}
    # The JoinGroup's answer still counts.
    sync = sent(
        m.response(
            sent_at + 3_100,
            join.request_id,
            JoinGroupResult(ErrorCode.NONE, 6, "workgroup", "sticky.v1", "leader-1", "me-1"),
        )
    )
    assert isinstance(sync.request, SyncGroup)


def test_an_eager_rejoin_sends_no_heartbeats_beside_it() -> None:
    m = make(protocols=[Protocol("sticky", StickyTestAssignor(), rebalance="eager")])
    now = to_stable(m)
    hb = sent(m.tick(now + 3_000))
    actions = m.response(
        now + 3_001, hb.request_id, HeartbeatResult(ErrorCode.REBALANCE_IN_PROGRESS)
    )
    ack_callbacks(m, actions, now + 3_002)  # revoked before rejoining: nothing at stake
    assert not m.owned
    assert not [a for a in advance(m, now + 20_000) if isinstance(a, SendRequest)]


def test_a_sync_held_longer_than_the_session_loses_and_starts_over() -> None:
    m = make()
    sent_at, join = rejoin_held(m)
    sync = sent(
        m.response(
            sent_at + 1,
            join.request_id,
            JoinGroupResult(ErrorCode.NONE, 6, "workgroup", "sticky.v1", "leader-1", "me-1"),
        )
    )
    # The leader is slow: the coordinator holds the SyncGroup 25 s.  The JoinGroup's
    # answer proved the session at the JoinGroup's send time at least.
    deadline, actions = tick_until_callback(m, sent_at + 1)
    assert deadline == sent_at + 10_000 - MARGIN
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_lost"]
    ack_callbacks(m, actions, deadline)
    blob = CODEC.encode_assignment(AssignmentData(assigned=(("shard", 0),), generation=6))
    actions = m.response(sent_at + 26_000, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob))
    # An assignment read after the session may have ended is not acted on (rule 4):
    # the member starts over and the next round hands its resources back.
    assert not only(actions, InvokeCallback)
    assert m.state is State.FINDING_COORDINATOR  # the session is over: start again
    assert m.generation == -1


def test_an_answered_sync_within_the_session_keeps_what_stays() -> None:
    m = make()
    sent_at, join = rejoin_held(m)
    sync = sent(
        m.response(
            sent_at + 1,
            join.request_id,
            JoinGroupResult(ErrorCode.NONE, 6, "workgroup", "sticky.v1", "leader-1", "me-1"),
        )
    )
    assert not only(advance(m, sent_at + 4_000), InvokeCallback)
    blob = CODEC.encode_assignment(AssignmentData(assigned=(("shard", 0),), generation=6))
    actions = m.response(sent_at + 4_000, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob))
    # Only revoked: nothing was added, so no on_assigned is issued.
    revoked = only(actions, InvokeCallback)
    assert [(c.kind, c.resources, c.owned) for c in revoked] == [
        ("on_revoked", (("shard", 1),), frozenset({("shard", 0)}))
    ]
    assert m.owned == {("shard", 0)}


def test_a_member_starved_while_its_join_is_held_falls_back_to_the_session() -> None:
    """After a freeze the coordinator may have answered long ago and removed the
    member since: only the session bound from the last proof is left."""
    m = make()
    sent_at, _join = rejoin_held(m)
    m.tick(sent_at + 1_000)
    actions = m.tick(sent_at + 12_000)  # woken 8 s after the watchdog's deadline
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_lost"]
    assert m.state is State.JOINING
    assert not m.owned


def test_a_member_starved_briefly_while_held_keeps_the_session_bound() -> None:
    m = make()
    sent_at, _join = rejoin_held(m)
    assert not only(m.tick(sent_at + 6_500), InvokeCallback)  # 3.5 s late: starved
    deadline, actions = tick_until_callback(m, sent_at + 6_500)
    assert deadline == sent_at - 1 + 10_000 - MARGIN  # the heartbeat's send time + session
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_lost"]


@pytest.mark.parametrize("rejoin_at", [4_000, 8_500])
def test_a_rejoin_never_extends_the_session(rejoin_at: int) -> None:
    m = make()
    now = to_stable(m)  # the session is proven alive since t=2
    assert isinstance(sent(m.tick(now + 3_000)).request, Heartbeat)  # never answered
    join = sent(m.request_rejoin(rejoin_at, "metadata changed"))
    assert isinstance(join.request, JoinGroup)
    deadline, actions = tick_until_callback(m, rejoin_at)
    assert deadline == 2 + 10_000 - MARGIN
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_lost"]


def test_a_frozen_member_does_not_trust_old_answers() -> None:
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    sync = sent(
        m.response(
            2,
            join.request_id,
            JoinGroupResult(ErrorCode.NONE, 5, "workgroup", "sticky.v1", "leader-1", "me-1"),
        )
    )
    # The process freezes for 30 s; then the (old) SyncGroup answer is read.
    blob = CODEC.encode_assignment(AssignmentData(assigned=(("shard", 1),), generation=5))
    m.tick(30_000)
    actions = m.response(30_001, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob))
    # Not acted on: the session cannot be vouched for, and the coordinator may have
    # given shard 1 to another member meanwhile.  The member starts over.
    assert only(actions, InvokeCallback) == []
    assert m.owned == frozenset()
    assert m.state is not State.STABLE


def test_a_prompt_held_answer_proves_the_session() -> None:
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    sync = sent(
        m.response(
            2,
            join.request_id,
            JoinGroupResult(ErrorCode.NONE, 5, "workgroup", "sticky.v1", "leader-1", "me-1"),
        )
    )
    blob = CODEC.encode_assignment(AssignmentData(assigned=(("shard", 1),), generation=5))
    # The coordinator held the SyncGroup 12 s (the leader was slow), heartbeats ran.
    for t in range(3_002, 12_000, 3_000):
        m.tick(t)
    actions = m.response(12_000, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob))
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_assigned"]
    assert m.owned == {("shard", 1)}


def test_leader_assigns_a_member_from_the_future_with_the_common_version() -> None:
    """Version probing: metadata newer than the leader understands never crashes it."""
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    mine = join.request.protocols[0][1]
    plain = BinaryCodec(compress_above=None).encode_metadata(
        MemberMetadata(kinds=("shard",), owned=(("shard", 5),), owned_generation=4)
    )
    future = b"wg" + (7).to_bytes(2, "big") + (7).to_bytes(2, "big") + b"\x00"
    future += plain[7:] + b"fields of version 7"
    members = (JoinedMember("me", None, mine), JoinedMember("future", None, future))
    actions = m.response(
        2,
        join.request_id,
        JoinGroupResult(ErrorCode.NONE, 5, "workgroup", "sticky.v1", "me", "me", members),
    )
    run = only(actions, RunAssignor)[0]
    assert run.input.members["future"].owned == (("shard", 5),)
    sync = sent(m.assignment_done(3, run.run_id, run.assignor.assign(run.input)))
    given = {k: CODEC.decode_assignment(v) for k, v in sync.request.assignments}
    # What every member can read: the leader's latest.
    assert given["future"].header.used_version == LATEST_VERSION
    assert given["future"].value.common_version == LATEST_VERSION
    assert given["future"].value.rejoin  # it must re-encode with the leader's latest
    assert ("shard", 5) in given["future"].value.assigned
    assert not given["me"].value.rejoin


def test_leader_passes_resource_racks_and_attributes_to_the_assignor() -> None:
    m = MemberMachine(
        MemberConfig(group_id="g", protocols=[PROTOCOL]),
        {"shard": [0, {"key": 1, "racks": ["eu-1"], "attributes": {"tier": "hot"}}]},
    )
    join = sent(m.start(0) + m.coordinator_found(1))
    members = (JoinedMember("me", None, join.request.protocols[0][1]),)
    actions = m.response(
        2,
        join.request_id,
        JoinGroupResult(ErrorCode.NONE, 1, "workgroup", "sticky.v1", "me", "me", members),
    )
    run = only(actions, RunAssignor)[0]
    assert run.input.resources == {"shard": (0, 1)}
    assert run.input.resource_racks == {("shard", 1): frozenset({"eu-1"})}
    assert run.input.resource_attributes == {("shard", 1): {"tier": "hot"}}


# --- the API the driver builds on ------------------------------------------------


def test_callbacks_carry_the_owned_set_after_the_change() -> None:
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    sync = sent(
        m.response(
            2,
            join.request_id,
            JoinGroupResult(ErrorCode.NONE, 5, "workgroup", "sticky.v1", "leader-1", "me-1"),
        )
    )
    blob = CODEC.encode_assignment(AssignmentData(assigned=(("shard", 0), ("shard", 1))))
    actions = m.response(3, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob))
    [assigned] = only(actions, InvokeCallback)
    assert assigned.kind == "on_assigned"
    assert assigned.owned == {("shard", 0), ("shard", 1)}
    ack_callbacks(m, actions, 3)
    actions = m.fail(4, WorkgroupError("the application gave up"))
    [lost] = only(actions, InvokeCallback)
    assert (lost.kind, lost.owned) == ("on_lost", frozenset())


def test_an_empty_assignment_issues_no_callback() -> None:
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    sync = sent(
        m.response(
            2,
            join.request_id,
            JoinGroupResult(ErrorCode.NONE, 5, "workgroup", "sticky.v1", "leader-1", "me-1"),
        )
    )
    actions = m.response(3, sync.request_id, SyncGroupResult(ErrorCode.NONE, b""))
    assert m.state is State.STABLE
    assert only(actions, InvokeCallback) == []
    assert m.settled


@pytest.mark.parametrize("timeout", [0, -5])
def test_connect_timeout_must_be_positive(timeout: int) -> None:
    with pytest.raises(ConfigError, match="connect timeout"):
        make(connect_timeout_ms=timeout)


def test_no_coordinator_within_the_connect_timeout_is_fatal() -> None:
    m = make(connect_timeout_ms=5_000, retry_backoff_ms=100, retry_backoff_max_ms=1_000)
    actions = m.start(0)
    attempts = 0
    t = 0
    while only(actions, FindCoordinator):
        attempts += 1
        actions = m.find_coordinator_failed(t + 10, CoordinatorUnavailableError("refused"))
        assert actions == []
        deadline = m.next_deadline()
        assert deadline is not None
        assert deadline <= 5_000  # the connect deadline is among the machine's deadlines
        t = deadline
        actions = m.tick(t)
    assert t == 5_000
    [failed] = only(actions, Failed)
    assert m.state is State.FATAL
    assert isinstance(failed.error, CoordinatorUnavailableError)
    assert str(failed.error) == (
        f"no coordinator reached within 5000 ms ({attempts} attempts; last: refused)"
    )
    assert m.coordinator_found(5_001) == []  # too late: nothing more happens
    assert m.next_deadline() is None


def test_connect_timeout_fires_while_a_lookup_hangs() -> None:
    m = make(connect_timeout_ms=2_000)
    assert only(m.start(0), FindCoordinator)
    assert m.next_deadline() == 2_000
    [failed] = only(m.tick(2_000), Failed)
    assert "(1 attempt; last: no lookup finished)" in str(failed.error)


def test_connect_timeout_does_not_apply_after_the_first_coordinator() -> None:
    m = make(connect_timeout_ms=2_000)
    now = to_stable(m)
    hb = sent(m.tick(now + 3_000))
    m.request_failed(now + 3_001, hb.request_id, CoordinatorUnavailableError("disconnected"))
    assert m.state is State.FINDING_COORDINATOR
    for t in range(now + 3_002, now + 9_000, 500):
        for _ in only(m.tick(t), FindCoordinator):
            m.find_coordinator_failed(t, CoordinatorUnavailableError("down"))
    assert m.state is State.FINDING_COORDINATOR  # only the session rules apply
    assert m.error is None


def test_failed_lookups_are_warnings_at_attempts_1_2_4_8_and_debug_between() -> None:
    """An outage is said, and said again less and less often: not one line per retry."""
    m = make(retry_backoff_ms=100)
    m.start(0)
    now = 1
    with capture_logs() as logs:
        for _ in range(9):
            m.find_coordinator_failed(now, CoordinatorUnavailableError("connection refused"))
            now = m.next_deadline() or now
            assert only(m.tick(now), FindCoordinator)
    lines = [e for e in logs if e["event"] == "member.coordinator_unavailable"]
    assert [e["attempt"] for e in lines] == list(range(1, 10))
    warned = [e["attempt"] for e in lines if e["log_level"] == "warning"]
    assert warned == [1, 2, 4, 8]
    assert {e["log_level"] for e in lines if e["attempt"] not in warned} == {"debug"}
    assert [e["retry_in_ms"] for e in lines[:2]] == [100, 200]
    assert all(e["group"] == "g" and e["error"] == "connection refused" for e in lines)


def test_fail_reports_resources_lost_and_a_dynamic_member_leaves() -> None:
    m = make()
    now = to_stable(m)
    error = WorkgroupError("the application gave up")
    actions = m.fail(now + 1, error)
    assert [(c.kind, c.owned) for c in only(actions, InvokeCallback)] == [("on_lost", frozenset())]
    leave = sent(actions)
    assert isinstance(leave.request, LeaveGroup)
    assert leave.request.members[0].member_id == "me-1"
    assert only(actions, Failed) == [Failed(error)]
    assert m.state is State.FATAL
    assert m.error is error
    assert m.owned == frozenset()
    assert m.fail(now + 2, WorkgroupError("again")) == []
    assert m.error is error


def test_fail_of_a_static_member_does_not_leave() -> None:
    m = make(instance_id="w-1")
    now = to_stable(m)
    actions = m.fail(now + 1, WorkgroupError("stop"))
    assert not only(actions, SendRequest)
    assert only(actions, Failed)


def test_release_gives_resources_back_without_a_callback_and_rejoins() -> None:
    m = make()
    now = to_stable(m)
    actions = m.release(now + 1, [("shard", 1), ("shard", 9)], "on_assigned failed")
    assert only(actions, InvokeCallback) == []
    assert m.owned == {("shard", 0)}
    join = sent(actions)
    assert isinstance(join.request, JoinGroup)
    meta = CODEC.decode_metadata(join.request.protocols[0][1]).value
    assert meta.owned == (("shard", 0),)


def test_release_of_resources_not_owned_changes_nothing() -> None:
    m = make()
    now = to_stable(m)
    assert m.release(now + 1, [("shard", 5)], "not mine") == []
    assert m.settled
    assert m.owned == {("shard", 0), ("shard", 1)}


def test_release_while_a_callback_runs_rejoins_once_it_is_done() -> None:
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    sync = sent(
        m.response(
            2,
            join.request_id,
            JoinGroupResult(ErrorCode.NONE, 5, "workgroup", "sticky.v1", "leader-1", "me-1"),
        )
    )
    blob = CODEC.encode_assignment(AssignmentData(assigned=(("shard", 0), ("shard", 1))))
    [assigned] = only(
        m.response(3, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob)), InvokeCallback
    )
    # on_assigned failed for ("shard", 1): the application gives it back, then finishes.
    assert m.release(4, [("shard", 1)], "on_assigned failed") == []
    assert not m.settled
    join = sent(m.callback_done(5, assigned.callback_id))
    assert isinstance(join.request, JoinGroup)
    assert m.owned == {("shard", 0)}


def test_the_fatal_error_is_logged_once() -> None:
    m = make()
    join = sent(m.start(0) + m.coordinator_found(1))
    with capture_logs() as logs:
        m.response(2, join.request_id, JoinGroupResult(ErrorCode.FENCED_INSTANCE_ID))
        m.fail(3, WorkgroupError("later"))
        m.close(4)
    errors = [e for e in logs if e["log_level"] in ("error", "critical")]
    assert [e["event"] for e in errors] == ["member.fatal"]
    assert errors[0]["error_type"] == "FencedInstanceError"


def fatal_join(code: ErrorCode, **kwargs: object) -> str:
    m = make(**kwargs)
    join = sent(m.start(0) + m.coordinator_found(1))
    m.response(2, join.request_id, JoinGroupResult(code))
    assert m.state is State.FATAL
    return str(m.error)


def test_invalid_session_timeout_says_what_the_coordinator_allows() -> None:
    message = fatal_join(ErrorCode.INVALID_SESSION_TIMEOUT, session_timeout_ms=4_000)
    assert "4000 ms" in message
    assert "outside the coordinator's allowed range" in message
    for setting in (
        "group.min.session.timeout.ms",
        "6000",
        "group.max.session.timeout.ms",
        "1800000",
        "--min-session-timeout-ms",
        "--max-session-timeout-ms",
    ):
        assert setting in message


def test_inconsistent_protocol_names_this_members_protocols() -> None:
    second = Protocol("rr", StickyTestAssignor(), rebalance="eager")
    message = fatal_join(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, protocols=[PROTOCOL, second])
    assert "protocol type 'workgroup'" in message
    assert "'sticky.v1', 'rr.v1'" in message
    assert "share none of them" in message


def test_fenced_instance_names_the_instance_id() -> None:
    message = fatal_join(ErrorCode.FENCED_INSTANCE_ID, instance_id="worker-7")
    assert "'worker-7'" in message
    assert "another process runs with" in message


def test_member_joined_counts_members_only_where_it_knows_them() -> None:
    """A follower is not told the members: its line has no ``members=0``."""
    with capture_logs() as logs:
        to_stable(make())
    (follower,) = [e for e in logs if e["event"] == "member.joined"]
    assert follower["leader"] is False
    assert "members" not in follower
    m = make()
    with capture_logs() as logs:
        join = sent(m.start(0) + m.coordinator_found(1))
        mine = join.request.protocols[0][1]
        members = (JoinedMember("me", None, mine), JoinedMember("other", None, mine))
        m.response(
            2,
            join.request_id,
            JoinGroupResult(ErrorCode.NONE, 1, "workgroup", "sticky.v1", "me", "me", members),
        )
    (leader,) = [e for e in logs if e["event"] == "member.joined"]
    assert (leader["leader"], leader["members"]) == (True, 2)
