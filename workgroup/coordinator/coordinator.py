"""The sans-I/O group coordinator: Kafka's classic group protocol as a state machine.

``GroupCoordinator.handle(now, token, request)`` takes one decoded request and
returns actions: ``Reply(token, result)`` for answers and ``Persist(...)`` for
state the driver must write durably *before* carrying out the actions that
follow it.  JoinGroup and SyncGroup may be parked; their replies come out of a
later ``handle`` or ``expire`` call, with the token they came with.  Every token
is answered exactly once.  ``expire(now)`` fires due timers; the driver calls it
at ``next_deadline_ms()``.  Nothing here reads a clock, touches a socket or
imports asyncio.

Request rules (Apache Kafka's ``GroupMetadataManager``, classic groups):

JoinGroup
  1. Empty group id: INVALID_GROUP_ID.  Session timeout outside
     [min, max]: INVALID_SESSION_TIMEOUT.
  2. A member id for a group that does not exist: UNKNOWN_MEMBER_ID.  Otherwise
     a JoinGroup without member id creates the group (Empty, generation 0).
  3. Group max size: while PreparingRebalance a member is admitted if it is
     already parked or fewer than ``group_max_size`` members are; otherwise if
     it is a member or the group is smaller than the limit.  A refused member
     is removed from the group: GROUP_MAX_SIZE_REACHED.
  4. Admission: the protocol type must be the group's and one of the member's
     protocols must be supported by every member (in an Empty group: any
     non-empty type and protocol list): INCONSISTENT_GROUP_PROTOCOL for that
     member alone.
  5. New dynamic member on v4+: it gets an id and MEMBER_ID_REQUIRED, and is a
     *pending* member until it joins with that id (dropped after its session
     timeout).  v0-v3: admitted at once.  New static member: admitted, or, if
     its instance id is known, it *replaces* the old member id (KIP-345): the
     old id's parked requests get FENCED_INSTANCE_ID.  In Stable, if the
     protocol vote would not change, no rebalance: the group is persisted and
     the member gets the current generation (v9+: the leader gets the member
     list and ``skip_assignment``; older versions name the *old* leader id, so
     a restarted static leader acts as a follower, as in Kafka).  In
     CompletingRebalance the replacement forces a rebalance.
  6. Known member: validated (UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID).
     PreparingRebalance: parked.  CompletingRebalance: same protocols → the
     current generation's answer again; changed → rebalance.  Stable: the
     leader or changed protocols → rebalance; a follower with unchanged
     protocols → the current generation's answer.
  7. A member that joins while the group can rebalance (Empty, Stable,
     CompletingRebalance) starts one; pending SyncGroups then get
     REBALANCE_IN_PROGRESS.  New members' sessions start with a 5-minute join
     timeout (Kafka's ``group.classic.new.member.join.timeout.ms``).
  8. The join phase completes when every member (and no pending member) is
     parked, or at the rebalance timeout (largest of the members').  Dynamic
     members that did not rejoin are removed; static ones stay.  If the leader
     did not rejoin a rejoined member becomes leader; if nobody rejoined, the
     phase waits another rebalance timeout.  The generation is incremented, the
     protocol chosen by vote, and every parked member answered; the leader
     alone receives the members' metadata.  An initial rebalance (from Empty)
     never completes early: it waits ``initial_rebalance_delay_ms``, extended by
     the same delay each time new members arrived, capped by the rebalance
     timeout (Kafka's InitialDelayedJoin).
  9. Every rejected JoinGroup is logged at info as ``group.join_rejected`` with
     the error and the reason (for INVALID_SESSION_TIMEOUT the requested timeout
     and the allowed range; for INCONSISTENT_GROUP_PROTOCOL the group's protocol
     type and common protocols next to the member's).

SyncGroup
  Empty group id: INVALID_GROUP_ID.  Missing or Empty group: UNKNOWN_MEMBER_ID.
  Dead: COORDINATOR_NOT_AVAILABLE.  Then member validation, generation
  (ILLEGAL_GENERATION), v5 protocol type/name (INCONSISTENT_GROUP_PROTOCOL).
  PreparingRebalance: REBALANCE_IN_PROGRESS.  CompletingRebalance: parked; the
  leader's SyncGroup persists the assignment (members it omits get an empty
  one), answers every parked member and makes the group Stable.  Stable: the
  member's assignment at once.  Members that have not synced when the rebalance
  timeout expires after the join phase are removed and a rebalance starts.

Heartbeat
  Empty group id: INVALID_GROUP_ID.  Missing group: UNKNOWN_MEMBER_ID.  Dead:
  COORDINATOR_NOT_AVAILABLE.  Member validation, then ILLEGAL_GENERATION.  Empty:
  UNKNOWN_MEMBER_ID.  PreparingRebalance: session extended,
  REBALANCE_IN_PROGRESS.  Otherwise session extended, NONE.  A member whose
  session expires is removed unless it is parked in a rebalance (and not new).

LeaveGroup
  Missing group: UNKNOWN_MEMBER_ID; Dead: COORDINATOR_NOT_AVAILABLE (top level).
  Each member identity separately: no member id + known instance id removes
  that static member; a pending member id is dropped; otherwise member
  validation (UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID).  A removed member's
  parked JoinGroup gets UNKNOWN_MEMBER_ID.  If anyone left, the group
  rebalances (or completes its join phase).  For v0-v2 the top-level error is
  the member's error.

OffsetCommit / OffsetFetch: see ``offsets.py``.  DescribeGroups: unknown group →
state "Dead", error NONE; protocol name and member metadata only while Stable.
ListGroups: state and type filters, case-insensitive.  DeleteGroups: only Empty
groups (NON_EMPTY_GROUP), missing or Dead: GROUP_ID_NOT_FOUND; deletes offsets.

Group lifetime: an Empty group without committed offsets is deleted after
``EMPTY_GROUP_CLEANUP_MS`` (Kafka removes such groups in its periodic cleanup,
every ``offsets.retention.check.interval.ms`` = 10 minutes).

Deliberate differences from Kafka (each small, each for a reason):

* Kafka leaves a superseded parked request unanswered (its socket is muted while
  a request is parked, so a client cannot send another on the same connection);
  here every token is answered exactly once, because the driver must not leak
  parked requests: a member's earlier parked JoinGroup or SyncGroup gets
  REBALANCE_IN_PROGRESS when the member sends a new one, and a member removed
  with a parked SyncGroup gets UNKNOWN_MEMBER_ID.
* A member turned away by GROUP_MAX_SIZE_REACHED during a join phase may leave
  every remaining member joined; the phase then completes at once instead of at
  the rebalance timeout.
* Leader succession after the leader is removed follows join order (Kafka takes
  the first key of a HashMap); the protocol vote's ties, which clients can
  observe, are broken exactly as Kafka's broker breaks them (``group.py``).
* The "a member arrived" flag of the initial delay is cleared when an initial
  rebalance starts (Kafka can carry a stale flag over from an earlier one and
  extend the first delay once more).
* A static member replaced before it sent its SyncGroup hands the pending sync
  over to its new id, so that the new id's SyncGroup settles it (Kafka keeps
  waiting for the old id and rebalances needlessly at the sync timeout).
* A protocol listed twice by one member counts once towards "supported by every
  member".
* The join and sync timers are at least 1 ms even if a client asks for a zero
  rebalance timeout, so that expiring timers always makes progress.
* ``unload`` (Kafka's partition unloading) is offered for a clean shutdown:
  groups turn Dead and parked requests are answered NOT_COORDINATOR.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from workgroup.coordinator.actions import (
    Action,
    Persist,
    Reply,
    ReplyToken,
    StoredGroup,
    StoredMember,
    StoredOffset,
)
from workgroup.coordinator.config import CoordinatorConfig
from workgroup.coordinator.group import Group, GroupState, Member
from workgroup.coordinator.offsets import OffsetStore, metadata_length, validate_commit
from workgroup.coordinator.timers import Timers
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import (
    FENCE_CLIENT_ID,
    CommitPartitionResult,
    CommitTopicResult,
    DeletedGroup,
    DeleteGroups,
    DeleteGroupsResult,
    DescribedGroup,
    DescribedMember,
    DescribeGroups,
    DescribeGroupsResult,
    FetchedGroup,
    GroupRequest,
    GroupResult,
    Heartbeat,
    HeartbeatResult,
    JoinedMember,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    LeftMember,
    ListedGroup,
    ListGroups,
    ListGroupsResult,
    OffsetCommit,
    OffsetCommitResult,
    OffsetFetch,
    OffsetFetchResult,
    SyncGroup,
    SyncGroupResult,
)
from workgroup.log import get_logger

log = get_logger(__name__)

#: How long a new member's first JoinGroup may stay parked (Kafka's default of
#: ``group.classic.new.member.join.timeout.ms``).
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000
#: How long an Empty group without offsets is kept (Kafka's default of
#: ``offsets.retention.check.interval.ms``, the period of its group cleanup).
EMPTY_GROUP_CLEANUP_MS = 600_000
#: JoinGroup version from which a static leader is told to skip assignment (KIP-814).
SKIP_ASSIGNMENT_JOIN_VERSION = 9
#: LeaveGroup version from which members are answered one by one.
BATCH_LEAVE_VERSION = 3

MemberIdFactory = Callable[[str, str], str]

_DEAD_GROUP = "the group is Dead (deleted, or the coordinator is unloading it)"


def kafka_member_id(client_id: str, group_instance_id: str) -> str:
    """Kafka's member ids: the instance id (static) or client id, a dash, a UUID."""
    return f"{group_instance_id or client_id}-{uuid.uuid4()}"


