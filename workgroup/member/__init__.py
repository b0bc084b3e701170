"""The group member: a sans-I/O state machine and its asyncio driver on aiokafka.

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
