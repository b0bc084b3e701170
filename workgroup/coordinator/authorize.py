"""Which group requests a principal may send, under a group ACL (acl.py).

:func:`authorize` maps one decoded group request to the ACL operations it
needs and decides, before the group core sees it (Kafka's ``KafkaApis``
checks, for the resource type GROUP):

* JoinGroup, SyncGroup, Heartbeat, LeaveGroup: ``join`` on the group.
* OffsetCommit: ``commit``.  Denied as a whole: every partition gets
  GROUP_AUTHORIZATION_FAILED and nothing is stored.
* OffsetFetch, DescribeGroups: ``describe`` per group.  They change nothing, so
  the core answers them whole and the groups the principal may not describe
  are replaced by GROUP_AUTHORIZATION_FAILED entries.
* ListGroups: lists only the groups the principal may describe (as Kafka
  without cluster DESCRIBE).
* DeleteGroups: ``delete`` per group; only the permitted groups reach the core,
  the others are answered GROUP_AUTHORIZATION_FAILED.

A request that needs nothing of the ACL is allowed unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from workgroup.coordinator import wire
from workgroup.coordinator.acl import GroupAcl
from workgroup.errors import ErrorCode
from workgroup.kafka import messages as m

DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED

Transform = Callable[[m.GroupResult], m.GroupResult]


@dataclass(frozen=True, slots=True)
class Allowed:
    #: What the core is to handle (possibly narrowed to the permitted groups).
    request: m.GroupRequest
    #: Applied to the core's result before it is sent.
    transform: Transform | None = None


@dataclass(frozen=True, slots=True)
class Denied:
    #: The whole answer; the core never sees the request.
    result: wire.Result
    groups: tuple[str, ...]


def authorize(acl: GroupAcl, principal: str, request: m.GroupRequest) -> Allowed | Denied:
    match request:
        case m.JoinGroup() | m.SyncGroup() | m.Heartbeat() | m.LeaveGroup():
            if acl.allows(principal, "join", request.group_id):
                return Allowed(request)
            return Denied(wire.error_result(request, DENIED), (request.group_id,))
        case m.OffsetCommit():
            if acl.allows(principal, "commit", request.group_id):
                return Allowed(request)
            return Denied(wire.error_result(request, DENIED), (request.group_id,))
        case m.OffsetFetch():
            hidden = frozenset(
                g.group_id
                for g in request.groups
                if not acl.allows(principal, "describe", g.group_id)
            )
            return Allowed(request, _hide_fetched(hidden) if hidden else None)
        case m.DescribeGroups():
            hidden = frozenset(
                g for g in request.group_ids if not acl.allows(principal, "describe", g)
            )
            return Allowed(request, _hide_described(hidden) if hidden else None)
        case m.ListGroups():
            return Allowed(request, _list_only(acl, principal))
        case m.DeleteGroups():
            permitted = tuple(g for g in request.group_ids if acl.allows(principal, "delete", g))
            refused = tuple(g for g in request.group_ids if g not in permitted)
            if not refused:
                return Allowed(request)
            if not permitted:
                return Denied(wire.error_result(request, DENIED), refused)
            narrowed = m.DeleteGroups(permitted, api_version=request.api_version)
            return Allowed(narrowed, _add_refused_deletions(refused))
    return Allowed(request)


def _hide_fetched(hidden: frozenset[str]) -> Transform:
    def transform(result: m.GroupResult) -> m.GroupResult:
        if not isinstance(result, m.OffsetFetchResult):
            return result
        return m.OffsetFetchResult(
            tuple(
                m.FetchedGroup(g.group_id, (), DENIED) if g.group_id in hidden else g
                for g in result.groups
            )
        )

    return transform


def _hide_described(hidden: frozenset[str]) -> Transform:
    def transform(result: m.GroupResult) -> m.GroupResult:
        if not isinstance(result, m.DescribeGroupsResult):
            return result
        return m.DescribeGroupsResult(
            tuple(
                m.DescribedGroup(DENIED, g.group_id, "") if g.group_id in hidden else g
                for g in result.groups
            )
        )

    return transform


def _list_only(acl: GroupAcl, principal: str) -> Transform:
    def transform(result: m.GroupResult) -> m.GroupResult:
        if not isinstance(result, m.ListGroupsResult):
            return result
        return m.ListGroupsResult(
            result.error,
            tuple(g for g in result.groups if acl.allows(principal, "describe", g.group_id)),
        )

    return transform


def _add_refused_deletions(refused: tuple[str, ...]) -> Transform:
    def transform(result: m.GroupResult) -> m.GroupResult:
        if not isinstance(result, m.DeleteGroupsResult):
            return result
        return m.DeleteGroupsResult(
            result.groups + tuple(m.DeletedGroup(g, DENIED) for g in refused)
        )

    return transform


__all__ = ["Allowed", "Denied", "authorize"]
