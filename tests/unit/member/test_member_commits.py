"""Commits as machine actions, their answers as machine events (the member
machine's rule 11), with a fake clock: the generation each partition goes
under, an answered commit as proof of life, a refused one as lost membership."""

from __future__ import annotations

from machine_steps import ack_callbacks, only, sent
from member_sim import StickyTestAssignor

from workgroup.errors import ErrorCode
from workgroup.kafka.messages import (
    CommitPartition,
    CommitPartitionResult,
    CommitTopic,
    CommitTopicResult,
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    OffsetCommit,
    OffsetCommitResult,
    SyncGroup,
    SyncGroupResult,
)
from workgroup.member.actions import (
    Action,
    Closed,
    CommitDone,
    Failed,
    InvokeCallback,
    SendRequest,
)
from workgroup.member.config import MemberConfig
from workgroup.member.errors import CoordinatorUnavailableError, FencedInstanceError
from workgroup.member.state import MemberMachine
from workgroup.member.transitions import State
from workgroup.protocol import AssignmentData, BinaryCodec, Protocol

COOPERATIVE = Protocol("sticky", StickyTestAssignor())
CODEC = BinaryCodec()
CATALOG = {"shard": list(range(6))}
S0, S1, S2 = ("shard", 0), ("shard", 1), ("shard", 2)
SESSION_MS = 6_000
HEARTBEAT_MS = 1_000
TOPIC = "leases"
#: Each resource's lease slot: partition i for shard i.
SLOTS = {(TOPIC, i): ("shard", i) for i in range(6)}


def make(**kwargs: object) -> MemberMachine:
    options: dict[str, object] = {
        "group_id": "g",
        "protocols": [COOPERATIVE],
        "session_timeout_ms": SESSION_MS,
        "rebalance_timeout_ms": 30_000,
        "heartbeat_interval_ms": HEARTBEAT_MS,
    }
    options.update(kwargs)
    return MemberMachine(MemberConfig(**options), CATALOG, confirm_release=True)  # type: ignore[arg-type]


def join_and_sync(
    m: MemberMachine, join: SendRequest, now: int, generation: int, assigned: tuple
) -> list[Action]:
    actions = m.response(
        now,
        join.request_id,
        JoinGroupResult(ErrorCode.NONE, generation, "workgroup", "sticky.v1", "leader-1", "me-1"),
    )
    sync = sent(actions)
    assert isinstance(sync.request, SyncGroup)
    blob = CODEC.encode_assignment(AssignmentData(assigned=assigned, generation=generation))
    return m.response(now, sync.request_id, SyncGroupResult(ErrorCode.NONE, blob))


def to_stable(m: MemberMachine, owned: tuple = (S0, S1), generation: int = 5) -> int:
    join = sent(m.start(0) + m.coordinator_found(1))
    ack_callbacks(m, join_and_sync(m, join, 2, generation, owned), 3)
    assert m.state is State.STABLE
    return 3


def commit(m: MemberMachine, now: int, commit_id: int, *shards: int) -> list[Action]:
    """Commit offset 1 of each shard's slot, naming its resource."""
    topic = CommitTopic(TOPIC, tuple(CommitPartition(i, 1) for i in shards))
    return m.commit(now, commit_id, (topic,), SLOTS)


def commits_sent(actions: list[Action]) -> list[tuple[SendRequest, OffsetCommit]]:
    return [
        (a, a.request) for a in only(actions, SendRequest) if isinstance(a.request, OffsetCommit)
    ]


def answer(request: OffsetCommit, code: ErrorCode) -> OffsetCommitResult:
    return OffsetCommitResult(
        tuple(
            CommitTopicResult(
                t.name, tuple(CommitPartitionResult(p.partition, code) for p in t.partitions)
            )
            for t in request.topics
        )
    )


def done(actions: list[Action]) -> CommitDone:
    (answered,) = only(actions, CommitDone)
    return answered


