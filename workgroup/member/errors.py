"""Errors of a group member (all :class:`~workgroup.errors.WorkgroupError`)."""

from __future__ import annotations

from collections.abc import Sequence

# Reaching a coordinator is every client's concern: defined there, named here too.
from workgroup.client.errors import (
    CoordinatorUnavailableError as CoordinatorUnavailableError,
)
from workgroup.client.errors import NothingAnswersError as NothingAnswersError
from workgroup.client.errors import connect_failure_reason as connect_failure_reason
from workgroup.errors import CoordinatorError, ErrorCode, WorkgroupError
from workgroup.kafka.messages import DescribeGroupsResult


class MemberFatalError(CoordinatorError):
    """The coordinator refused this member for good; restarting it the same way fails again."""

    retriable = False


class FencedInstanceError(MemberFatalError):
    """Another process joined with the same ``instance_id`` (static membership)."""


class InconsistentProtocolError(MemberFatalError):
    """The group uses a protocol type or name this member does not support."""


class InvalidSessionTimeoutError(MemberFatalError):
    """The session timeout is outside the coordinator's allowed range."""


class GroupFullError(MemberFatalError):
    """The group has reached the coordinator's maximum size."""


class GroupAuthorizationError(MemberFatalError):
    """This client may not join the group."""


class AssignorError(WorkgroupError):
    """The leader's assignor raised or returned something unusable."""


class CallbackError(WorkgroupError):
    """An ownership callback raised (with ``on_callback_error="fail"``); the
    callback's exception is the ``__cause__``."""


class MemberClosedError(WorkgroupError):
    """The member was closed."""


class IllegalTransitionError(WorkgroupError):
    """The member's state machine tried a state change its rules forbid (a bug)."""


_FATAL_CLASSES: dict[ErrorCode, type[MemberFatalError]] = {
    ErrorCode.FENCED_INSTANCE_ID: FencedInstanceError,
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: InconsistentProtocolError,
    ErrorCode.INVALID_SESSION_TIMEOUT: InvalidSessionTimeoutError,
    ErrorCode.GROUP_MAX_SIZE_REACHED: GroupFullError,
    ErrorCode.GROUP_AUTHORIZATION_FAILED: GroupAuthorizationError,
}

_FATAL_HINTS: dict[ErrorCode, str] = {
    ErrorCode.GROUP_MAX_SIZE_REACHED: "the group already has the maximum number of members",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "this client is not authorized to join the group",
}


def fatal_error(
    code: ErrorCode,
    context: str,
    *,
    session_timeout_ms: int,
    protocol_type: str,
    protocol_names: Sequence[str],
    instance_id: str | None,
) -> MemberFatalError:
    """The error for a refusal in :data:`~workgroup.errors.MEMBER_FATAL_CODES`,
    saying what the coordinator expected of this member (whose settings are
    passed in)."""
    cls = _FATAL_CLASSES.get(code, MemberFatalError)
    if code is ErrorCode.INVALID_SESSION_TIMEOUT:
        hint = (
            f"this member's session timeout ({session_timeout_ms} ms) is outside the "
            "coordinator's allowed range (Kafka: group.min.session.timeout.ms, default 6000, "
            "to group.max.session.timeout.ms, default 1800000; the embedded coordinator: "
            "--min-session-timeout-ms / --max-session-timeout-ms)"
        )
    elif code is ErrorCode.INCONSISTENT_GROUP_PROTOCOL:
        hint = (
            f"this member speaks protocol type {protocol_type!r} with protocols "
            f"{', '.join(repr(n) for n in protocol_names)}; the group's members share none "
            "of them"
        )
    elif code is ErrorCode.FENCED_INSTANCE_ID:
        hint = f"another process runs with this member's instance id {instance_id!r}"
    else:
        hint = _FATAL_HINTS.get(code, "the coordinator rejected the request")
    return cls(code, f"{context}: {code.name} ({int(code)}): {hint}")


def describe_group_summary(described: DescribeGroupsResult, group_id: str) -> str | None:
    """What a DescribeGroups answer says about the group's protocol, as a clause
    for an :class:`InconsistentProtocolError`'s message; ``None`` if it says nothing
    useful (an error, an empty group, or no protocol name, as Tansu answers)."""
    for group in described.groups:
        if (
            group.group_id != group_id
            or group.error is not ErrorCode.NONE
            or not group.protocol_type
            or not group.protocol_data
        ):
            continue
        count = len(group.members)
        return (
            f"the group uses protocol type {group.protocol_type!r} with protocol "
            f"{group.protocol_data!r} and has {count} member{'' if count == 1 else 's'}"
        )
    return None
