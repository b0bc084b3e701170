"""What the member machine asks its driver to do, and how the driver answers.

Each action names the :class:`~workgroup.member.state.MemberMachine` event that
answers it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from workgroup.assignors.base import AssignmentInput, Assignor
from workgroup.errors import ErrorCode, WorkgroupError
from workgroup.kafka.messages import Heartbeat, JoinGroup, LeaveGroup, OffsetCommit, SyncGroup
from workgroup.member.round_stages import RoundStages
from workgroup.types import Resource


@dataclass(frozen=True, slots=True)
class FindCoordinator:
    """Locate the group coordinator; answer with ``coordinator_found`` or
    ``find_coordinator_failed``."""


@dataclass(frozen=True, slots=True)
class SendRequest:
    """Send ``request`` to the coordinator; answer with ``response`` or
    ``request_failed`` (an OffsetCommit: with ``commit_answered``)."""

    request_id: int
    request: JoinGroup | SyncGroup | Heartbeat | LeaveGroup | OffsetCommit
    timeout_ms: int
    #: Send it on a second connection: a JoinGroup or SyncGroup of this member is
    #: held on the first, and a coordinator answers one connection in order.
    beside_held: bool = False
    #: Its timeout says nothing about the connection (keep it): the request may
    #: wait behind a JoinGroup the coordinator holds on the same connection.
    may_wait_behind_held: bool = False


#: A partition of a commit: ``(topic, partition)``.
Partition = tuple[str, int]
#: What a commit got for one partition: the coordinator's error code (or the
#: machine's, when it sent nothing for it), or the error its request failed with.
CommitOutcome = ErrorCode | WorkgroupError


@dataclass(frozen=True, slots=True)
class CommitDone:
    """The answer to the machine's ``commit`` event, for its caller: every
    partition's outcome (the machine's rule 11)."""

    commit_id: int
    outcomes: Mapping[Partition, CommitOutcome]


CallbackKind = Literal["on_assigned", "on_revoked", "on_lost", "on_warming", "on_warming_ended"]
#: What a callback that raises does to the member (the machine's rule 12).
CallbackErrorPolicy = Literal["log", "release", "fail"]


@dataclass(frozen=True, slots=True)
class InvokeCallback:
    """Run the application's callback; answer with ``callback_done``, or with
    ``callback_failed`` if it raised.

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
    """Run the leader's round stages, the assignor first, off the event loop
    (:func:`~workgroup.member.round_stages.run_round_stages` of ``stages``, the
    leader); answer with ``assignment_done``."""

    run_id: int
    protocol: str
    stages: RoundStages

    @property
    def assignor(self) -> Assignor:
        return self.stages.assignor

    @property
    def input(self) -> AssignmentInput:
        return self.stages.input


@dataclass(frozen=True, slots=True)
class Failed:
    """The member entered FATAL; ``error`` says why."""

    error: WorkgroupError


@dataclass(frozen=True, slots=True)
class Closed:
    """The member finished closing."""


Action = FindCoordinator | SendRequest | InvokeCallback | RunAssignor | CommitDone | Failed | Closed


__all__ = [
    "Action",
    "CallbackErrorPolicy",
    "CallbackKind",
    "Closed",
    "CommitDone",
    "CommitOutcome",
    "Failed",
    "FindCoordinator",
    "InvokeCallback",
    "Partition",
    "RunAssignor",
    "SendRequest",
]