def revoke_s1_in_generation_6(m: MemberMachine, now: int) -> int:
    """A rebalance (generation 6) takes S1 away; its release is still pending."""
    actions = m.request_rejoin(now, "test")
    join = sent(actions)
    actions = join_and_sync(m, join, now + 1, 6, (S0,))
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_revoked"]
    ack_callbacks(m, actions, now + 2)
    assert m.releasing == {S1}
    return now + 2


def rejoin(m: MemberMachine, now: int) -> SendRequest:
    """Ask for another round; its JoinGroup (sent after the release window)."""
    actions = m.request_rejoin(now, "another round")
    while not only(actions, SendRequest):
        deadline = m.next_deadline()
        assert deadline is not None
        actions = m.tick(deadline)
    join = sent(actions)
    assert isinstance(join.request, JoinGroup)
    return join


# --- the generation each partition goes under --------------------------------------


def test_an_owned_resource_commits_under_the_current_generation() -> None:
    m = make()
    now = to_stable(m)
    ((request, commit_request),) = commits_sent(commit(m, now, 1, 0, 1))
    assert commit_request.generation_id == 5
    assert commit_request.member_id == "me-1"
    assert request.may_wait_behind_held
    answered = done(
        m.commit_answered(now + 1, request.request_id, answer(commit_request, ErrorCode.NONE))
    )
    assert answered.commit_id == 1
    assert answered.outcomes == {(TOPIC, 0): ErrorCode.NONE, (TOPIC, 1): ErrorCode.NONE}


def test_a_releasing_resource_commits_under_the_generation_it_was_given_up_in() -> None:
    """Given up in generation 6: while the group is in 6 its commit goes there."""
    m = make()
    now = revoke_s1_in_generation_6(m, to_stable(m))
    ((_, first),) = commits_sent(commit(m, now, 1, 1))
    assert first.generation_id == 6  # given up in 6, the group is still in it


def test_a_releasing_resource_commits_under_a_later_generation_it_was_claimed_in() -> None:
    """Given up in 6 and still releasing when the member joins generation 7: its
    JoinGroup reported the resource as owned (a cooperative member reports what it
    is still releasing), so the leader handed it to nobody in 7 and it commits
    under 7, with what the member owns, in one request.  Under 6 the coordinator
    refused it once the group moved on, and a handler finishing its work (a
    Spark query's last batch, committed through its lease) waited for the end
    of its grace period."""
    m = make()
    now = revoke_s1_in_generation_6(m, to_stable(m))
    join = rejoin(m, now + 1)
    assert isinstance(join.request, JoinGroup)
    assert S1 in CODEC.decode_metadata(join.request.protocols[0][1]).value.owned
    ack_callbacks(m, join_and_sync(m, join, now + 2, 7, (S0,)), now + 3)
    assert m.generation == 7
    assert m.releasing == {S1}
    ((request, commit_request),) = commits_sent(commit(m, now + 4, 2, 0, 1))
    assert commit_request.generation_id == 7
    assert sorted(p.partition for t in commit_request.topics for p in t.partitions) == [0, 1]
    answered = done(
        m.commit_answered(now + 5, request.request_id, answer(commit_request, ErrorCode.NONE))
    )
    assert answered.outcomes == {(TOPIC, 0): ErrorCode.NONE, (TOPIC, 1): ErrorCode.NONE}
    assert m.state is State.STABLE
    assert m.owned == {S0}
    assert m.releasing == {S1}
    # Released, it is no longer the member's to commit.
    m.released(now + 6, [S1])
    assert done(commit(m, now + 7, 3, 1)).outcomes == {(TOPIC, 1): ErrorCode.ILLEGAL_GENERATION}


def test_a_resource_neither_owned_nor_releasing_is_refused_without_sending() -> None:
    m = make()
    now = revoke_s1_in_generation_6(m, to_stable(m))
    m.released(now, [S1])
    actions = commit(m, now + 1, 1, 1, 2)  # released, never owned
    assert commits_sent(actions) == []
    assert done(actions).outcomes == {
        (TOPIC, 1): ErrorCode.ILLEGAL_GENERATION,
        (TOPIC, 2): ErrorCode.ILLEGAL_GENERATION,
    }


