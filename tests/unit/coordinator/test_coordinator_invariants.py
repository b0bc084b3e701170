"""Randomized clients against the coordinator, checking its invariants after every step.

Clients join (dynamic and static, with changing metadata), sync (the leader with an
assignment), heartbeat, commit, leave and restart while time jumps.  Invariants:

* every request is answered at most once, and after ``unload`` exactly once;
* a group has at most one leader, a member of the group, and every JoinGroup answer
  of a generation names the same leader (up to a static member's replacement);
* a member never receives a JoinGroup answer of another generation than the group's,
  and a client's generations only grow;
* in a Stable group every dynamic member joined the current generation and nobody is
  parked; in CompletingRebalance nobody waits for a join answer; Empty has no members;
* the O(1) bookkeeping (parked-join counter, protocol support counts, static index,
  pending syncs) always equals what a full scan computes;
* a commit is accepted only from a member of the current generation (or from outside
  the group while it is Empty).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.group import GroupState
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import (
    CommitPartition,
    CommitTopic,
    Heartbeat,
    HeartbeatResult,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    LeavingMember,
    OffsetCommit,
    OffsetCommitResult,
    SyncGroupResult,
)
from workgroup.testing.coordinator import CoordinatorHarness, Token, join_request

GROUP = "g"
PROTOCOL_CHOICES = (
    (("range", b"1"),),
    (("range", b"2"),),
    (("roundrobin", b""), ("range", b"")),
)


@dataclass
class Client:
    name: str
    instance: str | None
    member_id: str = ""
    generation: int = -1
    leader: str = ""
    members: tuple[str, ...] = ()
    join: Token | None = None
    sync: Token | None = None
    session_timeout_ms: int = 10_000
    rebalance_timeout_ms: int = 20_000


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = CoordinatorHarness(CoordinatorConfig(initial_rebalance_delay_ms=100))
        self.clients = [Client(f"d{i}", None) for i in range(3)] + [
            Client(f"s{i}", f"host-{i}") for i in range(2)
        ]
        self.seen: set[Token] = set()
        #: Leader announced per generation, as an instance id for static members.
        self.leaders: dict[int, str] = {}

    # --- helpers ---------------------------------------------------------------------

    def group_generation(self) -> int:
        group = self.h.coordinator.group(GROUP)
        return -1 if group is None else group.generation_id

    @staticmethod
    def leader_identity(member_id: str) -> str:
        # Test member ids are "<instance or client>-<n>": a static member keeps its
        # instance id across replacements.
        prefix = member_id.rsplit("-", 1)[0]
        return prefix if prefix.startswith("host-") else member_id

    def absorb(self) -> None:
        """Apply every newly answered JoinGroup/SyncGroup to the client that sent it."""
        generation_now = self.group_generation()
        for client in self.clients:
            if client.join is not None and self.h.answered(client.join):
                result = self.h.result(client.join, JoinGroupResult)
                client.join = None
                self.on_join_answer(client, result, generation_now)
            if client.sync is not None and self.h.answered(client.sync):
                self.h.result(client.sync, SyncGroupResult)
                client.sync = None

    def on_join_answer(self, client: Client, result: JoinGroupResult, generation_now: int) -> None:
        if result.error is ErrorCode.MEMBER_ID_REQUIRED:
            client.member_id = result.member_id
            return
        if result.error is not ErrorCode.NONE:
            if result.error in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
                client.member_id = ""
                client.generation = -1
            return
        assert result.generation_id == generation_now, (result, generation_now)
        assert result.generation_id >= client.generation
        client.member_id = result.member_id
        client.generation = result.generation_id
        client.leader = result.leader
        client.members = tuple(m.member_id for m in result.members)
        identity = self.leader_identity(result.leader)
        announced = self.leaders.setdefault(result.generation_id, identity)
        assert announced == identity, (self.leaders, result)

    # --- rules -------------------------------------------------------------------------

    @rule(
        index=st.integers(0, 4),
        protocols=st.sampled_from(PROTOCOL_CHOICES),
        session=st.sampled_from([6_000, 10_000]),
        rebalance=st.sampled_from([10_000, 20_000]),
        api_version=st.sampled_from([3, 5, 8, 9]),
    )
    def join(
        self,
        index: int,
        protocols: tuple[tuple[str, bytes], ...],
        session: int,
        rebalance: int,
        api_version: int = 9,
    ) -> None:
        client = self.clients[index]
        if client.join is not None:
            return
        client.session_timeout_ms = session
        client.rebalance_timeout_ms = rebalance
        client.join = self.h.send(
            join_request(
                GROUP,
                client.member_id,
                protocols=protocols,
                session_timeout_ms=session,
                rebalance_timeout_ms=rebalance,
                group_instance_id=client.instance,
                api_version=api_version,
            )
        )
        self.absorb()

    @rule(index=st.integers(3, 4))
    def restart_static(self, index: int) -> None:
        client = self.clients[index]
        client.member_id = ""
        client.generation = -1
        if client.join is None:
            self.join(
                index, PROTOCOL_CHOICES[0], client.session_timeout_ms, client.rebalance_timeout_ms
            )

    @rule(index=st.integers(0, 4))
    def sync(self, index: int) -> None:
        client = self.clients[index]
        if client.sync is not None or client.generation < 0:
            return
        assignments = ()
        if client.leader == client.member_id:
            assignments = tuple((m, m.encode()) for m in client.members)
        client.sync = self.h.sync(
            GROUP,
            client.member_id,
            client.generation,
            assignments,
            group_instance_id=client.instance,
        )
        self.absorb()

    @rule(index=st.integers(0, 4))
    def heartbeat(self, index: int) -> None:
        client = self.clients[index]
        if not client.member_id:
            return
        request = Heartbeat(GROUP, client.generation, client.member_id, client.instance)
        self.h.call(request, HeartbeatResult)
        self.absorb()

    @rule(index=st.integers(0, 4))
    def commit(self, index: int) -> None:
        client = self.clients[index]
        group = self.h.coordinator.group(GROUP)
        before_generation = -1 if group is None else group.generation_id
        before_state = None if group is None else group.state
        is_member = group is not None and group.has_member(client.member_id)
        request = OffsetCommit(
            GROUP,
            client.generation,
            client.member_id,
            (CommitTopic("t", (CommitPartition(0, 1),)),),
            group_instance_id=client.instance,
        )
        error = self.h.call(request, OffsetCommitResult).topics[0].partitions[0].error
        if error is ErrorCode.NONE:
            from_outside = client.generation < 0 and before_state in (None, GroupState.EMPTY)
            assert from_outside or (is_member and client.generation == before_generation)
        self.absorb()

    @rule(index=st.integers(0, 4))
    def leave(self, index: int) -> None:
        client = self.clients[index]
        if not client.member_id:
            return
        self.h.call(
            LeaveGroup(GROUP, (LeavingMember(client.member_id, client.instance),)), LeaveGroupResult
        )
        self.absorb()
        client.member_id = ""
        client.generation = -1

    @rule(ms=st.sampled_from([0, 50, 100, 3_000, 6_000, 11_000, 25_000]))
    def advance(self, ms: int) -> None:
        # Timers fire one deadline at a time; absorb between them so that each
        # JoinGroup answer is checked against the generation it was produced in.
        target = self.h.now_ms + ms
        while (
            deadline := self.h.coordinator.next_deadline_ms()
        ) is not None and deadline <= target:
            self.h.advance_to(deadline)
            self.absorb()
        self.h.advance_to(target)
        self.absorb()

    # --- invariants --------------------------------------------------------------------

    @invariant()
    def bookkeeping_matches_a_full_scan(self) -> None:
        group = self.h.coordinator.group(GROUP)
        if group is None:
            return
        members = group.members
        assert group.num_awaiting_join == sum(1 for m in members.values() if m.awaiting_join)
        expected = Counter(name for m in members.values() for name in m.protocol_names)
        assert +group.supported_protocols == expected
        assert group.static_members == {
            m.group_instance_id: m.member_id
            for m in members.values()
            if m.group_instance_id is not None
        }
        assert group.pending_sync_members <= set(members)
        assert not (group.pending_members & set(members))
        if members:
            assert group.leader_id in members
        else:
            assert group.leader_id is None

    @invariant()
    def states_agree_with_parked_requests(self) -> None:
        group = self.h.coordinator.group(GROUP)
        if group is None:
            return
        parked_joins = [m for m in group.members.values() if m.awaiting_join]
        parked_syncs = [m for m in group.members.values() if m.awaiting_sync]
        if group.is_in(GroupState.EMPTY):
            assert not group.members
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            assert not parked_joins
        if group.is_in(GroupState.STABLE):
            assert not parked_joins
            assert not parked_syncs
            assert group.generation_id >= 1
            assert group.protocol_name is not None
        if group.is_in(GroupState.PREPARING_REBALANCE):
            assert not parked_syncs

    @invariant()
    def stable_dynamic_members_joined_the_current_generation(self) -> None:
        group = self.h.coordinator.group(GROUP)
        if group is None or not group.is_in(GroupState.STABLE):
            return
        for client in self.clients:
            if client.instance is None and group.has_member(client.member_id):
                assert client.generation == group.generation_id, (client, group.generation_id)

    def teardown(self) -> None:
        self.h._record(self.h.coordinator.unload(self.h.now_ms))
        assert self.h.pending_tokens() == []


CoordinatorMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("WG_STATEFUL_EXAMPLES", "100")),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCoordinatorInvariants = CoordinatorMachine.TestCase
