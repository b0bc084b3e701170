"""The member machine's parts that answer with outcomes (member/outcomes.py):
the answers read, what is due to be sent, and the catalog read."""

from __future__ import annotations

from member_sim import StickyTestAssignor

from workgroup.errors import CoordinatorError, ErrorCode
from workgroup.kafka.messages import JoinGroupResult
from workgroup.member.actions import Action, FindCoordinator
from workgroup.member.catalog import MemberCatalog
from workgroup.member.config import MemberConfig
from workgroup.member.departure import Departure
from workgroup.member.errors import CoordinatorUnavailableError, FencedInstanceError
from workgroup.member.generation import NO_GENERATION, Generation
from workgroup.member.holdings import Holdings
from workgroup.member.intents import Intents
from workgroup.member.load_balancing import LoadMeter
from workgroup.member.membership import Membership
from workgroup.member.outcomes import CoordinatorLost, Fail, Lead, Lose, Rejoin, Reset, Sync
from workgroup.member.outgoing import Outgoing
from workgroup.member.requests import Pending, RequestIds
from workgroup.member.responses import Responses
from workgroup.member.transitions import State
from workgroup.protocol import Protocol

PROTOCOL = Protocol("sticky", StickyTestAssignor())


def parts(
    connect_timeout_ms: int | None = None,
) -> tuple[MemberConfig, Membership, Responses, list[Action]]:
    config = MemberConfig(
        group_id="g", protocols=(PROTOCOL,), connect_timeout_ms=connect_timeout_ms
    )
    out: list[Action] = []
    holdings = Holdings("g", RequestIds(), out, confirm_release=False, on_callback_error="log")
    membership = Membership(config, holdings, Intents(), Departure(dynamic=True))
    return config, membership, Responses(config, membership), out


def joining(membership: Membership) -> None:
    membership.enter(State.FINDING_COORDINATOR)
    membership.lookup.start(0)
    membership.lookup.take_due(0)
    membership.lookup.found()
    membership.enter(State.JOINING)


def test_refusals_every_answer_shares_become_outcomes_from_the_error_table() -> None:
    _, _, responses, _ = parts()
    assert responses.refused(ErrorCode.UNKNOWN_MEMBER_ID, "Heartbeat") == [
        Lose("Heartbeat: UNKNOWN_MEMBER_ID"),
        Rejoin("Heartbeat: unknown member id", immediately=True, reset=Reset.MEMBER),
    ]
    assert responses.refused(ErrorCode.ILLEGAL_GENERATION, "SyncGroup") == [
        Lose("SyncGroup: ILLEGAL_GENERATION"),
        Rejoin("SyncGroup: illegal generation", immediately=True, reset=Reset.GENERATION),
    ]
    assert responses.refused(ErrorCode.NOT_COORDINATOR, "JoinGroup") == [
        CoordinatorLost("JoinGroup: NOT_COORDINATOR")
    ]
    (fatal,) = responses.refused(ErrorCode.FENCED_INSTANCE_ID, "Heartbeat") or []
    assert isinstance(fatal, Fail)
    assert isinstance(fatal.error, FencedInstanceError)
    # Left to the caller: JoinGroup and SyncGroup back off, a heartbeat retries.
    assert responses.refused(ErrorCode.UNKNOWN_SERVER_ERROR, "Heartbeat") is None


