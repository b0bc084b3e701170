"""One classic group: its state, its members and their bookkeeping.

States and transitions (Apache Kafka's classic group coordinator)::

    Empty ───────────────────► PreparingRebalance ◄───────────────────┐
      ▲     first JoinGroup        │           ▲                        │
      │                            │           │ a member joins,        │ a member joins or
      │ join phase ends,           │ join      │ changes metadata,      │ changes metadata,
      │ nobody left                │ phase     │ leaves or expires;     │ the leader rejoins,
      └────────────────────────────┤ ends      │ sync timeout           │ leaves, expires
                                   ▼           │                        │
                          CompletingRebalance ─┴──► Stable ─────────────┘
                                         leader's SyncGroup

    any state ──► Dead   (group deleted, or the coordinator unloaded)

* **Empty** — no members (offsets may exist).  Generation 0 for a new group,
  otherwise the generation in which the last member left.  The first JoinGroup
  starts the *initial* rebalance, which waits ``initial_rebalance_delay_ms``
  (extended by the same delay whenever a new member arrives, at most up to the
  rebalance timeout) so that members starting together form one generation.
* **PreparingRebalance** — the join phase: every member must send JoinGroup;
  their requests are parked.  It ends when all members have rejoined (a
  counter, not a scan) or the rebalance timeout (the largest of the members')
  expires; dynamic members that did not rejoin are then removed.  The
  generation is incremented and the protocol chosen by vote.
* **CompletingRebalance** — the sync phase: members have their JoinGroup
  answers; followers' SyncGroup requests are parked until the leader's SyncGroup
  brings the assignment.  Members that do not sync within the rebalance timeout
  are removed and a new rebalance starts.
* **Stable** — assignments handed out; heartbeats keep sessions alive.
* **Dead** — the group is gone; requests that still reach it get
  COORDINATOR_NOT_AVAILABLE (or GROUP_ID_NOT_FOUND where Kafka says so).

Allowed transitions (``_VALID_PREVIOUS``): PreparingRebalance ← {Stable,
CompletingRebalance, Empty}; CompletingRebalance ← {PreparingRebalance};
Stable ← {CompletingRebalance}; Empty ← {PreparingRebalance}; Dead ← any.

Members: a *pending* member got an id from MEMBER_ID_REQUIRED (JoinGroup v4+)
but has not joined with it yet; it counts against "all members joined" and is
dropped after its session timeout.  A member is *awaiting join* while it has a
parked JoinGroup and *awaiting sync* while it has a parked SyncGroup.  Static
members (KIP-345) are indexed by group instance id.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field

from workgroup.coordinator.actions import ReplyToken
from workgroup.errors import ErrorCode
from workgroup.kafka.java import java_hashmap_order

Protocols = tuple[tuple[str, bytes], ...]


class GroupState(enum.Enum):
    """The states of a classic group; values are the names Kafka reports."""

    #: No members; generation kept, offsets may exist.
    EMPTY = "Empty"
    #: Join phase: JoinGroups are parked until every member rejoined or time is up.
    PREPARING_REBALANCE = "PreparingRebalance"
    #: Sync phase: members know the generation; waiting for the leader's assignment.
    COMPLETING_REBALANCE = "CompletingRebalance"
    #: Assignment handed out; only heartbeats until the next change.
    STABLE = "Stable"
    #: Deleted or unloaded; kept only to answer requests that still reach it.
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class InvalidTransition(RuntimeError):
    """A state change the rules above forbid (a bug in the coordinator)."""


@dataclass(slots=True, eq=False)
class Member:
    """A joined member of a classic group."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    #: Parked JoinGroup (reply token) while the member awaits the join phase's end.
    join_token: ReplyToken | None = None
    #: Parked SyncGroup while the member awaits the leader's assignment.
    sync_token: ReplyToken | None = None
    #: Joined during the current join phase; its session is not yet established.
    is_new: bool = False
    protocol_names: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.protocol_names = frozenset(name for name, _ in self.protocols)

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def awaiting_join(self) -> bool:
        return self.join_token is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_token is not None

    def has_satisfied_heartbeat(self) -> bool:
        """Members parked in a rebalance are alive by definition, unless they are new."""
        if self.is_new:
            return False
        return self.awaiting_join or self.awaiting_sync

    def matches(self, protocols: Protocols) -> bool:
        return self.protocols == protocols

    def metadata(self, protocol_name: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        return b""

    def vote(self, candidates: set[str] | frozenset[str]) -> str:
        """The member's most preferred protocol among ``candidates``."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


class Group:
    """State and member bookkeeping of one classic group (no timers, no I/O)."""

    def __init__(
        self,
        group_id: str,
        *,
        state: GroupState = GroupState.EMPTY,
        generation_id: int = 0,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        leader_id: str | None = None,
    ) -> None:
        self.group_id = group_id
        self.state = state
        self.previous_state = GroupState.DEAD
        #: When the group last became Empty (offset retention counts from it);
        #: ``None``: not Empty, or not seen Empty by a retention check yet.
        self.empty_since_ms: int | None = None
        self.generation_id = generation_id
        self.protocol_type = protocol_type
        self.protocol_name = protocol_name
        self.leader_id = leader_id
        #: Members in the order they joined (leader succession follows it).
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: set[str] = set()
        self.pending_sync_members: set[str] = set()
        self.num_awaiting_join = 0
        self.supported_protocols: Counter[str] = Counter()
        #: A member joined during the initial (delayed) rebalance since the delay was armed.
        self.new_member_added = False
        #: The initial rebalance delay currently armed and the time still left after it.
        self.initial_delay_ms = 0
        self.initial_remaining_ms = 0
        #: The generation a pending-sync timer was armed for.
        self.sync_generation = -1

    # --- state ----------------------------------------------------------------

    def is_in(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, state: GroupState) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise InvalidTransition(
                f"group {self.group_id!r}: {self.state.value} -> {state.value} is not allowed"
            )
        self.previous_state = self.state
        self.state = state

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # --- members ----------------------------------------------------------------

    @property
    def num_members(self) -> int:
        return len(self.members)

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    def is_pending(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def add_pending(self, member_id: str) -> None:
        self.pending_members.add(member_id)

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def add(self, member: Member, join_token: ReplyToken | None) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise ValueError(f"instance {member.group_instance_id!r} is already a member")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.supported_protocols.update(member.protocol_names)
        member.join_token = join_token
        if join_token is not None:
            self.num_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> Member | None:
        """Forget a member (or pending member); the caller answers its parked requests."""
        member = self.members.pop(member_id, None)
        if member is not None:
            self._forget_protocols(member.protocol_names)
            if member.awaiting_join:
                self.num_awaiting_join -= 1
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        return member

    def update(
        self,
        member: Member,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        join_token: ReplyToken | None,
    ) -> None:
        """Apply a JoinGroup's settings to an existing member (parks ``join_token``)."""
        self._forget_protocols(member.protocol_names)
        member.protocols = protocols
        member.protocol_names = frozenset(name for name, _ in protocols)
        self.supported_protocols.update(member.protocol_names)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if join_token is not None and not member.awaiting_join:
            self.num_awaiting_join += 1
        elif join_token is None and member.awaiting_join:
            self.num_awaiting_join -= 1
        member.join_token = join_token

    def _forget_protocols(self, names: frozenset[str]) -> None:
        counts = self.supported_protocols
        for name in names:
            left = counts[name] - 1
            if left > 0:
                counts[name] = left
            else:
                del counts[name]

    def take_join_token(self, member: Member) -> ReplyToken | None:
        """Unpark the member's JoinGroup, if any, so that it can be answered."""
        token = member.join_token
        if token is not None:
            member.join_token = None
            self.num_awaiting_join -= 1
        return token

    @staticmethod
    def take_sync_token(member: Member) -> ReplyToken | None:
        token = member.sync_token
        member.sync_token = None
        return token

    def replace_static_member(self, group_instance_id: str, old_id: str, new_id: str) -> Member:
        """KIP-345: give a restarted static member a new id, keeping everything else.

        The old member's parked requests are *not* answered here; the caller takes
        them (``take_join_token``/``take_sync_token``) before, to fence them.
        """
        old = self.members.pop(old_id)
        new = Member(
            member_id=new_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
        )
        self.members[new_id] = new
        if self.is_leader(old_id):
            self.leader_id = new_id
        self.static_members[group_instance_id] = new_id
        if old_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_id)
            self.pending_sync_members.add(new_id)
        return new

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [member for member in self.members.values() if not member.awaiting_join]

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def validate_member(self, member_id: str, group_instance_id: str | None) -> ErrorCode:
        """UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID checks shared by most requests."""
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else promote a rejoined member.

        False when there is no leader or no member rejoined.
        """
        if self.leader_id is None:
            return False
        leader = self.members[self.leader_id]
        if leader.awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # --- protocols ----------------------------------------------------------------

    def supports_protocols(self, protocol_type: str, protocol_names: frozenset[str]) -> bool:
        """Admission: in a non-empty group one of the protocols must be everyone's."""
        if self.is_in(GroupState.EMPTY):
            return bool(protocol_type) and bool(protocol_names)
        if self.protocol_type != protocol_type:
            return False
        size = len(self.members)
        counts = self.supported_protocols
        return any(counts[name] == size for name in protocol_names)

    def candidate_protocols(self) -> set[str]:
        size = len(self.members)
        return {name for name, count in self.supported_protocols.items() if count == size}

    def select_protocol(self) -> str:
        """The preference vote: each member votes for its favourite candidate.

        The most voted protocol wins; ties are broken as Kafka's broker does (the
        first in the JVM HashMap order of the voted names, see
        :func:`workgroup.kafka.java.java_hashmap_order`).
        """
        if not self.members:
            raise ValueError(f"cannot select a protocol for empty group {self.group_id!r}")
        candidates = self.candidate_protocols()
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best: str | None = None
        for name in java_hashmap_order(list(votes)):
            if best is None or votes[name] > votes[best]:
                best = name
        assert best is not None
        return best

    # --- generations ----------------------------------------------------------------

    def init_next_generation(self) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(GroupState.COMPLETING_REBALANCE)
        else:
            self.protocol_name = None
            self.transition_to(GroupState.EMPTY)
        self.pending_sync_members.clear()

    def has_received_sync_from_all(self) -> bool:
        return not self.pending_sync_members