class TimerKind(enum.IntEnum):
    SESSION = 0  # a member's (or pending member's) session
    JOIN = 1  # the join phase's end (rebalance timeout or initial delay)
    SYNC = 2  # members that must have sent SyncGroup by now
    CLEANUP = 3  # drop the group if it is still Empty without offsets
    RETENTION = 4  # expire old offsets of Empty groups (one timer for all groups)


TimerKey = tuple[TimerKind, str, str]

_HEARTBEAT_RESULTS = {code: HeartbeatResult(code) for code in ErrorCode}


class GroupCoordinator:
    """Kafka's classic group coordinator over every group of the embedded server."""

    def __init__(
        self, config: CoordinatorConfig, *, member_id_factory: MemberIdFactory | None = None
    ) -> None:
        self._config = config
        self._new_member_id = member_id_factory or kafka_member_id
        self._groups: dict[str, Group] = {}
        self._offsets = OffsetStore()
        self._timers: Timers[TimerKey] = Timers()
        self._now = 0
        self._out: list[Action] = []
        #: Whether the join timer armed for a group is the initial (delayed) one.
        self._initial_join: set[str] = set()
        self._retention_armed = False
        # Dispatch on the exact record type (requests are final dataclasses).
        self._handlers: dict[type, Callable[[ReplyToken, Any], None]] = {
            JoinGroup: self._join_group,
            SyncGroup: self._sync_group,
            Heartbeat: self._heartbeat,
            LeaveGroup: self._leave_group,
            OffsetCommit: self._offset_commit,
            OffsetFetch: self._offset_fetch,
            DescribeGroups: self._describe_groups,
            ListGroups: self._list_groups,
            DeleteGroups: self._delete_groups,
        }

    # --- the driver's interface ---------------------------------------------------

    @property
    def config(self) -> CoordinatorConfig:
        return self._config

    def handle(self, now_ms: int, token: ReplyToken, request: GroupRequest) -> list[Action]:
        """Handle one request; return the replies and persistence it causes, in order."""
        self._now = now_ms
        handler = self._handlers.get(type(request))
        if handler is None:
            raise TypeError(f"not a group request: {type(request).__name__}")
        handler(token, request)
        if not self._retention_armed:
            self._arm_retention()
        return self._flush()

    def expire(self, now_ms: int) -> list[Action]:
        """Fire every timer due at ``now_ms`` (in deadline order)."""
        self._now = now_ms
        for kind, group_id, member_id in self._timers.due(now_ms):
            if kind is TimerKind.RETENTION:
                self._expire_offsets()
                self._retention_armed = False
                self._arm_retention()
                continue
            group = self._groups.get(group_id)
            if group is None:
                continue
            if kind is TimerKind.SESSION:
                self._expire_session(group, member_id)
            elif kind is TimerKind.JOIN:
                if group_id in self._initial_join:
                    self._initial_join.discard(group_id)
                    self._try_complete_initial_rebalance(group)
                else:
                    self._complete_join(group)
            elif kind is TimerKind.SYNC:
                self._expire_pending_sync(group)
            else:
                self._cleanup_group(group)
        return self._flush()

    def next_deadline_ms(self) -> int | None:
        return self._timers.next_deadline()

    def next_deadline_hint_ms(self) -> int | None:
        """A cheap lower bound of ``next_deadline_ms()`` (see ``Timers.earliest_hint``)."""
        return self._timers.earliest_hint()

    def restore(
        self, now_ms: int, groups: Iterable[StoredGroup], offsets: Iterable[StoredOffset]
    ) -> None:
        """Load durable state after a restart (later records supersede earlier ones).

        Groups with members come back Stable, without members Empty; every
        member's session restarts at ``now_ms``.  A group larger than
        ``group_max_size`` (the limit was lowered) starts a rebalance so that
        its last rejoining members are turned away, as Kafka does on loading.
        """
        self._now = now_ms
        for stored_offset in offsets:
            # Commit times are monotonic-clock readings of an earlier run: count
            # retention from now instead (never early; offsets.py).
            self._offsets.put(replace(stored_offset, commit_timestamp_ms=now_ms))
        for stored in groups:
            self._drop_group_timers(stored.group_id)
            self._groups.pop(stored.group_id, None)
            if not stored.deleted:
                self._groups[stored.group_id] = self._load_group(stored)
        for group_id in self._offsets.group_ids():
            if group_id not in self._groups:
                self._groups[group_id] = Group(group_id)
        for group in self._groups.values():
            for member in group.members.values():
                self._reschedule_session(group, member)
            if group.is_in(GroupState.EMPTY):
                self._arm_cleanup(group)
            elif group.num_members > self._config.group_max_size:
                log.info(
                    "group.over_capacity",
                    group=group.group_id,
                    size=group.num_members,
                    limit=self._config.group_max_size,
                )
                self._prepare_rebalance(group, "group.over_capacity")
        self._flush()

    def unload(self, now_ms: int) -> list[Action]:
        """Stop serving: every group turns Dead and parked requests get NOT_COORDINATOR."""
        self._now = now_ms
        for group in self._groups.values():
            group.transition_to(GroupState.DEAD)
            for member in group.members.values():
                join_token = group.take_join_token(member)
                if join_token is not None:
                    self._reply(
                        join_token,
                        JoinGroupResult(ErrorCode.NOT_COORDINATOR, member_id=member.member_id),
                    )
                sync_token = group.take_sync_token(member)
                if sync_token is not None:
                    self._reply(sync_token, SyncGroupResult(ErrorCode.NOT_COORDINATOR))
        self._timers.clear()
        self._initial_join.clear()
        return self._flush()

    # --- read-only views (tests, metrics) -----------------------------------------

    def group(self, group_id: str) -> Group | None:
        return self._groups.get(group_id)

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def stored_offset(self, group_id: str, topic: str, partition: int) -> StoredOffset | None:
        return self._offsets.get(group_id, topic, partition)

    # --- JoinGroup ------------------------------------------------------------

    def _join_group(self, token: ReplyToken, request: JoinGroup) -> None:
        config = self._config
        if not request.group_id:
            self._reject_join(token, request, ErrorCode.INVALID_GROUP_ID, "the group id is empty")
            return
        if not (
            config.min_session_timeout_ms
            <= request.session_timeout_ms
            <= config.max_session_timeout_ms
        ):
            self._reject_join(
                token,
                request,
                ErrorCode.INVALID_SESSION_TIMEOUT,
                "the session timeout is outside the coordinator's range",
                session_timeout_ms=request.session_timeout_ms,
                min_session_timeout_ms=config.min_session_timeout_ms,
                max_session_timeout_ms=config.max_session_timeout_ms,
            )
            return
        is_new_member = request.member_id == ""
        group = self._groups.get(request.group_id)
        if group is None:
            if not is_new_member:
                self._reject_join(
                    token,
                    request,
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    "a member id was given for a group that does not exist",
                )
                return
            group = Group(request.group_id)
            self._groups[request.group_id] = group
            self._arm_cleanup(group)

        if not self._accept_joining_member(group, request.member_id):
            self._remove_member_or_pending(group, request.member_id)
            self._reject_join(
                token,
                request,
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                "the group has its maximum number of members",
                answer_member_id="",  # Kafka answers without the member id
                group_max_size=config.group_max_size,
                members=group.num_members,
            )
            # Turning a member away may leave everyone else joined.
            self._maybe_complete_join_phase(group)
        elif is_new_member:
            self._join_new_member(group, token, request)
        else:
            self._join_existing_member(group, token, request)

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        limit = self._config.group_max_size
        if group.state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_in(GroupState.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            return (member is not None and member.awaiting_join) or group.num_awaiting_join < limit
        return group.has_member(member_id) or group.num_members < limit

    def _join_new_member(self, group: Group, token: ReplyToken, request: JoinGroup) -> None:
        if group.is_in(GroupState.DEAD):
            self._reject_join(token, request, ErrorCode.COORDINATOR_NOT_AVAILABLE, _DEAD_GROUP)
            return
        names = frozenset(name for name, _ in request.protocols)
        if not group.supports_protocols(request.protocol_type, names):
            self._reject_inconsistent_join(token, request, group)
            return
        member_id = self._new_member_id(request.client.client_id, request.group_instance_id or "")
        instance_id = request.group_instance_id
        if instance_id is not None:
            existing_id = group.static_member_id(instance_id)
            if existing_id is not None:
                self._replace_static_member(group, token, request, existing_id, member_id)
            else:
                self._add_member_and_rebalance(group, token, request, member_id)
        elif request.requires_known_member_id:
            group.add_pending(member_id)
            self._timers.schedule(
                (TimerKind.SESSION, group.group_id, member_id),
                self._now + request.session_timeout_ms,
            )
            self._reply(token, JoinGroupResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=member_id))
        else:
            self._add_member_and_rebalance(group, token, request, member_id)

    def _join_existing_member(self, group: Group, token: ReplyToken, request: JoinGroup) -> None:
        member_id = request.member_id
        if group.is_in(GroupState.DEAD):
            self._reject_join(token, request, ErrorCode.COORDINATOR_NOT_AVAILABLE, _DEAD_GROUP)
            return
        names = frozenset(name for name, _ in request.protocols)
        if not group.supports_protocols(request.protocol_type, names):
            self._reject_inconsistent_join(token, request, group)
            return
        if group.is_pending(member_id):
            if request.group_instance_id is not None:
                # Pending ids are only handed to dynamic members (Kafka fails the same way).
                self._reject_join(
                    token,
                    request,
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    "a static member joined with a member id handed to a dynamic member",
                )
                return
            self._add_member_and_rebalance(group, token, request, member_id)
            return
        error = group.validate_member(member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            self._reject_join(
                token,
                request,
                error,
                "the instance id belongs to another member id"
                if error is ErrorCode.FENCED_INSTANCE_ID
                else "the group does not know the member id",
            )
            return
        member = group.members[member_id]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, token, request)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(request.protocols):
                # Probably a lost JoinGroup answer: repeat it for the current generation.
                self._reply(token, self._current_join_result(group, member, with_members=True))
            else:
                self._update_member_and_rebalance(group, member, token, request)
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(request.protocols):
                # The leader rejoins to trigger a rebalance (e.g. its view of the work changed).
                self._update_member_and_rebalance(group, member, token, request)
            else:
                self._reply(token, self._current_join_result(group, member, with_members=False))
        else:
            self._reject_join(
                token,
                request,
                ErrorCode.UNKNOWN_MEMBER_ID,
                f"the group is {state.value}",
            )

    def _reject_join(
        self,
        token: ReplyToken,
        request: JoinGroup,
        error: ErrorCode,
        reason: str,
        *,
        answer_member_id: str | None = None,
        **details: object,
    ) -> None:
        """Answer a JoinGroup with ``error`` and log why (``group.join_rejected``).

        The answer carries the request's member id unless ``answer_member_id``
        says otherwise.
        """
        log.info(
            "group.join_rejected",
            group=request.group_id,
            member_id=request.member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client.client_id,
            error=error.name,
            reason=reason,
            **details,
        )
        member_id = request.member_id if answer_member_id is None else answer_member_id
        self._reply(token, JoinGroupResult(error, member_id=member_id))

    def _reject_inconsistent_join(
        self,
        token: ReplyToken,
        request: JoinGroup,
        group: Group,
    ) -> None:
        """INCONSISTENT_GROUP_PROTOCOL, logged with the group's and the member's protocols."""
        member_protocols = [name for name, _ in request.protocols]
        if not request.protocol_type or not member_protocols:
            reason = "the protocol type or the protocol list is empty"
        elif group.protocol_type != request.protocol_type:
            reason = "the protocol type differs from the group's"
        else:
            reason = "no protocol of the member is supported by every member of the group"
        self._reject_join(
            token,
            request,
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
            reason,
            group_protocol_type=group.protocol_type,
            group_protocols=sorted(group.candidate_protocols()),
            protocol_type=request.protocol_type,
            protocols=member_protocols,
        )

    def _current_join_result(
        self, group: Group, member: Member, *, with_members: bool
    ) -> JoinGroupResult:
        leader = group.is_leader(member.member_id)
        return JoinGroupResult(
            ErrorCode.NONE,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            member_id=member.member_id,
            members=self._joined_members(group) if with_members and leader else (),
        )

    def _add_member_and_rebalance(
        self, group: Group, token: ReplyToken, request: JoinGroup, member_id: str
    ) -> None:
        member = Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client.client_id,
            client_host=request.client.client_host,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=request.protocols,
            is_new=True,
        )
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.previous_state is GroupState.EMPTY:
            group.new_member_added = True
        group.add(member, token)
        # A parked new member cannot heartbeat; bound how long it may stay parked.
        self._timers.schedule(
            (TimerKind.SESSION, group.group_id, member_id), self._now + NEW_MEMBER_JOIN_TIMEOUT_MS
        )
        self._maybe_prepare_rebalance_or_complete_join(group, "member.added")

    def _update_member_and_rebalance(
        self, group: Group, member: Member, token: ReplyToken, request: JoinGroup
    ) -> None:
        superseded = group.take_join_token(member)
        if superseded is not None:
            self._reply(
                superseded,
                JoinGroupResult(ErrorCode.REBALANCE_IN_PROGRESS, member_id=member.member_id),
            )
        group.update(
            member,
            request.protocols,
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            token,
        )
        self._maybe_prepare_rebalance_or_complete_join(group, "member.rejoined")

    def _replace_static_member(
        self,
        group: Group,
        token: ReplyToken,
        request: JoinGroup,
        old_id: str,
        new_id: str,
    ) -> None:
        instance_id = request.group_instance_id
        assert instance_id is not None
        previous_leader = group.leader_id
        old = group.members[old_id]
        fenced_join = group.take_join_token(old)
        if fenced_join is not None:
            self._reply(
                fenced_join, JoinGroupResult(ErrorCode.FENCED_INSTANCE_ID, member_id=old_id)
            )
        fenced_sync = group.take_sync_token(old)
        if fenced_sync is not None:
            self._reply(fenced_sync, SyncGroupResult(ErrorCode.FENCED_INSTANCE_ID))
        self._timers.cancel((TimerKind.SESSION, group.group_id, old_id))
        member = group.replace_static_member(instance_id, old_id, new_id)
        log.info(
            "member.static_replaced",
            group=group.group_id,
            group_instance_id=instance_id,
            old_member_id=old_id,
            member_id=new_id,
            state=group.state.value,
        )
        self._reschedule_session(group, member)
        group.update(
            member,
            request.protocols,
            request.rebalance_timeout_ms,
            request.session_timeout_ms,
            token,
        )
        if group.is_in(GroupState.STABLE):
            if (group.protocol_name or "") == group.select_protocol():
                # Nothing the assignment depends on changed: no rebalance, but the new
                # member id must be durable before the member learns it.
                self._persist_group(group)
                join_token = group.take_join_token(member)
                assert join_token is not None
                if request.api_version >= SKIP_ASSIGNMENT_JOIN_VERSION:
                    leader = group.is_leader(new_id)
                    result = JoinGroupResult(
                        ErrorCode.NONE,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=group.leader_id or "",
                        member_id=new_id,
                        members=self._joined_members(group) if leader else (),
                        skip_assignment=leader,
                    )
                else:
                    result = JoinGroupResult(
                        ErrorCode.NONE,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=previous_leader or "",
                        member_id=new_id,
                    )
                self._reply(join_token, result)
            else:
                self._maybe_prepare_rebalance_or_complete_join(
                    group, "static_member.protocol_changed"
                )
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            # The leader may be assigning to the old member id: start over.
            self._prepare_rebalance(group, "static_member.replaced")
        else:
            self._maybe_complete_join_phase(group)

    # --- rebalance machinery --------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, group: Group, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)
        else:
            self._maybe_complete_join_phase(group)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            for member in group.members.values():
                member.assignment = b""
            self._propagate_assignment(group, ErrorCode.REBALANCE_IN_PROGRESS)
        group.pending_sync_members.clear()
        self._timers.cancel((TimerKind.SYNC, group.group_id, ""))
        initial = group.is_in(GroupState.EMPTY)
        if initial:
            delay = self._config.initial_rebalance_delay_ms
            group.initial_delay_ms = delay
            group.initial_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            group.new_member_added = False
            self._initial_join.add(group.group_id)
            self._timers.schedule((TimerKind.JOIN, group.group_id, ""), self._now + delay)
        group.transition_to(GroupState.PREPARING_REBALANCE)
        log.info(
            "group.rebalance_started",
            group=group.group_id,
            generation_id=group.generation_id,
            reason=reason,
        )
        if not initial:
            if group.has_all_members_joined():
                self._complete_join(group)
            else:
                self._schedule_join_timeout(group)

    def _schedule_join_timeout(self, group: Group) -> None:
        self._initial_join.discard(group.group_id)
        # At least 1 ms: a zero or negative rebalance timeout (clients are not
        # checked) must not make one ``expire`` call re-fire this timer forever.
        delay = max(group.rebalance_timeout_ms(), 1)
        self._timers.schedule((TimerKind.JOIN, group.group_id, ""), self._now + delay)

    def _maybe_complete_join_phase(self, group: Group) -> None:
        if (
            group.is_in(GroupState.PREPARING_REBALANCE)
            and group.previous_state is not GroupState.EMPTY
            and group.has_all_members_joined()
        ):
            self._complete_join(group)

    def _try_complete_initial_rebalance(self, group: Group) -> None:
        if group.new_member_added and group.initial_remaining_ms != 0:
            group.new_member_added = False
            delay = group.initial_delay_ms
            new_delay = min(self._config.initial_rebalance_delay_ms, group.initial_remaining_ms)
            group.initial_remaining_ms = max(group.initial_remaining_ms - delay, 0)
            group.initial_delay_ms = new_delay
            self._initial_join.add(group.group_id)
            self._timers.schedule((TimerKind.JOIN, group.group_id, ""), self._now + new_delay)
        else:
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return  # a stale timer: the phase already ended
        self._timers.cancel((TimerKind.JOIN, group.group_id, ""))
        self._initial_join.discard(group.group_id)
        for member in group.not_yet_rejoined():
            if not member.is_static:
                log.info(
                    "member.removed",
                    group=group.group_id,
                    member_id=member.member_id,
                    reason="did not rejoin before the rebalance timeout",
                )
                self._remove_member(group, member)
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Only static members that did not rejoin are left: wait for them (or
            # for their sessions to expire) another rebalance timeout.
            self._schedule_join_timeout(group)
            return
        group.init_next_generation()
        if group.is_in(GroupState.EMPTY):
            group.empty_since_ms = self._now
        if group.is_in(GroupState.EMPTY):
            log.info("group.empty", group=group.group_id, generation_id=group.generation_id)
            self._persist_group(group)
            self._arm_cleanup(group)
            return
        log.info(
            "group.join_completed",
            group=group.group_id,
            generation_id=group.generation_id,
            protocol=group.protocol_name,
            members=group.num_members,
        )
        leader_view = self._joined_members(group)
        generation = group.generation_id
        protocol_type = group.protocol_type
        protocol_name = group.protocol_name
        leader_id = group.leader_id or ""
        for member in group.members.values():
            token = group.take_join_token(member)
            if token is not None:
                is_leader = member.member_id == leader_id
                self._reply(
                    token,
                    JoinGroupResult(
                        ErrorCode.NONE,
                        generation_id=generation,
                        protocol_type=protocol_type,
                        protocol_name=protocol_name,
                        leader=leader_id,
                        member_id=member.member_id,
                        members=leader_view if is_leader else (),
                    ),
                )
            self._reschedule_session(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        group.sync_generation = generation
        self._timers.schedule(
            (TimerKind.SYNC, group.group_id, ""), self._now + group.rebalance_timeout_ms()
        )

    def _joined_members(self, group: Group) -> tuple[JoinedMember, ...]:
        protocol = group.protocol_name
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(protocol))
            for m in group.members.values()
        )

    def _propagate_assignment(self, group: Group, error: ErrorCode) -> None:
        ok = error is ErrorCode.NONE
        protocol_type = group.protocol_type if ok else None
        protocol_name = group.protocol_name if ok else None
        for member in group.members.values():
            token = group.take_sync_token(member)
            if token is not None:
                self._reply(
                    token,
                    SyncGroupResult(
                        error,
                        assignment=member.assignment,
                        protocol_type=protocol_type,
                        protocol_name=protocol_name,
                    ),
                )
                self._reschedule_session(group, member)

    # --- SyncGroup ------------------------------------------------------------

    def _sync_group(self, token: ReplyToken, request: SyncGroup) -> None:
        if not request.group_id:
            self._reply(token, SyncGroupResult(ErrorCode.INVALID_GROUP_ID))
            return
        group = self._groups.get(request.group_id)
        if group is None or group.is_in(GroupState.EMPTY):
            self._reply(token, SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        error = self._validate_sync(group, request)
        if error is not ErrorCode.NONE:
            self._reply(token, SyncGroupResult(error))
            return
        member_id = request.member_id
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._reply(token, SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            member = group.members[member_id]
            superseded = group.take_sync_token(member)
            if superseded is not None:
                self._reply(superseded, SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
            member.sync_token = token
            self._remove_pending_sync_member(group, member_id)
            if group.is_leader(member_id):
                assignments = dict(request.assignments)
                for other in group.members.values():
                    other.assignment = assignments.get(other.member_id, b"")
                self._persist_group(group)
                self._propagate_assignment(group, ErrorCode.NONE)
                group.transition_to(GroupState.STABLE)
                log.info(
                    "group.stable",
                    group=group.group_id,
                    generation_id=group.generation_id,
                    members=group.num_members,
                )
        else:  # Stable
            self._remove_pending_sync_member(group, member_id)
            member = group.members[member_id]
            self._reply(
                token,
                SyncGroupResult(
                    ErrorCode.NONE,
                    assignment=member.assignment,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                ),
            )
            # As Kafka: the member just proved itself alive, and it counts the
            # session from this answer (a follower's rejoin in a stable group).
            self._reschedule_session(group, member)

    def _validate_sync(self, group: Group, request: SyncGroup) -> ErrorCode:
        if group.is_in(GroupState.DEAD):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if request.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if _inconsistent(request.protocol_type, group.protocol_type) or _inconsistent(
            request.protocol_name, group.protocol_name
        ):
            return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        return ErrorCode.NONE

    def _remove_pending_sync_member(self, group: Group, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members or group.state not in (
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
        ):
            self._timers.cancel((TimerKind.SYNC, group.group_id, ""))

    def _expire_pending_sync(self, group: Group) -> None:
        if group.sync_generation != group.generation_id:
            return
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if group.has_received_sync_from_all():
            return
        late = list(group.pending_sync_members)
        for member_id in late:
            member = group.members.get(member_id)
            if member is not None:
                log.info(
                    "member.removed",
                    group=group.group_id,
                    member_id=member_id,
                    reason="did not send SyncGroup before the rebalance timeout",
                )
                self._remove_member(group, member)
        self._prepare_rebalance(group, "members.sync_expired")

    # --- Heartbeat ------------------------------------------------------------

    def _heartbeat(self, token: ReplyToken, request: Heartbeat) -> None:
        self._out.append(Reply(token, _HEARTBEAT_RESULTS[self._heartbeat_error(request)]))

    def _heartbeat_error(self, request: Heartbeat) -> ErrorCode:
        if not request.group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self._groups.get(request.group_id)
        if group is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        state = group.state
        if state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(request.member_id, request.group_instance_id)
        if error is not ErrorCode.NONE:
            return error
        if request.generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        member = group.members[request.member_id]
        if request.client.client_id != FENCE_CLIENT_ID:
            self._timers.schedule(
                (TimerKind.SESSION, group.group_id, member.member_id),
                self._now + member.session_timeout_ms,
            )
        if state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _reschedule_session(self, group: Group, member: Member) -> None:
        self._timers.schedule(
            (TimerKind.SESSION, group.group_id, member.member_id),
            self._now + member.session_timeout_ms,
        )

    def _expire_session(self, group: Group, member_id: str) -> None:
        if group.is_in(GroupState.DEAD):
            return
        if group.is_pending(member_id):
            log.info("member.pending_expired", group=group.group_id, member_id=member_id)
            group.remove(member_id)
            if group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
                self._complete_join(group)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        log.info("member.session_expired", group=group.group_id, member_id=member_id)
        self._remove_member(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group, "member.session_expired")
        elif group.is_in(GroupState.PREPARING_REBALANCE) and group.has_all_members_joined():
            self._complete_join(group)

    # --- LeaveGroup -----------------------------------------------------------

    def _leave_group(self, token: ReplyToken, request: LeaveGroup) -> None:
        if not request.group_id:
            self._reply(token, LeaveGroupResult(ErrorCode.INVALID_GROUP_ID))
            return
        group = self._groups.get(request.group_id)
        if group is None:
            self._reply(token, LeaveGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        if group.is_in(GroupState.DEAD):
            self._reply(token, LeaveGroupResult(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            return
        answers: list[LeftMember] = []
        anyone_left = False
        for identity in request.members:
            error = self._leave_one(group, identity.member_id, identity.group_instance_id)
            anyone_left = anyone_left or error is ErrorCode.NONE
            answers.append(LeftMember(identity.member_id, identity.group_instance_id, error))
        if anyone_left:
            if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group, "members.left")
            elif group.is_in(GroupState.PREPARING_REBALANCE):
                self._maybe_complete_join_phase(group)
        top_level = ErrorCode.NONE
        if request.api_version < BATCH_LEAVE_VERSION:
            top_level = next(
                (answer.error for answer in answers if answer.error is not ErrorCode.NONE),
                ErrorCode.NONE,
            )
        self._reply(token, LeaveGroupResult(top_level, tuple(answers)))

    def _leave_one(self, group: Group, member_id: str, instance_id: str | None) -> ErrorCode:
        if member_id == "":
            # Removal by instance id alone (admin tools, KIP-345).
            existing = group.static_member_id(instance_id) if instance_id is not None else None
            if existing is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            self._remove_member(group, group.members[existing])
            return ErrorCode.NONE
        if group.is_pending(member_id):
            group.remove(member_id)
            self._timers.cancel((TimerKind.SESSION, group.group_id, member_id))
            return ErrorCode.NONE
        error = group.validate_member(member_id, instance_id)
        if error is ErrorCode.NONE:
            log.info("member.left", group=group.group_id, member_id=member_id)
            self._remove_member(group, group.members[member_id])
        return error

    def _remove_member(self, group: Group, member: Member) -> None:
        """Remove a member, answering whatever it has parked (UNKNOWN_MEMBER_ID)."""
        self._timers.cancel((TimerKind.SESSION, group.group_id, member.member_id))
        join_token = group.take_join_token(member)
        if join_token is not None:
            self._reply(join_token, JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
        sync_token = group.take_sync_token(member)
        if sync_token is not None:
            self._reply(sync_token, SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)

    def _remove_member_or_pending(self, group: Group, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is not None:
            self._remove_member(group, member)
        elif group.is_pending(member_id):
            group.remove(member_id)
            self._timers.cancel((TimerKind.SESSION, group.group_id, member_id))

    # --- offsets --------------------------------------------------------------

    def _offset_commit(self, token: ReplyToken, request: OffsetCommit) -> None:
        group = self._groups.get(request.group_id) if request.group_id else None
        error = validate_commit(group, request) if request.group_id else ErrorCode.INVALID_GROUP_ID
        if error is not ErrorCode.NONE:
            self._reply(token, _commit_result(request, lambda _partition: error))
            return
        if group is None:
            # A commit from outside any membership: an Empty group holds the offsets.
            group = Group(request.group_id)
            self._groups[request.group_id] = group
            self._arm_cleanup(group)
        fence = request.client.client_id == FENCE_CLIENT_ID
        if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE) and not fence:
            member = group.members.get(request.member_id)
            if member is not None:
                self._reschedule_session(group, member)
        limit = self._config.offset_metadata_max_bytes
        accepted: list[StoredOffset] = []
        errors: dict[tuple[str, int], ErrorCode] = {}
        for topic in request.topics:
            for partition in topic.partitions:
                metadata = partition.metadata or ""
                if metadata_length(metadata) > limit:
                    errors[(topic.name, partition.partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                    continue
                accepted.append(
                    StoredOffset(
                        group_id=request.group_id,
                        topic=topic.name,
                        partition=partition.partition,
                        offset=partition.offset,
                        metadata=metadata,
                        leader_epoch=partition.leader_epoch,
                        commit_timestamp_ms=self._now,
                    )
                )
        for stored in accepted:
            self._offsets.put(stored)
        if accepted:
            self._out.append(Persist(offsets=tuple(accepted)))
        self._reply(
            token,
            _commit_result(
                request,
                lambda key: errors.get(key, ErrorCode.NONE),
            ),
        )

    def _offset_fetch(self, token: ReplyToken, request: OffsetFetch) -> None:
        fetched: list[FetchedGroup] = []
        for wanted in request.groups:
            if not wanted.group_id:
                fetched.append(FetchedGroup(wanted.group_id, (), ErrorCode.INVALID_GROUP_ID))
                continue
            group = self._groups.get(wanted.group_id)
            known = group is not None and not group.is_in(GroupState.DEAD)
            topics = self._offsets.fetch(wanted.group_id, wanted.topics, group_known=known)
            fetched.append(FetchedGroup(wanted.group_id, topics))
        self._reply(token, OffsetFetchResult(tuple(fetched)))

    # --- administration -------------------------------------------------------

    def _describe_groups(self, token: ReplyToken, request: DescribeGroups) -> None:
        described: list[DescribedGroup] = []
        for group_id in request.group_ids:
            if not group_id:
                described.append(DescribedGroup(ErrorCode.INVALID_GROUP_ID, group_id, ""))
                continue
            group = self._groups.get(group_id)
            if group is None:
                described.append(DescribedGroup(ErrorCode.NONE, group_id, GroupState.DEAD.value))
                continue
            stable = group.is_in(GroupState.STABLE)
            protocol = group.protocol_name if stable else None
            described.append(
                DescribedGroup(
                    ErrorCode.NONE,
                    group_id,
                    group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_data=protocol or "",
                    members=tuple(
                        DescribedMember(
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            metadata=m.metadata(protocol) if stable else b"",
                            assignment=m.assignment,
                        )
                        for m in group.members.values()
                    ),
                )
            )
        self._reply(token, DescribeGroupsResult(tuple(described)))

    def _list_groups(self, token: ReplyToken, request: ListGroups) -> None:
        states = {state.lower() for state in request.states_filter}
        types = {group_type.lower() for group_type in request.types_filter}
        listed: list[ListedGroup] = []
        if not types or "classic" in types:
            for group in self._groups.values():
                if states and group.state.value.lower() not in states:
                    continue
                listed.append(
                    ListedGroup(group.group_id, group.protocol_type or "", group.state.value)
                )
        self._reply(token, ListGroupsResult(ErrorCode.NONE, tuple(listed)))

    def _delete_groups(self, token: ReplyToken, request: DeleteGroups) -> None:
        results: list[DeletedGroup] = []
        for group_id in request.group_ids:
            if not group_id:
                results.append(DeletedGroup(group_id, ErrorCode.INVALID_GROUP_ID))
                continue
            group = self._groups.get(group_id)
            if group is None or group.is_in(GroupState.DEAD):
                results.append(DeletedGroup(group_id, ErrorCode.GROUP_ID_NOT_FOUND))
            elif not group.is_in(GroupState.EMPTY):
                results.append(DeletedGroup(group_id, ErrorCode.NON_EMPTY_GROUP))
            else:
                self._delete_group(group)
                results.append(DeletedGroup(group_id, ErrorCode.NONE))
        self._reply(token, DeleteGroupsResult(tuple(results)))

    def _delete_group(self, group: Group) -> None:
        group.transition_to(GroupState.DEAD)
        # Timers first: they look the group up to find its members' session timers.
        self._drop_group_timers(group.group_id)
        del self._groups[group.group_id]
        tombstones = self._offsets.delete_group(group.group_id)
        stored = self._stored_group(group)
        self._out.append(
            Persist(
                groups=(
                    StoredGroup(
                        group_id=stored.group_id,
                        generation_id=stored.generation_id,
                        protocol_type=stored.protocol_type,
                        protocol_name=stored.protocol_name,
                        leader=stored.leader,
                        members=(),
                        deleted=True,
                    ),
                ),
                offsets=tombstones,
            )
        )
        log.info("group.deleted", group=group.group_id)

    def _drop_group_timers(self, group_id: str) -> None:
        for kind in (TimerKind.JOIN, TimerKind.SYNC, TimerKind.CLEANUP):
            self._timers.cancel((kind, group_id, ""))
        self._initial_join.discard(group_id)
        group = self._groups.get(group_id)
        if group is not None:
            for member_id in [*group.members, *group.pending_members]:
                self._timers.cancel((TimerKind.SESSION, group_id, member_id))

    def _arm_cleanup(self, group: Group) -> None:
        self._timers.schedule(
            (TimerKind.CLEANUP, group.group_id, ""), self._now + EMPTY_GROUP_CLEANUP_MS
        )

    def _arm_retention(self) -> None:
        if self._config.offsets_retention_ms == -1:
            return
        self._retention_armed = True
        self._timers.schedule(
            (TimerKind.RETENTION, "", ""),
            self._now + self._config.offsets_retention_check_interval_ms,
        )

    def _expire_offsets(self) -> None:
        """Kafka's offset retention (``offsets.py``): Empty groups only."""
        retention = self._config.offsets_retention_ms
        for group in list(self._groups.values()):
            if not group.is_in(GroupState.EMPTY) or group.pending_members:
                group.empty_since_ms = None
                continue
            if group.protocol_type is None:
                # Never had members: each offset from its own commit.
                tombstones = self._offsets.expire(group.group_id, self._now - retention)
            else:
                if group.empty_since_ms is None:
                    group.empty_since_ms = self._now  # first seen Empty: never early
                if self._now - group.empty_since_ms < retention:
                    continue
                tombstones = self._offsets.expire(group.group_id, None)
            if tombstones:
                log.info("group.offsets_expired", group=group.group_id, count=len(tombstones))
                self._out.append(Persist(offsets=tombstones))
            if not self._offsets.has_offsets(group.group_id):
                self._delete_group(group)

    def _cleanup_group(self, group: Group) -> None:
        if (
            group.is_in(GroupState.EMPTY)
            and not group.pending_members
            and not self._offsets.has_offsets(group.group_id)
        ):
            self._delete_group(group)

    # --- persistence ----------------------------------------------------------

    def _stored_group(self, group: Group) -> StoredGroup:
        return StoredGroup(
            group_id=group.group_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id,
            members=tuple(
                StoredMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    session_timeout_ms=m.session_timeout_ms,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    protocols=m.protocols,
                    assignment=m.assignment,
                )
                for m in group.members.values()
            ),
        )

    def _persist_group(self, group: Group) -> None:
        self._out.append(Persist(groups=(self._stored_group(group),)))

    def _load_group(self, stored: StoredGroup) -> Group:
        group = Group(
            stored.group_id,
            state=GroupState.STABLE if stored.members else GroupState.EMPTY,
            generation_id=stored.generation_id,
            protocol_type=stored.protocol_type or None,
            protocol_name=stored.protocol_name if stored.members else None,
        )
        for sm in stored.members:
            group.add(
                Member(
                    member_id=sm.member_id,
                    group_instance_id=sm.group_instance_id,
                    client_id=sm.client_id,
                    client_host=sm.client_host,
                    rebalance_timeout_ms=sm.rebalance_timeout_ms,
                    session_timeout_ms=sm.session_timeout_ms,
                    protocol_type=stored.protocol_type or "",
                    protocols=sm.protocols,
                    assignment=sm.assignment,
                ),
                None,
            )
        if stored.leader is not None and stored.leader in group.members:
            group.leader_id = stored.leader
        return group

    # --- output ---------------------------------------------------------------

    def _reply(self, token: ReplyToken, result: GroupResult) -> None:
        self._out.append(Reply(token, result))

    def _flush(self) -> list[Action]:
        out = self._out
        self._out = []
        return out


def _inconsistent(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current


def _commit_result(
    request: OffsetCommit, error_of: Callable[[tuple[str, int]], ErrorCode]
) -> OffsetCommitResult:
    return OffsetCommitResult(
        tuple(
            CommitTopicResult(
                topic.name,
                tuple(
                    CommitPartitionResult(p.partition, error_of((topic.name, p.partition)))
                    for p in topic.partitions
                ),
            )
            for topic in request.topics
        )
    )
