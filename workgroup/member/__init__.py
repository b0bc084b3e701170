"""The group member: a sans-I/O state machine and its asyncio driver on aiokafka.

What each module owns:

* ``state`` — :class:`MemberMachine`, the one decider (its Rules list); its
  parts, all sans-I/O: ``transitions`` (states and legal moves), ``lookup``
  (finding the coordinator), ``requests`` (requests in flight), ``generation``,
  ``heartbeat`` (heartbeat and session timing), ``ownership`` (what is owned
  and releasing), ``commits`` (commits in flight), ``round_plan`` (the leader's
  round), ``delay`` (reassignment delay), ``leading`` (when the leader's round
  runs), ``application`` (the application's requests), ``parts`` (where they
  are built), ``views`` (what the machine shows of them); ``config``,
  ``actions`` (its outputs) and ``errors``.
* ``transport`` — bootstrap addresses, the coordinator connection, and the one
  place aiokafka's errors become workgroup's; ``wire`` — the requests' codec.
* ``driver`` — :class:`GroupMember`: feeds the machine its events and carries
  out its actions.

``GroupMember`` (the driver) is imported lazily so that the state machine can be
used without asyncio or aiokafka being loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workgroup.member.config import MemberConfig
from workgroup.member.errors import (
    AssignorError,
    CallbackError,
    CoordinatorUnavailableError,
    FencedInstanceError,
    GroupAuthorizationError,
    GroupFullError,
    IllegalTransitionError,
    InconsistentProtocolError,
    InvalidSessionTimeoutError,
    MemberClosedError,
    MemberFatalError,
)
from workgroup.member.state import MemberMachine
from workgroup.member.transitions import State

if TYPE_CHECKING:
    from workgroup.member.driver import GroupMember


def __getattr__(name: str) -> Any:
    if name == "GroupMember":
        from workgroup.member.driver import GroupMember

        return GroupMember
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AssignorError",
    "CallbackError",
    "CoordinatorUnavailableError",
    "FencedInstanceError",
    "GroupAuthorizationError",
    "GroupFullError",
    "GroupMember",
    "IllegalTransitionError",
    "InconsistentProtocolError",
    "InvalidSessionTimeoutError",
    "MemberClosedError",
    "MemberConfig",
    "MemberFatalError",
    "MemberMachine",
    "State",
]