def test_a_partition_naming_no_resource_commits_under_the_current_generation() -> None:
    m = make()
    now = to_stable(m)
    topic = CommitTopic("offsets", (CommitPartition(0, 42),))
    ((_, request),) = commits_sent(m.commit(now, 1, (topic,)))
    assert request.generation_id == 5


def test_nothing_is_sent_without_a_coordinator_or_once_closed() -> None:
    m = make()
    now = to_stable(m)
    heartbeat = sent(m.tick(now + HEARTBEAT_MS))
    m.request_failed(now + HEARTBEAT_MS, heartbeat.request_id, CoordinatorUnavailableError("gone"))
    assert m.state is State.FINDING_COORDINATOR
    actions = commit(m, now + HEARTBEAT_MS + 1, 1, 0)
    assert commits_sent(actions) == []
    (outcome,) = done(actions).outcomes.values()
    assert isinstance(outcome, CoordinatorUnavailableError)
    assert outcome.retriable

    closed = make()
    closed.close(0)
    actions = commit(closed, 1, 2, 0)
    assert commits_sent(actions) == []
    assert done(actions).outcomes == {(TOPIC, 0): ErrorCode.UNKNOWN_MEMBER_ID}


def test_a_failed_request_answers_its_partitions_with_the_error() -> None:
    m = make()
    now = to_stable(m)
    ((request, _),) = commits_sent(commit(m, now, 1, 0))
    error = CoordinatorUnavailableError("OffsetCommit: timed out")
    actions = m.commit_answered(now + 1, request.request_id, error)
    assert done(actions).outcomes == {(TOPIC, 0): error}
    assert m.state is State.STABLE  # a commit's timeout says nothing about the group


# --- proof of life ---------------------------------------------------------------------


def run(m: MemberMachine, now: int, until: int, *, commit_every_ms: int | None) -> list[Action]:
    """Answer heartbeats with a retriable error (no proof) and, every
    ``commit_every_ms``, commit and answer NONE; returns the callbacks issued."""
    callbacks: list[Action] = []
    next_commit = now if commit_every_ms is not None else None
    commit_id = 100
    while now < until:
        deadline = m.next_deadline()
        now = min(deadline if deadline is not None else until, until)
        if next_commit is not None and next_commit <= now:
            now = next_commit
            next_commit += commit_every_ms or 0
            commit_id += 1
            actions = commit(m, now, commit_id, 0)
            for request, commit_request in commits_sent(actions):
                actions += m.commit_answered(
                    now, request.request_id, answer(commit_request, ErrorCode.NONE)
                )
        else:
            actions = m.tick(now)
        for action in actions:
            if isinstance(action, SendRequest) and isinstance(action.request, Heartbeat):
                actions += m.response(
                    now, action.request_id, HeartbeatResult(ErrorCode.REQUEST_TIMED_OUT)
                )
        callbacks += only(actions, InvokeCallback)
    return callbacks


def test_answered_commits_keep_a_member_whose_heartbeats_fail() -> None:
    m = make()
    now = to_stable(m)
    callbacks = run(m, now, now + 5 * SESSION_MS, commit_every_ms=2_000)
    assert callbacks == []
    assert m.state is State.STABLE
    assert m.owned == {S0, S1}


def test_without_commits_the_same_member_loses_its_resources_within_the_session() -> None:
    m = make()
    now = to_stable(m)
    callbacks = run(m, now, now + SESSION_MS, commit_every_ms=None)
    assert [(c.kind, set(c.resources)) for c in callbacks] == [("on_lost", {S0, S1})]  # type: ignore[union-attr]


