"""A small in-memory classic group coordinator with Kafka's semantics, for member tests.

Used until (and alongside) the embedded coordinator's sans-I/O core: it has the
same shape (``handle(now, token, request) -> [Reply]``, ``tick``,
``next_deadline``).  It covers what the member relies on: MEMBER_ID_REQUIRED,
the join phase (parked JoinGroups, initial delay, rebalance timeout), the
preference vote, the sync phase, heartbeats, LeaveGroup, session expiry and
static members rejoining without a rebalance.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field

from workgroup.coordinator.actions import Reply, ReplyToken
from workgroup.errors import ErrorCode
from workgroup.kafka.messages import (
    GroupRequest,
    Heartbeat,
    HeartbeatResult,
    JoinedMember,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    LeftMember,
    SyncGroup,
    SyncGroupResult,
)


@dataclass
class _Member:
    member_id: str
    instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    deadline: int
    join_token: ReplyToken | None = None
    sync_token: ReplyToken | None = None
    assignment: bytes = b""


@dataclass
class _Group:
    group_id: str
    state: str = "Empty"
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)
    pending: dict[str, int] = field(default_factory=dict)
    join_deadline: int | None = None
    initial_until: int | None = None


class CoordinatorDouble:
    def __init__(self, *, initial_delay_ms: int = 100, first_generation: int = 1) -> None:
        self.initial_delay_ms = initial_delay_ms
        self.first_generation = first_generation
        self.groups: dict[str, _Group] = {}
        self._ids = itertools.count(1)
        self._out: list[Reply] = []

    # --- driver interface ---------------------------------------------------

    def handle(self, now: int, token: ReplyToken, request: GroupRequest) -> list[Reply]:
        group = self.groups.setdefault(request.group_id, _Group(request.group_id))  # type: ignore[union-attr]
        if isinstance(request, JoinGroup):
            self._join(now, group, token, request)
        elif isinstance(request, SyncGroup):
            self._sync(now, group, token, request)
        elif isinstance(request, Heartbeat):
            self._heartbeat(now, group, token, request)
        elif isinstance(request, LeaveGroup):
            self._leave(now, group, token, request)
        else:
            raise TypeError(type(request).__name__)
        return self._flush()

    def next_deadline(self) -> int | None:
        deadlines = [
            d
            for g in self.groups.values()
            for d in [
                g.join_deadline,
                g.initial_until,
                *[m.deadline for m in g.members.values() if m.join_token is None],
                *g.pending.values(),
            ]
            if d is not None
        ]
        return min(deadlines) if deadlines else None

    def tick(self, now: int) -> list[Reply]:
        for group in self.groups.values():
            for member in list(group.members.values()):
                if member.join_token is None and now >= member.deadline:
                    self._remove(now, group, member.member_id)
            for member_id, deadline in list(group.pending.items()):
                if now >= deadline:
                    del group.pending[member_id]
            if group.state == "PreparingRebalance":
                if group.initial_until is not None and now >= group.initial_until:
                    group.initial_until = None
                    self._maybe_complete_join(now, group)
                if group.join_deadline is not None and now >= group.join_deadline:
                    self._complete_join(now, group)
        return self._flush()

    # --- JoinGroup ----------------------------------------------------------

    def _join(self, now: int, group: _Group, token: ReplyToken, req: JoinGroup) -> None:
        if (
            group.protocol_type is not None
            and group.members
            and (
                req.protocol_type != group.protocol_type
                or not self._supports(group, {name for name, _ in req.protocols})
            )
        ):
            self._reply(token, JoinGroupResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
            return
        if req.member_id == "":
            new_id = f"{req.group_instance_id or 'member'}-{next(self._ids)}"
            if req.group_instance_id is not None:
                old = group.static.get(req.group_instance_id)
                if old is not None and old in group.members:
                    self._replace_static(now, group, token, req, old, new_id)
                    return
                self._add(now, group, token, req, new_id)
                return
            group.pending[new_id] = now + req.session_timeout_ms
            self._reply(token, JoinGroupResult(ErrorCode.MEMBER_ID_REQUIRED, member_id=new_id))
            return
        if req.member_id in group.pending:
            del group.pending[req.member_id]
            self._add(now, group, token, req, req.member_id)
            return
        member = group.members.get(req.member_id)
        if member is None:
            self._reply(token, JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
            return
        if member.instance_id != req.group_instance_id:
            self._reply(token, JoinGroupResult(ErrorCode.FENCED_INSTANCE_ID))
            return
        changed = member.protocols != req.protocols
        member.protocols = req.protocols
        member.deadline = now + member.session_timeout_ms
        if group.state == "PreparingRebalance":
            member.join_token = token
            self._maybe_complete_join(now, group)
        elif group.state == "CompletingRebalance":
            if changed:
                member.join_token = token
                self._prepare(now, group)
            else:
                self._reply(token, self._join_result(group, member))
        elif group.state == "Stable":
            if changed or group.leader == member.member_id:
                member.join_token = token
                self._prepare(now, group)
            else:
                self._reply(token, self._join_result(group, member))

    def _add(
        self, now: int, group: _Group, token: ReplyToken, req: JoinGroup, member_id: str
    ) -> None:
        group.members[member_id] = _Member(
            member_id,
            req.group_instance_id,
            req.session_timeout_ms,
            req.rebalance_timeout_ms,
            req.protocol_type,
            req.protocols,
            now + req.session_timeout_ms,
            join_token=token,
        )
        if req.group_instance_id is not None:
            group.static[req.group_instance_id] = member_id
        group.protocol_type = req.protocol_type
        if group.leader is None:
            group.leader = member_id
        if group.state in ("Empty", "Stable", "CompletingRebalance"):
            initial = group.state == "Empty"
            self._prepare(now, group, initial=initial)
        else:
            self._maybe_complete_join(now, group)

    def _replace_static(
        self, now: int, group: _Group, token: ReplyToken, req: JoinGroup, old: str, new_id: str
    ) -> None:
        member = group.members.pop(old)
        if member.join_token is not None:
            self._reply(member.join_token, JoinGroupResult(ErrorCode.FENCED_INSTANCE_ID))
        if member.sync_token is not None:
            self._reply(member.sync_token, SyncGroupResult(ErrorCode.FENCED_INSTANCE_ID))
        member.member_id, member.join_token, member.sync_token = new_id, None, None
        member.deadline = now + req.session_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        group.members[new_id] = member
        group.static[req.group_instance_id or ""] = new_id
        was_leader = group.leader == old
        if was_leader:
            group.leader = new_id
        if group.state == "Stable" and member.protocols == req.protocols:
            self._reply(
                token,
                JoinGroupResult(
                    ErrorCode.NONE,
                    generation_id=group.generation,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol,
                    leader=group.leader or "",
                    member_id=new_id,
                    members=self._members_of(group) if was_leader else (),
                    skip_assignment=was_leader,
                ),
            )
            return
        member.protocols = req.protocols
        member.join_token = token
        if group.state == "PreparingRebalance":
            self._maybe_complete_join(now, group)
        else:
            self._prepare(now, group)

    def _supports(self, group: _Group, names: set[str]) -> bool:
        common = self._candidates(group)
        return bool(common & names)

    def _candidates(self, group: _Group) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in group.members.values()]
        return set.intersection(*sets) if sets else set()

    def _prepare(self, now: int, group: _Group, *, initial: bool = False) -> None:
        for member in group.members.values():
            if member.sync_token is not None:
                self._reply(member.sync_token, SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
                member.sync_token = None
        group.state = "PreparingRebalance"
        timeout = max(m.rebalance_timeout_ms for m in group.members.values())
        group.join_deadline = now + timeout
        group.initial_until = now + self.initial_delay_ms if initial else None
        self._maybe_complete_join(now, group)

    def _maybe_complete_join(self, now: int, group: _Group) -> None:
        if group.state != "PreparingRebalance":
            return
        if group.initial_until is not None and now < group.initial_until:
            return
        if all(m.join_token is not None for m in group.members.values()):
            self._complete_join(now, group)

    def _complete_join(self, now: int, group: _Group) -> None:
        for member in list(group.members.values()):
            if member.join_token is None:
                self._remove_quietly(group, member.member_id)
        group.join_deadline = None
        group.initial_until = None
        if not group.members:
            group.state = "Empty"
            group.leader = None
            group.generation += 1
            return
        group.generation = self.first_generation if group.generation == 0 else group.generation + 1
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        candidates = self._candidates(group)
        votes: Counter[str] = Counter()
        for member in group.members.values():
            votes[next(name for name, _ in member.protocols if name in candidates)] += 1
        group.protocol = max(sorted(votes), key=lambda name: votes[name])
        group.state = "CompletingRebalance"
        for member in group.members.values():
            token, member.join_token = member.join_token, None
            member.deadline = now + member.session_timeout_ms
            assert token is not None
            self._reply(token, self._join_result(group, member))

    def _members_of(self, group: _Group) -> tuple[JoinedMember, ...]:
        return tuple(
            JoinedMember(m.member_id, m.instance_id, dict(m.protocols)[group.protocol or ""])
            for m in group.members.values()
        )

    def _join_result(self, group: _Group, member: _Member) -> JoinGroupResult:
        leader = member.member_id == group.leader
        return JoinGroupResult(
            ErrorCode.NONE,
            generation_id=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol,
            leader=group.leader or "",
            member_id=member.member_id,
            members=self._members_of(group) if leader else (),
        )

    # --- SyncGroup / Heartbeat / LeaveGroup -----------------------------------

    def _check(
        self, group: _Group, member_id: str, generation: int, instance: str | None
    ) -> ErrorCode:
        member = group.members.get(member_id)
        if member is None:
            if instance is not None and instance in group.static:
                return ErrorCode.FENCED_INSTANCE_ID
            return ErrorCode.UNKNOWN_MEMBER_ID
        if member.instance_id != instance:
            return ErrorCode.FENCED_INSTANCE_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    def _sync(self, now: int, group: _Group, token: ReplyToken, req: SyncGroup) -> None:
        code = self._check(group, req.member_id, req.generation_id, req.group_instance_id)
        if code is not ErrorCode.NONE:
            self._reply(token, SyncGroupResult(code))
            return
        member = group.members[req.member_id]
        member.deadline = now + member.session_timeout_ms
        if group.state == "PreparingRebalance":
            self._reply(token, SyncGroupResult(ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.state == "Stable":
            self._reply(token, self._sync_result(group, member))
        elif group.state == "CompletingRebalance":
            member.sync_token = token
            if req.member_id == group.leader:
                given = dict(req.assignments)
                for m in group.members.values():
                    m.assignment = given.get(m.member_id, b"")
                group.state = "Stable"
                for m in group.members.values():
                    if m.sync_token is not None:
                        self._reply(m.sync_token, self._sync_result(group, m))
                        m.sync_token = None

    def _sync_result(self, group: _Group, member: _Member) -> SyncGroupResult:
        return SyncGroupResult(
            ErrorCode.NONE, member.assignment, group.protocol_type, group.protocol
        )

    def _heartbeat(self, now: int, group: _Group, token: ReplyToken, req: Heartbeat) -> None:
        code = self._check(group, req.member_id, req.generation_id, req.group_instance_id)
        if code is ErrorCode.NONE:
            member = group.members[req.member_id]
            member.deadline = now + member.session_timeout_ms
            if group.state == "PreparingRebalance":
                code = ErrorCode.REBALANCE_IN_PROGRESS
        self._reply(token, HeartbeatResult(code))

    def _leave(self, now: int, group: _Group, token: ReplyToken, req: LeaveGroup) -> None:
        results = []
        for leaving in req.members:
            code = (
                ErrorCode.NONE
                if leaving.member_id in group.members
                else ErrorCode.UNKNOWN_MEMBER_ID
            )
            if code is ErrorCode.NONE:
                self._remove(now, group, leaving.member_id)
            results.append(LeftMember(leaving.member_id, leaving.group_instance_id, code))
        self._reply(token, LeaveGroupResult(ErrorCode.NONE, tuple(results)))

    def _remove_quietly(self, group: _Group, member_id: str) -> None:
        member = group.members.pop(member_id)
        if member.instance_id is not None and group.static.get(member.instance_id) == member_id:
            del group.static[member.instance_id]
        if group.leader == member_id:
            group.leader = next(iter(group.members), None)

    def _remove(self, now: int, group: _Group, member_id: str) -> None:
        member = group.members[member_id]
        if member.join_token is not None:
            self._reply(member.join_token, JoinGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
        if member.sync_token is not None:
            self._reply(member.sync_token, SyncGroupResult(ErrorCode.UNKNOWN_MEMBER_ID))
        self._remove_quietly(group, member_id)
        if not group.members:
            group.state = "Empty"
            group.join_deadline = None
        elif group.state in ("Stable", "CompletingRebalance"):
            self._prepare(now, group)
        else:
            self._maybe_complete_join(now, group)

    def _reply(self, token: ReplyToken, result: object) -> None:
        self._out.append(Reply(token, result))  # type: ignore[arg-type]

    def _flush(self) -> list[Reply]:
        out, self._out = self._out, []
        return out