def test_a_join_answer_counts_only_while_joining_and_says_who_leads() -> None:
    config, membership, responses, _ = parts()
    pending = Pending("join", NO_GENERATION, sent_at=10)
    answer = JoinGroupResult(
        ErrorCode.NONE,
        generation_id=4,
        protocol_type=config.protocol_type,
        protocol_name=PROTOCOL.wire_name,
        leader="m-1",
        member_id="m-1",
    )
    assert responses.join(20, pending, answer) == []  # not JOINING: stale
    joining(membership)
    assert responses.join(20, pending, answer) == [Lead(PROTOCOL, answer)]
    assert membership.generation == Generation(4, "m-1", PROTOCOL)
    assert membership.heartbeat.alive_since is not None
    membership.enter(State.SYNCING)
    membership.enter(State.JOINING)
    follower = JoinGroupResult(
        ErrorCode.NONE, 5, config.protocol_type, PROTOCOL.wire_name, leader="m-2", member_id="m-1"
    )
    assert responses.join(30, pending, follower) == [Sync(follow=True)]
    membership.enter(State.JOINING)
    (wrong,) = responses.join(
        40, pending, JoinGroupResult(ErrorCode.NONE, 6, "other", PROTOCOL.wire_name)
    )
    assert isinstance(wrong, Fail)
    assert "protocol type is 'other'" in str(wrong.error)


def test_a_failed_request_retries_finds_the_coordinator_or_fails() -> None:
    _, membership, responses, _ = parts()
    joining(membership)
    membership.generation = Generation(1, "m-1", PROTOCOL)
    held = Pending("join", membership.generation, sent_at=0)
    beside = Pending("heartbeat", membership.generation, sent_at=0, beside_held=True)
    lost = CoordinatorError(ErrorCode.NOT_COORDINATOR, "moved")
    assert responses.failed(50, held, lost) == [CoordinatorLost(f"join failed: {lost}")]
    # Beside a held request a failed heartbeat is only a missing proof: retried.
    assert responses.failed(50, beside, lost) == []
    assert membership.heartbeat.next_at is not None
    assert membership.heartbeat.next_at > 50
    refused = CoordinatorError(ErrorCode.GROUP_AUTHORIZATION_FAILED, "no")
    assert responses.failed(60, held, refused) == [Fail(refused)]


def test_membership_forgets_the_member_id_or_only_the_generation() -> None:
    _, membership, _, _ = parts()
    membership.generation = Generation(3, "m-1", PROTOCOL)
    membership.heartbeat.proved_alive(10, 10, held=False)
    membership.forget(Reset.NOTHING)
    assert membership.heartbeat.alive_since == 10
    membership.forget(Reset.GENERATION)
    assert (membership.generation.member_id, membership.generation.is_valid) == ("m-1", False)
    assert membership.heartbeat.alive_since is None
    membership.forget(Reset.MEMBER)
    assert membership.generation == NO_GENERATION


def test_lookups_go_when_due_and_the_first_search_ends_at_the_connect_deadline() -> None:
    config, membership, _, out = parts(connect_timeout_ms=1_000)
    intents = Intents()
    holdings = Holdings("g", RequestIds(), out, confirm_release=False, on_callback_error="log")
    outgoing = Outgoing(
        config,
        RequestIds(),
        out,
        membership,
        holdings,
        intents,
        Departure(dynamic=True),
        LoadMeter(config.balance.smoothing_ms),
    )
    membership.lookup.start(0)
    membership.to_finding(0, immediately=True)
    assert outgoing.find_if_due(0) == []
    assert out == [FindCoordinator()]
    assert outgoing.find_if_due(10) == []  # one lookup at a time
    assert len(out) == 1
    (failed,) = outgoing.find_if_due(1_000)
    assert isinstance(failed, Fail)
    assert isinstance(failed.error, CoordinatorUnavailableError)


def test_the_catalog_changes_with_its_digest_and_a_leader_notices_its_round_is_stale() -> None:
    catalog = MemberCatalog({"shard": range(3)})
    digest = catalog.digest
    assert not catalog.change({"shard": [0, 1, 2]})  # the same catalog
    catalog.assigned(digest, led=False)
    assert not catalog.changed_since_assignment  # only the leader remembers
    catalog.assigned(digest, led=True)
    assert not catalog.changed_since_assignment
    assert catalog.change({"shard": range(4)})
    assert catalog.digest != digest
    assert catalog.keys == {"shard": (0, 1, 2, 3)}
    assert catalog.changed_since_assignment