def test_an_answer_to_an_older_generation_proves_nothing() -> None:
    m = make()
    now = revoke_s1_in_generation_6(m, to_stable(m))
    ((old, old_request),) = commits_sent(commit(m, now, 1, 1))
    join = rejoin(m, now + 1)
    ack_callbacks(m, join_and_sync(m, join, now + 2, 7, (S0,)), now + 3)
    before = m.alive_since
    m.commit_answered(now + 4, old.request_id, answer(old_request, ErrorCode.NONE))
    assert m.alive_since == before


# --- a refused commit: rule 3 ----------------------------------------------------------


def refuse(m: MemberMachine, now: int, code: ErrorCode) -> list[Action]:
    ((request, commit_request),) = commits_sent(commit(m, now, 1, 0))
    return m.commit_answered(now + 1, request.request_id, answer(commit_request, code))


def test_unknown_member_id_loses_everything_and_rejoins_without_a_member_id() -> None:
    m = make()
    now = to_stable(m)
    actions = refuse(m, now, ErrorCode.UNKNOWN_MEMBER_ID)
    assert done(actions).outcomes == {(TOPIC, 0): ErrorCode.UNKNOWN_MEMBER_ID}
    (lost,) = only(actions, InvokeCallback)
    assert lost.kind == "on_lost"
    assert set(lost.resources) == {S0, S1}
    assert m.owned == frozenset()
    assert m.state is State.JOINING
    join = sent(ack_callbacks(m, actions, now + 2))
    assert isinstance(join.request, JoinGroup)
    assert join.request.member_id == ""


def test_illegal_generation_loses_everything_and_rejoins_with_the_member_id() -> None:
    m = make()
    now = to_stable(m)
    actions = refuse(m, now, ErrorCode.ILLEGAL_GENERATION)
    (lost,) = only(actions, InvokeCallback)
    assert lost.kind == "on_lost"
    assert m.generation == -1
    join = sent(ack_callbacks(m, actions, now + 2))
    assert isinstance(join.request, JoinGroup)
    assert join.request.member_id == "me-1"


def test_fenced_instance_id_is_fatal() -> None:
    m = make(instance_id="w-1")
    now = to_stable(m)
    actions = refuse(m, now, ErrorCode.FENCED_INSTANCE_ID)
    (failed,) = only(actions, Failed)
    assert isinstance(failed.error, FencedInstanceError)
    assert [c.kind for c in only(actions, InvokeCallback)] == ["on_lost"]
    assert m.state is State.FATAL


def test_a_refusal_while_closing_loses_what_is_left_and_closes() -> None:
    m = make(instance_id="w-1")
    now = to_stable(m)
    ack_callbacks(m, m.close(now), now + 1)  # revoked, releasing under generation 5
    assert m.state is State.LEAVING
    assert m.releasing == {S0, S1}
    actions = refuse(m, now + 2, ErrorCode.UNKNOWN_MEMBER_ID)
    (lost,) = only(actions, InvokeCallback)
    assert lost.kind == "on_lost"
    assert set(lost.resources) == {S0, S1}
    assert only(ack_callbacks(m, actions, now + 4), Closed)


def test_other_answers_leave_the_membership_alone() -> None:
    m = make()
    now = to_stable(m)
    actions = refuse(m, now, ErrorCode.OFFSET_METADATA_TOO_LARGE)
    assert only(actions, InvokeCallback) == []
    assert m.state is State.STABLE
    assert m.owned == {S0, S1}


def test_a_dynamic_member_sends_no_commit_after_its_leave_group() -> None:
    m = make()
    now = to_stable(m)
    actions = ack_callbacks(m, m.close(now), now + 1)
    actions = m.released(now + 2, [S0, S1])
    leave = sent(actions)
    assert isinstance(leave.request, LeaveGroup)
    actions = commit(m, now + 3, 1, 0)
    assert commits_sent(actions) == []
    assert done(actions).outcomes == {(TOPIC, 0): ErrorCode.UNKNOWN_MEMBER_ID}
