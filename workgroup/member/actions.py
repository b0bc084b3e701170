"""What the member machine asks its driver to do, and how the driver answers.

Each action names the :class:`~workgroup.member.state.MemberMachine` event that
answers it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workgroup.assignors.base import AssignmentInput, Assignor
from workgroup.errors import WorkgroupError
from workgroup.kafka.messages import Heartbeat, JoinGroup, LeaveGroup, SyncGroup
from workgroup.types import Resource


@dataclass(frozen=True, slots=True)
class FindCoordinator:
    """Locate the group coordinator; answer with ``coordinator_found`` or
    ``find_coordinator_failed``."""


@dataclass(frozen=True, slots=True)
class SendRequest:
    """Send ``request`` to the coordinator; answer with ``response`` or ``request_failed``."""

    request_id: int
    request: JoinGroup | SyncGroup | Heartbeat | LeaveGroup
    timeout_ms: int
    #: Send it on a second connection: a JoinGroup or SyncGroup of this member is
    #: held on the first, and a coordinator answers one connection in order.
    beside_held: bool = False


CallbackKind = Literal["on_assigned", "on_revoked", "on_lost"]


@dataclass(frozen=True, slots=True)
class InvokeCallback:
    """Run the application's callback; answer with ``callback_done``.

    Callbacks must run one after another in the order they are issued.
    ``resources`` is what changes (never empty); ``owned`` is everything the
    member owns right after the change.
    """

    callback_id: int
    kind: CallbackKind
    resources: tuple[Resource, ...]
    generation: int
    owned: frozenset[Resource]


@dataclass(frozen=True, slots=True)
class RunAssignor:
    """Run ``assignor.assign(input)`` (the leader); answer with ``assignment_done``."""

    run_id: int
    protocol: str
    assignor: Assignor
    input: AssignmentInput


@dataclass(frozen=True, slots=True)
class Failed:
    """The member entered FATAL; ``error`` says why."""

    error: WorkgroupError


@dataclass(frozen=True, slots=True)
class Closed:
    """The member finished closing."""


Action = FindCoordinator | SendRequest | InvokeCallback | RunAssignor | Failed | Closed


__all__ = [
    "Action",
    "CallbackKind",
    "Closed",
    "Failed",
    "FindCoordinator",
    "InvokeCallback",
    "RunAssignor",
    "SendRequest",
]
